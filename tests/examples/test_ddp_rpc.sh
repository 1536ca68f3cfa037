#!/bin/sh
# examples/ddp_rpc (seed 002: DDP + RPC, PyTorch's tutorial) over real UCX
# through todist-run -n 4: replaying PyTorch's run of the tutorial's model
# (tests/data/ddp_rpc_ref.safetensors, from tests/data/gen_ddp_rpc_ref.py:
# the same initial weights and batches), every step's loss of each trainer
# and the linear after every step equal PyTorch's to 1e-5 and the two DDP
# replicas are identical after every step. Without --ref it trains on its
# own batches, the loss falls and (--check) the replicas stay identical. The srun --todist run is in
# tests/spank/test_spank_slurm.sh. Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
EX="$top_builddir/examples/ddp_rpc"
REF="$top_srcdir/tests/data/ddp_rpc_ref.safetensors"
plan 10

out=$(timeout -k 5 300 todist-run -n 4 "$EX" --ref "$REF" 2>&1)
rc=$?
is "$rc" 0 "ddp_rpc --ref exits 0"
like "$out" "^check=ok " "losses, linear weights and replicas match PyTorch"
like "$out" "^master: trainer 0: 50 steps" "trainer 0 ran the reference's 50 steps"
like "$out" "^master: trainer 1: 50 steps" "trainer 1 ran the reference's 50 steps"
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"
printf '%s\n' "$out" | grep '^check=' | sed 's/^/# /'

out=$(timeout -k 5 300 todist-run -n 4 "$EX" --epochs 3 --check 2>&1)
rc=$?
is "$rc" 0 "ddp_rpc --epochs 3 --check exits 0"
like "$out" "^check=ok replicas_max_abs_diff=0 " "the DDP replicas are identical after every step"
first=$(printf '%s\n' "$out" | sed -n 's/^trainer 0: training done for epoch 0, mean loss //p')
last=$(printf '%s\n' "$out" | sed -n 's/^trainer 0: training done for epoch 2, mean loss //p')
ok "$(awk -v a="$first" -v b="$last" 'BEGIN{exit !(a > 0 && b > 0 && b < a)}'; echo $?)" \
   "trainer 0's mean loss falls ($first -> $last)"
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"

out=$(timeout -k 5 60 todist-run -n 2 "$EX" 2>&1)
is "$?" 2 "ddp_rpc -n 2 refuses (needs 4 ranks)"
like "$out" "needs 4 ranks" "and says why"
out=$("$EX" --bogus 2>&1)
is "$?" 2 "an unknown option is a usage error"
done_testing
