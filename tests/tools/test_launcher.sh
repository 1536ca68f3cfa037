#!/bin/sh
# todist-run: environment per rank, labels, exit codes and signals,
# teardown within the bound, restarts, multi-node mode, bad arguments.
. "$top_srcdir/tests/lib.sh"
plan 32
T=$TD_TMP
run() { timeout -k 5 30 todist-run "$@"; }

# --- environment per rank
env -u TODIST_JOB_TOKEN timeout -k 5 30 todist-run -n 3 sh -c 'echo "$TODIST_RANK $TODIST_WORLD_SIZE $TODIST_LOCAL_RANK $TODIST_LOCAL_WORLD_SIZE $TODIST_NODE_RANK $TODIST_NNODES $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $TODIST_RESTART_COUNT" > '"$T"'/env.$TODIST_RANK; echo "$TODIST_MASTER_ADDR:$TODIST_MASTER_PORT $MASTER_ADDR:$MASTER_PORT $TODIST_JOB_TOKEN" > '"$T"'/m.$TODIST_RANK'
is "$?" 0 "three ranks exit 0"
is "$(cat $T/env.0)" "0 3 0 3 0 1 0 3 0 3 0 0" "rank 0 environment"
is "$(cat $T/env.2)" "2 3 2 3 0 1 2 3 2 3 0 0" "rank 2 environment"
is "$(sort -u $T/m.* | wc -l)" 1 "master and token equal in every rank"
like "$(cat $T/m.0)" '^127\.0\.0\.1:[0-9]+ 127\.0\.0\.1:[0-9]+ [0-9a-f]{64}$' "master address, port and a 256-bit hex token"
# the first job's token (third field) against a second job's, both made
# by todist-run (none inherited from the environment)
tok1=$(awk '{print $3}' $T/m.0)
tok2=$(env -u TODIST_JOB_TOKEN timeout -k 5 30 todist-run -n 1 sh -c 'echo $TODIST_JOB_TOKEN')
like "$tok2" '^[0-9a-f]{64}$' "the second job has a 256-bit hex token too"
ok "$([ -n "$tok1" ] && [ "$tok1" != "$tok2" ]; echo $?)" "a new token per job"
is "$(TODIST_JOB_TOKEN=abc run -n 1 sh -c 'echo $TODIST_JOB_TOKEN')" "abc" "TODIST_JOB_TOKEN from the environment is kept"

# --- labels
out=$(run -n 2 --label sh -c 'echo out$TODIST_RANK; echo err$TODIST_RANK >&2; printf tail' 2>$T/err)
like "$out" '\[0\]: out0' "stdout labelled for rank 0"
like "$out" '\[1\]: out1' "stdout labelled for rank 1"
like "$(cat $T/err)" '\[1\]: err1' "stderr labelled and kept on stderr"
is "$(printf '%s\n' "$out" | grep -c 'tail$')" 2 "last line without newline is flushed"
run -n 2 --label sh -c 'i=0; while [ $i -lt 2000 ]; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx$TODIST_RANK; i=$((i+1)); done' > $T/many
is "$(grep -Ecv '^\[([01])\]: x{100}\1$' $T/many)" 0 "4000 lines, none mixed"
is "$(wc -l < $T/many)" 4000 "no line lost"

# --- failure: exit code, the others stopped quickly
t0=$(td_now)
run -n 3 sh -c 'if [ $TODIST_RANK = 1 ]; then exit 7; fi; sleep 60' 2>$T/err
rc=$?
t1=$(td_now)
is "$rc" 7 "exit status of the failing rank"
like "$(cat $T/err)" 'rank 1 \(pid [0-9]+\) exited with code 7' "names the failing rank and its code"
# Teardown takes ~0.1 s here (at most the 3 s grace period by design);
# without it the others would sleep 60 s and hit the 30 s timeout. The bound
# is loose so a loaded machine cannot fail the test.
ok "$(awk -v a=$t0 -v b=$t1 'BEGIN{exit !(b-a < 20)}'; echo $?)" "others stopped, not left running"

run -n 2 sh -c 'if [ $TODIST_RANK = 0 ]; then kill -9 $$; fi; sleep 60' 2>$T/err
is "$?" 137 "killed rank gives 128+9"
like "$(cat $T/err)" 'rank 0 \(pid [0-9]+\) was killed by signal 9' "names the signal"

t0=$(td_now)
run -n 2 --grace-period 1 sh -c 'trap "" TERM; if [ $TODIST_RANK = 1 ]; then exit 3; fi; while :; do sleep 1; done' 2>/dev/null
rc=$?
t1=$(td_now)
is "$rc" 3 "a rank ignoring SIGTERM does not change the status"
ok "$(awk -v a=$t0 -v b=$t1 'BEGIN{exit !(b-a < 20)}'; echo $?)" "SIGKILL after the grace period (else the 30 s timeout)"

# --- signals are forwarded
todist-run -n 2 sh -c 'trap "echo got > '"$T"'/sig.$TODIST_RANK; exit 0" TERM; echo up > '"$T"'/up.$TODIST_RANK; while :; do sleep 0.1; done' 2>$T/sigerr &
lp=$!
td_track_pid $lp
i=0; while [ $i -lt 100 ] && ! { [ -f $T/up.0 ] && [ -f $T/up.1 ]; }; do sleep 0.1; i=$((i+1)); done
kill -TERM $lp
wait $lp
is "$?" 143 "launcher exits 128+SIGTERM"
is "$(cat $T/sig.0 $T/sig.1 2>/dev/null | tr '\n' ' ')" "got got " "SIGTERM reached every rank"
like "$(cat $T/sigerr)" "todist-run: got signal 15 \(.*\); ranks still running: 0 1\$" \
     "and the launcher named the ranks it stopped (a test's timeout: the hung ones)"

# --- restarts
run -n 2 --max-restarts 2 sh -c 'echo $TODIST_RESTART_COUNT >> '"$T"'/rs.$TODIST_RANK; [ $TODIST_RESTART_COUNT -ge 2 ] || exit 3' 2>$T/err
is "$?" 0 "succeeds on the third incarnation"
# a rank writes before it fails; the other may be stopped before writing
is "$(cat $T/rs.* | sort -u | tr '\n' ' ')" "0 1 2 " "TODIST_RESTART_COUNT counts restarts"
run -n 1 --max-restarts 1 sh -c 'exit 4' 2>/dev/null
is "$?" 4 "restarts exhausted: the rank's status"

# --- multi-node mode
out=$(TODIST_JOB_TOKEN=t run -n 2 --nnodes 2 --node-rank 1 --master-addr h --master-port 1234 --label sh -c 'echo $TODIST_RANK/$TODIST_WORLD_SIZE/$GROUP_RANK/$TODIST_MASTER_ADDR:$MASTER_PORT' | sort)
is "$(echo $out)" "[2]: 2/4/1/h:1234 [3]: 3/4/1/h:1234" "node 1 of 2 runs ranks 2 and 3"

# --- bad arguments
run 2>/dev/null; is "$?" 2 "no program: exit 2"
run -n 0 true 2>/dev/null; is "$?" 2 "-n 0: exit 2"
err=$(run --nnodes 2 true 2>&1); is "$?" 2 "--nnodes without master: exit 2"
run -n 1 /nonexistent/prog 2>/dev/null; is "$?" 127 "missing program: 127"
done_testing
