#!/bin/sh
# srun --todist across real network stacks: a Slurm cluster whose nodes
# are emulated hosts (tests/hosts.sh): slurmd n1..n4 each in a host of its
# own (network, PID, mount and UTS namespaces, hostname = node name, its
# own boot id, /dev/shm and /tmp), munged and slurmctld in a fifth host
# h5, from which srun is run. Everything meets on the bed's bridge; the
# machine's own network stack is not touched. Checks that srun -N2's
# ranks run on two hosts, that a collective's bytes cross both hosts'
# links (interface byte counters), that neither the in-place read nor
# the shared segment is offered across hosts (and both are used inside a
# host), and PyTorch DDP over gloo across two hosts.
#
# Why a cluster of its own beside test_spank_slurm.sh (whose nodes share
# one network stack): that test's 80-odd checks are about the plugin's
# mapping, ports and failures and need only mount namespaces, so they
# keep running where network namespaces are not permitted; this one is
# about the network, and runs beside it in make check.
#
# Cleanup: every daemon, step and task runs inside a host, so the hosts'
# teardown (hosts_down, on any exit) ends them all (each host's PID
# namespace dies with its init); then the temp dir goes.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
. "$top_srcdir/tests/spank/cluster.sh"
cluster_require
hosts_supported || skip_all "$HOSTS_WHY"

# Under TD_TMP: the hosts see it at its own path (their /tmp is private),
# so the munge socket, the configuration, spools and outputs are shared.
D=$TD_TMP/cluster
mkdir -p "$D/state" "$D/spool" "$D/tmpfs" "$D/out"

die_setup() {
    echo "Bail out! cluster setup failed: $1"
    for f in "$D"/*.log "$HOSTS_DIR"/h*/init.log; do
        [ -s "$f" ] && diag "== $f" "$(tail -n 15 "$f")"
    done
    exit 1
}

# ---- the hosts: n1..n4 run slurmd, h5 the controller, munged and srun ----
C=5
hosts_up 5 || die_setup "hosts_up 5"
for n in 1 2 3 4; do
    hosts_rename $n n$n || die_setup "naming host $n"
done
ctl() { hosts_run $C "$@"; }

# One munged for the cluster, on the controller's host: its socket is a
# file under $D, which every host reaches (a Unix socket's path is not in
# a network namespace).
cluster_munge "$D" ctl || die_setup "munged does not answer"
hosts_run 1 sh -c "munge -S '$D/munge/munge.sock' -n | unmunge -S '$D/munge/munge.sock'" \
    >/dev/null 2>&1 || die_setup "munge does not answer on host 1"

# Fixed ports are safe: each host has a network stack of its own.
{
    cat <<CONF
ClusterName=tdhosts
SlurmctldHost=$(hosts_name $C)($(hosts_addr $C))
SlurmctldPort=6817
SlurmdPort=6818
$(cluster_conf "$D")
MpiParams=ports=12000-12019
CONF
    for n in 1 2 3 4; do
        echo "NodeName=n$n NodeHostname=n$n NodeAddr=$(hosts_addr $n) CPUs=4"
    done
    echo "PartitionName=test Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP"
} > "$D/slurm.conf"
echo "required $plugin" > "$D/plugstack.conf"
export SLURM_CONF=$D/slurm.conf
# The liveness check fails a peer silent for TODIST_LIVENESS seconds (3 by
# default): a timing, which no run below is about (as in test_hosts.sh).
# CI at a load of 10 saw rank 2 fail rank 0 after 3.0 s of silence in the
# 2x2 run, and rank 0, alive, then hit UCX 1.13's `remote_id ==
# remote_ep_id` assertion on the endpoint rank 2 had closed.
TODIST_LIVENESS=60; export TODIST_LIVENESS
for n in 1 2 3 4; do mkdir -p "$D/tmpfs/n$n" "$D/spool/n$n"; done

ctl slurmctld -i >"$D/slurmctld.out" 2>&1 || die_setup "slurmctld"
for n in 1 2 3 4; do
    hosts_run $n slurmd -N n$n >"$D/slurmd-n$n.out" 2>&1 || die_setup "slurmd n$n"
done
nodes_idle() { [ "$(ctl sinfo -h -N -o %t | grep -c '^idle$')" = 4 ]; }
wait_for 60 nodes_idle ||
    die_setup "nodes not idle: $(ctl sinfo -h -N -o '%N %t' | tr '\n' ' ')"

