#!/bin/bash
# bench/startup.sh: start-up and shutdown at scale, in one invocation.
#
#   bench/startup.sh [BUILD] [BEFORE_LIBDIR]
#
# For each size in SIZES (default "1 16 64 256") and REPS repetitions
# (default 3), interleaved: todist's ranks under todist-run running
# BUILD/bench/startup against BUILD's libtodist and, if given, against
# BEFORE_LIBDIR's (another build's .libs: each build's library in its own
# ranks, `env LD_LIBRARY_PATH=DIR` inside todist-run, never libtool's
# wrapper; see bench/RESULTS.md's correction); then torch 1.13's
# init_process_group(gloo) and init_rpc at the same sizes (TORCH=0: not;
# TORCH_SIZES, default "16 64", since 256 torch processes need ~80 GB).
# A world of one runs the program directly (no launcher): its wall time
# is the process's whole life, exec to exit. SRUN=1: also srun --todist
# with and without --mpi=pmix on tests/spank/test_spank_slurm.sh's four-node
# test cluster (needs root and Slurm's daemons; that test's
# TD_BENCH_STARTUP hook runs the same program there).
#
# BEFORE_MAX (default 64): the largest size the before build runs at.
# One line per run: what, size, wall s, CPU s of all its processes
# (user + system: what the run costs the machine, whatever else runs
# there), slowest td_init, slowest
# td_finalize (ms), resident memory per rank after td_init (median and
# max, MB), virtual size (median, MB).
set -u
B=$(cd "${1:-build}" && pwd)
BEFORE=${2:+$(cd "$2" && pwd)}
SIZES=${SIZES:-"1 16 64 256"}
SRUN=${SRUN:-0}
# the before build (3973245) takes ~100 MB of private memory per rank:
# 256 of them would not fit this machine's 23 GB
BEFORE_MAX=${BEFORE_MAX:-64}
REPS=${REPS:-3}
TORCH=${TORCH:-1}
TORCH_SIZES=${TORCH_SIZES:-"16 64"}
PY=${PYTHON:-/usr/bin/python3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PROBE=$B/bench/.libs/startup
[ -x "$PROBE" ] || PROBE=$B/bench/startup
LAUNCH=$B/tools/.libs/todist-run
[ -x "$LAUNCH" ] || LAUNCH=$B/tools/todist-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/todist-startup.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

now() { echo "$EPOCHREALTIME"; }

# summarise FILE of "rank=.. init_ms=.. fin_ms=.. rss_kb=.. vsz_kb=.." lines
# from N ranks
summary() {
    "$PY" - "$1" "$2" <<'PYEOF'
import sys
rows = []
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    if "init_ms" in kv:
        rows.append(kv)
n = int(sys.argv[2])
if len(rows) < n:
    print("only %d of %d ranks reported" % (len(rows), n), end="")
    sys.exit()
med = lambda v: sorted(v)[(len(v) - 1) // 2]
rss = [float(r["rss_kb"]) / 1024 for r in rows]
vsz = [float(r["vsz_kb"]) / 1024 for r in rows]
print("init max %7.1f ms  fin max %7.1f ms  RSS %5.1f / %5.1f MB  VSZ %6.0f MB"
      % (max(float(r["init_ms"]) for r in rows),
         max(float(r["fin_ms"]) for r in rows), med(rss), max(rss), med(vsz)),
      end="")
PYEOF
}

# one run: LABEL N LIBDIR CMD...
run_one() {
    local label=$1 n=$2 dir=$3 t0 t1 rc
    shift 3
    t0=$(now)
    if [ "$n" = 1 ] && [ "$label" != torch-gloo ] && [ "$label" != torch-rpc ]; then
        /usr/bin/time -f '%U %S' -o "$OUT/cpu" \
            env LD_LIBRARY_PATH="$dir" "$@" > "$OUT/run" 2> "$OUT/err"
    else
        LD_LIBRARY_PATH="$B/.libs" /usr/bin/time -f '%U %S' -o "$OUT/cpu" \
            timeout 600 "$LAUNCH" -n "$n" \
            env LD_LIBRARY_PATH="$dir" "$@" > "$OUT/run" 2> "$OUT/err"
    fi
    rc=$?
    t1=$(now)
    # CPU seconds of every process of the run (the ranks are waited for):
    # on a loaded machine the wall time is mostly waiting for a core
    printf '%-12s %4d  wall %7.3f s  cpu %6.2f s  %s%s\n' "$label" "$n" \
        "$(echo "$t1 - $t0" | bc -l)" \
        "$(awk '{ print $1 + $2 }' "$OUT/cpu" 2>/dev/null)" \
        "$(summary "$OUT/run" "$n")" \
        "$([ $rc = 0 ] || echo "  (exit $rc: $(head -c 200 "$OUT/err" | tr '\n' ' '))")"
}

echo "# bench/startup.sh $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# after:  $B/.libs ($(git -C "$SRC" rev-parse --short HEAD 2>/dev/null))"
[ -n "$BEFORE" ] && echo "# before: $BEFORE"
for rep in $(seq "$REPS"); do
    echo "# repetition $rep"
    for n in $SIZES; do
        if [ -n "$BEFORE" ] && [ "$n" -le "$BEFORE_MAX" ]; then
            run_one before "$n" "$BEFORE" "$PROBE"
        elif [ -n "$BEFORE" ]; then
            printf '%-12s %4d  not run (above BEFORE_MAX=%s)\n' before "$n" "$BEFORE_MAX"
        fi
        run_one after "$n" "$B/.libs" "$PROBE"
    done
done
if [ "$TORCH" = 1 ] && "$PY" -c 'import torch' 2>/dev/null; then
    for n in $TORCH_SIZES; do
        run_one torch-gloo "$n" "" "$PY" "$SRC/bench/startup_torch.py" gloo
        run_one torch-rpc "$n" "" "$PY" "$SRC/bench/startup_torch.py" rpc
    done
fi
if [ "$SRUN" = 1 ]; then
    echo "# srun --todist on tests/spank/test_spank_slurm.sh's cluster (4 nodes on this machine)"
    TD_BENCH_STARTUP=1 TD_BENCH_STARTUP_SIZES="$(echo " $SIZES " | sed 's/ 1 / /')" \
        TD_BENCH_STARTUP_BEFORE="$BEFORE" BEFORE_MAX=$BEFORE_MAX \
        make -C "$B" check TESTS=tests/spank/test_spank_slurm.sh > "$OUT/srun" 2>&1
    grep -h 'startup srun' "$B/tests/spank/test_spank_slurm.log" | sed 's/^# //'
fi
