#!/bin/sh
# Build and test todist's GPU path from the GPU kit on a bare CUDA machine
# (no network, no UCX/hwloc/OpenBLAS/autotools): docs/gpus.md, "The GPU kit".
#   scripts/gpu-check.sh DIR      (run from the repository root)
# DIR is what scripts/gpu-kit.sh wrote. The kit is unpacked into DIR/run/,
# configured --with-cuda against DIR/root only, built with -j all cores; the
# CUDA and NCCL tests and the GPU benchmarks run; DIR/results.md gets the
# device, driver, test outcomes and figures, ready for bench/RESULTS.md.
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_HOME (default: the
# nvidia-nccl wheel, else the system), GPU_CHECK_CUDA=no (configure without
# CUDA: the kit's self-test on a machine with no toolkit), GPU_CHECK_TESTS
# (the tests to run instead of the CUDA/NCCL list), GPU_CHECK_BENCH=no (no
# benchmarks) or =rpc_device (only the RPC echo, 1 MiB instead of 64, with
# and without the bounce ring, TODIST_CUDA_BOUNCE=0, twice each).
set -u
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
kit=$(cd "$1" && pwd) || exit 2
R=$kit/root
ml=$(gcc -print-multiarch 2>/dev/null); ml=${ml:-x86_64-linux-gnu}
run=$kit/run; out=$kit/results.md
tarball=$(ls "$kit"/todist-*.tar.gz 2>/dev/null | head -n 1)
[ -n "$tarball" ] && [ -d "$R" ] || { echo "gpu-check: $kit is not a kit (scripts/gpu-kit.sh)" >&2; exit 2; }
jobs=$(nproc 2>/dev/null || echo 4)
say() { echo "gpu-check: $*"; }

# 1. the kit's libraries and .pc files, relocated to where the kit lies
rm -rf "$run"; mkdir -p "$run/pkgconfig" "$run/lib"
for d in "$R/usr/lib/$ml/pkgconfig" "$R/usr/lib/$ml/openblas-pthread/pkgconfig" "$R/usr/share/pkgconfig"; do
  [ -d "$d" ] || continue
  for pc in "$d"/*.pc; do [ -f "$pc" ] || continue; sed "s#@KITROOT@#$R#g" "$pc" > "$run/pkgconfig/$(basename "$pc")"; done
done
libdirs="$R/usr/lib/$ml:$R/usr/lib/$ml/openblas-pthread:$R/lib/$ml"
export PKG_CONFIG_LIBDIR="$run/pkgconfig"      # the kit's .pc files only
unset PKG_CONFIG_PATH
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -x "$R/usr/bin/pkgconf" ]; then export PKG_CONFIG="$R/usr/bin/pkgconf"; fi
command -v make >/dev/null 2>&1 || export PATH="$R/usr/bin:$PATH"
CPPFLAGS="-I$R/usr/include -I$R/usr/include/$ml"
LDFLAGS=""
for d in $(echo "$libdirs" | tr ':' ' '); do LDFLAGS="$LDFLAGS -L$d -Wl,-rpath-link,$d"; done

# 2. CUDA and NCCL (the nvidia-nccl wheel has libnccl.so.2 but no libnccl.so)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cuda_arg="--with-cuda=$CUDA_HOME"; [ "${GPU_CHECK_CUDA:-yes}" = no ] && cuda_arg=--without-cuda
nccl=${NCCL_HOME:-}
if [ -z "$nccl" ] && command -v python3 >/dev/null 2>&1; then
  nccl=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
fi
if [ -z "$nccl" ]; then
  for f in /usr/local/lib/python3*/dist-packages/nvidia/nccl /usr/lib/python3/dist-packages/nvidia/nccl \
           /usr/local/lib/python3*/site-packages/nvidia/nccl "$HOME"/.local/lib/python3*/site-packages/nvidia/nccl; do
    [ -d "$f/lib" ] && { nccl=$f; break; }
  done
fi
if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ]; then
  so=$(ls "$nccl"/lib/libnccl.so* 2>/dev/null | head -n 1)
  ln -sf "$so" "$run/lib/libnccl.so"
  CPPFLAGS="$CPPFLAGS -I$nccl/include"
  LDFLAGS="$LDFLAGS -L$run/lib -Wl,-rpath,$nccl/lib"
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl/lib"
  say "NCCL: $so"
else
  nccl=""; say "NCCL: none found (wheel nvidia-nccl-cu12, or NCCL_HOME); configure looks in $CUDA_HOME"
fi
export CPPFLAGS LDFLAGS

# 3. unpack, configure, build
mkdir -p "$run/build"; tar -xzf "$tarball" -C "$run"
src=$(ls -d "$run"/todist-*/ | head -n 1)
cd "$run/build" || exit 1
"$src/configure" $cuda_arg --without-pmix --without-slurm > "$run/configure.out" 2>&1 \
  || { tail -n 30 "$run/configure.out"; say "configure failed ($run/configure.out)"; exit 1; }
sed -n '/^todist .*configuration\|^  CUDA\|^  [A-Z]/p' "$run/configure.out" | head -n 30
make -j"$jobs" > "$run/make.out" 2>&1 || { tail -n 40 "$run/make.out"; say "build failed"; exit 1; }
say "built with -j$jobs"

