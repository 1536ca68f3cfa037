#!/bin/sh
# check-sanitizers.sh [address|thread] [TEST...]: build with sanitizers in
# a folder of its own and run make check there (TEST...: only those, as
# make check TESTS='...'), ending with "N passed, N failed[, N skipped]".
#   address (default): ASan + UBSan in build-san. A distributed runtime's
#     bugs are use-after-free and undefined behaviour: run this before
#     merging anything that touches memory ownership (CI runs it).
#   thread: ThreadSanitizer in build-tsan, with the suppressions in
#     scripts/tsan.supp (UCX's own races, each entry justified there).
# TD_SAN_DIR overrides the folder; docs/testing.md says more.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
kind=address
case "${1:-}" in
address|thread) kind=$1; shift ;;
esac
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
if [ "$kind" = thread ]; then dir=${TD_SAN_DIR:-build-tsan}; else dir=${TD_SAN_DIR:-build-san}; fi
mkdir -p "$dir"
cd "$dir"
[ -f Makefile ] || ../configure --enable-sanitizers=$kind ${TODIST_CONFIGURE_FLAGS:-}
make -j"$(nproc)"
# UCX installs memory hooks that the sanitizers' allocators do not expect.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# A race report makes the process exit 66 at its end (so the test fails).
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$top/scripts/tsan.supp:exitcode=66:second_deadlock_stack=1:history_size=4}
set +e
if [ $# -gt 0 ]; then
    make -j"$(nproc)" check TESTS="$*"
else
    make -j"$(nproc)" check
fi
rc=$?
sh "$top/scripts/test-summary.sh" . || rc=1
exit $rc
