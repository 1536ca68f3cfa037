#!/bin/sh
# check-tsan-peers.sh [RUNS]: the ThreadSanitizer check of the threads the
# runtime starts (progress thread, handler pool, timers, group queues),
# quicker than the whole suite under `check-sanitizers.sh thread`. Builds
# what it needs in build-tsan (TD_SAN_DIR: another folder), then runs each
# peer program below RUNS times (default 2: a race shows only when its
# threads meet) under todist-run, and prints one line per run with its
# report count, then "N runs, N reports". Exits 1 when any run has a
# report or fails. Suppressions: scripts/tsan.supp (each one justified).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-2}
dir=${TD_SAN_DIR:-build-tsan}
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p "$dir"
cd "$dir" || exit 1
[ -f Makefile ] || ../configure --enable-sanitizers=thread \
    ${TODIST_CONFIGURE_FLAGS:-} >/dev/null || exit 1
# ranks program mode
peers="2 tests/coll/coll_peer matrix
2 tests/rpc/rpc_peer basic
2 tests/rpc/rpc_peer futures
2 tests/transport/transport_peer pingpong
4 tests/coll/coll_peer late_names
3 tests/coll/coll_peer mismatch
4 tests/coll/coll_peer concurrent"
progs=$(printf '%s\n' "$peers" | awk '{ print $2 }' | sort -u)
make -j"$(nproc)" libtodist.la tools/todist-run $progs >/dev/null || exit 1
# UCX installs memory hooks that TSan's allocator does not expect.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$top/scripts/tsan.supp:halt_on_error=0:exitcode=66:history_size=4}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT INT TERM
total=0 n=0 bad=0
for i in $(seq 1 "$runs"); do
    printf '%s\n' "$peers" | {
        while read -r np prog mode; do
            f="$log/$(basename "$prog").$mode.$i"
            timeout -k 5 600 tools/todist-run -n "$np" "$prog" "$mode" \
                >"$f" 2>&1
            rc=$?
            k=$(grep -c 'WARNING: ThreadSanitizer' "$f")
            printf '%-34s run %d: rc %d, %d report(s)\n' \
                "$prog $mode -n $np" "$i" "$rc" "$k"
            if [ "$k" -gt 0 ]; then
                grep -A 12 'WARNING: ThreadSanitizer' "$f" | head -40
            fi
            echo "$rc $k" >>"$log/sum"
        done
    }
done
while read -r rc k; do
    n=$((n + 1)); total=$((total + k))
    [ "$rc" = 0 ] && [ "$k" = 0 ] || bad=1
done <"$log/sum"
echo "$n runs, $total reports"
exit $bad
