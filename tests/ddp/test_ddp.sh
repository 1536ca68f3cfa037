#!/bin/sh
# DistributedDataParallel over real collectives and UCX, through todist-run
# (tests/ddp/ddp_peer): parameters broadcast from rank 0, gradients equal the
# average of the ranks' own, 4 SGD steps equal single-process training on
# the whole batch (several small buckets, rebuilt in arrival order after the
# first iteration; the default all_reduce and the example hook), an unused
# parameter is an error naming it unless find_unused_parameters, no_sync
# accumulates locally and the next synchronised step averages the sums, bad
# parameters are named. At 2 and 3 ranks. Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/ddp/ddp_peer"

checks="parameters_broadcast_from_rank0 gradients_are_the_average
find_unused_parameters_unused_grad_is_zero destroy_keeps_gradients
training_matches_single_process buckets_rebuilt_in_arrival_order
training_with_divide_then_sum_hook training_right_across_the_rebuild unused_parameter_is_an_error_naming_it
next_iteration_with_all_used_succeeds no_sync_keeps_local_gradients
no_sync_then_sync_averages_the_sums optimizer_refuses_before_wait
optimizer_steps_after_wait bad_parameters_are_named"
count() { set -- $1; echo $#; }
plan $(( 2 * ($(count "$checks") + 1) ))

for n in 2 3; do
    out=$(timeout -k 5 120 todist-run -n $n "$PEER" 2>&1); rc=$?
    for c in $checks; do
        if printf '%s\n' "$out" | grep -x "PASS $c" >/dev/null; then
            ok 0 "$n ranks: $c"
        else
            ok 1 "$n ranks: $c"
            printf '%s\n' "$out" | grep "FAIL $c" | sed 's/^/# /'
        fi
    done
    is "$rc" 0 "$n ranks: every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"
done
done_testing
