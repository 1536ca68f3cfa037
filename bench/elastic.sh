#!/bin/sh
# bench/elastic.sh BUILD [REPS] [all|inplace|heal|restart] [HEAL_RANKS]
#
# inplace (in-place recovery, todist/elastic.h): examples/fashion_mnist_ddp
# on 4 ranks under todist-run --no-kill, --in-place --die-at 2:12 (rank 2
# SIGKILLs itself after the forward of step 12, stamping the time): the
# death to the survivors' next completed step, split into detection (the
# death to the survivors' failed step), agreement (td_elastic_recover's
# quorum), rebuild (the new group, the heal when one is behind, the
# sampler and DDP) and the step itself; against the same program
# restarted from its checkpoint (--elastic, todist-run --max-restarts 1,
# a checkpoint every 10 steps) in the same run: the death to the restarted
# group's first step. Median and min-max of REPS runs each.
#
# restart: from a rank's death to the first step of
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
B=${1:?usage: bench/elastic.sh BUILD [REPS] [all|inplace|heal|restart] [HEAL_RANKS]}
REPS=${2:-5}
MODE=${3:-all}
S=$(cd "$(dirname "$0")" && pwd)
RUN=$B/tools/todist-run
[ -x "$RUN" ] || { echo "elastic: $RUN not built" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/todist-bench.XXXXXX")
trap 'rm -rf "$T"' EXIT

# ---- in-place recovery against a restart, the example on 4 ranks ----
EX=$B/examples/fashion_mnist_ddp
ARGS="--epochs 1 --max-batches 40 --batch-size 32 --hidden 64 --threads 1
      --log-every 0 --optimizer sgd"
ip_one() {
    o=$T/ip.$i
    timeout -k 5 120 "$RUN" -n 4 --no-kill "$EX" $ARGS --in-place \
        --die-at 2:12 > "$o.out" 2> "$o.err"
    t0=$(sed -n 's/.*--die-at: SIGKILL at step 12 at \([0-9.]*\)$/\1/p' "$o.err")
    line=$(grep '^in-place: epoch 1 ' "$o.out")
    t1=$(printf '%s\n' "$line" | sed -n 's/.*failure seen at \([0-9.]*\);.*/\1/p')
    ag=$(printf '%s\n' "$line" | sed -n 's/.*agreement \([0-9.]*\) ms.*/\1/p')
    rb=$(printf '%s\n' "$line" | sed -n 's/.*rebuild \([0-9.]*\) ms.*/\1/p')
    he=$(printf '%s\n' "$line" | sed -n 's/.*heal \([0-9.]*\) ms.*/\1/p')
    t2=$(sed -n 's/^in-place: step 12 done .* at \([0-9.]*\)$/\1/p' "$o.out")
    if [ -n "$t0" ] && [ -n "$t1" ] && [ -n "$t2" ] && [ -n "$ag" ]; then
        awk -v a="$t0" -v b="$t1" -v c="$t2" -v g="$ag" -v r="$rb" -v h="$he" \
            -v T="$T" 'BEGIN {
            printf "%.3f\n", (c - a) * 1e3 >> (T "/ip_total")
            printf "%.3f\n", (b - a) * 1e3 >> (T "/ip_detect")
            printf "%.3f\n", g >> (T "/ip_agree")
            printf "%.3f\n", r + h >> (T "/ip_rebuild")
            printf "%.3f\n", (c - b) * 1e3 - g - r - h >> (T "/ip_step") }'
    else
        echo "elastic: in-place run $i gave no figure:" >&2
        tail -n 5 "$o.err" >&2
    fi
}
rs_one() {
    o=$T/rs.$i
    timeout -k 5 120 "$RUN" -n 4 --max-restarts 1 "$EX" $ARGS --elastic \
        --checkpoint "$o.ck" --die-at 2:12 > "$o.out" 2> "$o.err"
    t0=$(sed -n 's/.*--die-at: SIGKILL at step 12 at \([0-9.]*\)$/\1/p' "$o.err")
    t2=$(sed -n 's/^resume: step [0-9]* done at \([0-9.]*\)$/\1/p' "$o.out")
    if [ -n "$t0" ] && [ -n "$t2" ]; then
        awk -v a="$t0" -v c="$t2" 'BEGIN { printf "%.3f\n", (c - a) * 1e3 }' \
            >> "$T/rs_total"
    else
        echo "elastic: restart run $i gave no figure:" >&2
        tail -n 5 "$o.err" >&2
    fi
}
ms() { # LABEL -> "median (min-max, n runs)" in ms
    sort -n "$T/$1" 2>/dev/null | awk '{ a[NR] = $1 } END {
        if (NR == 0) { print "none"; exit }
        printf "%.1f ms (%.1f-%.1f, %d runs)", a[int((NR + 1) / 2)], a[1], a[NR], NR }'
}
# ---- the heal (a joiner's, or a survivor's behind) against send/recv ----
# bench/heal on HEAL_RANKS ranks (default 2: a source and one joiner; 3-4:
# the chain pipelines pieces), 64 MiB in 16, 4 and 1 tensors: the heal's chain
# (td_checkpoint_broadcast), the same tensors one td_broadcast each (the
# heal before the chain), and one td_send/td_recv of 64 MiB, in one run
# each (REPS repetitions inside, median).
if [ "$MODE" = all ] || [ "$MODE" = heal ]; then
    HEAL=$B/bench/heal
    if [ ! -x "$HEAL" ]; then
        echo "elastic: heal part not run ($HEAL not built: make -C BUILD bench/heal)"
    else
        echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
        for parts in 16 4 1; do
            timeout -k 5 120 "$RUN" -n "${4:-2}" "$HEAL" 64 "$REPS" "$parts" 2>&1 |
                grep -v '^todist-run: warning'
        done
    fi
    [ "$MODE" = heal ] && exit 0
fi

if [ "$MODE" = all ] || [ "$MODE" = inplace ]; then
    if [ ! -x "$EX" ]; then
        echo "elastic: in-place part not run ($EX not built: make check builds it)"
    else
        for i in $(seq "$REPS"); do
            ip_one
            rs_one
        done
        echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "in-place recovery, fashion_mnist_ddp on 4 ranks, rank 2 SIGKILLed at step 12:"
        echo "  death -> survivors' next completed step: $(ms ip_total)"
        echo "    detection (death -> the step fails):  $(ms ip_detect)"
        echo "    agreement (the quorum):               $(ms ip_agree)"
        echo "    rebuild (group, heal, sampler, DDP):  $(ms ip_rebuild)"
        echo "    the step itself, at 3 ranks:          $(ms ip_step)"
        echo "  restart instead (--max-restarts 1, resume from step 10): death -> first step: $(ms rs_total)"
        a=$(sort -n "$T/ip_total" 2>/dev/null | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : 0 }')
        b=$(sort -n "$T/rs_total" 2>/dev/null | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : 0 }')
        awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "elastic in-place: %.1f ms, restart %.1f ms (%.1fx)\n", a, b, b / a }'
    fi
    [ "$MODE" = inplace ] && exit 0
fi

PY=/usr/bin/python3
export PYTHON=$PY     # what todist-run runs a .py with
if ! $PY -c 'import torch.distributed.run' 2>/dev/null; then
    echo "elastic: not measured (no torch in $PY)"
    exit 0
fi

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
