#!/bin/sh
# todist-run as a torchrun drop-in: todist's store and torch's MASTER_PORT
# are different ports, torchrun's spellings and elastic names, OMP and bind
# settings, bad values (exit 2), and the store's port clashes failing at
# once with a message that names the port and the fix (issue 19).
. "$top_srcdir/tests/lib.sh"
plan 36
T=$TD_TMP
B=$top_builddir/tests/runtime/init_bind
run() { timeout -k 5 60 todist-run "$@"; }
names='echo "$TODIST_RANK $MASTER_PORT $TODIST_MASTER_PORT $RANK $ROLE_RANK $ROLE_WORLD_SIZE $ROLE_NAME $GROUP_RANK $GROUP_WORLD_SIZE $TORCHELASTIC_RUN_ID $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS $OMP_NUM_THREADS ${TODIST_BIND-unset}"'

# --- two ports, torchrun's names
env -u OMP_NUM_THREADS -u TODIST_BIND todist-run -n 2 sh -c "$names" > $T/a.raw
is "$?" 0 "two ranks run"
sort $T/a.raw > $T/a
mp=$(awk 'NR==1{print $2}' $T/a); sp=$(awk 'NR==1{print $3}' $T/a)
ok "$([ -n "$mp" ] && [ -n "$sp" ] && [ "$mp" != "$sp" ]; echo $?)" \
    "MASTER_PORT ($mp) and TODIST_MASTER_PORT ($sp) differ"
is "$(cut -d' ' -f4-12 $T/a | tr '\n' '|')" \
   "0 0 2 default 0 1 none 0 0|1 1 2 default 0 1 none 0 0|" \
   "RANK ROLE_RANK ROLE_WORLD_SIZE ROLE_NAME GROUP_RANK GROUP_WORLD_SIZE RUN_ID RESTART_COUNT MAX_RESTARTS"
cpus=$(nproc); want=$((cpus / 2)); [ $want -ge 1 ] || want=1
is "$(cut -d' ' -f13 $T/a | sort -u)" "$want" "OMP_NUM_THREADS = $cpus cores / 2 ranks"
is "$(cut -d' ' -f14 $T/a | sort -u)" "unset" "TODIST_BIND left unset by default"
is "$(OMP_NUM_THREADS=7 run -n 1 sh -c 'echo $OMP_NUM_THREADS')" 7 "OMP_NUM_THREADS set by the user kept"

# --- torchrun's spellings
out=$(env -u TODIST_BIND todist-run --nproc_per_node=2 --nnodes=1:1 --node_rank=0 \
      --master_addr=127.0.0.1 --master_port=29411 --max_restarts=1 \
      --rdzv_id=job7 --bind closest sh -c "$names" | sort | tr '\n' '|')
like "$out" "^0 29411 29412 0 0 2 default 0 1 job7 0 1 [0-9]+ closest\|1 29411 29412 1 1 2 " \
    "torchrun spellings: --master_port is MASTER_PORT, the store takes +1"
is "$(run --nproc-per-node 1 --standalone --master-port 29421 --store-port 29440 sh -c 'echo $MASTER_PORT $TODIST_MASTER_PORT')" \
   "29421 29440" "--store-port chooses the store's port"

# --- bad values: exit 2 with a message
bad() { # desc args...
    d=$1; shift
    err=$(run "$@" true 2>&1 >/dev/null); rc=$?
    is "$rc" 2 "$d: exit 2"
}
bad "--nnodes 1:2 alone" --nnodes 1:2
like "$err" "--nnodes MIN:2 needs --master-addr and --master-port" \
     "restart rounds need the master's address"
bad "--nnodes 3:2" --nnodes 3:2
like "$err" "--nnodes 3:2: MIN is above MAX" "MIN above MAX named"
err=$(env -u TODIST_JOB_TOKEN todist-run --nnodes 1:2 --master-addr h \
      --master-port 29450 true 2>&1); rc=$?
is "$rc" 2 "restart rounds without a token: exit 2"
like "$err" "need the same TODIST_JOB_TOKEN" "and the token is asked for"
bad "--rdzv-port = store port" --nnodes 1:2 --master-addr h --master-port 29450 --rdzv-port 29451
like "$err" "--rdzv-port 29451 is also --master-port or --store-port" "a clash with the store's port named"
bad "--bind far" --bind far
like "$err" "--bind expects closest or none, got 'far'" "bad --bind named"
bad "--store-port = --master-port" --master-port 29500 --store-port 29500
like "$err" "needs a port of its own" "one port for both refused"
bad "--standalone with 2 nodes" --standalone --nnodes 2 --master-addr h --master-port 1
bad "--store-port 0" --store-port 0
bad "--master-port 65535 alone" --master-port 65535
bad "--run-id ''" --run-id ''

