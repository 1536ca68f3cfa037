#!/bin/sh
# The all_reduce of two ranks on two hosts as one tagged UCX message each
# way (runtime/coll/allreduce.c T1..T6, ucx_transport/transport.c U1..U6),
# on the bed at 1+1: the values of every dtype and op from 4 B to the
# largest tagged body and past it; a different call on each rank (dtype,
# count, collective) fails both as a mismatch (T2), also a collective whose
# message was queued before the all_reduce began (step.h C18); a late
# rank, a timeout on the other and the same failure told to it (T3); a
# first call made before the endpoint is wired up, posted again (T6); a
# dead rank named (T3). Not a timing test: the late rank is 3 s past a
# 1 s timeout; kindfirst's rank 0 sleeps 1 s so that the broadcast comes
# first (if it came after the call began, rx.c would find it: C5); cold
# orders its steps by files and the stopped rank's state.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
B="$top_builddir/tests"

if ! hosts_supported; then
    skip_all "$HOSTS_WHY"
fi
plan 22

hosts_up 2 || { diag "hosts_up failed"; exit 1; }
run() { # MODE [ENV...]
    _m=$1; shift
    OUT=$(for _kv in "$@"; do export "$_kv"; done
          HOSTS_TIMEOUT=90 hosts_launch 1,1 "$B/hosts/pair_peer" "$_m" 2>&1)
}

run values
for _r in 0 1; do
    # 4 dtypes x 3 tagged sizes x 4 ops + 2,000 calls of 8 B
    like "$OUT" "rank=$_r values ok tagged=2048\$" \
         "rank $_r: every value right, 2,048 calls tagged, the 16 past 256 B not"
done
unlike "$OUT" "FAIL" "no wrong value, no failed call"
[ "$_tap_failed" = 0 ] || diag "$OUT"

for _m in dtype count kind; do
    run "$_m"
    for _r in 0 1; do
        like "$OUT" "rank=$_r rc=-[0-9][0-9]* err=.*mismatched collectives in group [0-9]* at call #[0-9]*: rank [01] called" \
             "$_m: rank $_r fails as a mismatch, naming both calls"
    done
done
like "$OUT" "rank=0 rc=.*called all_reduce.*rank 1 called broadcast|rank=0 rc=.*rank 1 called broadcast.*all_reduce" \
     "kind: rank 0's error names rank 1's broadcast"

run kindfirst TODIST_COLL_TIMEOUT=3
like "$OUT" "rank=0 rc=-[0-9][0-9]* err=.*mismatched collectives in group [0-9]* at call #[0-9]*: .*broadcast" \
     "kindfirst: rank 0 finds rank 1's broadcast queued before its all_reduce (C18), not a timeout"
[ "$_tap_failed" = 0 ] || diag "$OUT"

run timeout TODIST_COLL_TIMEOUT=1
like "$OUT" "rank=0 rc=-[0-9][0-9]* err=coll: all_reduce timed out after 1.0 s on rank 0 waiting for rank\(s\) 1" \
     "timeout: rank 0 times out, naming rank 1"
like "$OUT" "rank=1 rc=-[0-9][0-9]* err=.*timed out after 1.0 s on rank 0" \
     "timeout: rank 1, late, gets rank 0's timeout (told, C6)"
unlike "$OUT" "was not matched" \
       "timeout: rank 1's message, its receive cancelled, is taken out at the end (U5)"

# U6: rank 0 sends rank 1, waiting in its all_reduce, a message with the
# call's bare tag from a UCX worker of its own, then calls: keyed by the
# job's token, the real tag is not the bare one, and rank 1 never takes it
run forged
for _r in 0 1; do
    like "$OUT" "rank=$_r forged sum=3,3 rc=0" \
         "forged: rank $_r's sum is the two ranks' (the forged message not taken)"
done
unlike "$OUT" "was not matched|FAIL" "forged: the forged message is taken out at the end, nothing failed"
[ "$_tap_failed" = 0 ] || diag "$OUT"

# T6, U2: the first call, made while the endpoint to the peer cannot
# finish wiring up (rank 1 stopped itself after a store barrier: nothing
# answers the wire-up), is refused, posted again, and completes once rank
# 1 resumes; rank 1 is resumed only after a refusal (before T6 the call
# waited to its deadline and timed out: TODIST_COLL_TIMEOUT=20, far more
# than a resumed rank needs, is no bound on speed). TODIST_COLL_SHM=0:
# else the group's first call tries the segment first, through the
# transport, which makes the endpoint (no test reached U2 so).
R="$TD_TMP/cold"
(export TODIST_COLL_TIMEOUT=20 TODIST_LIVENESS=30 TODIST_COLL_SHM=0
 HOSTS_TIMEOUT=90 hosts_launch 1,1 "$B/hosts/pair_peer" cold "$R") \
    > "$TD_TMP/cold.out" 2>&1 &
_l=$!
_t=0
while [ ! -s "$R.pid1" ] && [ $_t -lt 600 ]; do sleep 0.1; _t=$((_t + 1)); done
_p1=$(cat "$R.pid1" 2>/dev/null)
_st=
_t=0
while [ -n "$_p1" ] && [ $_t -lt 600 ] && kill -0 "$_l" 2>/dev/null; do
    _st=$(hosts_run 2 cat "/proc/$_p1/stat" 2>/dev/null |
          sed -n 's/.*) \([A-Za-z]\) .*/\1/p')
    [ "$_st" = T ] && break
    sleep 0.1; _t=$((_t + 1))
done
: > "$R.go"
_t=0
while [ ! -e "$R.refused" ] && [ $_t -lt 600 ] && kill -0 "$_l" 2>/dev/null; do
    sleep 0.1; _t=$((_t + 1))
done
[ -n "$_p1" ] && hosts_run 2 kill -CONT "$_p1"
wait $_l
OUT=$(cat "$TD_TMP/cold.out")
is "$_st" T "cold: rank 1 stopped before rank 0's first call"
like "$OUT" "rank=0 cold rc=0 sum=3,3 unwired=[1-9][0-9]* " \
     "cold: rank 0's first call, refused for want of a wired-up endpoint, is posted again and completes (T6)"
like "$OUT" "rank=1 cold rc=0 sum=3,3 " "cold: rank 1's too"
[ "$_tap_failed" = 0 ] || diag "$OUT"

run dead
like "$OUT" "rank=0 rc=-[0-9][0-9]* err=.*rank 1" "dead: rank 0's call fails naming rank 1"
unlike "$OUT" "Assertion|ucs_assert|Segmentation" "dead: no abort"
[ "$_tap_failed" = 0 ] || diag "$OUT"
done_testing
