#!/bin/sh
# The staging engine (ucx_transport/staging.h) between two processes over
# real UCX transfers, with the test copy backend ("device memory" is host
# memory, copies are memcpy): sizes 0, 1, chunk-1, chunk, chunk+1, 2 chunks,
# 3 chunks + 5 and 64 MiB all in flight at once and echoed back, content
# checked both ways; the credit bound (S1) with 2 and 3 slots; copies
# overlapping transfers; chunks read in place within a host (S8), and
# through UCX with TODIST_STAGING_CMA=0; malformed messages; a receiver and a sender
# killed mid-transfer. Every run is bounded by timeout.
. "$top_srcdir/tests/lib.sh"
plan 14
PEER="$top_builddir/tests/transport/staging_peer"
run() { timeout -k 5 "$@"; }

out=$(run 240 todist-run -n 2 "$PEER" echo 65536 2 2>&1)
is "$?" 0 "double-buffered echo, 64 KiB chunks"
like "$out" 'rank 0: ok 8 transfers \(0 B .. 64 MiB, chunk 65536, 2 slots\) echoed intact.* 1031 chunks read in place' \
     "every size came back intact, at most 2 chunks unacked, copies overlapped, every chunk of 64 KiB read in place (S8)"
[ -n "$(printf '%s\n' "$out" | grep FAIL)" ] && diag "$out"

out=$(TODIST_STAGING_CMA=0 run 240 todist-run -n 2 "$PEER" echo 65536 2 2>&1)
is "$?" 0 "echo with TODIST_STAGING_CMA=0"
like "$out" 'echoed intact.* 0 chunks read in place' "TODIST_STAGING_CMA=0: every chunk through UCX"

out=$(run 240 todist-run -n 2 "$PEER" echo 1048576 3 2>&1)
is "$?" 0 "triple-buffered echo, 1 MiB chunks"
like "$out" 'chunk 1048576, 3 slots\) echoed intact.*max 3 unacked' \
     "three slots: three chunks in flight, never more"

out=$(UCX_TLS=tcp,self run 240 todist-run -n 2 "$PEER" echo 262144 2 2>&1)
is "$?" 0 "echo over TCP only (UCX_TLS=tcp,self)"
like "$out" 'rank 0: ok 8 transfers' "intact over TCP"

out=$(run 120 todist-run -n 2 "$PEER" malformed 4096 2>&1)
is "$?" 0 "malformed staging messages"
like "$out" 'rank 1: ok 7 bad messages rejected, the good transfer arrived intact' \
     "each is rejected; the engine keeps serving"

out=$(run 60 todist-run -n 2 --grace-period 20 "$PEER" kill_receiver 65536 2>&1)
is "$?" 137 "the killed receiver's status is reported"
like "$out" 'rank 0: ok the send to the killed receiver failed with TD_ERR_PEER' \
     "the sender's transfer fails with TD_ERR_PEER"

out=$(run 60 todist-run -n 2 --grace-period 20 "$PEER" kill_sender 65536 2>&1)
is "$?" 137 "the killed sender's status is reported"
like "$out" 'rank 0: ok the receive from the killed sender failed with TD_ERR_PEER' \
     "the receiver's transfer fails with TD_ERR_PEER"
done_testing