# --- several nodes without a token: PyTorch-only programs run, td_init
# refuses to start an unauthenticated store across nodes.
out=$(env -u TODIST_JOB_TOKEN todist-run -n 1 --nnodes 2 --node-rank 1 \
      --master-addr 127.0.0.1 --master-port 29431 sh -c 'echo "${TODIST_JOB_TOKEN-none} $RANK"')
is "$out" "none 1" "--nnodes 2 without a token: starts, exports no token"
t0=$(td_now)
err=$(env -u TODIST_JOB_TOKEN TODIST_CONNECT_TIMEOUT=60 todist-run -n 1 --nnodes 2 \
      --node-rank 1 --master-addr 127.0.0.1 --master-port 29431 "$B" 2>&1)
rc=$?; t1=$(td_now)
is "$rc" 1 "td_init across nodes without a token fails"
like "$err" "one of 2 nodes but TODIST_JOB_TOKEN is not set" "and says what to set"
ok "$(awk -v a=$t0 -v b=$t1 'BEGIN{exit !(b-a < 30)}'; echo $?)" "at once, not after the connect timeout"

# --- a store that cannot bind fails at once, naming the port and the fix.
# Job A: rank 0 serves its store on port $P and waits for rank 1, which
# never comes; job B then tries the same port.
# (a band of its own: test_spank_slurm's daemons take 30000-34999 and its
# reservations 22000-29999, test_reach_init 38200-40203; make check runs
# them side by side). Above the kernel's ephemeral ports (32768-60999 by
# default): in 36000-37999, used before, a busy machine had dozens of
# connections whose local port the kernel had picked there, invisible to
# a check of listening sockets, and job A's store could not bind (6
# checks failed under load). Every socket on the port counts, any state.
lo=$(awk '{print $2 + 1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
[ "${lo:-0}" -ge 61000 ] 2>/dev/null && [ "$lo" -le 63000 ] || lo=61000
P=$(( lo + 1 + ($$ % 1000) * 2 ))
while ss -Htan 2>/dev/null | awk '{print $4}' | grep -E ":($((P-1))|$P|$((P+1)))\$" >/dev/null; do P=$((P + 2)); done
TODIST_INIT_TIMEOUT=120 todist-run -n 2 --master-port $((P - 1)) --store-port $P \
    sh -c 'if [ $TODIST_RANK = 0 ]; then exec "$0"; fi; sleep 120' "$B" \
    >/dev/null 2>&1 &
ja=$!
td_track_pid $ja
i=0; while [ $i -lt 300 ] && ! ss -Htln | awk '{print $4}' | grep ":$P\$" >/dev/null; do sleep 0.1; i=$((i+1)); done
ok "$(ss -Htln | awk '{print $4}' | grep ":$P\$" >/dev/null; echo $?)" "job A's store listens on $P"
t0=$(td_now)
err=$(TODIST_CONNECT_TIMEOUT=60 run -n 1 --master-port $((P + 100)) --store-port $P "$B" 2>&1)
rc=$?; t1=$(td_now)
is "$rc" 1 "job B (one rank, so no other rank races it) cannot bind: exit 1"
like "$err" "todist's store cannot listen on port $P \(TODIST_MASTER_PORT\).*--resv-ports.*store_port=N" \
    "names the port and the fix"
ok "$(awk -v a=$t0 -v b=$t1 'BEGIN{exit !(b-a < 30)}'; echo $?)" "at once, not after the connect timeout"

# A rank of another job (another token) reaching A's store fails at once.
t0=$(td_now)
err=$(TODIST_JOB_TOKEN=0123456789abcdef TODIST_CONNECT_TIMEOUT=60 run -n 1 --nnodes 2 \
      --node-rank 1 --master-addr 127.0.0.1 --master-port $((P - 1)) --store-port $P "$B" 2>&1)
rc=$?; t1=$(td_now)
is "$rc" 1 "a rank with another job's token fails"
like "$err" "rank 1 reached a store on port $P that is not this job's.*token rejected" \
    "saying the store is another job's"
ok "$(awk -v a=$t0 -v b=$t1 'BEGIN{exit !(b-a < 30)}'; echo $?)" "at once, not after the connect timeout"
kill -TERM $ja 2>/dev/null; wait $ja 2>/dev/null

# --- restarts reach torchrun's names
run -n 1 --max-restarts 2 sh -c 'echo $TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS >> '"$T"'/rs; [ $TORCHELASTIC_RESTART_COUNT -ge 1 ] || exit 3' 2>/dev/null
is "$(tr '\n' ' ' < $T/rs)" "0/2 1/2 " "TORCHELASTIC_RESTART_COUNT counts, MAX_RESTARTS given"
done_testing
