#!/bin/sh
# srun --todist on a real Slurm cluster started by this test: munged with
# its own key and socket, slurmctld and four slurmd nodes (n1..n4, all on
# this host, each in a mount namespace whose /etc/hosts names them), fake
# GPUs through gres, everything under a temp dir. Daemons are stopped by
# the pids in their pid files on any exit. Needs root and Slurm's daemons;
# skips otherwise.
. "$top_srcdir/tests/lib.sh"

plugin=$top_builddir/spank/.libs/todist.so
[ -f "$plugin" ] || skip_all "SPANK plugin not built (no slurm/spank.h)"
[ "$(id -u)" = 0 ] || skip_all "needs root to run slurmd and munged"
for b in munged mungekey slurmctld slurmd srun sbatch salloc squeue sinfo scontrol unshare; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
        skip_all "$b not installed (scripts/install-deps.sh installs Slurm)"
done
PATH=$PATH:/usr/sbin
unshare --mount true 2>/dev/null || skip_all "cannot make mount namespaces"

# A sanitizer build's plugin needs the ASan runtime loaded first, which
# Slurm's programs lack. TD_SPANK_ASAN=1 preloads it into srun and the
# daemons (the plugin then runs under ASan for real), but ASan in the
# multi-threaded, forking slurmstepd can deadlock, so it is opt-in.
if readelf -d "$plugin" 2>/dev/null | grep -q 'libasan'; then
    [ "${TD_SPANK_ASAN:-0}" = 1 ] ||
        skip_all "sanitizer build: todist.so needs ASan preloaded into Slurm (set TD_SPANK_ASAN=1)"
    LD_PRELOAD="$(${TD_CC:-cc} -print-file-name=libasan.so) $(${TD_CC:-cc} -print-file-name=libubsan.so)"
    ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
    export LD_PRELOAD ASAN_OPTIONS
fi

D=$TD_TMP/cluster
mkdir -p "$D/munge" "$D/state" "$D/spool" "$D/tmpfs" "$D/out"
chmod 0700 "$D/munge"

# ---- cleanup: kill what the pid files name, never by process name --------
# Everything this cluster started (daemons, slurmstepd, tasks) inherits
# SLURM_CONF=$D/slurm.conf: a step left hanging is found by it.
_pidfiles="$D/munged.pid $D/slurmctld.pid $D/slurmd-n1.pid $D/slurmd-n2.pid \
$D/slurmd-n3.pid $D/slurmd-n4.pid"
pids_of_cluster() {
    for f in $_pidfiles; do
        p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && echo "$p"
    done
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}; p=${p%/environ}
        [ "$p" != $$ ] &&
            { tr '\0' '\n' < "$e"; } 2>/dev/null | grep -qx "SLURM_CONF=$D/slurm.conf" &&
            echo "$p"
    done
}
any_alive() {
    for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done
    return 1
}
stop_daemons() {
    pids=$(pids_of_cluster | sort -u)
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
    t=0     # wait (bounded) so nothing holds the temp dir when it goes
    while [ $t -lt 100 ] && any_alive $pids; do
        sleep 0.1; t=$((t + 1))
    done
    pids=$(pids_of_cluster | sort -u)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
}
trap "stop_daemons; [ -n \"\$TD_KEEP\" ] || _td_cleanup" EXIT

# Poll CMD until it succeeds or SECONDS pass.
wait_for() { # seconds cmd...
    end=$(( $(date +%s) + $1 )); shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.2
    done
}

