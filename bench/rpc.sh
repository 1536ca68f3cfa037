#!/bin/sh
# rpc.sh [BUILDDIR]: todist's RPC next to torch.distributed.rpc (TensorPipe,
# /usr/bin/python3) and raw UCX (ucx_perftest) in one invocation, then the
# ratios on the last lines (rpc_sync / rpc_async: todist's no-op registered
# TD_RPC_INLINE; the "pool handler" lines: the same no-op run by the handler
# pool, as torch runs its). It also measures the floors the targets are
# judged against, in the same invocation: todist's own point-to-point 8 B
# round trip (bench/collectives sendrecv 8) and two memcpys of the echo's
# bytes (bench/rpc_bandwidth's memcpy_floor). torch is skipped with a note
# when absent, UCX when ucx_perftest is. Environment: CALLS (default 20000
# todist, 2000 torch), MIB (default 64), TODIST_PROGRESS (the transport's
# progress mode), PIN=1 (pin todist's two latency ranks to cores 0 and 1,
# PERFORMANCE.md's method for ping-pongs), BUILDS="NAME=DIR ..." (run todist's
# figures once per build, in that order, each with its own programs:
# DIR/bench/rpc_latency and rpc_bandwidth (they link the library
# statically), DIR/bench/.libs/collectives with DIR/.libs/libtodist.so*:
# a build folder or a copy of those: compare builds in one invocation, e.g.
# BUILDS="before=/tmp/old after=build").
# Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
CALLS=${CALLS:-20000}
MIB=${MIB:-64}
out=$(mktemp); trap 'rm -f "$out"' EXIT

# bench/collectives of build DIR: libtool's wrapper starts its program
# with BUILDDIR's library, so start the program itself with DIR's.
coll_prog() {
    if [ -x "$1/bench/.libs/collectives" ]; then
        echo "env LD_LIBRARY_PATH=$1/.libs $1/bench/.libs/collectives"
    else
        echo "$1/bench/collectives"
    fi
}

# todist's figures with the programs in $2/bench, lines prefixed $1
# ("todist" or "todist@NAME").
todist_figures() {
    tag=$1 d=$2
    echo "# $tag (todist-run -n 2, TODIST_PROGRESS=${TODIST_PROGRESS:-auto}${PIN:+, ranks pinned to cores 0 and 1}, programs in $d/bench)"
    if [ -n "${PIN:-}" ]; then
        todist-run -n 2 sh -c 'exec taskset -c $TODIST_RANK "$0" "$@"' \
            "$d/bench/rpc_latency" "$CALLS" | sed "s|^|$tag |" | tee -a "$out"
    else
        todist-run -n 2 "$d/bench/rpc_latency" "$CALLS" | sed "s|^|$tag |" | tee -a "$out"
    fi
    todist-run -n 2 $(coll_prog "$d") sendrecv 8 | grep '^sendrecv' |
        sed "s|^|$tag |" | tee -a "$out"
    todist-run -n 2 "$d/bench/rpc_bandwidth" "$MIB" | sed "s|^|$tag |" | tee -a "$out"
}

if [ -n "${BUILDS:-}" ]; then
    for spec in $BUILDS; do
        d=$(cd "${spec#*=}" && pwd) || exit 1
        todist_figures "todist@${spec%%=*}" "$d"
    done
else
    todist_figures todist "$B"
fi

if /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null; then
    echo "# torch.distributed.rpc (TensorPipe, /usr/bin/python3)"
    /usr/bin/python3 "$S/rpc_torch.py" latency $((CALLS / 10)) 2>/dev/null |
        sed 's/^/torch /' | tee -a "$out"
    /usr/bin/python3 "$S/rpc_torch.py" bandwidth "$MIB" 2>/dev/null |
        sed 's/^/torch /' | tee -a "$out"
else
    echo "# torch.distributed.rpc not available: torch columns skipped"
fi

if command -v ucx_perftest >/dev/null; then
    echo "# raw UCX echo (ucx_perftest -t ucp_am_lat, $MIB MiB; bw = 2N/rtt)"
    port=$((20000 + $$ % 10000))
    s=$((MIB * 1048576))
    ucx_perftest -p $port >/dev/null 2>&1 &
    sp=$!
    sleep 0.5
    lat=$(ucx_perftest 127.0.0.1 -p $port -t ucp_am_lat -s $s -n 30 -w 5 \
          2>/dev/null | awk '/^Final:/ {print $3}')
    wait $sp
    if [ -n "$lat" ]; then
        awk -v l="$lat" -v s=$s 'BEGIN { printf "ucx rpc_echo size=%d median_ms=%.2f bw_MiBps=%.0f\n", s, 2 * l / 1000, 2 * s / (2 * l * 1e-6) / 1048576 }' |
            tee -a "$out"
    fi
