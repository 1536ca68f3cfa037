#!/bin/sh
# The main job: install dependencies, build, and train seed 001's recipe
# (examples/fashion_mnist_ddp: DistributedDataParallel + DistributedSampler
# on Fashion-MNIST) for 2 epochs on one worker per core, after the same
# training on one worker so the speed-up is visible; rank 0 prints progress
# and per-epoch lines. Both runs' metrics are drawn on one PNG, whose path
# is printed last: loss against wall-clock seconds, test accuracy per epoch,
# samples per second. Extra arguments go to the example (e.g. --epochs 3).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/scripts/install-deps.sh"
sh "$top/scripts/build.sh"
cd "$top/build"
make examples/fashion_mnist_ddp >/dev/null
n=$(nproc)
out=${TODIST_DEMO_DIR:-$top/build/demo}
mkdir -p "$out"
rm -f "$out/metrics-1.jsonl" "$out/metrics-$n.jsonl" "$out/metrics.png"
export OPENBLAS_NUM_THREADS=1
echo "== 1 worker"
./tools/todist-run -n 1 ./examples/fashion_mnist_ddp --epochs 2 --metrics-every 20 \
    --metrics "$out/metrics-1.jsonl" "$@"
echo "== $n workers (one per core)"
./tools/todist-run -n "$n" ./examples/fashion_mnist_ddp --epochs 2 --metrics-every 20 \
    --metrics "$out/metrics-$n.jsonl" "$@"
awk -v n="$n" '
    /"seconds"/ { f = FILENAME ~ /metrics-1\./ ? 1 : n
                  sub(/.*"seconds": /, ""); sub(/}.*/, ""); t[f] += $0 }
    END { if (t[1] > 0 && t[n] > 0)
              printf "== time for 2 epochs: 1 worker %.2f s, %d workers %.2f s (%.2fx faster)\n",
                     t[1], n, t[n], t[1] / t[n] }' \
    "$out/metrics-1.jsonl" "$out/metrics-$n.jsonl"
if command -v gnuplot >/dev/null; then
    sh "$top/scripts/plot-metrics.sh" "$out/metrics-1.jsonl" "$out/metrics-$n.jsonl" \
        "$out/metrics.png" >/dev/null &&
        echo "== curves: $out/metrics.png"
fi
