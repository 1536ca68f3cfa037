#!/bin/sh
# Join (uneven inputs) with DDP over real collectives and UCX, through
# todist-run (tests/ddp/join_peer): ranks holding 3 and 10 (2 ranks) or 3, 10
# and 7 batches (3 ranks) all finish, end with equal parameters (those of
# the last joiner), equal to a reference computed without communication,
# both with PyTorch's default divisor (the initial group size) and with
# divide_by_initial_world_size = 0; a rank with no batch is an error on
# every rank, not a hang. Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/ddp/join_peer"

checks="uneven_inputs_finish_divide_by_initial_world_size
final_parameters_equal_on_all_ranks_initial
final_parameters_equal_reference_initial
uneven_inputs_finish_divide_by_active_ranks
final_parameters_equal_on_all_ranks_active
final_parameters_equal_reference_active
rank_without_batches_is_an_error_on_every_rank"
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
