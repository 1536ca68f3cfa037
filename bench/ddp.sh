#!/bin/sh
# ddp.sh [BUILDDIR]: one epoch of Fashion-MNIST with todist's DDP
# (examples/fashion_mnist_ddp) and torch's DDP over gloo
# (bench/ddp_torch.py, /usr/bin/python3), at 1, 2 and 4 ranks, in one
# invocation, same recipe on both sides (784-256-10, batch 64 per rank, SGD
# lr 0.01 momentum 0.9, one thread per rank); then the ratios. torch is
# skipped with a note when absent. RANKS (default "1 2 4") picks the sizes.
# The overlap check (bench/ddp_overlap, a model with >= 25 MB of gradients)
# runs last at 2 ranks. Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
RANKS=${RANKS:-1 2 4}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
out=$(mktemp); trap 'rm -f "$out"' EXIT
have_torch=0
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null && have_torch=1

for n in $RANKS; do
    line=$(todist-run -n "$n" "$B/examples/fashion_mnist_ddp" --epochs 1 \
        --log-every 0 --threads 1 | grep '^epoch=')
    s=$(printf '%s\n' "$line" | sed -n 's/.*seconds=\([0-9.]*\).*/\1/p')
    a=$(printf '%s\n' "$line" | sed -n 's/.*test_accuracy=\([0-9.]*\).*/\1/p')
    sps=$(awk -v s="$s" 'BEGIN { printf "%.0f", 60000 / s }')
    echo "todist ddp ranks=$n epoch_s=$s samples_per_s=$sps test_accuracy=$a" |
        tee -a "$out"
    if [ "$have_torch" = 1 ]; then
        todist-run -n "$n" /usr/bin/python3 "$S/ddp_torch.py" 2>/dev/null |
            grep '^torch ddp' | tee -a "$out"
    fi
done
[ "$have_torch" = 1 ] || echo "# torch not available (/usr/bin/python3 -c 'import torch'): torch lines skipped"

awk '
/^todist ddp/ { split($3, r, "="); split($4, e, "="); split($6, a, "=");
                t[r[2]] = e[2]; acc[r[2]] = a[2] }
/^torch ddp/  { split($3, r, "="); split($4, e, "="); p[r[2]] = e[2] }
END {
    if (t[1] > 0 && t[2] > 0)
        printf "scaling: 2 ranks take %.2fx the 1-rank epoch (target <= 0.6)\n", t[2] / t[1]
    for (n in t) if (p[n] > 0)
        printf "throughput vs torch ddp at %d ranks: %.2fx (target >= 2)\n", n, p[n] / t[n]
    for (n in acc) if (n != 1 && acc[1] != "")
        printf "accuracy at %d ranks: %s (1 rank %s)\n", n, acc[n], acc[1]
}' "$out"

echo "# overlap (2 ranks, >= 25 MB of gradients)"
todist-run -n 2 "$B/bench/ddp_overlap"
