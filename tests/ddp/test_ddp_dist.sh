#!/bin/sh
# DDP inside a distributed autograd context (DDP9 in todist/ddp.h), two
# ranks through todist-run (tests/ddp/ddp_dist_peer): each step crosses an RPC
# hop; after td_ddp_dist_backward the context's gradients of the DDP
# parameters are the average of the ranks' local gradients and identical on
# both ranks (before and after the bucket rebuild), a non-DDP leaf keeps its
# own gradient, .grad is untouched, a per-owner distributed optimizer over
# the context keeps the replicas equal, a local backward afterwards still
# averages .grad, and mixing a local announcement with a distributed
# backward is an error naming both; with find_unused_parameters an unused
# parameter's context gradient is zero; Join with
# divide_by_initial_world_size = 0 divides the context's gradients by the
# ranks still training, and ZeRO steps from the context's gradients (after
# td_ddp_dist_backward and after a plain td_dist_backward). Bounded by
# timeout.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/ddp/ddp_dist_peer"

checks="context_grads_are_the_average_it0 non_ddp_leaf_gradient_stays_in_context
context_grads_are_the_average_it1 dist_backward_leaves_dot_grad_alone
dist_optimizer_steps_replicas_by_the_average
local_backward_after_dist_averages_grad
mixed_local_and_dist_is_an_error_naming_both
next_dist_iteration_after_error_works
find_unused_in_dist_backward_gives_zeros_and_averages
join_divides_the_context_gradients_by_the_active_ranks
zero_steps_from_the_context_after_ddp_dist_backward
zero_steps_from_the_context_after_dist_backward"
count() { set -- $1; echo $#; }
plan $(( $(count "$checks") + 1 ))

out=$(timeout -k 5 120 todist-run -n 2 "$PEER" 2>&1); rc=$?
for c in $checks; do
    if printf '%s\n' "$out" | grep -x "PASS $c" >/dev/null; then
        ok 0 "$c"
    else
        ok 1 "$c"
        printf '%s\n' "$out" | grep "FAIL $c" | sed 's/^/# /'
    fi
done
is "$rc" 0 "both ranks exit 0"
[ "$rc" = 0 ] || diag "$out"
done_testing
