#!/bin/sh
# Prove the GPU kit without a GPU (docs/gpus.md, "The GPU kit"): build it (or
# take DIR), check its size, then in a mount namespace where the system's
# UCX, hwloc and OpenBLAS headers, libraries and .pc files are hidden, run
# scripts/gpu-check.sh on it: configure and build from the kit alone, run a
# subset of the tests (the CUDA ones must skip for "no CUDA device" only), and
# check that ldd of every built binary resolves from the kit, the build, the
# CUDA toolkit or glibc/gcc's runtime only.
#   scripts/gpu-kit-selftest.sh [DIR]      (root; exit 77 where namespaces are not permitted)
# Not part of make check: it builds all of todist (minutes). make check runs
# the cheap tests/tools/test_gpu_kit_manifest.sh instead.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
if [ "${TD_SELFTEST_INNER:-}" != 1 ]; then
  unshare --mount --propagation private true 2>/dev/null ||
    { echo "1..0 # SKIP mount namespaces not permitted here"; exit 77; }
  if [ $# -ge 1 ]; then kit=$1; own=""
  else kit=$(mktemp -d "${TMPDIR:-/tmp}/gpu-kit.XXXXXX"); own=$kit; fi
  trap '[ -n "$own" ] && rm -rf "$own"' EXIT INT TERM
  [ -f "$kit/MANIFEST" ] || sh "$top/scripts/gpu-kit.sh" "$kit" || exit 1
  size=$(du -sm --exclude=run --exclude=results.md "$kit" | cut -f1)  # gpu-check.sh's output aside
  echo "selftest: kit $kit: $size MiB"
  [ "$size" -le 64 ] || { echo "not ok - kit is $size MiB, over 64"; exit 1; }
  TD_SELFTEST_INNER=1 unshare --mount --propagation private sh "$0" "$(cd "$kit" && pwd)"
  exit $?
fi

# --- inside the namespace -------------------------------------------------
kit=$1; ml=$(gcc -print-multiarch 2>/dev/null); ml=${ml:-x86_64-linux-gnu}
hide_dir() { [ -d "$1" ] && mount -t tmpfs none "$1"; }
hide_file() { [ -e "$1" ] && mount --bind /dev/null "$1"; }
for d in /usr/include/ucp /usr/include/ucs /usr/include/uct /usr/include/ucm /usr/include/hwloc \
         /usr/include/$ml/openblas* /usr/lib/$ml/openblas* /usr/lib/$ml/ucx; do hide_dir "$d"; done
for f in /usr/include/hwloc.h /usr/lib/$ml/libuc[pstm].so* /usr/lib/$ml/libhwloc.so* \
         /usr/lib/$ml/libopenblas*.so* /usr/lib/$ml/pkgconfig/ucx*.pc /usr/lib/$ml/pkgconfig/hwloc.pc \
         /usr/lib/$ml/pkgconfig/openblas.pc /usr/lib/$ml/pkgconfig/blas*.pc /usr/lib/$ml/pkgconfig/cblas.pc; do
  hide_file "$f"; done
fail=0
if pkg-config --exists ucx 2>/dev/null || [ -s /usr/include/ucp/api/ucp.h ] || [ -s /usr/include/hwloc.h ]; then
  echo "not ok - the system's UCX/hwloc are still visible"; exit 1; fi
echo "ok - system UCX, hwloc, OpenBLAS hidden"

cd "$top" || exit 1
GPU_CHECK_TESTS="${GPU_KIT_SELFTEST_TESTS:-tests/kernels/test_cuda tests/kernels/test_device_module.sh tests/kernels/test_device_backend tests/coll/test_coll_device.sh tests/rpc/test_rpc_device.sh tests/tensor/test_tensor}" \
GPU_CHECK_BENCH=no sh "$top/scripts/gpu-check.sh" "$kit"
rc=$?
[ "$rc" -eq 0 ] && echo "ok - gpu-check.sh built and tested from the kit" ||
  { echo "not ok - gpu-check.sh exit $rc"; fail=1; }
b=$kit/run/build
# CUDA tests skip for the absence of a device only
logs="$b/tests/kernels/test_cuda.log $b/tests/kernels/test_device_module.log $b/tests/coll/test_coll_device.log"
bad=$(cat $logs | grep -i '# skip' | grep -vi 'no CUDA device')
nskip=$(cat $logs | grep -ciE '^(not )?ok .*# skip .*no CUDA device')
[ -z "$bad" ] && [ "$nskip" -gt 0 ] && echo "ok - CUDA tests skip for no CUDA device only ($nskip skips)" ||
  { echo "not ok - other skips:"; echo "$bad"; fail=1; }

# ldd: the kit, the build, the CUDA toolkit, glibc/gcc's runtime only
cuda=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
LD_LIBRARY_PATH="$kit/root/usr/lib/$ml:$kit/root/usr/lib/$ml/openblas-pthread:$kit/root/lib/$ml:$(find "$b" -type d -name .libs | paste -sd:)"
export LD_LIBRARY_PATH
n=0; nbad=0
for f in $(find "$b" -type f \( -name '*.so*' -o -perm -u+x \)); do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  n=$((n + 1))
  out=$(ldd "$f" 2>&1 | awk -v k="$kit" -v b="$b" -v c="$cuda" '
    /not found/ { print; next }
    / => \// { p = $3
      if (index(p, k) == 1 || index(p, b) == 1 || index(p, c) == 1 || index(p, "/usr/local/cuda") == 1) next
      if (p ~ /\/(libc|libm|libdl|libpthread|librt|libutil|libresolv|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so/) next
      print }')
  [ -z "$out" ] || { nbad=$((nbad + 1)); echo "# $f:"; echo "$out" | sed 's/^/#   /'; }
done
[ "$n" -gt 0 ] && [ "$nbad" -eq 0 ] && echo "ok - ldd of $n built binaries resolves from the kit, CUDA and glibc/gcc only" ||
  { echo "not ok - ldd: $nbad of $n binaries resolve elsewhere"; fail=1; }
# and the libraries did come from the kit
# (OpenBLAS is opened at the first matrix product, kernels/cpu/cpu_blas.c,
# from the folder configure found it in: not in ldd, so that folder is checked)
ldd "$b/.libs/libtodist.so" | grep -q "libucp.so.* => $kit/root/" &&
ldd "$b/.libs/libtodist.so" | grep -q "libhwloc.so.* => $kit/root/" &&
grep -q "^TD_BLAS_DIR = $kit/root/" "$b/Makefile" &&
  echo "ok - libtodist.so takes UCX, hwloc and OpenBLAS from the kit" ||
  { echo "not ok - libtodist.so does not take UCX/hwloc/OpenBLAS from the kit:"; ldd "$b/.libs/libtodist.so"; grep '^TD_BLAS_DIR' "$b/Makefile"; fail=1; }
exit $fail
