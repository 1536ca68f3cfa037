#!/bin/sh
# A rank answers a ping while a thread of its own holds the address lock
# (tests/hosts.sh, 1+1; transport.c L9). Rank 1 sends rank 0 a message
# and waits for its reply; rank 0, which has no endpoint to rank 1 yet,
# first looks up rank 1's host, and TODIST_TEST_HOLD_ADDR holds that
# look-up on the address lock 9 s, as a store slow to answer does, while
# rank 1 pings it. Before L9 rank 0's progress thread made an endpoint to
# answer, called the resolver from the receive callback and waited there
# for the lock: rank 0 answered nothing and made no progress at all (seen
# as test_spank_hosts 17/18 timing out under load, issue 30). Not a
# timing test: the hold only has to outlast TODIST_LIVENESS.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
B="$top_builddir/tests"

if ! hosts_supported; then
    skip_all "$HOSTS_WHY"
fi
plan 4

hosts_up 2 || { diag "hosts_up failed"; exit 1; }
OUT=$(TODIST_TEST_HOLD_ADDR=0:9 TODIST_LIVENESS=3 TODIST_LOG=info \
      HOSTS_TIMEOUT=60 hosts_launch 1,1 "$B/hosts/hosts_peer" answer 0 \
      "$TD_TMP/answer" 2>&1)
for _r in 0 1; do
    like "$OUT" "op=answer rank=$_r rc=0 " \
         "rank 0 held 9 s on the address lock: rank $_r's exchange completes"
done
unlike "$OUT" "rank 0 answered nothing" \
       "rank 0 answers rank 1's pings while its main thread holds the lock"
unlike "$OUT" "unreachable|lost rank|Assertion|ucs_assert" \
       "no rank is taken for lost, no abort"
[ "$_tap_failed" = 0 ] || diag "$OUT"
done_testing