# ---- the checks ------------------------------------------------------------
plan 23

# run_srun NAME SRUN-ARGS...: srun on the controller's host; output in
# $D/out/NAME (sorted), stderr in NAME.err, status in $rc.
run_srun() {
    name=$1; shift
    ctl timeout -k 5 120 srun "$@" >"$D/out/$name" 2>"$D/out/$name.err"
    rc=$?
    sort "$D/out/$name" -o "$D/out/$name"
    # A failed step shows why in the log (its folder goes with the test).
    if [ "$rc" != 0 ] || grep FAIL "$D/out/$name" >/dev/null; then
        diag "srun $name: exit $rc" "$(grep FAIL "$D/out/$name" | head -n 20)" \
             "$(grep -v debug "$D/out/$name.err" | tail -n 40)"
    fi
}
col() { # file key -> the values, space-separated, in the file's order
    sed -n "s/.* $2=\([^ ]*\).*/\1/p; s/^$2=\([^ ]*\).*/\1/p" "$1" |
        tr '\n' ' ' | sed 's/ $//'
}
# mark: note hosts 1 and 2's byte counters; crossed I MIN: host I's
# interface sent and received at least MIN bytes since the mark.
mark() {
    set -- $(hosts_bytes 1) $(hosts_bytes 2)
    tx1=$1; rx1=$2; tx2=$3; rx2=$4
}
crossed() { # I MIN what
    eval "_tx=\$tx$1 _rx=\$rx$1"
    set -- "$1" "$2" "$3" $(hosts_bytes "$1")
    ok "$([ $(($4 - _tx)) -ge "$2" ] && [ $(($5 - _rx)) -ge "$2" ]; echo $?)" \
       "$3: host n$1's link sent $(($4 - _tx)) and received $(($5 - _rx)) bytes (>= $2)"
}

# 1. four nodes, four hosts
probe='echo "rank=$TODIST_RANK node=$SLURMD_NODENAME host=$(cat /proc/sys/kernel/hostname) boot=$(cat /proc/sys/kernel/random/boot_id) net=$(readlink /proc/self/ns/net) master=$TODIST_MASTER_ADDR"'
run_srun four -N4 --ntasks-per-node=1 --todist sh -c "$probe"
is "$rc" 0 "srun -N4 --todist on four hosts succeeds"
is "$(col "$D/out/four" node)|$(col "$D/out/four" host)" "n1 n2 n3 n4|n1 n2 n3 n4" \
   "each task runs on its node's host, whose hostname is the node's name"
b0=$(cat /proc/sys/kernel/random/boot_id)
is "$(col "$D/out/four" boot | tr ' ' '\n' | grep -v "^$b0\$" | sort -u | wc -l)" 4 \
   "four boot ids, none the machine's"
n0=$(readlink /proc/self/ns/net)
is "$(col "$D/out/four" net | tr ' ' '\n' | grep -v "^$n0\$" | sort -u | wc -l)" 4 \
   "four network namespaces, none the machine's"

# 2. a collective across two hosts: 8 all_reduces of 4 MiB (1,048,579
# float32, tests/coll/coll_peer.c's BIG), one rank on each host. Two
# ranks exchange at least the payload each way per call, whatever the
# algorithm: both links must carry 8 x 4,194,316 bytes each way.
payload=$((8 * 4194316))
mark
run_srun ar -N2 -n2 -w n1,n2 --todist "$top_builddir/tests/coll/coll_peer" allreduce_big 8
is "$rc|$(grep -c '^PASS allreduce_big' "$D/out/ar")|$(grep -c '^FAIL' "$D/out/ar")" "0|2|0" \
   "srun -N2 --todist: 8 all_reduces of 4 MiB pass on both ranks"
crossed 1 $payload "all_reduce 8 x 4 MiB"
crossed 2 $payload "all_reduce 8 x 4 MiB"

# 3. nothing offered across hosts: bodies above the single-copy threshold
# (coll_peer big: all_reduce, broadcast and point-to-point of 1.2 MB) are
# not read in place and the collectives' shared segment is not used.
run_srun big -N2 -n2 -w n1,n2 --todist env TODIST_LOG=debug \
    "$top_builddir/tests/coll/coll_peer" big
is "$rc|$(grep -c '^FAIL' "$D/out/big")" "0|0" "1+1 large bodies: both ranks pass"
like "$(cat "$D/out/big.err")" "rank [01] offered its inbox \(another host: not used\)" \
     "1+1: the other host's mailbox is not used"
