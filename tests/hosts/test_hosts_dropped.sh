#!/bin/sh
# A live rank is not taken for lost (tests/hosts.sh, 1+1; transport.c L7,
# L8). Rank 0 stops itself (SIGSTOP, TODIST_TEST_STOP_CONNECT) as it makes
# its endpoint to rank 1, before UCX could send that endpoint's wire-up,
# while rank 1 waits for it in an all_reduce (rank 1 fetched rank 0's
# address before, hosts_peer.c); the test sees rank 0 stopped, then
# resumes it (SIGCONT) after HOLD seconds and rank 1's verdict, or once
# rank 1 gave it up. Rank 1's pings
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
plan 14

# stop HOLD LIVENESS [VERDICT]: run "hosts_peer dropped" 1+1; once rank 0
# is seen stopped (its state in /proc is T: the hook fired as it made its
# endpoint), hold it HOLD seconds and, with VERDICT, until rank 1 also
# said what it makes of rank 0's silence (busy, unreachable or lost);
# resume it at once if rank 1 gave its all_reduce up. Every wait is on
# something observable, bounded (the ranks' own timeout is 90 s).
stop() {
    rm -f "$TD_TMP"/drop.*
    (TODIST_TEST_STOP_CONNECT=0 TODIST_LIVENESS=$2 TODIST_LOG=info \
     HOSTS_TIMEOUT=90 hosts_launch 1,1 "$B/hosts/hosts_peer" dropped 0 \
     "$TD_TMP/drop") > "$TD_TMP/drop.out" 2>&1 &
    _l=$!
    _t=0
    while [ ! -s "$TD_TMP/drop.0" ] && [ $_t -lt 300 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    _p0=$(cat "$TD_TMP/drop.0")
    # until rank 0 stopped (or ended: then no stop came, and the checks
    # below say so)
    _t=0
    _st=
    while [ $_t -lt 600 ] && kill -0 "$_l" 2>/dev/null; do
        _st=$(hosts_run 1 cat "/proc/$_p0/stat" 2>/dev/null |
              sed -n 's/.*) \([A-Za-z]\) .*/\1/p')
        [ "$_st" = T ] && break
        sleep 0.1; _t=$((_t + 1))
    done
    STOPPED=$_st
    _t=0
    while [ $_t -lt 450 ] &&
          ! grep "^op=dropped call=1 rank=1 " "$HOSTS_DIR/rank1.out" \
              >/dev/null 2>&1; do
        if [ $_t -ge $(($1 * 10)) ] && { [ -z "${3:-}" ] ||
           grep "busy, not lost\|unreachable\|lost rank" \
               "$HOSTS_DIR/rank1.out" >/dev/null 2>&1; }; then
            break
        fi
        sleep 0.1; _t=$((_t + 1))
    done
    hosts_run 1 kill -CONT "$_p0"
    wait $_l
    OUT=$(cat "$TD_TMP/drop.out")
}

hosts_up 2 || { diag "hosts_up failed"; exit 1; }

# rank 0 stopped 3x TODIST_LIVENESS as its endpoint was being made, and
# until rank 1 gave its verdict (rank 1 holds rank 0's address first:
# hosts_peer.c; before, the stop missed once in a few runs, and 3 times
# in a row in a CI's loaded make check)
stop 6 2 verdict
is "$STOPPED" T "rank 0 stops as it makes its endpoint to rank 1"
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
is "$STOPPED" T "stopped less than TODIST_LIVENESS: rank 0 stops too"
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
