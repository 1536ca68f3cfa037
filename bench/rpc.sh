#!/bin/sh
# rpc.sh [BUILDDIR]: todist's RPC next to torch.distributed.rpc (TensorPipe,
# /usr/bin/python3) and raw UCX (ucx_perftest) in one invocation, then the
# ratios on the last lines (rpc_sync / rpc_async: todist's no-op registered
# TD_RPC_INLINE; the "pool handler" lines: the same no-op run by the handler
# pool, as torch runs its). torch is skipped with a note when absent, UCX
# when ucx_perftest is. Environment: CALLS (default 20000 todist, 2000
# torch), MIB (default 64), TODIST_PROGRESS (the transport's progress mode),
# PIN=1 (pin todist's two latency ranks to cores 0 and 1, PERFORMANCE.md's
# method for ping-pongs).
# Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
CALLS=${CALLS:-20000}
MIB=${MIB:-64}
out=$(mktemp); trap 'rm -f "$out"' EXIT

echo "# todist (todist-run -n 2, TODIST_PROGRESS=${TODIST_PROGRESS:-auto}${PIN:+, ranks pinned to cores 0 and 1})"
if [ -n "${PIN:-}" ]; then
    todist-run -n 2 sh -c 'exec taskset -c $TODIST_RANK "$0" "$@"' \
        "$B/bench/rpc_latency" "$CALLS" | sed 's/^/todist /' | tee -a "$out"
else
    todist-run -n 2 "$B/bench/rpc_latency" "$CALLS" | sed 's/^/todist /' | tee -a "$out"
fi
todist-run -n 2 "$B/bench/rpc_bandwidth" "$MIB" | sed 's/^/todist /' | tee -a "$out"

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
$1 == "todist" && $2 == "rpc_sync_8B" { tl = field($0, "median_us") }
$1 == "todist" && $2 == "rpc_sync_8B_pool" { tlp = field($0, "median_us") }
$1 == "todist" && $2 == "rpc_async_8inflight_pool" { tap = field($0, "calls_per_s") }
$1 == "torch"  && $2 == "rpc_sync_8B" { pl = field($0, "median_us") }
$1 == "todist" && $2 == "rpc_async_8inflight" { ta = field($0, "calls_per_s") }
$1 == "torch"  && $2 == "rpc_async_8inflight" { pa = field($0, "calls_per_s") }
$1 == "todist" && $2 == "rpc_echo" { tb = field($0, "bw_MiBps"); tm = field($0, "median_ms") }
$1 == "torch"  && $2 == "rpc_echo" { pb = field($0, "bw_MiBps"); pm = field($0, "median_ms") }
$1 == "ucx"    && $2 == "rpc_echo" { ub = field($0, "bw_MiBps") }
END {
  if (pl != "") printf "rpc_sync 8B (pool handler): todist %.2f us, torch %.0f us, speedup %.0fx\n", tlp, pl, pl / tlp;
  else printf "rpc_sync 8B (pool handler): todist %.2f us\n", tlp;
  if (pa != "") printf "rpc_async 8 in flight (pool handler): todist %.0f calls/s, torch %.0f calls/s, speedup %.0fx\n", tap, pa, tap / pa;
  else printf "rpc_async 8 in flight (pool handler): todist %.0f calls/s\n", tap;
  if (pl != "") printf "rpc_sync 8B: todist %.2f us, torch %.0f us, speedup %.0fx\n", tl, pl, pl / tl;
  else printf "rpc_sync 8B: todist %.2f us, torch skipped\n", tl;
  if (pa != "") printf "rpc_async 8 in flight: todist %.0f calls/s, torch %.0f calls/s, speedup %.0fx\n", ta, pa, ta / pa;
  else printf "rpc_async 8 in flight: todist %.0f calls/s\n", ta;
  line = sprintf("rpc_echo 64MiB: todist %.1f ms (%.0f MiB/s)", tm, tb);
  if (ub != "") line = line sprintf(", %.0f%% of raw UCX (%.0f MiB/s)", 100 * tb / ub, ub);
  if (pb != "") line = line sprintf(", torch %.1f ms, speedup %.1fx", pm, pm / tm);
  print line
}' "$out"
