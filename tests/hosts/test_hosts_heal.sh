#!/bin/sh
# A rank dropped by a peer's liveness check is told so (tests/hosts.sh,
# 1+1; transport.c L12). Both ranks warm up, host 2 is cut off and both
# enter an all_reduce; only one rank watches with a short TODIST_LIVENESS
# (2 s), the other with 30 s, so only the first drops the other before
# the link is restored (as when a partition heals after one side gave up
# and before the other did). Then each rank sends to the other.
#  - no rank aborts (UCX 1.13's remote_id assertion) or hangs: the job
#    ends, every rank reports both calls;
#  - the dropped rank's calls fail naming the rank that dropped it and
#    saying so ("dropped this rank: it heard nothing from it ..."), not
#    that it died: before L12 they said "died" or "has failed" (the
#    dropper closed its endpoint; the dropped rank saw the connection
#    close); its all_reduce may also complete (what the dropper had sent
#    before the cut still arrives), as it did before;
#  - the dropper's error is as before (its log: "unreachable ... answered
#    nothing").
# Done with host 2's rank dropping rank 0 (host 1, the store's) and the
# other way. Not a timing test: the cut lasts until the dropper reported.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
B="$top_builddir/tests"

if ! hosts_supported; then
    skip_all "$HOSTS_WHY"
fi
plan 18

# heal DROPPER: rank DROPPER watches with TODIST_LIVENESS=2, the other
# with 30; host 2 is cut until DROPPER's all_reduce failed (30 s at most).
heal() {
    _d=$1
    rm -f "$TD_TMP"/heal*
    (TODIST_LOG=info HOSTS_TIMEOUT=90 hosts_launch 1,1 sh -c \
        'if [ "$TODIST_RANK" = "$0" ]; then TODIST_LIVENESS=2; else
         TODIST_LIVENESS=30; fi; export TODIST_LIVENESS; exec "$@"' "$_d" \
        "$B/hosts/hosts_peer" heal 0 "$TD_TMP/heal") > "$TD_TMP/heal.out" 2>&1 &
    _l=$!
    _t=0
    while [ ! -e "$TD_TMP/heal" ] && [ $_t -lt 600 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    hosts_cut 2
    : > "$TD_TMP/heal.cut"
    _t=0
    while ! grep "^op=heal call=1 rank=$_d " "$HOSTS_DIR/rank$_d.out" \
            > /dev/null 2>&1 && [ $_t -lt 300 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    hosts_restore 2
    : > "$TD_TMP/heal.go"
    # both report their send (60 s at most), then leave
    _t=0
    while [ "$(cat "$HOSTS_DIR"/rank[01].out 2>/dev/null |
               grep -c "^op=heal call=2 ")" -lt 2 ] && [ $_t -lt 600 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    : > "$TD_TMP/heal.done"
    wait $_l
    RC=$?
    OUT=$(cat "$TD_TMP/heal.out")
}

hosts_up 2 || { diag "hosts_up failed"; exit 1; }

for _d in 0 1; do
    _f=$_tap_failed
    _o=$((1 - _d))
    _h=$((_d + 1))
    heal $_d
    is "$RC" 0 "rank $_d drops rank $_o: the job ends (no abort, no hang)"
    unlike "$OUT" "Assertion|ucs_assert|backtrace|Abort" \
           "rank $_d drops rank $_o: no abort"
    like "$OUT" "op=heal call=1 rank=$_d rc=-[0-9]+ .*err=coll: rank $_o .* died" \
         "rank $_d drops rank $_o: its all_reduce fails (as before)"
    like "$OUT" "rank $_d\\]: error: transport: rank $_o unreachable: on another host, it answered nothing" \
         "rank $_d drops rank $_o: its log says why (as before)"
    # (its all_reduce may also complete: what rank $_d had sent it before
    # the cut still arrives)
    like "$OUT" "op=heal call=1 rank=$_o rc=(0 |-[0-9]+ .*err=coll: rank $_d \\(group rank $_d of group 0, 2 members; on host h$_h, ranks there: $_d\\) dropped this rank: it heard nothing from it for [0-9.]+ s \\(TODIST_LIVENESS=2\\))" \
         "rank $_d drops rank $_o: rank $_o's all_reduce completes or fails, told it was dropped"
    # (told during the all_reduce: the group's failure; told after it
    # completed: the send's own, coll_post_send)
    like "$OUT" "op=heal call=2 rank=$_o rc=-[0-9]+ .*err=coll: (send to )?rank $_d .*on host h$_h, ranks there: $_d.* dropped this rank: it heard nothing from it for [0-9.]+ s \\(TODIST_LIVENESS=2\\)" \
         "rank $_d drops rank $_o: rank $_o's send after the cut fails, told it was dropped"
    unlike "$(printf '%s\n' "$OUT" | grep "^op=heal call=[12] rank=$_o ")" \
           "died" "rank $_d drops rank $_o: rank $_o is not told rank $_d died"
    like "$OUT" "rank $_o\\]: error: runtime: rank $_d \\(on host h$_h, ranks there: $_d\\) dropped this rank" \
         "rank $_d drops rank $_o: rank $_o's log says so"
    like "$OUT" "op=heal call=2 rank=$_d rc=-[0-9]+ " \
         "rank $_d drops rank $_o: its later send fails too"
    [ "$_tap_failed" = "$_f" ] || diag "$OUT"
done
done_testing
