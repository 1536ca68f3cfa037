#!/bin/sh
# The demo's picture (scripts/plot-metrics.sh): two runs' metrics files, a
# 1-worker and an N-worker run, are drawn on one picture: both runs' loss
# against wall-clock seconds on the same axes, both runs' test accuracy per
# epoch on integer epoch ticks, the samples/s of each, a title with the
# machine's core count and each run's time. Then the same from the metrics
# examples/fashion_mnist_ddp writes (a header record, progress records every
# --metrics-every steps with the real step number, epoch records).
. "$top_srcdir/tests/lib.sh"
plan 14
command -v gnuplot >/dev/null || { skip 14 "gnuplot is not installed"; done_testing; }
P="$top_srcdir/scripts/plot-metrics.sh"
cd "$TD_TMP" || exit 1

cat > one.jsonl <<'EOF'
{"workers": 1, "batch_per_worker": 64, "cores": 4}
{"epoch": 1, "step": 10, "time": 0.500, "loss": 1.250000, "samples_per_s": 1280}
{"epoch": 1, "step": 20, "time": 1.000, "loss": 0.750000, "samples_per_s": 1280}
{"epoch": 1, "train_loss": 1.000000, "test_accuracy": 0.700000, "samples_per_s": 1280, "time": 1.100, "seconds": 1.100}
{"epoch": 2, "step": 30, "time": 1.600, "loss": 0.550000, "samples_per_s": 1280}
{"epoch": 2, "step": 40, "time": 2.100, "loss": 0.450000, "samples_per_s": 1280}
{"epoch": 2, "train_loss": 0.500000, "test_accuracy": 0.800000, "samples_per_s": 1280, "time": 2.200, "seconds": 1.100}
EOF
cat > three.jsonl <<'EOF'
{"workers": 3, "batch_per_worker": 64, "cores": 4}
{"epoch": 1, "step": 10, "time": 0.250, "loss": 1.350000, "samples_per_s": 3456}
{"epoch": 1, "train_loss": 1.100000, "test_accuracy": 0.650000, "samples_per_s": 3456, "time": 0.400, "seconds": 0.400}
{"epoch": 2, "step": 20, "time": 0.650, "loss": 0.650000, "samples_per_s": 3456}
{"epoch": 2, "train_loss": 0.600000, "test_accuracy": 0.750000, "samples_per_s": 3456, "time": 0.800, "seconds": 0.400}
EOF

sh "$P" one.jsonl three.jsonl out.png >plot.out 2>&1
is "$?" 0 "plot-metrics.sh draws two metrics files"
[ -s out.png ] || diag "$(cat plot.out)"
is "$(head -c 4 out.png 2>/dev/null | od -An -c | tr -d ' ')" '211PNG' "the picture is a PNG"

# The same picture as SVG, whose text and curves can be read back.
sh "$P" one.jsonl three.jsonl out.svg >/dev/null 2>&1
svg=$(cat out.svg 2>/dev/null)
like "$svg" 'on a 4-core machine' "the title names the machine's core count (from the metrics)"
like "$svg" 'time for 2 epochs: 1 worker 2\.20 s, 3 workers 0\.80 s \(speed-up 2\.75x\)' \
     "the title gives both runs' time to finish and the speed-up"
# Legend entries (two panels with curves) and the bar labels name both runs.
is "$(grep -c '>1 worker<' out.svg)" 3 "1 worker: in the loss and accuracy keys and under its bar"
is "$(grep -c '>3 workers<' out.svg)" 3 "3 workers: in the loss and accuracy keys and under its bar"
like "$svg" 'wall-clock seconds' "loss is drawn against wall-clock seconds"
like "$svg" 'mean of each 10 steps' "the loss title says each point is a mean of K steps"
like "$svg" '>1280<' "the 1-worker bar is labelled with its samples/s"
like "$svg" '>3456<' "the 3-worker bar is labelled with its samples/s"
# Epoch ticks are integers: exactly 1 and 2 (the accuracy axis's are < 1).
ticks=$(sed -n '/training loss (mean/,/test accuracy after each epoch/p' out.svg |
        grep -o '>[^<]*<' | tr -d '<> \t' | grep -E '^[0-9]+(\.[0-9]+)?$' |
        awk '$1 >= 1' | tr '\n' ' ')
is "$ticks" "1 2 " "the epoch axis has integer ticks only"

# From the example's own metrics: 1 and 2 workers, two short epochs.
ex="$top_builddir/examples/fashion_mnist_ddp"
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    skip 3 "dataset-fashion-mnist is not installed"
    done_testing
fi
for n in 1 2; do
    OPENBLAS_NUM_THREADS=1 timeout -k 5 300 todist-run -n $n "$ex" --epochs 2 \
        --max-batches 30 --log-every 0 --metrics-every 10 --metrics "m$n.jsonl" \
        >"run$n.out" 2>&1 || diag "$(tail -5 "run$n.out")"
done
is "$(head -1 m2.jsonl 2>/dev/null)" \
   "{\"workers\": 2, \"batch_per_worker\": 64, \"cores\": $(getconf _NPROCESSORS_ONLN)}" \
   "the example's first record names the workers, the batch and the cores"
# Real step numbers across epochs: 30 steps an epoch, a record every 10.
is "$(sed -n 's/.*"step": \([0-9]*\), "time".*/\1/p' m1.jsonl | tr '\n' ' ')" \
   "10 20 30 40 50 60 " "progress records every 10 steps, numbered across epochs"
sh "$P" m1.jsonl m2.jsonl real.svg >/dev/null 2>&1
like "$(grep -c 'workers\?<' real.svg 2>/dev/null)" '^[1-9]' \
     "the example's two metrics files draw ($(grep -o '>[12] workers\?<' real.svg | sort -u | tr -d '<>' | tr '\n' ',' ))"
done_testing