die_setup() {
    echo "Bail out! cluster setup failed: $1"
    for f in "$D"/*.log; do [ -f "$f" ] && diag "== $f" "$(tail -15 "$f")"; done
    exit 1
}

# Ports: pick a base from our pid so that concurrent runs (make check and
# distcheck) do not collide, and check it is free.
base=$(( 30000 + ($$ % 500) * 10 ))
while ss -Htln 2>/dev/null | awk '{print $4}' | grep -Eq ":($base|$((base+1))|$((base+2))|$((base+3))|$((base+4)))\$"; do
    base=$((base + 10))
done

# ---- munge: own key, own socket ------------------------------------------
mungekey --create --keyfile="$D/munge/munge.key" --bits=1024 2>"$D/mungekey.log" ||
    die_setup "mungekey"
chmod 0400 "$D/munge/munge.key"
munged --force --socket="$D/munge/munge.sock" --key-file="$D/munge/munge.key" \
    --pid-file="$D/munged.pid" --log-file="$D/munged.log" \
    --seed-file="$D/munge/seed" >"$D/munged.out" 2>&1 || die_setup "munged"
wait_for 10 sh -c "munge -S '$D/munge/munge.sock' -n | unmunge -S '$D/munge/munge.sock'" ||
    die_setup "munge does not answer"

# ---- fake GPUs and the configuration --------------------------------------
for i in 0 1 2 3; do
    mknod "$D/fakegpu$i" c 195 $i || die_setup "mknod"
done
printf '127.0.0.1 localhost\n127.0.0.1 n1 n2 n3 n4\n127.0.0.1 %s\n' \
    "$(hostname)" > "$D/hosts"
cat > "$D/gres.conf" <<GRES
Name=gpu File=$D/fakegpu[0-3]
GRES
cat > "$D/slurm.conf" <<CONF
ClusterName=tdtest
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$base
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd-%n.log
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
TmpFS=$D/tmpfs/%n
PlugStackConfig=$D/plugstack.conf
GresTypes=gpu
NodeName=n[1-4] NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=[$((base+1))-$((base+4))] CPUs=4 Gres=gpu:4
PartitionName=test Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
CONF
# slurmstepd reads plugstack.conf at each step start, so tests rewrite it.
plugstack() { echo "required $plugin $*" > "$D/plugstack.conf"; }
plugstack port_range=21000-21999
export SLURM_CONF=$D/slurm.conf
for n in 1 2 3 4; do mkdir -p "$D/tmpfs/n$n" "$D/spool/n$n"; done

# ---- daemons -----------------------------------------------------------
slurmctld -i >"$D/slurmctld.out" 2>&1 || die_setup "slurmctld"
for n in 1 2 3 4; do
    unshare --mount sh -c "mount --bind '$D/hosts' /etc/hosts && exec slurmd -N n$n" \
        >"$D/slurmd-n$n.out" 2>&1 || die_setup "slurmd n$n"
done
nodes_idle() { [ "$(sinfo -h -N -o %t | grep -c '^idle$')" = 4 ]; }
wait_for 60 nodes_idle || die_setup "nodes not idle: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')"

# ---- the tests ----------------------------------------------------------
plan 50

# One line per task: todist-info's view plus the raw variables.
probe='echo "$(todist-info) token=${TODIST_JOB_TOKEN-} RANK=${RANK-} LOCAL_RANK=${LOCAL_RANK-} WORLD_SIZE=${WORLD_SIZE-} LOCAL_WORLD_SIZE=${LOCAL_WORLD_SIZE-} GROUP_RANK=${GROUP_RANK-} MASTER_ADDR=${MASTER_ADDR-} MASTER_PORT=${MASTER_PORT-} cvd=${CUDA_VISIBLE_DEVICES-} tgpu=${TODIST_GPU-} omp=${OMP_NUM_THREADS-} bind=${TODIST_BIND-} node=$SLURMD_NODENAME"'
run_srun() { # name srun-args... ; output in $D/out/NAME, status in $rc
    name=$1; shift
    timeout 120 srun "$@" >"$D/out/$name" 2>"$D/out/$name.err"
    rc=$?
    sort -t= -k2 -n "$D/out/$name" -o "$D/out/$name"
}
field() { # file key -> one value per line, in rank order
    sed -n "s/.*[ ^]$2=\([^ ]*\).*/\1/p; s/^$2=\([^ ]*\).*/\1/p" "$1" | head -n 64
}
col() { field "$1" "$2" | tr '\n' ' ' | sed 's/ $//'; }
by_rank() { # file -> lines sorted by rank
    sed 's/^rank=\([0-9]*\) /\1 &/' "$1" | sort -n | cut -d' ' -f2-
}
sorted() { by_rank "$1" > "$1.s"; mv "$1.s" "$1"; }

