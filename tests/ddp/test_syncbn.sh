#!/bin/sh
# SyncBatchNorm over real collectives and UCX, through todist-run
# (tests/ddp/syncbn_peer): with uneven rows per rank (5, 2, 7), the output and
# input gradient equal single-process BatchNorm1d over the concatenated
# batch, the group sum of the weight and bias gradients equals its
# gradients, the running statistics equal its own after two train steps,
# and eval mode uses them (float64, 1e-10); one row in the whole group is
# an error on every rank; inside a DDP model (linear -> SyncBatchNorm) the
# averaged gradients times the group size equal single-process ones. At 2
# and 3 ranks. Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/ddp/syncbn_peer"

checks="forward_equals_batchnorm_over_concatenated_batch
input_gradient_equals_concatenated_rows
weight_bias_gradients_sum_to_concatenated
running_statistics_equal_concatenated eval_mode_uses_running_statistics
num_batches_tracked_counts_train_steps
one_row_in_the_group_is_an_error_on_every_rank
syncbn_inside_ddp_gradients_match"
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