# 4. tests: every test whose sources speak of a CUDA device, plus their peers.
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ -n "${GPU_CHECK_TESTS:-}" ]; then tests=$GPU_CHECK_TESTS
else
  tests=$(cd "$src" && grep -rlE 'no CUDA device|CUDA device' tests | grep -E '/test_[^/]*$' |
          sed 's/\.c$//' | sort -u | tr '\n' ' ')
  # the docs' commands mention devices but need the dataset and a full
  # tree: not a GPU test
  tests=$(echo "$tests" | tr ' ' '\n' | grep -v test_docs_commands | tr '\n' ' ')
  tests="$tests tests/rpc/test_rpc_device.sh"
fi
say "tests: $tests"
make -j"$jobs" check TESTS="$tests" > "$run/check.out" 2>&1; check_rc=$?
grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):' "$run/check.out" | tail -n 7

# 5. benchmarks (each bounded; a failure is recorded, not fatal)
PATH="$run/build/tools:$PATH"; export PATH
gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | paste -sd';' -)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
bench() { name=$1; shift
  echo "### $name: $*"; echo '```'
  timeout -k 5 300 "$@" 2>&1 | tail -n 40; echo "(exit $?)"; echo '```'; }
{
  echo "## GPU check $(date -u +%Y-%m-%d) -- $(basename "$tarball")"
  echo
  echo "- device: ${gpu:-none (no nvidia-smi or no GPU)} ($ngpu GPU)"
  echo "- driver: ${driver:-none}"
  echo "- CUDA: $("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | tail -n 1 || echo none); NCCL: ${nccl:-no wheel or NCCL_HOME (configure looked in $CUDA_HOME)}"
  echo "- host: $(nproc) cores; command: scripts/gpu-check.sh (make -j$jobs)"
  echo "- configure: $(grep -E '^ +CUDA ' "$run/configure.out" | sed 's/^ *//')"
  echo
  echo "### tests (make check TESTS=...: exit $check_rc)"; echo '```'
  grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):' "$run/check.out"
  for t in $tests; do
    log=$run/build/${t%.sh}.log; [ -f "$log" ] || { echo "$t: no log"; continue; }
    echo "$t: $(grep -E '^ok ' "$log" | grep -vic '# skip') ok, $(grep -cE '^not ok ' "$log") not ok, $(grep -ciE '^(not )?ok .*# skip|^1\.\.0 # skip' "$log") skipped$(grep -iE '^(not )?ok .*# skip|^1\.\.0 # skip' "$log" | grep -ioE '# skip .*' | sort | uniq -c | sed 's/ *\([0-9]*\) # [Ss][Kk][Ii][Pp] */; \1x: /' | tr -d '\n')"
  done
  echo '```'
  if [ "${GPU_CHECK_BENCH:-yes}" != no ] && [ "$cuda_arg" != --without-cuda ]; then
    # the staging engine with its host copy backend (memcpy, no GPU)
    only=${GPU_CHECK_BENCH:-yes}
    [ "$only" = rpc_device ] || bench staging sh "$src/bench/staging.sh" "$run/build"
    # RPC echo on the GPU: cpu, staged (and direct where UCX has CUDA),
    # then one staged 64 MiB echo stage by stage, and the copy floors
    # (pinned and pageable, both ways), all from one invocation; then the
    # same with the staged chunks through UCX instead of read in place
    export TODIST_MODULE_PATH="$run/build/.libs"
    if [ "$only" = rpc_device ]; then
      # the small-body figures (bytes=8 lines) with the bounce ring and
      # without it (cuda_device.h G4), interleaved; the large echo short
      for i in 1 2; do
        bench rpc_device todist-run -n 2 "$run/build/bench/rpc_device" 1
        bench rpc_device_bounce_off env TODIST_CUDA_BOUNCE=0 todist-run -n 2 "$run/build/bench/rpc_device" 1
      done
    else
      bench rpc_device todist-run -n 2 "$run/build/bench/rpc_device" 64
      bench rpc_device_cma_off env TODIST_STAGING_CMA=0 todist-run -n 2 "$run/build/bench/rpc_device" 64
      bench collectives sh "$src/bench/collectives.sh" "$run/build"
    fi
    # the same echo with both ranks' work in one MPS server: a small device
    # body's echo costs ~300 us on a shared GPU without it, which the copies
    # do not explain (docs/gpus.md, "Small device bodies")
    if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
      mps=$run/mps; mkdir -p "$mps/pipe" "$mps/log"
      export CUDA_MPS_PIPE_DIRECTORY="$mps/pipe" CUDA_MPS_LOG_DIRECTORY="$mps/log"
      if nvidia-cuda-mps-control -d; then
        # bounded tighter than the others: a client of a broken server
        # could wait
        bench rpc_device_mps timeout -k 5 60 todist-run -n 2 "$run/build/bench/rpc_device" 1
        echo quit | timeout -k 5 20 nvidia-cuda-mps-control
      else
        echo "### rpc_device_mps: nvidia-cuda-mps-control -d failed"
      fi
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else
      echo "### rpc_device_mps: no nvidia-cuda-mps-control here"
    fi
  fi
} > "$out"
say "results: $out"
exit "$check_rc"
