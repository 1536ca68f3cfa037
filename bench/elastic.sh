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
# 1.13) and with 0.1 s. Then, as root, the same across two emulated hosts
# when a whole host is killed (below). Median and min-max of REPS runs
# each, in seconds.
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

# Debian's torch 1.13 under Python 3.11 cannot parse its own default
# --redirects/--tee of 0 (Std.from_str gives None: IntFlag no longer
# iterates its zero member), so every launch fails in to_map; any other
# value works: stdout to a log file, stderr teed.
TR="$PY -m torch.distributed.run --standalone --nproc_per_node=2 --max_restarts=1 --redirects 1 --tee 2"
for i in $(seq "$REPS"); do
    one todist "$RUN" -n 2 --max-restarts 1
    one torchrun $TR --log_dir "$T/trlogs.$i"
    one torchrun_fast $TR --log_dir "$T/trlogs_fast.$i" --monitor_interval=0.1
done

# Across two emulated hosts (tests/hosts.sh, root only): one rank per
# host, --nnodes 1:2 --max-restarts 1; once step 3 is done everywhere the
# benchmark kills host 2 (its launcher too) and host 1 goes on alone:
# kill -> host 1's first step at world size 1. todist-run notices the lost
# launcher after TODIST_LIVENESS (3 s); torchrun's c10d rendezvous (its
# defaults) waits for its own keep-alive and last-call timeouts.
host_one() { # LABEL LOGS COMMAND...: LOGS 1 adds torchrun's --log_dir
    label=$1; logs=$2; shift 2
    o=$T/$label.$i
    rm -f "$o.hold" "$o.kill" "$o.first"
    hp=""
    for h in 1 2; do
        if [ "$logs" = 1 ]; then
            hosts_run $h env PYTHON=$PY timeout -k 5 180 "$@" \
                --log_dir "$T/logs.$label.$h.$i" \
                "$S/elastic_step.py" "$o" 6 3 hold > "$T/$label.$h.log" 2>&1 &
        else
            hosts_run $h env PYTHON=$PY timeout -k 5 180 "$@" \
                "$S/elastic_step.py" "$o" 6 3 hold > "$T/$label.$h.log" 2>&1 &
        fi
        hp="$hp $!"
    done
    n=0
    while [ ! -s "$o.hold" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done
    if [ -s "$o.hold" ]; then
        date +%s.%N > "$o.kill"
        hosts_kill 2
    fi
    for p in $hp; do wait "$p"; done
    if [ -s "$o.kill" ] && [ -s "$o.first" ]; then
        awk -v a="$(cat "$o.kill")" -v b="$(cat "$o.first")" \
            'BEGIN { printf "%.3f\n", b - a }' >> "$T/$label"
    else
        echo "elastic: $label run $i gave no figure:" >&2
        tail -n 5 "$T/$label.1.log" >&2
    fi
}
hosts_line=""
if [ "$(id -u)" = 0 ]; then
    HOSTS_SHARE=$T
    . "$S/../tests/hosts.sh"
    trap 'hosts_down; rm -rf "$T"' EXIT
    if hosts_supported; then
        TODIST_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
        export TODIST_JOB_TOKEN
        for i in $(seq "$REPS"); do
            hosts_up 2
            host_one hosts_todist 0 "$RUN" -n 1 --nnodes 1:2 --max-restarts 1 --rdzv-last-call 60 \
                --master-addr "$(hosts_addr 1)" --master-port 29500
            hosts_up 2
            host_one hosts_torchrun 1 $PY -m torch.distributed.run \
                --nnodes 1:2 --nproc_per_node 1 --max_restarts 1 \
                --rdzv_backend c10d --rdzv_endpoint "$(hosts_addr 1):29600" \
                --rdzv_id bench --redirects 1 --tee 2
            hosts_down
        done
        hosts_line=yes
    else
        echo "elastic: hosts part not run: $HOSTS_WHY"
    fi
else
    echo "elastic: hosts part not run (needs root)"
fi
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "kill -> first step of the restarted group, 2 ranks, torch gloo worker:"
echo "  todist-run --max-restarts 1:                       $(stats todist)"
echo "  torchrun --max_restarts 1 (monitor_interval 5 s):  $(stats torchrun)"
echo "  torchrun --max_restarts 1 (monitor_interval 0.1):  $(stats torchrun_fast)"
if [ -n "$hosts_line" ]; then
    echo "kill host 2 of 2 -> host 1's first step alone (1 rank a host):"
    echo "  todist-run --nnodes 1:2 --max-restarts 1:         $(stats hosts_todist)"
    echo "  torchrun --nnodes 1:2 --max_restarts 1 (c10d):    $(stats hosts_torchrun)"
    awk -v a="$(med hosts_todist)" -v b="$(med hosts_torchrun)" 'BEGIN {
        if (a > 0) printf "elastic hosts: todist-run %.2f s, torchrun %.2f s (%.1fx)\n", a, b, b / a }'
fi
awk -v a="$(med todist)" -v b="$(med torchrun)" -v c="$(med torchrun_fast)" 'BEGIN {
    if (a > 0) printf "elastic: todist-run %.2f s, torchrun %.2f s (%.1fx), torchrun at 0.1 s monitoring %.2f s (%.1fx)\n", a, b, b / a, c, c / a }'
