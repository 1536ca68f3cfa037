#!/bin/sh
# rref.sh [BUILDDIR]: todist's remote references next to torch.distributed.rpc
# RRefs (TensorPipe, /usr/bin/python3) in one invocation, then the ratios
# on the last lines: a method call on an existing object, a fetch, and a
# short-lived object's whole life (create, call at once, release). torch is
# skipped with a note when absent. Environment: CALLS (default 5000 todist,
# 500 torch). Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
CALLS=${CALLS:-5000}
out=$(mktemp); trap 'rm -f "$out"' EXIT

echo "# todist (todist-run -n 2, TODIST_PROGRESS=${TODIST_PROGRESS:-auto})"
todist-run -n 2 "$B/bench/rref_latency" "$CALLS" | sed 's/^/todist /' |
    tee -a "$out"
if /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null; then
    echo "# torch.distributed.rpc RRefs (TensorPipe, /usr/bin/python3)"
    /usr/bin/python3 "$S/rref_torch.py" $((CALLS / 10)) 2>/dev/null |
        sed 's/^/torch /' | tee -a "$out"
else
    echo "# torch.distributed.rpc not available: torch columns skipped"
fi
for m in rref_call rref_to_here rref_create_call; do
    t=$(awk -v m="$m" '$1 == "todist" && $2 == m {
        sub("median_us=", "", $3); print $3 }' "$out")
    p=$(awk -v m="$m" '$1 == "torch" && $2 == m {
        sub("median_us=", "", $3); print $3 }' "$out")
    if [ -n "$t" ] && [ -n "$p" ]; then
        awk -v m="$m" -v t="$t" -v p="$p" 'BEGIN {
            printf "%s: todist %s us, torch %s us, speedup %.0fx\n",
                   m, t, p, p / t }'
    elif [ -n "$t" ]; then
        echo "$m: todist $t us (no torch figure)"
    fi
done
