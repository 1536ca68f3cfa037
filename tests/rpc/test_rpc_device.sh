#!/bin/sh
# RPC of device tensors (issue 17) between two processes over real UCX,
# with the test device backend (2 "cuda" devices per process whose memory
# is host memory; kernels/device.h D4): rank 0 maps cuda:0 -> cuda:1 for
# worker1. GPU-direct and staged routes (the staged one in 64 KiB chunks,
# so a 4 MiB body takes 64 of them): tensors land on the mapped device
# with their content, replies come back by the reverse map; an unmapped
# device is refused naming the device and the peer; distributed autograd
# sends the gradient back to the device x came from; a receiver or a
# sender killed mid-transfer. Every run is bounded by timeout.
. "$top_srcdir/tests/lib.sh"
plan 25
PEER="$top_builddir/tests/rpc/rpc_device_peer"
run() { timeout -k 5 "$@"; }
export TODIST_STAGING_CHUNK=65536

for route in staged direct; do
    out=$(run 240 todist-run -n 2 "$PEER" echo $route 2>&1)
    is "$?" 0 "$route: echo of device tensors"
    like "$out" "rank 0: ok $route: reply 2 is x \* 2 on cuda:0 \(reverse map\) \(max diff 0\)" \
         "$route: a 4 MiB tensor went to cuda:1 and came back to cuda:0 intact"
    like "$out" "rank 0: ok $route: tensor 3 landed on cuda:1" \
         "$route: a transposed tensor landed on the mapped device"
    like "$out" "rank 0: ok $route: reply 4 is x \* 2 on the cpu" \
         "$route: a cpu tensor stays on the cpu"
    if [ $route = staged ]; then
        like "$out" "rank 0: ok staged: bodies went through the staging engine in chunks" \
             "staged: the bodies went through the staging engine, in chunks"
        like "$out" "rank 0: ok staged: the reply's chunks were read in place \(64 reads" \
             "staged: each chunk was read once from the sender's buffer (same host)"
    else
        like "$out" "rank 0: ok direct: no body went through the staging engine" \
             "direct: no body went through the staging engine"
    fi
    like "$out" "rank 1: ok every test-device block of rank 1 was given back" \
         "$route: the receiver's device memory was given back"
    if printf "%s\n" "$out" | grep FAIL >/dev/null; then diag "$out"; fi
done

out=$(run 120 todist-run -n 2 "$PEER" unmapped staged 2>&1)
is "$?" 0 "unmapped devices"
like "$out" "rank 0: ok a tensor on unmapped cuda:1 is refused naming device and peer \(rpc: list item 0: device map: a tensor on cuda:1 cannot go to worker1" \
     "a tensor on a device the map lacks fails before sending, naming it and the peer"
like "$out" "rank 0: ok a reply from cuda:0 with no way back fails naming it" \
     "a reply from a device with no reverse entry fails, naming it"
if printf "%s\n" "$out" | grep FAIL >/dev/null; then diag "$out"; fi

for route in staged direct; do
    out=$(run 120 todist-run -n 2 "$PEER" autograd $route 2>&1)
    is "$?" 0 "$route: distributed autograd with device tensors"
    like "$out" "rank 0: ok $route: the gradient 2x landed on cuda:0, x's device \(max diff 0\)" \
         "$route: the gradient came back to the device x came from"
    if printf "%s\n" "$out" | grep FAIL >/dev/null; then diag "$out"; fi
done

out=$(run 120 todist-run -n 2 --grace-period 20 "$PEER" kill_receiver staged 2>&1)
is "$?" 137 "the killed receiver's status is reported"
like "$out" "rank 0: ok the call whose 64 MiB body was being staged to the killed rank failed with TD_ERR_PEER" \
     "a call whose body is being staged fails with TD_ERR_PEER when the receiver dies"
if printf "%s\n" "$out" | grep FAIL >/dev/null; then diag "$out"; fi

out=$(run 120 todist-run -n 2 --grace-period 20 "$PEER" kill_sender staged 2>&1)
is "$?" 137 "the killed sender's status is reported"
like "$out" "rank 1: ok the half-received body was freed when its sender died" \
     "the receiver frees a half-received body when its sender dies"
like "$out" "rank 1: ok no handler ran for the unfinished call" \
     "no handler runs for a call whose body never arrived"
if printf "%s\n" "$out" | grep FAIL >/dev/null; then diag "$out"; fi
done_testing
