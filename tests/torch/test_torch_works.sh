#!/bin/sh
# What the c10d backend "todist" hands back to torch (python/todist/
# backend.py B3, B4, C3), 2 ranks (tests/torch/works_peer.py): a finished
# work's future holds the call's tensors, for every kind of call; a
# torch.distributed frame above a C++ caller is not taken for the caller;
# the completion thread finishes an operation with its own status; DDP's
# reducer, with and without a comm hook, given finished works (torch 1.13
# read address 0 in Reducer::finalize_backward when their value was
# empty). Skipped without torch.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/torch/torch_env.sh"
PEER=$top_srcdir/tests/torch/works_peer.py

works="sync_all_reduce_value_holds_the_tensor
 sync_broadcast_value_holds_the_tensor
 sync_all_gather_into_tensor_value_holds_the_output
 sync_reduce_scatter_tensor_value_holds_the_output
 sync_send_recv_value_holds_the_tensor sync_barrier_finished
 sync_reuse_value_is_this_calls_tensor sync_reuse_same_tensor_same_work
 sync_reuse_keeps_only_small_tensors sync_reuse_lets_go_of_changed_tensors
 frame_with_other_options_is_not_the_caller
 completion_finishes_with_the_operations_status"
reducer="reducer_comm_hook_reads_the_value reducer_default_reads_the_value"
count() { echo $#; }
plan $(( $(count $works) + $(count $reducer) + 2 ))

expect() { # output names...: both ranks printed PASS name
    _out=$1; shift
    for _c in "$@"; do
        is "$(printf '%s\n' "$_out" | grep -cx "PASS $_c")" 2 "$_c (2 ranks)"
        printf '%s\n' "$_out" | grep "^FAIL $_c:" | head -2 | cut -c1-600 |
            sed 's/^/# /'
    done
}
run() { # mode
    timeout -k 5 120 todist-run --grace-period 20 -n 2 "$PY" "$PEER" "$1" 2>&1
}

out=$(run works); rc=$?
expect "$out" $works
is "$rc" 0 "every rank exits 0 (works)"
[ "$rc" = 0 ] || diag "$out" | grep -v '^# PASS' | tail -20
out=$(run reducer); rc=$?
expect "$out" $reducer
is "$rc" 0 "every rank exits 0 (reducer)"
[ "$rc" = 0 ] || diag "$out" | grep -v '^# PASS' | tail -20
done_testing
