#!/bin/sh
# bench/rounds.awk, the close of bench/hosts.sh ROUNDS=N, on rounds made up
# here: each cell's medians over the rounds, the range of its ratios, the
# 95% interval of their median (order statistics) and the verdict against
# Open MPI that interval gives (faster, slower, tie; none under 6 rounds).
. "$top_srcdir/tests/lib.sh"
plan 12
T=$TD_TMP
A=$top_srcdir/bench/rounds.awk

# CELL N FIRST STEP: N rounds of cell CELL whose bestmpi/todist goes FIRST,
# FIRST+STEP, ... in a shuffled order (the summary must sort them)
rounds() {
    awk -v cell="$1" -v n="$2" -v a="$3" -v d="$4" 'BEGIN {
        for (i = 0; i < n; i++) { j = (i * 7) % n;     # 7 is prime to 15 and 4
            printf "allreduce round=%d %s todist_us=%d tcp_us=9 bestmpi/todist=%.2f\n", i + 1, cell, 8 + (i % 4), a + j * d } }'
}
rounds "shape=none hosts=1,1 size=8" 15 1.01 0.01 > $T/in
rounds "shape=10gbit hosts=1,1 size=8" 15 0.81 0.01 >> $T/in
rounds "shape=none hosts=1,1 size=4096" 15 0.93 0.01 >> $T/in
rounds "shape=none hosts=2,2 size=8" 4 0.50 0.20 >> $T/in
# a build's cell of its own, a percentage and figures of 100 us and more
for i in 1 2 3 4 5 6; do
    echo "allreduce round=$i build=after shape=none hosts=1,1 size=67108864 todist_us=$((470 + 10 * i)) of_ucx=$((89 + i))%"
done >> $T/in
awk -f "$A" $T/in > $T/out
is "$?" 0 "rounds.awk runs"
is "$(wc -l < $T/out | tr -d ' ')" 5 "one median line per cell"
is "$(cut -d' ' -f2-4 $T/out | head -4 | tr '\n' '|')" \
   "shape=none hosts=1,1 size=8|shape=10gbit hosts=1,1 size=8|shape=none hosts=1,1 size=4096|shape=none hosts=2,2 size=8|" \
   "cells in the order they first came"
# 15 rounds: the median is the 8th, the interval the 3rd to the 13th
like "$(sed -n 1p $T/out)" " bestmpi/todist=1\\.08\\[1\\.01-1\\.15,ci95:1\\.03-1\\.13\\] todist=faster\$" \
     "all of the interval above 1: faster (median 1.08, ci95 1.03-1.13)"
like "$(sed -n 2p $T/out)" " bestmpi/todist=0\\.88\\[0\\.81-0\\.95,ci95:0\\.83-0\\.93\\] todist=slower\$" \
     "all of it below 1: slower"
like "$(sed -n 3p $T/out)" " bestmpi/todist=1\\.00\\[0\\.93-1\\.07,ci95:0\\.95-1\\.05\\] todist=tie\$" \
     "an interval that holds 1: tie"
# 4 rounds: no interval, no verdict; the median of an even count
like "$(sed -n 4p $T/out)" " bestmpi/todist=0\\.80\\[0\\.50-1\\.10\\]\$" \
     "under 6 rounds: the median and range only (0.80 of 0.5, 0.7, 0.9, 1.1)"
unlike "$(sed -n 4p $T/out)" "todist=(faster|slower|tie)" "... and no verdict"
like "$(sed -n 1p $T/out)" "^median shape=none hosts=1,1 size=8 todist_us=9 tcp_us=9 " \
     "a figure's median over the rounds (todist_us 8-11: 9 of 15)"
like "$(sed -n 5p $T/out)" "^median build=after shape=none hosts=1,1 size=67108864 todist_us=505 " \
     "a build's own cell; 100 us and more without decimals (505 of 480-530)"
like "$(sed -n 5p $T/out)" " of_ucx=92%\\[90-95%,ci95:90-95%\\]\$" \
     "a percentage keeps its sign (of_ucx 90-95%, 6 rounds: the interval is the range)"
# a round whose ratio is missing (Open MPI gave no figure) is left out
printf 'allreduce round=1 shape=none hosts=1,1 size=8 todist_us=9\n' > $T/in2
rounds "shape=none hosts=1,1 size=8" 6 0.95 0.02 | sed 's/round=/round=1/' >> $T/in2
like "$(awk -f "$A" $T/in2)" "bestmpi/todist=1\\.00\\[0\\.95-1\\.05,ci95:0\\.95-1\\.05\\] todist=tie" \
     "a round without the ratio is not counted as one (6 of 7 rounds)"
done_testing
