#!/bin/sh
# collectives.sh [BUILDDIR]: todist's collectives next to Open MPI
# (MPI_Allreduce from bench/mpi_allreduce.c, built here with mpicc, run with
# mpirun) and torch's gloo (bench/collectives_gloo.py, /usr/bin/python3) at
# 2 and 4 ranks, in one invocation; then raw UCX (ucx_perftest) for the
# send/recv figures; the ratios come last. A baseline that is absent is
# skipped with a note (TODIST_WITH_BASELINES=1 sh scripts/install-deps.sh
# installs them). Environment: RANKS (default "2 4"), ITERS_SCALE
# (repetitions, default 1), TODIST_PROGRESS (the transport's progress mode).
# Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
RANKS=${RANKS:-"2 4"}
out=$(mktemp); tmp=$(mktemp -d); trap 'rm -rf "$out" "$tmp"' EXIT

for n in $RANKS; do
    echo "# todist (todist-run -n $n, TODIST_PROGRESS=${TODIST_PROGRESS:-auto})"
    todist-run -n "$n" "$B/bench/collectives" | sed 's/^/todist /' |
        tee -a "$out"
done

if command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
   mpicc -O2 -o "$tmp/mpi_allreduce" "$S/mpi_allreduce.c" 2>"$tmp/cc.log"; then
    for n in $RANKS; do
        echo "# Open MPI $(mpirun --version 2>/dev/null | awk 'NR==1 {print $NF}') (mpirun -n $n --oversubscribe)"
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            mpirun -n "$n" --oversubscribe --bind-to none \
            "$tmp/mpi_allreduce" 2>/dev/null | sed 's/^/mpi /' | tee -a "$out"
    done
else
    echo "# Open MPI not available (mpicc/mpirun): MPI columns skipped"
fi

if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
    for n in $RANKS; do
        echo "# torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') gloo ($n processes)"
        /usr/bin/python3 "$S/collectives_gloo.py" "$n" 2>/dev/null |
            sed 's/^/gloo /' | tee -a "$out"
    done
else
    echo "# torch not available (/usr/bin/python3): gloo columns skipped"
fi

if command -v ucx_perftest >/dev/null; then
    echo "# raw UCX round trip (ucx_perftest -t ucp_am_lat: rtt = 2 x latency)"
    for s in 8 67108864; do
        port=$((20000 + ($$ + s) % 10000))
        ucx_perftest -p $port >/dev/null 2>&1 &
        sp=$!
        sleep 0.5
        n_it=$([ $s = 8 ] && echo 20000 || echo 20)
        lat=$(ucx_perftest 127.0.0.1 -p $port -t ucp_am_lat -s $s -n $n_it \
              -w 5 2>/dev/null | awk '/^Final:/ {print $3}')
        wait $sp
        [ -n "$lat" ] && awk -v l="$lat" -v s=$s 'BEGIN {
            printf "ucx sendrecv size=%d rtt_us=%.2f\n# spread bw_MBps=%.0f\n", s, 2 * l, 2 * s / (2 * l)
        }' | tee -a "$out"
    done
else
    echo "# ucx_perftest not available: raw UCX column skipped"
fi

echo "# ratios (> 1: todist faster)"
awk '
function field(line, key,   n, a, i) { n = split(line, a, " ");
    for (i = 1; i <= n; i++) if (index(a[i], key "=") == 1) return substr(a[i], length(key) + 2);
    return "" }
$1 == "todist" && $2 == "allreduce" { k = field($0, "ranks") " " field($0, "size"); td[k] = field($0, "median_us"); keys[++nk] = k }
$1 == "mpi" && $2 == "allreduce" { mpi[field($0, "ranks") " " field($0, "size")] = field($0, "median_us") }
$1 == "gloo" && $2 == "allreduce" { gl[field($0, "ranks") " " field($0, "size")] = field($0, "median_us") }
$1 == "todist" && $2 == "sendrecv" && !(field($0, "size") in tsr) { tsr[field($0, "size")] = field($0, "rtt_us") }
$1 == "ucx" && $2 == "sendrecv" { usr[field($0, "size")] = field($0, "rtt_us") }
END {
    for (i = 1; i <= nk; i++) {
        k = keys[i]; split(k, p, " ");
        line = sprintf("allreduce ranks=%s size=%s todist_us=%s", p[1], p[2], td[k]);
        if (k in mpi) line = line sprintf(" mpi_us=%s mpi/todist=%.2f", mpi[k], mpi[k] / td[k]);
        if (k in gl) line = line sprintf(" gloo_us=%s gloo/todist=%.1f", gl[k], gl[k] / td[k]);
        print line
    }
    for (s in tsr) if (s in usr)
        printf "sendrecv size=%s todist_rtt_us=%s ucx_rtt_us=%s todist/ucx=%.2f\n", s, tsr[s], usr[s], tsr[s] / usr[s]
}' "$out"
