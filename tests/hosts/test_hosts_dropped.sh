#!/bin/sh
# A live rank is not taken for lost (tests/hosts.sh, 1+1; transport.c L7,
# L8). Rank 0 stops itself (SIGSTOP, TODIST_TEST_STOP_CONNECT) as it makes
# its endpoint to rank 1, before UCX could send that endpoint's wire-up,
# while rank 1 waits for it in an all_reduce; the test resumes it
# (SIGCONT) after HOLD seconds, or once rank 1 gave it up. Rank 1's pings
# wait behind the unfinished wire-up, so nothing of UCX's crosses to host
# 1: only the kernel's keepalive probes, which L8 turns on, show that host
# 1 answers. Without L8 rank 1 failed rank 0 after TODIST_LIVENESS (the
# false loss of a live rank seen in CI, issue 30). A stop shorter than
# TODIST_LIVENESS is no loss either. Not a timing test: HOLD only has to
# be longer (or shorter) than the period.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
B="$top_builddir/tests"

if ! hosts_supported; then
    skip_all "$HOSTS_WHY"
fi
plan 12

# stop HOLD LIVENESS: run "hosts_peer dropped" 1+1, rank 0 held stopped
# HOLD seconds (less if rank 1 reports its all_reduce first).
stop() {
    rm -f "$TD_TMP"/drop.*
    (TODIST_TEST_STOP_CONNECT=0 TODIST_LIVENESS=$2 TODIST_LOG=info \
     HOSTS_TIMEOUT=60 hosts_launch 1,1 "$B/hosts/hosts_peer" dropped 0 \
     "$TD_TMP/drop") > "$TD_TMP/drop.out" 2>&1 &
    _l=$!
    _t=0
    while [ ! -s "$TD_TMP/drop.0" ] && [ $_t -lt 300 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    _p0=$(cat "$TD_TMP/drop.0")
    _t=0
    while ! grep -q "^op=dropped call=1 rank=1 " "$HOSTS_DIR/rank1.out" \
            2>/dev/null && [ $_t -lt $(($1 * 10)) ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    hosts_run 1 kill -CONT "$_p0"
    wait $_l
    OUT=$(cat "$TD_TMP/drop.out")
}

hosts_up 2 || { diag "hosts_up failed"; exit 1; }

# rank 0 stopped 3x TODIST_LIVENESS as its endpoint was being made. Once
# in a few runs the stop misses (rank 1 never watched rank 0: it said
# neither "busy" nor "unreachable"): tried again, at most 6 times (3
# misses in a row seen once, in a CI's loaded make check).
for _try in 1 2 3 4 5 6; do
    stop 6 2
    printf '%s\n' "$OUT" | grep "busy, not lost\|unreachable" >/dev/null &&
        break
    diag "try $_try: rank 1 did not watch rank 0; again"
done
for _r in 0 1; do
    like "$OUT" "op=dropped call=1 rank=$_r rc=0 " \
         "stopped 6 s as it connects: rank $_r's all_reduce completes"
    like "$OUT" "op=dropped call=2 rank=$_r rc=0 " \
         "stopped 6 s as it connects: rank $_r's barrier after it too"
done
like "$OUT" "rank 0 answered nothing for [0-9.]+ s, but its host acknowledged our data [0-9]+ ms ago: busy, not lost" \
     "stopped 6 s as it connects: rank 1 says why it keeps waiting"
unlike "$OUT" "unreachable|lost rank" \
       "stopped 6 s as it connects: no rank is taken for lost"
[ "$_tap_failed" = 0 ] || diag "$OUT"

# ... and stopped less than TODIST_LIVENESS
_f=$_tap_failed
stop 1 3
for _r in 0 1; do
    like "$OUT" "op=dropped call=1 rank=$_r rc=0 " \
         "stopped 1 s as it connects: rank $_r's all_reduce completes"
    like "$OUT" "op=dropped call=2 rank=$_r rc=0 " \
         "stopped 1 s as it connects: rank $_r's barrier after it too"
done
# (rank 1 may still find rank 0 busy: on a loaded machine the stop and
# the wait for the CPU after it can outlast the period)
unlike "$OUT" "unreachable|lost rank" \
       "stopped 1 s (TODIST_LIVENESS=3): rank 0 is not taken for lost"
unlike "$OUT" "Assertion|ucs_assert|backtrace" "no abort"
[ "$_tap_failed" = "$_f" ] || diag "$OUT"
done_testing
