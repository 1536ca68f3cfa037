#!/bin/sh
# plot-metrics.sh RUN.jsonl [RUN.jsonl...] OUT.png|OUT.svg: draw one or more runs of
# examples/fashion_mnist_ddp --metrics (JSON lines) on one picture, with
# gnuplot (Debian gnuplot-nox, installed by scripts/install-deps.sh):
#   - training loss against wall-clock seconds, every run on the same axes
#     (each point the mean loss of the K steps before it, at its real step);
#   - test accuracy per epoch, every run;
#   - training throughput (samples/s) of each run;
# titled with the machine's core count and each run's time to finish.
# scripts/demo.sh draws its 1-worker and N-worker runs this way.
set -e
[ $# -ge 2 ] || {
    echo "usage: plot-metrics.sh RUN.jsonl [RUN.jsonl...] OUT.png" >&2; exit 2; }
command -v gnuplot >/dev/null || {
    echo "plot-metrics.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2
    exit 1
}
eval "out=\${$#}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# num FILE KEY: the value of "KEY" in each line of FILE that has it.
num() { sed -n "s/.*\"$2\": \([0-9.eE+-]*\).*/\1/p" "$1"; }

i=0
cores=
for f in "$@"; do
    [ "$f" = "$out" ] && [ $((i + 1)) -eq $# ] && break
    i=$((i + 1))
    [ -r "$f" ] || { echo "plot-metrics.sh: cannot read $f" >&2; exit 1; }
    # progress records: "time loss step"; epoch records: "epoch accuracy"
    grep '"step"' "$f" | sed -n 's/.*"step": \([0-9]*\), "time": \([0-9.eE+-]*\), "loss": \([0-9.eE+-]*\).*/\2 \3 \1/p' \
        > "$tmp/steps$i"
    grep '"test_accuracy"' "$f" | sed -n 's/.*"epoch": \([0-9]*\),.*"test_accuracy": \([0-9.eE+-]*\).*/\1 \2/p' \
        > "$tmp/epochs$i"
    [ -s "$tmp/steps$i" ] || [ -s "$tmp/epochs$i" ] || {
        echo "plot-metrics.sh: no metrics records in $f" >&2; exit 1; }
    w=$(num "$f" workers | head -1)
    case $w in
    '') label=$(basename "$f" .jsonl) ;;
    1) label="1 worker" ;;
    *) label="$w workers" ;;
    esac
    eval "label$i=\$label"
    [ -n "$cores" ] || cores=$(num "$f" cores | head -1)
    # throughput: the mean of the epochs' samples/s; time to finish: the
    # last epoch's wall clock
    sps=$(grep '"train_loss"' "$f" | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' |
          awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }')
    fin=$(grep '"train_loss"' "$f" | sed -n 's/.*"time": \([0-9.]*\).*/\1/p' | tail -1)
    eval "sps$i=\${sps:-0}; fin$i=\$fin"
    echo "$i \"$label\" ${sps:-0}" >> "$tmp/sps"
    k=$(awk 'NR == 1 { a = $3 } NR == 2 { print $3 - a; exit }' "$tmp/steps$i")
    [ -n "$k" ] && [ -z "${kk:-}" ] && kk=$k
done
n=$i
[ "$n" -ge 1 ] || { echo "plot-metrics.sh: no runs given" >&2; exit 2; }
[ -n "$cores" ] || cores=$(nproc)

emax=$(cat "$tmp"/epochs* 2>/dev/null | awk '$1 > m { m = $1 } END { print m + 0 }')
[ "$emax" -ge 1 ] || emax=1
title="Fashion-MNIST, DistributedDataParallel on a $cores-core machine"
sub=
i=1
while [ $i -le $n ]; do
    eval "l=\$label$i; t=\$fin$i"
    [ -n "$t" ] && sub="$sub${sub:+, }$l $(printf '%.2f' "$t") s"
    i=$((i + 1))
done
[ -n "$sub" ] && sub="time for $emax epoch$([ "$emax" = 1 ] || echo s): $sub"
# two runs: the speed-up of the second (more workers) over the first
if [ "$n" = 2 ] && [ -n "$fin1" ] && [ -n "$fin2" ]; then
    sub="$sub ($(awk -v a="$fin1" -v b="$fin2" 'BEGIN { printf "speed-up %.2fx", a / b }'))"
fi
lossttl="training loss${kk:+ (mean of each $kk steps)}"
colors="#1f77b4 #d62728 #2ca02c #9467bd #ff7f0e"
color() { echo $colors | cut -d' ' -f"$1"; }
# plot_runs NAME STYLE: a gnuplot "plot" line drawing column 2 against
# column 1 of $tmp/NAME<i> for every run i that has it, WITH STYLE in the
# run's colour ("NaN notitle" when no run has it, so gnuplot still draws
# the frame).
plot_runs() {
    printf 'plot '
    i=1; sep=
    while [ $i -le $n ]; do
        eval "l=\$label$i"
        if [ -s "$tmp/$1$i" ]; then
            printf "%s'%s' using 1:2 with %s lc rgb '%s' title '%s'" \
                "$sep" "$tmp/$1$i" "$2" "$(color $i)" "$l"
            sep=", "
        fi
        i=$((i + 1))
    done
    [ -n "$sep" ] || printf "NaN notitle"
    echo
}

{
    case $out in
    *.svg) echo "set terminal svg size 1500,560 font ',11' noenhanced" ;;
    *)     echo "set terminal pngcairo size 1500,560 font ',11' noenhanced" ;;
    esac
    echo "set output '$out'"
    # printf, not echo: dash's echo would turn gnuplot's \n into a newline
    printf 'set multiplot layout 1,3 title "%s\\n%s" font ",13"\n' "$title" "$sub"
    echo "set key below horizontal"
    echo "set grid"
    echo "set tmargin 5"
    echo "set bmargin 6"
    # 1. loss against wall-clock seconds
    echo "set title '$lossttl'"
    echo "set xlabel 'wall-clock seconds since training started'"
    echo "set ylabel 'loss'"
    echo "set xrange [0:*]"
    plot_runs steps "lines lw 2"
    # 2. test accuracy per epoch, integer ticks
    echo "set title 'test accuracy after each epoch'"
    echo "set xlabel 'epoch'"
    echo "set ylabel 'accuracy'"
    echo "set xrange [0.5:$emax.5]"
    echo "set xtics 1"
    echo "set format y '%.3f'"
    plot_runs epochs "linespoints lw 2 pt 7 ps 1.5"
    # 3. throughput, one bar per run, the value on top
    echo "set title 'training throughput'"
    echo "set xlabel ''"
    echo "set ylabel 'samples per second'"
    echo "set format y '%.0f'"
    echo "set xrange [0.4:$n.6]"
    echo "set yrange [0:*]"
    echo "set offsets 0, 0, graph 0.12, 0"
    echo "set style fill solid 0.7 border -1"
    echo "set boxwidth 0.6"
    echo "unset key"
    echo "set xtics ()"
    i=1
    while [ $i -le $n ]; do
        eval "l=\$label$i"
        echo "set xtics add ('$l' $i)"
        i=$((i + 1))
    done
    echo "plot '$tmp/sps' using 1:3:(\$1 == 1 ? 0x1f77b4 : \$1 == 2 ? 0xd62728 : 0x2ca02c) with boxes lc rgb variable notitle, \\"
    echo "     '' using 1:3:(sprintf('%.0f', \$3)) with labels offset 0,1 notitle"
    echo "unset multiplot"
} > "$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "$out"
