#!/bin/sh
# Remote references and the distributed optimizer hold no RPC pool thread
# while they wait (rref.c's RR1), three workers over real UCX through
# todist-run with TODIST_RPC_THREADS=1 (tests/rpc/rref_async_peer.c says what
# each check does): a 1,000-hop chain of nested calls passing a reference
# along, each hop a method call on it; 400 method calls and a fetch of an
# object whose creation is pending, the call that completes the creation
# queued behind them; a distributed optimizer created over parameters not
# created yet on owners busy with 400 such calls each, then a forward,
# backward and step with the right values, and a second step from an async
# handler (td_dist_optimizer_step_async). Each of these needs more than
# the pool's 256 threads when a waiting handler holds one, and then timed
# out. Then, with TODIST_RPC_TIMEOUT=2, a call and a fetch on an object
# never created end in the old error after the default timeout; with
# TODIST_RREF_MAX_PARKED=50, the 51st parked call is refused naming the
# bound, and a bad value fails td_init naming the variable. Every
# worker checks it leaked no reference. Bounded by timeout; lib.sh cleans up.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/rpc/rref_async_peer"
names="rref_chain rref_pending_fetch rref_pending_fanout optim_busy_owners
optim_step_async_in_handler optim_busy_owners_param1 optim_busy_owners_param2"
tnames="pending_call_times_out pending_fetch_times_out"
set -- $names $tnames parked_bound_refuses
plan $(( $# + 4 ))

out=$(TODIST_RPC_THREADS=1 TODIST_RPC_TIMEOUT=60 \
      timeout -k 5 300 todist-run -n 3 "$PEER" all 1000 400 2>&1)
rc=$?
is "$rc" 0 "rref_async_peer exits 0 under TODIST_RPC_THREADS=1 (no leak)"
expect "$out" $names
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"

out=$(TODIST_RPC_THREADS=1 TODIST_RPC_TIMEOUT=2 \
      timeout -k 5 120 todist-run -n 3 "$PEER" timeout 2>&1)
rc=$?
is "$rc" 0 "rref_async_peer timeout exits 0"
expect "$out" $tnames
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"

out=$(TODIST_RPC_THREADS=1 TODIST_RREF_MAX_PARKED=50 \
      timeout -k 5 120 todist-run -n 3 "$PEER" bound 2>&1)
rc=$?
is "$rc" 0 "rref_async_peer bound exits 0"
expect "$out" parked_bound_refuses
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"

out=$(TODIST_RREF_MAX_PARKED=lots timeout -k 5 60 todist-run -n 1 "$PEER" 2>&1)
like "$out" "TODIST_RREF_MAX_PARKED='lots' is not a count in 1\.\.16777216" \
    "a bad TODIST_RREF_MAX_PARKED fails td_init naming it"
done_testing