# 1. one node, -n4
run_srun one -N1 -n4 -w n1 --todist sh -c "$probe"
sorted "$D/out/one"
is "$rc" 0 "srun -N1 -n4 --todist succeeds"
is "$(col "$D/out/one" rank)" "0 1 2 3" "ranks 0-3"
is "$(col "$D/out/one" local_rank)" "0 1 2 3" "local ranks 0-3"
is "$(col "$D/out/one" world_size)" "4 4 4 4" "world size 4"
is "$(col "$D/out/one" master_addr)" "n1 n1 n1 n1" "master is the step's node"
is "$(col "$D/out/one" source)" "todist todist todist todist" "resolved from TODIST_*"
port=$(field "$D/out/one" master_port | sort -u)
ok "$([ "$(echo "$port" | wc -l)" = 1 ] && [ "$port" -ge 21000 ] && [ "$port" -le 21999 ]; echo $?)" \
    "one master port ($port), within port_range 21000-21999"
tok=$(field "$D/out/one" token | sort -u)
ok "$([ "$(echo "$tok" | wc -l)" = 1 ] && echo "$tok" | grep -Eqx '[0-9a-f]{64}'; echo $?)" \
    "one 64-hex-digit token in all tasks"
is "$(col "$D/out/one" omp)" "1 1 1 1" "OMP_NUM_THREADS = the task's CPUs (4 CPUs / 4 tasks)"

run_srun cpt -N1 -n2 -c2 -w n1 --todist sh -c "$probe"
is "$(col "$D/out/cpt" omp)" "2 2" "OMP_NUM_THREADS = --cpus-per-task (2)"

# 2. a second step gets another token and another port
run_srun one2 -N1 -n4 -w n1 --todist sh -c "$probe"
tok2=$(field "$D/out/one2" token | sort -u)
port2=$(field "$D/out/one2" master_port | sort -u)
ok "$([ -n "$tok2" ] && [ "$tok2" != "$tok" ]; echo $?)" "a new step has a new token"
ok "$([ -n "$port2" ] && [ "$port2" != "$port" ]; echo $?)" "a new step has another port ($port2)"

# Check a step's mapping against where Slurm really ran each task: node
# ranks follow the step's node list, local ranks count up on each node in
# rank order, local world sizes are the tasks per node, one master.
consistent() { # file -> "ok" or what is wrong
    awk '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        n++; node[n] = v["node"]; nr[n] = v["node_rank"]; lr[n] = v["local_rank"]
        lws[n] = v["local_world_size"]; r[n] = v["rank"]; m[v["master_addr"]] = 1
        cnt[v["node"]]++
    } END {
        k = 0; for (x in cnt) names[++k] = x
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
            if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
        for (i = 1; i <= k; i++) idx[names[i]] = i - 1
        for (i = 1; i <= n; i++) {
            if (r[i] != i - 1) { print "rank " r[i] " at line " i; exit }
            if (nr[i] != idx[node[i]]) { print "rank " r[i] " on " node[i] " has node_rank " nr[i]; exit }
            if (lr[i] != seen[node[i]]++) { print "rank " r[i] " has local_rank " lr[i]; exit }
            if (lws[i] != cnt[node[i]]) { print "rank " r[i] " has local_world_size " lws[i] " but " node[i] " runs " cnt[node[i]]; exit }
        }
        nm = 0; for (x in m) nm++
        if (nm != 1 || !((names[1]) in m)) { print "masters:"; for (x in m) print x; exit }
        print "ok"
    }' "$1"
}

# 3. four nodes, eight tasks
run_srun four -N4 -n8 --ntasks-per-node=2 --todist sh -c "$probe"
sorted "$D/out/four"
is "$rc" 0 "srun -N4 -n8 --todist succeeds"
is "$(col "$D/out/four" rank)" "0 1 2 3 4 5 6 7" "ranks 0-7"
is "$(col "$D/out/four" node)" "n1 n1 n2 n2 n3 n3 n4 n4" "tasks ran on four slurmd nodes"
is "$(col "$D/out/four" node_rank)" "0 0 1 1 2 2 3 3" "node ranks"
is "$(col "$D/out/four" local_rank)" "0 1 0 1 0 1 0 1" "local ranks"
is "$(col "$D/out/four" local_world_size)" "2 2 2 2 2 2 2 2" "local world sizes"
is "$(col "$D/out/four" nnodes)" "4 4 4 4 4 4 4 4" "4 nodes"
is "$(field "$D/out/four" master_addr | sort -u) $(field "$D/out/four" master_port | sort -u | wc -l)" \
    "n1 1" "one master (n1), one port"

