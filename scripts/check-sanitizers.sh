#!/bin/sh
# Build with ASan + UBSan in ./build-san and run make check there.
# A distributed runtime's bugs are use-after-free and races: run this
# before merging anything that touches memory ownership.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p build-san
cd build-san
[ -f Makefile ] || ../configure --enable-sanitizers ${TODIST_CONFIGURE_FLAGS:-}
make -j"$(nproc)"
# UCX installs memory hooks that ASan's allocator does not expect.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
make -j"$(nproc)" check
rc=$?
sh "$top/scripts/test-summary.sh" . || rc=1
exit $rc
