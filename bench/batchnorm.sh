#!/bin/sh
# bench/batchnorm.sh BUILDDIR: BatchNorm1d forward + backward (float32, one
# thread) in todist and in torch, side by side, then torch/todist time
# ratios (> 1: todist is faster). torch is skipped with a note if absent.
B=${1:?usage: bench/batchnorm.sh BUILDDIR}
D=$(dirname "$0")
T=$("$B/bench/batchnorm") || exit 1
printf '%s\n' "$T"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    P=$(OMP_NUM_THREADS=1 /usr/bin/python3 "$D/batchnorm_torch.py") || exit 1
    printf '%s\n' "$P"
    printf '%s\n%s\n' "$T" "$P" | awk '
        { split($3, a, "="); split($4, b, "="); split($5, u, "=");
          k = a[2] "x" b[2]; v[$1, k] = u[2]; if (!(k in seen)) { seen[k] = 1; o[++n] = k } }
        END { for (i = 1; i <= n; i++) { k = o[i]
              printf "ratio torch/todist %s = %.2f\n", k, v["torch", k] / v["todist", k] } }'
else
    echo "note: python3-torch not installed; no baseline"
fi
