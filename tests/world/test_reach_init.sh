#!/bin/sh
# td_init warns when a job spans more than one host and the store's master
# address resolves to a loopback address (Debian's "127.0.1.1 HOSTNAME"
# line): two todist-run "nodes" on this machine, one rank each, so the job
# still runs here while the warning names the host, the address and the
# fix. A one-host job on loopback does not warn. Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
plan 9
PEER=$top_builddir/tests/transport/transport_peer
export TODIST_JOB_TOKEN=0123456789abcdef0123456789abcdef

# two_nodes ADDR PORT: both nodes' output, node 0's first
two_nodes() {
    timeout -k 5 120 todist-run --nnodes 2 --node-rank 1 --master-addr "$1" \
        --master-port "$2" "$PEER" barrier >"$TD_TMP/node1" 2>&1 &
    _p=$!
    td_track_pid $_p
    timeout -k 5 120 todist-run --nnodes 2 --node-rank 0 --master-addr "$1" \
        --master-port "$2" "$PEER" barrier 2>&1
    echo "node 0 exit $?"
    wait $_p
    echo "node 1 exit $?"
    cat "$TD_TMP/node1"
}
# (a band of its own, apart from test_spank_slurm's 21000-34999 and
# test_launch_ports' 35999-38099, which make check runs alongside)
port=$((38200 + $$ % 1000 * 2))
while ss -Htln 2>/dev/null | awk '{print $4}' | grep -E ":($port|$((port+1)))\$" >/dev/null; do
    port=$((port + 2))
done
out=$(two_nodes 127.0.1.1 $port)
like "$out" 'node 0 exit 0' "a two-host job on 127.0.1.1 still runs here (node 0)"
like "$out" 'node 1 exit 0' "(node 1)"
like "$out" "todist\[rank 0\]: world: the job spans 2 hosts but the store's master address '127\.0\.1\.1' resolves to the loopback address 127\.0\.1\.1 on host $(hostname)" \
     "rank 0 warns, naming the address and its host"
like "$out" "todist\[rank 1\]: world: the job spans 2 hosts" \
     "so does the first rank of the other node"
like "$out" 'set MASTER_ADDR / TODIST_MASTER_ADDR to an address the other hosts can reach' \
     "the warning gives the fix"
is "$(printf '%s\n' "$out" | grep -c 'world: the job spans')" 2 \
   "one warning a node"

if [ "$(getent hosts "$(hostname)" | cut -c1-4)" = "127." ]; then
    out=$(two_nodes "$(hostname)" $((port + 2)))
    like "$out" "master address '$(hostname)' \(this host's name\) resolves to the loopback address 127\." \
         "this host's name on loopback (/etc/hosts) is called that"
else
    skip 1 "$(hostname) does not resolve to a loopback address here"
fi

out=$(timeout -k 5 60 todist-run -n 2 "$PEER" barrier 2>&1)
is "$?" 0 "a one-host job on loopback runs"
unlike "$out" 'world: the job spans' "and does not warn"
done_testing