# 4. uneven: -N4 -n8 as Slurm packs it, and -N3 -n7 cyclic (3,2,2)
run_srun packed -N4 -n8 --todist sh -c "$probe"
sorted "$D/out/packed"
is "$(consistent "$D/out/packed")" ok "-N4 -n8 packed by Slurm: mapping matches placement"
run_srun three -N3 -n7 -w "n[2-4]" -m cyclic --todist sh -c "$probe"
sorted "$D/out/three"
is "$(consistent "$D/out/three")" ok "-N3 -n7 cyclic: mapping matches placement"
is "$(field "$D/out/three" node_rank | sort -u | tr '\n' ' ')" "0 1 2 " "-N3 -n7 spans three nodes"
ok "$([ "$(field "$D/out/three" local_world_size | sort -u | wc -l)" -gt 1 ]; echo $?)" \
    "-N3 -n7 layout is uneven ($(col "$D/out/three" local_world_size))"
is "$(field "$D/out/three" master_addr | sort -u)" "n2" "master is the step's first node n2"

# 5. torchrun names, and torchrun=no
is "$(col "$D/out/three" RANK)" "0 1 2 3 4 5 6" "torchrun RANK"
is "$(col "$D/out/three" GROUP_RANK)" "$(col "$D/out/three" node_rank)" "torchrun GROUP_RANK = node rank"
is "$(field "$D/out/three" MASTER_ADDR | sort -u) $(col "$D/out/three" LOCAL_WORLD_SIZE)" \
    "n2 $(col "$D/out/three" local_world_size)" "torchrun MASTER_ADDR and LOCAL_WORLD_SIZE"
run_srun notr -N2 -n2 --todist=torchrun=no,port=23456 sh -c "$probe"
sorted "$D/out/notr"
is "$(field "$D/out/notr" RANK | tr -d '\n')$(field "$D/out/notr" MASTER_PORT | tr -d '\n')" "" \
    "torchrun=no: no torchrun names"
is "$(col "$D/out/notr" master_port)" "23457 23457" "port=N: the store takes N + 1 (MASTER_PORT is N)"

# 6. a bad option fails srun with the plugin's message
timeout 60 srun -n1 --todist=bogus true >"$D/out/bogus" 2>&1
rc=$?
ok "$([ $rc != 0 ] && [ $rc != 124 ]; echo $?)" "--todist=bogus: srun fails (status $rc)"
like "$(cat "$D/out/bogus")" "todist: --todist: unknown or malformed option 'bogus'" \
    "message starts todist: and names the option"

# 7. fake GPUs: --gpus-per-node=4 -n4 gives each task its own
run_srun gpn -N1 -n4 --gpus-per-node=4 --todist=verbose sh -c "$probe"
sorted "$D/out/gpn"
is "$(col "$D/out/gpn" cvd)" "0 1 2 3" "--gpus-per-node=4: one GPU per task by local rank"
is "$(col "$D/out/gpn" tgpu)" "0 1 2 3" "TODIST_GPU records the choice"
like "$(cat "$D/out/gpn.err")" "todist: job [0-9]+ step [0-9]+: rank 3/4 local 3/4 node 0/1 master n[0-9]:[0-9]+ gpu 3 \(chosen\)" \
    "verbose prints each task's mapping"
run_srun gpt -N1 -n4 --gpus-per-task=1 --todist sh -c "$probe"
sorted "$D/out/gpt"
is "$(col "$D/out/gpt" cvd)|$(col "$D/out/gpt" tgpu)" "0 1 2 3|0 1 2 3" \
    "--gpus-per-task=1: Slurm's binding kept"

# 8. sbatch --todist: the batch step untouched, inner srun steps wired
cat > "$D/job.sh" <<JOB
#!/bin/sh
echo "batch token=\${TODIST_JOB_TOKEN-} rank=\${TODIST_RANK-} RANK=\${RANK-}" > "$D/out/batch"
srun -N2 -n4 sh -c '$probe' > "$D/out/inner"
srun -N1 -n2 --exact sh -c '$probe; sleep 1' > "$D/out/conc-a" &
srun -N1 -n2 --exact sh -c '$probe; sleep 1' > "$D/out/conc-b" &
wait
JOB
jid=$(sbatch --parsable -N2 -n4 --todist -o "$D/out/sbatch.log" "$D/job.sh")
job_done() { ! squeue -h -j "$jid" 2>/dev/null | grep -q .; }
wait_for 120 job_done
is "$(cat "$D/out/batch" 2>/dev/null)" "batch token= rank= RANK=" "batch step left alone"
sorted "$D/out/inner"
is "$(col "$D/out/inner" rank)|$(field "$D/out/inner" nnodes | sort -u)" "0 1 2 3|2" \
    "inner srun step wired: 4 ranks on 2 nodes"
