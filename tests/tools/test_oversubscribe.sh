#!/bin/sh
# todist-run warns, once, when a node's ranks outnumber the cores it may use
# (its CPU affinity: taskset, a Slurm cgroup), naming both numbers; a rank
# per core or fewer says nothing; a restarted group does not repeat it.
. "$top_srcdir/tests/lib.sh"
command -v taskset >/dev/null || skip_all "taskset (util-linux) not found"
plan 5
# One core this launcher may use: the first of the allowed set.
core=$(taskset -cp $$ | sed 's/.*: *//; s/[-,].*//')
run() { timeout -k 5 60 taskset -c "$core" todist-run "$@" 2>&1 >/dev/null; }

err=$(run -n 2 true)
like "$err" '^todist-run: warning: 2 ranks on this node but 1 core to run them on' \
     "2 ranks on 1 core: a warning naming both"
is "$(printf '%s\n' "$err" | grep -c 'warning: .* ranks on this node')" 1 "said once"
err=$(run -n 1 true)
is "$err" "" "1 rank on 1 core: nothing on stderr"
err=$(run -n 2 --max-restarts 2 sh -c 'exit 3')
is "$(printf '%s\n' "$err" | grep -c 'warning: .* ranks on this node')" 1 \
   "a group restarted twice warns once"
# All the machine's allowed cores, a rank each: quiet.
n=$(taskset -cp $$ | sed 's/.*: *//' | awk -F, '{ c = 0; for (i = 1; i <= NF; i++) {
        split($i, r, "-"); c += (r[2] == "" ? 1 : r[2] - r[1] + 1) } print c }')
err=$(timeout -k 5 60 todist-run -n "$n" true 2>&1 >/dev/null)
unlike "$err" 'warning: .* ranks on this node' "$n ranks on $n cores: no warning"
done_testing
