#!/bin/sh
# dist_backward.sh [BUILDDIR] [ITERS]: forward + distributed backward of
# the my_add graph in todist (todist-run -n 2) and in
# torch.distributed.autograd (bench/dist_backward_torch.py, /usr/bin/python3
# with PyTorch 1.13), medians, then
#   dist_backward: todist X us, torch Y us, speedup Z
# where X and Y are forward + backward. Figures go to bench/RESULTS.md.
set -e
B=${1:-build}
N=${2:-2000}
B=$(cd "$B" && pwd)
src=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
make -C "$B" bench/dist_backward >/dev/null
td=$(TODIST_PROGRESS=${TODIST_PROGRESS:-blocking} todist-run -n 2 \
     "$B/bench/dist_backward" --iters "$N" --warmup $((N / 10)))
echo "$td"
th=$(/usr/bin/python3 "$src/dist_backward_torch.py" "$N" $((N / 10)) 2>/dev/null \
     | grep '^torch ')
echo "$th"
x=$(printf '%s\n' "$td" | sed -n 's/.*total_us=\([0-9.]*\).*/\1/p')
y=$(printf '%s\n' "$th" | sed -n 's/.*total_us=\([0-9.]*\).*/\1/p')
echo "dist_backward: todist $x us, torch $y us, speedup $(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.1f", y / x }')"
