#!/bin/sh
# Distributed autograd over real RPC and UCX, multi-process through
# todist-run: examples/my_add, then tests/dist_autograd/dist_peer (gradients equal to the
# local computation for one and two hops, several roots, calls to self;
# what is recorded and when not; unused sends and inputs; retain_graph;
# remote errors naming the rank; cleanup on every worker; 8 threads; 10,000
# contexts; a worker killed mid-backward). Every run is bounded by timeout;
# lib.sh cleans up.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/dist_autograd/dist_peer"
run() { timeout -k 5 "$@"; }

basic="my_add_one_hop my_add_call_to_self no_grad_no_recording
send_recv_recorded two_hops_two_roots rref_to_here_value_recorded unused_send_no_hang_unused_input
retain_graph_accumulates remote_error_names_rank
remote_error_two_hops_names_origin cleanup_every_worker
eight_threads_own_contexts"
many="ten_thousand_contexts ten_thousand_released_everywhere
ten_thousand_memory_flat"
kill="worker_killed_mid_backward"
count() { set -- $1; echo $#; }
plan $(( $(count "$basic") + $(count "$many") + $(count "$kill") + 9 ))

# PyTorch's design-note example
out=$(run 60 todist-run -n 2 "$top_builddir/examples/my_add" --seed 7 2>&1)
rc=$?
is "$rc" 0 "my_add: exits 0"
like "$out" '^t1=\[(-?[0-9]+\.[0-9]{6},){8}-?[0-9]+\.[0-9]{6}\]' \
     "my_add: prints t1 as 9 values with %.6f"
for n in t2 t4 grad_t1 grad_t2; do
    like "$out" "^$n=\\[" "my_add: prints $n"
done
g=$(printf '%s\n' "$out" | sed -n 's/^grad_t1=//p')
t4=$(printf '%s\n' "$out" | sed -n 's/^t4=//p')
is "$g" "$t4" "my_add: grad_t1 is t4 (the analytic gradient)"
like "$out" '^check=ok$' "my_add: check=ok"
[ "$rc" = 0 ] || diag "$out"
out2=$(run 60 todist-run -n 2 "$top_builddir/examples/my_add" --seed 8 2>&1)
isnt_same=$( [ "$(printf '%s\n' "$out" | head -1)" != \
               "$(printf '%s\n' "$out2" | head -1)" ] && echo 0 || echo 1)
ok "$isnt_same" "my_add: --seed changes the tensors"

out=$(run 120 todist-run -n 3 "$PEER" basic 2>&1); rc=$?
expect "$out" $basic
[ "$rc" = 0 ] || diag "$out"

out=$(run 300 todist-run -n 3 "$PEER" many 2>&1); rc=$?
expect "$out" $many
[ "$rc" = 0 ] || diag "$out"

# rank 2 _exit()s inside a backward function: the backward must end with
# an error naming rank 2, not hang (bounded by the timeout here).
out=$(run 90 todist-run -n 3 --grace-period 30 "$PEER" kill 2>&1); rc=$?
expect "$out" $kill
printf '%s\n' "$out" | grep "PASS worker_killed_mid_backward" >/dev/null || diag "$out"
done_testing
