#!/bin/sh
# plot-metrics.sh METRICS.jsonl OUT.png: draw the loss and test-accuracy
# curves that examples/fashion_mnist_ddp --metrics wrote (JSON lines), with
# gnuplot (Debian gnuplot-nox, installed by scripts/install-deps.sh).
set -e
[ $# -eq 2 ] || { echo "usage: plot-metrics.sh METRICS.jsonl OUT.png" >&2; exit 2; }
command -v gnuplot >/dev/null || {
    echo "plot-metrics.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2
    exit 1
}
in=$1; out=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# step records -> "n loss" (n counts steps across epochs); epoch records
sed -n 's/.*"step": \([0-9]*\), "loss": \([0-9.eE+-]*\).*/\2/p' "$in" |
    awk '{ print NR, $1 }' > "$tmp/steps"
sed -n 's/.*"epoch": \([0-9]*\), "train_loss": \([0-9.eE+-]*\), "test_accuracy": \([0-9.eE+-]*\).*/\1 \2 \3/p' \
    "$in" > "$tmp/epochs"
[ -s "$tmp/steps" ] || [ -s "$tmp/epochs" ] || {
    echo "plot-metrics.sh: no metrics records in $in" >&2; exit 1; }
[ -s "$tmp/steps" ] || echo "0 0" > "$tmp/steps"
[ -s "$tmp/epochs" ] || echo "0 0 0" > "$tmp/epochs"
gnuplot <<GP
set terminal pngcairo size 1000,420 noenhanced
set output "$out"
set multiplot layout 1,2
set title "training loss (logged steps)"
set xlabel "logged step"
plot "$tmp/steps" using 1:2 with lines title "loss"
set title "per epoch"
set xlabel "epoch"
set y2tics
plot "$tmp/epochs" using 1:2 with linespoints title "train loss", \
     "$tmp/epochs" using 1:3 axes x1y2 with linespoints title "test accuracy"
unset multiplot
GP
echo "$out"
