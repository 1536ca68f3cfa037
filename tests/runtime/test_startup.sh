#!/bin/sh
# Start-up costs the store a fixed number of writes per rank (issue 29.2):
# its address (which is also its arrival at the start-up barrier), its
# device facts (count and NCCL capability in one key) and its pid (for the
# liveness check of peers of its host, runtime/liveness.h), plus the
# barrier's two keys: 3N + 2 keys after td_init of N ranks, nothing per
# pair. The
# address resolver's connection is made at the first lookup, not at
# td_init (tests/test_transport.sh's store_gone checks its error).
. "$top_srcdir/tests/lib.sh"
plan 6
PEER="$top_builddir/tests/runtime/startup_keys_peer"
for n in 1 3 8; do
    out=$(timeout -k 5 120 todist-run -n $n "$PEER" 2>&1)
    is "$?" 0 "$n rank(s): td_init, count, td_finalize"
    like "$out" "keys=$((3 * n + 2)) world=$n" "$n rank(s): 3N + 2 keys after td_init"
done
done_testing
