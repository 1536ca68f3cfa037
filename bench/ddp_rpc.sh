#!/bin/sh
# ddp_rpc.sh [BUILDDIR]: seed 002's DDP + RPC program, todist's
# (examples/ddp_rpc under todist-run -n 4) beside PyTorch's tutorial as
# published (bench/ddp_rpc_torch.py: RemoteModule, DDP over gloo, TensorPipe,
# DistributedOptimizer; CPU, one thread per process), in one invocation,
# EPOCHS (default 20) epochs of 10 batches each; each trainer times its own
# training loop. todist's program also meets its trainers at two barriers
# per step (its deterministic order), which the tutorial does not: the
# comparison is, if anything, unfair to todist. torch is skipped with a note
# when absent. Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
EPOCHS=${EPOCHS:-20}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

t=$(todist-run -n 4 "$B/examples/ddp_rpc" --epochs "$EPOCHS" |
    sed -n 's/^master: trainer \([01]\): \([0-9]*\) steps.*(\([0-9.]*\) ms per step)$/\1 \2 \3/p')
printf '%s\n' "$t" | while read -r r n ms; do
    echo "todist ddp_rpc trainer=$r steps=$n ms_per_step=$ms"
done
tms=$(printf '%s\n' "$t" | awk '{ if ($3 > m) m = $3 } END { print m }')

if /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null; then
    p=$(BENCH_PORT=${BENCH_PORT:-29500} /usr/bin/python3 "$S/ddp_rpc_torch.py" \
        "$EPOCHS" 2>/dev/null | grep '^torch ddp_rpc')
    printf '%s\n' "$p"
    pms=$(printf '%s\n' "$p" | sed -n 's/.*ms_per_step=\([0-9.]*\).*/\1/p' |
          awk '{ if ($1 > m) m = $1 } END { print m }')
    awk -v a="$tms" -v b="$pms" 'BEGIN {
        if (a > 0 && b > 0)
            printf "ddp_rpc: todist %.3f ms/step, torch %.3f ms/step, speedup %.1fx\n", a, b, b / a
        else
            print "ddp_rpc: a side printed no time" }'
else
    echo "# torch not available (/usr/bin/python3 -c 'import torch'): torch lines skipped"
    echo "ddp_rpc: todist $tms ms/step"
fi
