#!/bin/sh
# bench/launch.sh BUILD [N] [REPS]: todist-run against torchrun (PyTorch's
# launcher, `python3 -m torch.distributed.run`), side by side in one run:
#   start: launch N ranks of /bin/true and wait for the launcher to return;
#   stop:  rank 1 exits 3 while the others sleep 60 s; time until the
#          launcher returns (how fast a failure stops the group).
# Median of REPS runs each, in milliseconds. torchrun is skipped (and said
# so) when /usr/bin/python3 has no torch.
set -u
B=${1:?usage: bench/launch.sh BUILD [N] [REPS]}
N=${2:-4}
REPS=${3:-5}
RUN=$B/tools/todist-run
[ -x "$RUN" ] || { echo "launch: $RUN not built" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/todist-bench.XXXXXX")
trap 'rm -rf "$T"' EXIT
cat > "$T/fail.sh" <<'SH'
#!/bin/sh
r=${TODIST_RANK:-$RANK}
if [ "$r" = 1 ]; then exit 3; fi
exec sleep 60
SH
chmod +x "$T/fail.sh"

ms() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_of() { # command... -> milliseconds
    t0=$(ms); "$@" >/dev/null 2>&1; t1=$(ms)
    echo $(( (t1 - t0) / 1000000 ))
}
have_torch=0
/usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null && have_torch=1
torchrun() {
    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node="$N" \
        --no_python "$@"
}

for i in $(seq "$REPS"); do
    time_of "$RUN" -n "$N" /bin/true >> "$T/td_start"
    time_of "$RUN" -n "$N" "$T/fail.sh" >> "$T/td_stop"
    if [ $have_torch = 1 ]; then
        time_of torchrun /bin/true >> "$T/tr_start"
        time_of torchrun "$T/fail.sh" >> "$T/tr_stop"
    fi
done
tds=$(median < "$T/td_start"); tdf=$(median < "$T/td_stop")
echo "start $N ranks of /bin/true: todist-run $tds ms (runs: $(tr '\n' ' ' < "$T/td_start"))"
echo "stop after rank 1 exits 3:   todist-run $tdf ms (runs: $(tr '\n' ' ' < "$T/td_stop"))"
if [ $have_torch = 1 ]; then
    trs=$(median < "$T/tr_start"); trf=$(median < "$T/tr_stop")
    echo "start $N ranks of /bin/true: torchrun $trs ms (runs: $(tr '\n' ' ' < "$T/tr_start"))"
    echo "stop after rank 1 exits 3:   torchrun $trf ms (runs: $(tr '\n' ' ' < "$T/tr_stop"))"
    awk -v a="$tds" -v b="$trs" -v c="$tdf" -v d="$trf" -v n="$N" 'BEGIN {
        printf "launch: %d ranks start todist-run %d ms, torchrun %d ms, speedup %.1fx; stop after a failure todist-run %d ms, torchrun %d ms, speedup %.1fx\n",
            n, a, b, b / (a > 0 ? a : 1), c, d, d / (c > 0 ? c : 1) }'
else
    echo "launch: $N ranks start todist-run $tds ms, stop after a failure $tdf ms; torchrun not measured (no torch in /usr/bin/python3)"
fi
