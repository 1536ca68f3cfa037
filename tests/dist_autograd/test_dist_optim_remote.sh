#!/bin/sh
# The distributed optimizer over remote references, multi-process through
# todist-run over real RPC and UCX (tests/dist_autograd/dist_optim_peer): parameters owned
# by ranks 1 and 2, a loss computed on rank 0 from their values fetched
# inside a dist autograd context, distributed backward, step; the owners'
# parameters must equal the same SGD / Adam / AdamW steps done locally (1e-6,
# float64); two concurrent steps from two threads equal two sequential ones;
# owners' optimizers are released on destroy and on failed construction;
# the internal functions reject malformed calls; an owner that died gives
# an error naming it. Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/dist_autograd/dist_optim_peer"
run() { timeout -k 5 "$@"; }

basic="grouped_by_owner sgd_matches_local adam_matches_local
adamw_matches_local parameters_moved destroy_releases_owners
concurrent_steps_serialized bad_options_error_names_rank
bad_options_nothing_left not_a_tensor_error_names_rank
malformed_calls_rejected"
kill="dead_owner_error_names_rank"
count() { set -- $1; echo $#; }
plan $(( $(count "$basic") + $(count "$kill") + 1 ))

out=$(run 120 todist-run -n 3 "$PEER" basic 2>&1); rc=$?
expect "$out" $basic
is "$rc" 0 "basic: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"

# rank 2 _exit()s after the optimizer was built: the step must end with an
# error naming rank 2, not hang.
out=$(TODIST_RPC_TIMEOUT=30 run 90 todist-run -n 3 --grace-period 30 \
      "$PEER" kill 2>&1)
expect "$out" $kill
printf '%s\n' "$out" | grep "PASS dead_owner_error_names_rank" >/dev/null || diag "$out"
done_testing
