#!/bin/sh
# RPC's small messages through the mailboxes between ranks of one host
# (issue 31, step 1: runtime/rpc/rpc.c R12, ucx_transport/transport.c
# X1-X6), with the path on (the default) and off (TODIST_RPC_MBOX=0): the
# path taken, echoes up to and over a slot's size, 400 mixed small and
# larger calls in their sending order, a timeout; a peer that dies while
# its reply sits unread in the caller's inbox: the caller's calls end
# within 2 s, the pending one naming it. And a process outside the job
# that writes into a rank's inbox (a copied message, its job tag broken)
# runs nothing there and stalls nothing (mbox_intruder). Every run is
# bounded. (The other RPC suites run with the mailboxes on by default;
# tests/rpc/test_rpc.sh runs its own once more with them off.)
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/rpc/mbox_peer"
INTRUDER="$top_builddir/tests/rpc/mbox_intruder"
run() { timeout -k 5 "$@"; }

basic="mbox_path mbox_echo mbox_order mbox_timeout"
kill="kill_reply_path kill_reply_call_ends kill_pending_call_fails"
count() { set -- $1; echo $#; }
plan $(( 2 * ($(count "$basic") + 1 + $(count "$kill") + 1) + 5 ))

for mode in on off; do
    if [ $mode = on ]; then
        unset TODIST_RPC_MBOX
    else
        TODIST_RPC_MBOX=0; export TODIST_RPC_MBOX
    fi
    out=$(MBOX_EXPECT=$mode run 120 todist-run -n 2 "$PEER" basic 2>&1)
    rc=$?
    diag "mailboxes $mode"
    expect "$out" $basic
    is "$rc" 0 "basic, mailboxes $mode: every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"

    out=$(MBOX_EXPECT=$mode run 120 todist-run -n 2 --grace-period 20 \
          "$PEER" kill 2>&1)
    rc=$?
    expect "$out" $kill
    is "$rc" 137 "kill, mailboxes $mode: the killed rank's status is reported"
    [ "$rc" = 137 ] || diag "$out"
done
unset TODIST_RPC_MBOX

# A process outside the job writes into rank 1's inbox.
D="$TD_TMP/intruder"
mkdir -p "$D"
run 120 todist-run -n 2 "$PEER" intruder "$D" >"$D/out" 2>&1 &
job=$!
td_track_pid $job
t0=$(td_now)
while [ ! -e "$D/ready" ] || [ ! -e "$D/pid" ]; do
    if ! kill -0 $job 2>/dev/null ||
       [ "$(awk -v a="$(td_now)" -v b="$t0" 'BEGIN { print (a - b > 60) }')" = 1 ]; then
        break
    fi
    sleep 0.05
done
ok "$([ -e "$D/ready" ] && [ -e "$D/pid" ]; echo $?)" \
   "intruder: rank 0 made its calls and rank 1 said its pid"
iout=$(run 30 "$INTRUDER" "$(cat "$D/pid" 2>/dev/null)" 2>&1)
is "$?" 0 "intruder: wrote into rank 1's inbox ($iout)"
touch "$D/done"
wait $job
rc=$?
out=$(cat "$D/out")
expect "$out" intruder_not_run
like "$out" "rank 1\]: transport: dropped 1 message\(s\) with a wrong job tag \(claiming rank 0" \
     "intruder: rank 1 dropped the message, naming the rank it claimed"
is "$rc" 0 "intruder: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"
done_testing