else
    echo "# ucx_perftest not available: raw UCX column skipped"
fi

awk '
function field(line, key,   n, a, i) { n = split(line, a, " ");
    for (i = 1; i <= n; i++) if (index(a[i], key "=") == 1) return substr(a[i], length(key) + 2);
    return "" }
$1 ~ /^todist/ && !($1 in seen) { seen[$1] = 1; order[++nt] = $1 }
$1 ~ /^todist/ && $2 == "rpc_sync_8B" { tl[$1] = field($0, "median_us") }
$1 ~ /^todist/ && $2 == "rpc_sync_8B_pool" { tlp[$1] = field($0, "median_us") }
$1 ~ /^todist/ && $2 == "rpc_async_8inflight_pool" { tap[$1] = field($0, "calls_per_s") }
$1 ~ /^todist/ && $2 == "rpc_async_8inflight" { ta[$1] = field($0, "calls_per_s") }
$1 ~ /^todist/ && $2 == "rpc_echo" { tb[$1] = field($0, "bw_MiBps"); tm[$1] = field($0, "median_ms") }
$1 ~ /^todist/ && $2 == "memcpy_floor" { fm[$1] = field($0, "median_ms"); anyfm = fm[$1] }
$1 ~ /^todist/ && $2 == "sendrecv" { p2p[$1] = field($0, "rtt_us") }
$1 == "torch"  && $2 == "rpc_sync_8B" { pl = field($0, "median_us") }
$1 == "torch"  && $2 == "rpc_async_8inflight" { pa = field($0, "calls_per_s") }
$1 == "torch"  && $2 == "rpc_echo" { pb = field($0, "bw_MiBps"); pm = field($0, "median_ms") }
$1 == "ucx"    && $2 == "rpc_echo" { ub = field($0, "bw_MiBps") }
END {
  for (k = 1; k <= nt; k++) {
    t = order[k]; who = t; sub(/^todist@/, "todist ", who);
    if (fm[t] == "") fm[t] = anyfm;     # a build whose programs lack it
    if (pl != "") printf "rpc_sync 8B (pool handler): %s %.2f us, torch %.0f us, speedup %.0fx\n", who, tlp[t], pl, pl / tlp[t];
    else printf "rpc_sync 8B (pool handler): %s %.2f us\n", who, tlp[t];
    if (pa != "") printf "rpc_async 8 in flight (pool handler): %s %.0f calls/s, torch %.0f calls/s, speedup %.0fx\n", who, tap[t], pa, tap[t] / pa;
    else printf "rpc_async 8 in flight (pool handler): %s %.0f calls/s\n", who, tap[t];
    line = sprintf("rpc_sync 8B: %s %.2f us", who, tl[t]);
    if (p2p[t] != "") line = line sprintf(", %.2fx its p2p 8 B round trip (%.2f us)", tl[t] / p2p[t], p2p[t]);
    if (pl != "") line = line sprintf(", torch %.0f us, speedup %.0fx", pl, pl / tl[t]);
    print line
    if (pa != "") printf "rpc_async 8 in flight: %s %.0f calls/s, torch %.0f calls/s, speedup %.0fx\n", who, ta[t], pa, ta[t] / pa;
    else printf "rpc_async 8 in flight: %s %.0f calls/s\n", who, ta[t];
    line = sprintf("rpc_echo %dMiB: %s %.1f ms (%.0f MiB/s)", mib, who, tm[t], tb[t]);
    if (fm[t] != "") line = line sprintf(", %.2fx the memcpy floor (%.1f ms)", tm[t] / fm[t], fm[t]);
    if (ub != "") line = line sprintf(", %.0f%% of raw UCX (%.0f MiB/s)", 100 * tb[t] / ub, ub);
    if (pb != "") line = line sprintf(", torch %.1f ms, speedup %.1fx", pm, pm / tm[t]);
    print line
  }
}' mib="$MIB" "$out"