is "$(consistent "$D/out/inner")" ok "inner step's mapping matches placement"
pa=$(field "$D/out/conc-a" master_port | sort -u); pb=$(field "$D/out/conc-b" master_port | sort -u)
ok "$([ -n "$pa" ] && [ -n "$pb" ] && [ "$pa" != "$pb" ]; echo $?)" \
    "two concurrent steps of one job: different ports ($pa, $pb)"
ta=$(field "$D/out/conc-a" token | sort -u); tb=$(field "$D/out/conc-b" token | sort -u)
ok "$([ -n "$ta" ] && [ "$ta" != "$tb" ]; echo $?)" "and different tokens"

# salloc --todist: the srun steps inside the allocation are wired
timeout 120 salloc -N2 -n2 --todist srun sh -c "$probe" >"$D/out/salloc" 2>"$D/out/salloc.err"
sorted "$D/out/salloc"
is "$(col "$D/out/salloc" rank)|$(col "$D/out/salloc" node_rank)" "0 1|0 1" \
    "salloc --todist: its srun step is wired"

# 10. a distributed program under srun --todist: remote calls between
# every pair of ranks, over UCX, with the store on the step's first node.
run_srun rpc -N2 -n4 --todist "$top_builddir/tests/rpc_allpairs"
sorted "$D/out/rpc"
is "$rc" 0 "srun -N2 -n4 --todist rpc_allpairs succeeds"
is "$(col "$D/out/rpc" calls_ok)" "4 4 4 4" "every rank called all 4 ranks and got their answers"
is "$(field "$D/out/rpc" node | sort -u | tr '\n' ' ')" "n1 n2 " "the ranks ran on two slurmd nodes"

# 9. site default=on: no --todist needed; bad plugstack argument reported
plugstack default=on torchrun=no
run_srun def -n2 -N1 sh -c "$probe"
sorted "$D/out/def"
is "$(col "$D/out/def" rank)|$(field "$D/out/def" RANK | tr -d '\n')" "0 1|" "default=on wires every step (site torchrun=no)"
# Failures surface from task_init: an srun whose host lacks the plugin
# makes no token, so every task fails with the plugin's message and srun
# exits non-zero (a user_init failure would not reach srun's status).
: > "$D/plugstack-empty.conf"
sed "s|^PlugStackConfig=.*|PlugStackConfig=$D/plugstack-empty.conf|" "$D/slurm.conf" \
    > "$D/slurm-noplugin.conf"
SLURM_CONF=$D/slurm-noplugin.conf timeout 60 srun -N1 -n2 true >"$D/out/notoken" 2>&1
rc=$?
ok "$([ $rc != 0 ] && [ $rc != 124 ]; echo $?)" "no token from srun: the step fails (status $rc)"
like "$(cat "$D/out/notoken")" "todist: job [0-9]+ step [0-9]+: TODIST_JOB_TOKEN is not set" \
    "the task reports the missing token"
plugstack colour=blue
timeout 60 srun -n1 true >"$D/out/badconf" 2>&1
rc=$?
ok "$([ $rc != 0 ] && [ $rc != 124 ]; echo $?)" "bad plugstack argument: srun fails (status $rc)"
like "$(cat "$D/out/badconf")" "todist: plugstack.conf: unknown or malformed argument 'colour=blue'" \
    "the bad argument is named"
plugstack

# On failure, show what srun and the daemons said.
if [ "$_tap_failed" != 0 ]; then
    for f in "$D"/out/*.err "$D"/out/sbatch.log; do
        [ -s "$f" ] && diag "== $f" "$(tail -20 "$f")"
    done
    diag "== slurmd-n1.log" "$(tail -20 "$D/slurmd-n1.log")"
fi
done_testing
