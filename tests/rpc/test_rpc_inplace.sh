#!/bin/sh
# RPC bodies read in place between two ranks of one host (issue 31, step
# 2: runtime/rpc/rpc.c R10, ucx_transport/transport.c O1-O5), with the
# path on (the default) and off (TODIST_RPC_CMA=0): echoes below and
# above the 64 KiB threshold and of several bodies, intact; the bodies
# read in place (on) or not at all (off); 200 mixed 8 B and 1 MiB calls
# run in their sending order; a remote object's fetch and a distributed
# backward's gradient messages take the path; a peer that dies with an
# offer to it unread fails the call within 2 s naming it, and the offer's
# send completes. Offers a process outside the job makes are refused in
# tests/transport/test_transport.sh (forged). Every run is bounded.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/rpc/inplace_peer"
run() { timeout -k 5 "$@"; }

basic="inplace_echo_64KiB_less_4 inplace_echo_64KiB inplace_echo_1MiB
inplace_echo_16MiB inplace_several_bodies inplace_counts inplace_order
inplace_rref_fetch inplace_dist_backward"
kill="inplace_peer_killed inplace_offer_completed"
count() { set -- $1; echo $#; }
plan $(( 2 * ($(count "$basic") + 1 + $(count "$kill") + 1) ))

for mode in on off; do
    if [ $mode = on ]; then
        unset TODIST_RPC_CMA
    else
        TODIST_RPC_CMA=0; export TODIST_RPC_CMA
    fi
    out=$(INPLACE_EXPECT=$mode run 120 todist-run -n 2 "$PEER" basic 2>&1)
    rc=$?
    diag "in place $mode"
    expect "$out" $basic
    is "$rc" 0 "basic, in place $mode: every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"

    out=$(INPLACE_EXPECT=$mode run 120 todist-run -n 2 --grace-period 20 \
          "$PEER" kill 2>&1)
    rc=$?
    expect "$out" $kill
    is "$rc" 137 "kill, in place $mode: the killed rank's status is reported"
    [ "$rc" = 137 ] || diag "$out"
done
unset TODIST_RPC_CMA
done_testing
