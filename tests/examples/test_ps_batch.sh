#!/bin/sh
# examples/ps_batch (seed 003's batch-updating parameter server, async
# handlers) over real UCX through todist-run: with 2 and 3 trainers (and
# TODIST_RPC_THREADS=1 on the server: every trainer's call waits on the
# round's future without a pool thread), the server's parameters after the
# run equal the same training done in one process, and every round ran.
. "$top_srcdir/tests/lib.sh"
EX="$top_builddir/examples/ps_batch"
plan 8
for n in 3 4; do
    out=$(TODIST_RPC_THREADS=1 timeout -k 5 120 todist-run -n $n "$EX" \
          --steps 30 --check 2>&1)
    rc=$?
    is "$rc" 0 "ps_batch -n $n exits 0"
    like "$out" "^server: 30 rounds of $((n - 1)) trainers" \
         "ps_batch -n $n: 30 rounds of $((n - 1)) trainers"
    like "$out" '^check=ok max_abs_diff=' \
         "ps_batch -n $n: parameters equal the one-process training"
    [ "$rc" = 0 ] || diag "$out"
done
# the loss goes down (the updates are real)
first=$(printf '%s\n' "$out" | sed -n 's/^trainer 1 step 0 loss //p')
last=$(printf '%s\n' "$out" | sed -n 's/^trainer 1 step 29 loss //p')
ok "$(awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a / 2)}'; echo $?)" \
   "trainer 1's loss falls by half or more ($first -> $last)"
out=$(timeout -k 5 60 todist-run -n 1 "$EX" 2>&1)
is "$?" 2 "ps_batch -n 1 refuses (needs a server and a trainer)"
done_testing
