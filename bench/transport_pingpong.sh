#!/bin/sh
# transport_pingpong.sh [BUILDDIR]: todist's transport echo next to raw UCX
# (ucx_perftest -t ucp_am_lat, a ping-pong of active messages: its latency
# is half a round trip) in one invocation, both pinned to cores 0 and 1,
# then the ratios. Needs ucx-utils. Figures go to bench/RESULTS.md.
#
# The ratio compares like with like: ucx_perftest -e (endpoints with
# UCP_ERR_HANDLING_MODE_PEER) and UCX_MM_ERROR_HANDLING=y, as todist runs.
# For reference it also prints raw UCX without error handling, where UCX
# 1.13 may use CMA (single-copy process_vm_readv) for large messages, which
# it does not offer to endpoints with PEER error handling.
set -e
B=${1:-build}
B=$(cd "$B" && pwd)
PATH="$B/tools:$PATH"
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing (apt install ucx-utils)" >&2; exit 1; }
ncpu=$(nproc)
pin0="taskset -c 0"; pin1="taskset -c 1"
[ "$ncpu" -ge 2 ] || { pin0=""; pin1=""; }
sizes="8 65536 4194304 67108864"
out=$(mktemp); trap 'rm -f "$out"' EXIT

echo "# todist transport (todist-run -n 2, busy progress, ranks on cores 0 and 1)"
todist-run -n 2 sh -c 'exec taskset -c $TODIST_RANK "$0" "$@"' \
    "$B/bench/transport_pingpong" $sizes | tee "$out"

perftest() { # label extra-args...
    label=$1; shift
    echo "# raw UCX, $label (ucx_perftest -t ucp_am_lat $*, server on core 1, client on core 0)"
    for s in $sizes; do
        case $s in 8) n=200000;; 65536) n=20000;; 4194304) n=300;; *) n=30;; esac
        UCX_MM_ERROR_HANDLING=${UCX_MM_ERROR_HANDLING:-y} $pin1 ucx_perftest -p $port "$@" >/dev/null 2>&1 &
        sp=$!
        sleep 0.5
        lat=$(UCX_MM_ERROR_HANDLING=${UCX_MM_ERROR_HANDLING:-y} $pin0 ucx_perftest 127.0.0.1 -p $port \
              -t ucp_am_lat -s $s -n $n -w $((n / 10 + 1)) "$@" 2>/dev/null |
              awk '/^Final:/ {print $3}')
        wait $sp || true
        rtt=$(awk -v l="$lat" 'BEGIN{printf "%.3f", 2 * l}')
        bw=$(awk -v r="$rtt" -v s=$s 'BEGIN{printf "%.1f", 2 * s / (r * 1e-6) / 1048576}')
        echo "$label size=$s rtt_us=$rtt bw_MiBps=$bw"
        echo "$label $s $rtt $bw" >> "$out"
        port=$((port + 1))
    done
}
port=$((20000 + $$ % 10000))
perftest ucx -e
perftest ucx-noerr

awk '/^size=/ { split($1,a,"="); split($2,b,"="); split($5,c,"="); t[a[2]]=b[2]; tb[a[2]]=c[2] }
     /^ucx / { u[$2]=$3; ub[$2]=$4 }
     /^ucx-noerr / { n[$2]=$3; nb[$2]=$4 }
     END {
       printf "transport_pingpong: 8 B rtt todist %.3f us, ucx %.3f us, ratio %.2fx (target <= 1.3x); ",
              t[8], u[8], t[8] / u[8];
       printf "64 MiB echo todist %.0f MiB/s, ucx %.0f MiB/s, %.0f%% (target >= 80%%); ",
              tb[67108864], ub[67108864], 100 * tb[67108864] / ub[67108864];
       printf "ucx without error handling: 8 B %.3f us, 64 MiB %.0f MiB/s\n",
              n[8], nb[67108864] }' "$out"
