#!/bin/sh
# RemoteModule (todist/remote_module.h) over real RPC and UCX, two workers
# through todist-run (tests/dist_autograd/remote_module_peer): modules created on rank 1
# (linear, embedding_bag, mlp) forward equal to the local computation; an
# embedding_bag forward inside a distributed autograd context, a local
# linear on top, distributed backward and a distributed SGD step over the
# remote parameters give the local computation's gradient and weights;
# free removes the module from its owner's table; a handle passed in a
# value list runs the same module without owning it. Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/dist_autograd/remote_module_peer"
names="linear_forward_equals_local embedding_bag_loss_equals_local
local_linear_grad_in_context dist_optimizer_steps_remote_embedding
mlp_forward_equals_local free_returns_ok owner_freed_module
handle_from_list_runs_the_module freeing_a_received_handle_keeps_the_module
list_that_is_not_a_handle_is_rejected"
set -- $names
plan $(( $# + 1 ))
out=$(timeout -k 5 120 todist-run -n 2 "$PEER" 2>&1)
rc=$?
is "$rc" 0 "remote_module_peer exits 0"
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
