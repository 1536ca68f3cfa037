#!/bin/sh
# bench/elastic.sh BUILD [REPS]: from a rank's death to the first step of
# the restarted group, todist-run against torchrun's elastic agent (torch
# 1.13's `python3 -m torch.distributed.run --standalone --max_restarts 1`),
# side by side in one run, 2 ranks on this machine.
#
# The worker (bench/elastic_step.py) is the same PyTorch (gloo) program
# under both launchers: rank 1 SIGKILLs itself after step 3 and stamps the
# time; rank 0 of the restarted group stamps the time after its first
# all_reduce. So the figure is the launcher's detection and restart plus
# what every restart costs (python3, import torch, the rendezvous, one
# step). torchrun is timed with its default --monitor_interval (5 s in
# 1.13) and with 0.1 s. Median and min-max of REPS runs each, in seconds.
# Needs torch in /usr/bin/python3 (Debian's python3-torch): both launchers
# run the same torch program, so without it nothing is measured.
set -u
B=${1:?usage: bench/elastic.sh BUILD [REPS]}
REPS=${2:-5}
S=$(cd "$(dirname "$0")" && pwd)
RUN=$B/tools/todist-run
[ -x "$RUN" ] || { echo "elastic: $RUN not built" >&2; exit 1; }
PY=/usr/bin/python3
export PYTHON=$PY     # what todist-run runs a .py with
if ! $PY -c 'import torch.distributed.run' 2>/dev/null; then
    echo "elastic: not measured (no torch in $PY)"
    exit 0
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/todist-bench.XXXXXX")
trap 'rm -rf "$T"' EXIT

# one LABEL LAUNCHER...: one run, its recovery time appended to $T/LABEL
one() {
    label=$1; shift
    o=$T/$label.$i
    rm -f "$o.kill" "$o.first"
    timeout -k 5 180 "$@" "$S/elastic_step.py" "$o" 6 3 > "$T/$label.log" 2>&1
    if [ -s "$o.kill" ] && [ -s "$o.first" ]; then
        awk -v a="$(cat "$o.kill")" -v b="$(cat "$o.first")" \
            'BEGIN { printf "%.3f\n", b - a }' >> "$T/$label"
    else
        echo "elastic: $label run $i gave no figure:" >&2
        tail -n 5 "$T/$label.log" >&2
    fi
}
stats() { # LABEL -> "median (min-max, n runs)"
    sort -n "$T/$1" 2>/dev/null | awk '{ a[NR] = $1 } END {
        if (NR == 0) { print "none"; exit }
        printf "%.2f s (%.2f-%.2f, %d runs)", a[int((NR + 1) / 2)], a[1], a[NR], NR }'
}
med() { sort -n "$T/$1" 2>/dev/null | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : 0 }'; }

torchrun() {
    $PY -m torch.distributed.run --standalone --nproc_per_node=2 \
        --max_restarts=1 "$@"
}
for i in $(seq "$REPS"); do
    one todist "$RUN" -n 2 --max-restarts 1
    one torchrun torchrun
    one torchrun_fast torchrun --monitor_interval=0.1
done
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "kill -> first step of the restarted group, 2 ranks, torch gloo worker:"
echo "  todist-run --max-restarts 1:                       $(stats todist)"
echo "  torchrun --max_restarts 1 (monitor_interval 5 s):  $(stats torchrun)"
echo "  torchrun --max_restarts 1 (monitor_interval 0.1):  $(stats torchrun_fast)"
awk -v a="$(med todist)" -v b="$(med torchrun)" -v c="$(med torchrun_fast)" 'BEGIN {
    if (a > 0) printf "elastic: todist-run %.2f s, torchrun %.2f s (%.1fx), torchrun at 0.1 s monitoring %.2f s (%.1fx)\n", a, b, b / a, c, c / a }'