unlike "$(cat "$D/out/big.err")" "read in place|cannot read" \
       "1+1: no in-place read offered across hosts"
unlike "$(cat "$D/out/big.err")" "collectives through shared memory" \
       "1+1: no shared segment across hosts"
like "$(cat "$D/out/big.err")" "segment is on another host" \
     "1+1: the segment offered by the other host is refused"
unlike "$(cat "$D/out/big.err")" "lost rank" \
       "1+1: a peer that leaves after the finalize join is not reported lost"

# ... and both are used inside a host. The same program on one host: the
# world group's collectives go through its shared segment, and bodies
# are read in place.
run_srun big1 -N1 -n2 -w n1 --todist env TODIST_LOG=debug \
    "$top_builddir/tests/coll/coll_peer" big
is "$rc|$(grep -c '^FAIL' "$D/out/big1")" "0|0" "one host x 2 ranks, large bodies: both ranks pass"
like "$(cat "$D/out/big1.err")" "collectives through shared memory" \
     "one host: the collectives use the shared segment"
like "$(cat "$D/out/big1.err")" "p2p body of [0-9]+ bytes from rank [01] read in place" \
     "one host: bodies are read in place"
# At 2 hosts x 2 ranks bodies are read in place, each from a rank on the
# reader's own node only: each rank first prints its node (stdout), and
# --label prefixes every line with its rank.
run_srun big22 -N2 --ntasks-per-node=2 -w n1,n2 --label --todist env TODIST_LOG=debug \
    sh -c 'echo "node=$SLURMD_NODENAME"; exec "$0" big' "$top_builddir/tests/coll/coll_peer"
is "$rc|$(grep -c 'FAIL' "$D/out/big22")" "0|0" "2x2 large bodies: all four ranks pass"
nodes=$(sed -n 's/^ *\([0-9]*\): node=\(.*\)/\1 \2/p' "$D/out/big22")
reads=$(sed -n 's/^ *\([0-9]*\): .*p2p body of [0-9]* bytes from rank \([0-9]*\) read in place.*/\1 \2/p' \
        "$D/out/big22.err")
ok "$([ -n "$reads" ] && [ "$(echo "$nodes" | awk '{print $2}' | sort | uniq -c | awk '{print $1}' | tr '\n' ' ')" = "2 2 " ]; echo $?)" \
   "2x2: bodies read in place inside a node ($(echo "$reads" | grep -c .) reads; ranks on $(echo "$nodes" | sort -n | awk '{print $2}' | tr '\n' ' '))"
is "$(printf '%s\n--\n%s\n' "$nodes" "$reads" |
      awk '$1 == "--" { r = 1; next } !r { at[$1] = $2; next } at[$1] != at[$2] { print }' | wc -l)" 0 \
   "2x2: none read from a rank on the other node"
unlike "$(cat "$D/out/big22.err")" "lost rank" \
       "2x2: a peer that leaves after the finalize join is not reported lost"

# 4. PyTorch DDP over gloo across two hosts (tests/spank/ddp_gloo.py: 4
# steps of 1 MiB of gradients; the bytes must cross both links).
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
    mark
    run_srun ddp -N2 -n2 -w n1,n2 --todist /usr/bin/python3 \
        "$top_srcdir/tests/spank/ddp_gloo.py"
    is "$(cat "$D/out/ddp" | tr '\n' ' ')" \
       "rank=0 world=2 host=n1 ddp=ok rank=1 world=2 host=n2 ddp=ok " \
       "srun --todist: gloo DDP on n1 and n2 agrees with a one-process reference"
    [ "$rc" = 0 ] || diag "$(tail -n 20 "$D/out/ddp.err")"
    # 4 steps of 512 x 513 float32 gradients, all-reduced
    crossed 1 $((4 * 512 * 513 * 4)) "gloo DDP"
    crossed 2 $((4 * 512 * 513 * 4)) "gloo DDP"
else
    skip 3 "PyTorch (/usr/bin/python3 -c 'import torch') not installed"
fi

if [ "$_tap_failed" != 0 ]; then
    for f in "$D"/slurmd-n1.log "$D"/slurmd-n2.log "$D"/slurmctld.log; do
        [ -s "$f" ] && diag "== $f" "$(tail -n 15 "$f")"
    done
fi
done_testing
