#!/bin/sh
# Async RPC handlers (td_rpc_register_async) between two workers over real
# UCX, through todist-run, with TODIST_RPC_THREADS=1: a future's error and
# a handler's error travel back naming the rank; a future completed later
# by another thread answers the call; td_remote of an async handler
# holds its future's value; a 1,000-hop chain of async handlers
# ends with the right value, and, inside a distributed autograd context,
# with the right gradients on both workers after a distributed backward
# that bounces 1,000 times (the propagate handler is async too). Bounded by
# timeout; lib.sh cleans up.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/rpc/async_peer"
names="future_error_travels_back handler_error_names_rank
completed_by_other_thread remote_object_of_async_handler chain_1000_forward chain_1000_backward
chain_1000_grads chain_1000_grad_w0 chain_1000_grad_w1"
set -- $names
plan $(( $# + 1 ))
out=$(TODIST_RPC_THREADS=1 timeout -k 5 300 todist-run -n 2 "$PEER" 1000 2>&1)
rc=$?
is "$rc" 0 "async_peer exits 0 under TODIST_RPC_THREADS=1"
for c in $names; do
    if printf '%s\n' "$out" | grep -x "PASS $c" >/dev/null; then
        ok 0 "$c"
    else
        ok 1 "$c"
        printf '%s\n' "$out" | grep "FAIL $c" | sed 's/^/# /'
    fi
done
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"
done_testing
