#!/bin/sh
# A drop with sends of ours queued in UCX, on an endpoint whose wire-up
# is done (transport.c L12's "closed by force", L13), on one link per
# host and on two (tests/hosts.sh HOSTS_RAILS=2, UCX over both). Rank 0
# streams 8 MiB messages to rank 1 (hosts_peer queued: always two
# posted, a rendezvous each), host 2 is cut off (every rail) once the
# stream runs, and each rank drops the other (TODIST_LIVENESS=2): rank 0
# with sends in UCX, which cannot complete across the cut, so it closes
# its endpoint by force. Checks:
#  - the stream crossed the link(s) before the cut;
#  - no rank aborts or hangs: the job ends, both report;
#  - rank 0's send fails, and it dropped rank 1 (its log) with sends in
#    UCX: its endpoint is not kept (L12's "kept" debug line is absent);
#  - rank 1's receive fails naming rank 0, with TD_ERR_PEER as a send
#    does, not UCX's cancel (L14: before, a rendezvous
#    receive under way at the cut hung until the job's timeout: rank 1
#    kept its endpoint to rank 0, and UCX never ended the receive), and
#    rank 1 lost no message: each one it received is whole and in order.
# The link is limited to 100 Mbit/s, so that the cut lands inside a
# message (each takes most of a second); passes wherever it lands.
# The link stays cut until both reported. TD_TEST_QUEUED_HEAL=1 restores
# it once rank 0 reported, rank 1 watching with TODIST_LIVENESS=30 (the
# partition heals before rank 1 gives up): UCX 1.13.1 then crashes rank
# 0 now and then (SIGSEGV in ucs_mpool_put under uct_tcp_iface_progress,
# after the forced close, when rank 1's traffic reaches it again), on one
# rail and on two: open, see docs/hosts.md. Not a timing test: every step
# waits for the state it needs.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
B="$top_builddir/tests"

HOSTS_RAILS=2
if ! hosts_supported; then
    skip_all "$HOSTS_WHY"
fi
plan 16
HEAL=${TD_TEST_QUEUED_HEAL:-0}

# queued RAILS: the scenario on a bed of RAILS links per host.
queued() {
    _k=$1
    HOSTS_RAILS=$_k hosts_up 2 || { diag "hosts_up failed"; exit 1; }
    # a message takes most of a second: the cut lands inside one
    hosts_rate 2 100mbit || { diag "hosts_rate failed"; exit 1; }
    Q="$TD_TMP/q$_k"
    rm -f "$Q" "$Q".*
    set -- $(hosts_bytes 2)
    _rx=$2
    (HOSTS_TIMEOUT=120 hosts_launch 1,1 sh -c \
        'if [ "$TODIST_RANK" = 0 ]; then TODIST_LIVENESS=2
         else TODIST_LIVENESS=$1; fi; TODIST_LOG=debug
         export TODIST_LIVENESS TODIST_LOG; shift; exec "$0" "$@"' \
        "$B/hosts/hosts_peer" "$([ "$HEAL" = 1 ] && echo 30 || echo 2)" \
        queued 0 "$Q") > "$Q.out" 2>&1 &
    _l=$!
    # rank 0's first send done and rank 1 received two (60 s at most)
    _t=0
    while { [ ! -e "$Q" ] || [ ! -e "$Q.got" ]; } && [ $_t -lt 600 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    set -- $(hosts_bytes 2)
    _rx=$(($2 - _rx))
    hosts_cut 2
    if [ "$HEAL" = 1 ]; then
        # rank 0 reported (60 s at most), then the link
        _t=0
        while ! grep "^op=queued rank=0 " "$HOSTS_DIR/rank0.out" \
                > /dev/null 2>&1 && [ $_t -lt 600 ]; do
            sleep 0.1; _t=$((_t + 1))
        done
        hosts_restore 2
    fi
    # both reported (or one died: the job ends) (60 s at most)
    _t=0
    while { ! grep "^op=queued rank=0 " "$HOSTS_DIR/rank0.out" ||
            ! grep "^op=queued rank=1 " "$HOSTS_DIR/rank1.out"; } \
            > /dev/null 2>&1 && kill -0 $_l 2>/dev/null && [ $_t -lt 600 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    : > "$Q.done"
    wait $_l
    _rc=$?
    OUT=$(cat "$Q.out")
    _d="$_k rail(s)"
    # two 8 MiB messages received at least, on whichever lanes
    ok "$([ $_rx -ge 16777216 ]; echo $?)" \
       "$_d: the stream crossed the link(s) before the cut ($_rx bytes in)"
    is "$_rc" 0 "$_d: the job ends (no abort, no hang)"
    unlike "$OUT" "Assertion|ucs_assert|backtrace|Abort" "$_d: no abort"
    like "$OUT" "op=queued rank=0 n=[0-9]+ bad=0 rc=-[0-9]+ .*rank 1" \
         "$_d: rank 0's send fails naming rank 1"
    like "$OUT" "rank 0\\]: error: transport: rank 1 unreachable: on another host, it answered nothing" \
         "$_d: rank 0 dropped rank 1 (its log)"
    unlike "$OUT" "rank 1: its endpoint kept" \
           "$_d: ...with sends in UCX: its endpoint closed, not kept"
    # TD_ERR_PEER (-6), as rank 0's send: before, a receive cut by the
    # forced close failed with UCX's cancel, TD_ERR_CANCELED (-15)
    like "$OUT" "op=queued rank=1 n=[0-9]+ bad=[0-9]+ rc=-6 .*rank 0" \
         "$_d: rank 1's receive fails with TD_ERR_PEER naming rank 0"
    like "$OUT" "op=queued rank=1 n=[0-9]+ bad=0 " \
         "$_d: rank 1 lost no message (each whole, in order)"
    diag "$_d: $(printf '%s\n' "$OUT" |
                 grep -E 'closed by force|kept, to tell|^op=queued' |
                 sed 's/ err=.*//')"
    [ "$_tap_failed" = 0 ] ||
        diag "$(printf '%s\n' "$OUT" | grep -v 'debug: coll' | tail -40)"
    hosts_down
}
queued 1
UCX_NET_DEVICES=eth0,eth1 UCX_MAX_RNDV_RAILS=2 UCX_MAX_EAGER_RAILS=2
export UCX_NET_DEVICES UCX_MAX_RNDV_RAILS UCX_MAX_EAGER_RAILS
queued 2
done_testing
