#!/bin/sh
# The CUDA backend is a module (kernels/module.h): libtodist links no CUDA
# library, a CPU-only run never maps one, the first device request loads
# the module and installs its rows, and without the module (or without a
# driver) a device request fails naming what is missing.
. "$top_srcdir/tests/lib.sh"
plan 18
PEER="$top_builddir/tests/kernels/device_module_peer"
LIB="$top_builddir/.libs/libtodist.so"
MOD="$top_builddir/.libs/libtodist-cuda.so"
CUDA_LIBS='cudart|cublas|nccl|libcuda\.so|todist-cuda'
run() { timeout -k 5 120 "$@"; }
mkdir -p "$TD_TMP/empty"

# 1. the library itself: no CUDA library among what it needs
needed=$(readelf -d "$LIB" | grep NEEDED)
unlike "$needed" "$CUDA_LIBS" "libtodist.so needs no CUDA library"
resolved=$(ldd "$LIB")
unlike "$resolved" "$CUDA_LIBS" "ldd libtodist.so resolves none"

# 2. a CPU-only run, module at hand: td_init, a cpu op, a barrier, finalize.
# TODIST_DEVICE=auto loads the module at td_init where the NVIDIA driver is
# (runtime/init.c), so on a GPU node the CPU-only run says TODIST_DEVICE=cpu.
cpu_env=
[ -e /proc/driver/nvidia/version ] && cpu_env=TODIST_DEVICE=cpu
out=$(run env $cpu_env todist-run -n 1 "$PEER" cpu 2>&1)
is "$?" 0 "a cpu run, world of one"
like "$out" 'mapped: none' "maps no CUDA library"
out=$(run env $cpu_env todist-run -n 2 "$PEER" cpu 2>&1)
is "$?" 0 "a cpu run, two ranks"
is "$(printf '%s\n' "$out" | grep -c 'mapped: none')" 2 "neither maps one"

# 3. a device request without the module: the error names it and the path
out=$(TODIST_MODULE_PATH="$TD_TMP/empty" run "$PEER" ask 2>&1)
like "$out" "count: TD_ERR_UNSUPPORTED no CUDA device: the CUDA module libtodist-cuda.so is not in $TD_TMP/empty" \
     "without the module: 'no CUDA device', the module's name, where it looked"
like "$out" 'set TODIST_MODULE_PATH' "and how to point at it"
like "$out" 'kernels: no' "no kernel row"
out=$(TODIST_DEVICE=cuda TODIST_MODULE_PATH="$TD_TMP/empty" run "$PEER" init 2>&1)
like "$out" 'init: TD_ERR_UNSUPPORTED no CUDA device: the CUDA module libtodist-cuda.so' \
     "TODIST_DEVICE=cuda without the module fails td_init, naming it"
out=$(TODIST_DEVICE=gpu run "$PEER" init 2>&1)
like "$out" 'init: TD_ERR_INVALID init: TODIST_DEVICE=gpu on rank 0 is not one of cpu, cuda, auto' \
     "a bad TODIST_DEVICE is refused"

# 4. the module present: loaded at the first request, rows installed
if [ ! -f "$MOD" ]; then
    skip 7 "built without CUDA"
    done_testing
fi
out=$(TODIST_MODULE_PATH="$TD_TMP/empty:$top_builddir/.libs" run "$PEER" ask 2>&1)
like "$out" "module: $top_builddir/.libs/libtodist-cuda.so" \
     "the first request loads the module (found through TODIST_MODULE_PATH)"
like "$out" 'kernels: yes' "and installs its kernel row"
like "$out" 'mapped: libtodist-cuda libcudart' "the CUDA libraries are mapped now"
if printf '%s' "$out" | grep 'count: TD_OK' >/dev/null; then
    skip 1 "a CUDA device is present"
else
    like "$out" 'count: TD_ERR_UNSUPPORTED no CUDA device \(' \
         "no driver: the module's own 'no CUDA device (reason)'"
fi
out=$(printf 'garbage' > "$TD_TMP/libtodist-cuda.so";
      TODIST_MODULE_PATH="$TD_TMP" run "$PEER" ask 2>&1)
like "$out" "no CUDA device: cannot load $TD_TMP/libtodist-cuda.so: " \
     "a module that does not load: dlopen's reason"
out=$(TODIST_DEVICE=cuda run todist-run -n 1 "$PEER" init 2>&1)
like "$out" 'mapped: libtodist-cuda libcudart' "TODIST_DEVICE=cuda loads it at td_init"
out=$(run todist-run -n 1 "$PEER" init 2>&1)
if [ -e /proc/driver/nvidia/version ]; then
    like "$out" 'mapped: libtodist-cuda libcudart' "TODIST_DEVICE=auto loads it at td_init where the NVIDIA driver is"
else
    like "$out" 'mapped: none' "TODIST_DEVICE=auto leaves it unloaded at td_init without the NVIDIA driver"
fi
done_testing
