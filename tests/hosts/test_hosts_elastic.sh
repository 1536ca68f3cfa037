#!/bin/sh
# In-place recovery across a partition that heals (tests/hosts.sh;
# runtime/elastic/elastic.c EL12, transport.c L12). A host is cut off
# while every rank is in an all_reduce of an elastic job (hosts_peer
# elheal: each rank adds world rank + 1); only the other host's ranks
# watch with a short TODIST_LIVENESS (2 s), the cut-off host's with 30 s,
# so only they drop it; the link is restored once they did, and the
# cut-off rank is told (its TODIST_COLL_TIMEOUT 300 s, except in part 5).
# Its own liveness pings, 10 s into its silence, are one way it is told:
# with 300 s (no ping) the told rank of parts 2 and 3 heard nothing and
# waited until the job's timeout in 1 run of 6 (not traced further; L12's
# closed endpoint, a send of the dropper's still queued, fits). Checked:
#  - no rank aborts or hangs: every rank reports, the job ends;
#  - the droppers recover to epoch 1 without the cut-off host's rank, and
#    their all_reduce in it gives the sum of their own contributions;
#  - the dropped rank's recovery fails saying it was dropped and by whom
#    ("elastic: rank R was dropped by rank D (on host ...)"), and it
#    leaves (its program exits 3): before EL12 it took the rank that told
#    it so for lost, declared it dead in the agreement (the plan could
#    leave out both), or said that rank 0 was lost.
# Part 1: 2+1, rank 0's process serves the store (hosts_launch), host 2's
# rank 2 dropped by ranks 0 and 1: epoch 1 is world 3 -> 2, sum 1 + 2.
# Part 2: 1+1 under one todist-run --no-kill per host (host 1's launcher
# serves the store, TODIST_AGENT_STORE=1), host 1's rank 0 dropped by
# rank 1, which enters its recovery only once rank 0's ended (as when
# its store requests wait across the cut while the dropped rank's store
# is at hand): epoch 1 is world 2 -> 1 with rank 1, sum 2. Before EL12
# the told rank 0 declared rank 1 dead and formed epoch 1 alone, and
# rank 1 was refused as stale: the dropped rank went on, its dropper
# left (with both declarations in first: nobody, no plan).
# Part 3: part 2 under todist-run --no-kill --replace 1 on host 1 (op
# elgrow: each step committed, then td_elastic_admit; the admitter waits
# for the replacement, TODIST_ELASTIC_ADMIT_WAIT): the dropped rank 0
# leaves, its launcher's replacement joins epoch 2 (world 1 -> 2), and
# both all_reduce there (sum 1 + 2).
# Part 4: 1+1 as in part 2, both hosts with TODIST_LIVENESS=2, host 2
# (rank 1) cut off: each drops the other; rank 0 declares rank 1 dead and
# forms epoch 1 alone (world 2 -> 1, sum 1); rank 1 recovers once the link
# is back, is never told (a 'D' from a peer it failed is ignored), is
# refused as stale, and reads its declarer from the store: "elastic: rank
# 1 was dropped by rank 0 (on host h1, ranks there: 0): it declared this
# rank lost, and epoch 1 was formed without it; ..." (EL12's store read:
# without it, "rank 1 is stale").
# Part 5: part 2 where the dropped rank 0 (beside the store) enters the
# agreement before it is told: its all_reduce times out
# (TODIST_COLL_TIMEOUT=2) and its TODIST_ELASTIC_TIMEOUT=4 passes while
# rank 1, its dropper, cut off from the store, stays away. quorum.h Q13:
# rank 0 forms no epoch alone on silence (1 of 2 is no majority) and
# waits; once the link is back, rank 1 declares it dead and forms epoch 1
# (world 2 -> 1, sum 2), and rank 0 leaves, "dropped by rank 1". Before
# Q13, rank 0 formed epoch 1 alone and rank 1, alive and the one that
# dropped it, was refused as stale. The link comes back once rank 0 said
# it waits (its Q13 line); rank 0's wait, which fails 2 x 4 + 1 s after
# it joined, is held (TODIST_TEST_ELASTIC_HOLD) until rank 1 reported
# its recovery, however long a loaded machine makes that.
# Not a timing test: each step waits for the ranks' report of the one
# before (a cut lasts until a dropper reported, about 2 s), and no timeout
# that must not fire can within a part (each job ends within 90 s): the
# cut-off rank's TODIST_COLL_TIMEOUT is 300 s (not part 5's, which must
# fire); its TODIST_LIVENESS of 30 s drops a peer only after 30 s of its
# host's silence (part 5's rank 0: 300 s, it learns from the store); part
# 3's TODIST_ELASTIC_ADMIT_WAIT is 300 s (it ends once the replacement
# asked); part 5's wait is held; and the kernels give up no connection of
# the job (hosts_up gives every host's kernel 120 keepalive probes: with
# the 9 of the default, the TCP keepalive that a rank turns on for its
# connections to a quiet peer's host, idle 1 s, then every second,
# liveness.h V6, and UCX's on its own, gave one up about 10 s into a cut,
# e.g. rank 1's store connection in parts 4 and 5).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
B="$top_builddir/tests"

if ! hosts_supported; then
    skip_all "$HOSTS_WHY"
fi
plan 35

# up: a bed of 2 hosts (whose kernels give up an idle connection only
# after 120 unanswered keepalive probes, 2 min, past any part's 90 s:
# hosts_up, see above)
up() {
    hosts_up 2 || { diag "hosts_up failed"; exit 1; }
}

# wait_for FILES PATTERN N: until N lines of FILES match PATTERN (60 s at
# most; 0 when they did)
wait_for() {
    _t=0
    while [ "$(cat $1 2>/dev/null | grep -c -E "$2")" -lt "$3" ]; do
        [ $_t -lt 600 ] || return 1
        sleep 0.1; _t=$((_t + 1))
    done
    return 0
}

# report OUT PATTERN: OUT's lines PATTERN picks when no check failed since
# f was set, else all of OUT
report() {
    if [ "$_tap_failed" = "$f" ]; then
        diag "$(printf '%s\n' "$1" | grep -E "$2")"
    else
        diag "$1"
    fi
}

# launch OP R ENV REPLACE LIVE0 [ENV0]: 1+1 under one todist-run
# --no-kill per host (host 1's launcher serves the store), hosts_peer OP,
# ready at R, rank 1 the slow one (it recovers once R.go is there); rank 0
# on host 1 (TODIST_LIVENESS=LIVE0, its launcher given REPLACE, ENV0 more
# VAR=VALUE for it), rank 1 on host 2 (TODIST_LIVENESS=2). ENV: more
# VAR=VALUE for both; l0, l1: the launchers. Returns once R is there
# (every rank warm).
launch() {
    _op=$1; _rdy=$2; _env=$3; _rep=$4; _live0=$5; _env0=${6:-}
    _tok=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    for k in 0 1; do
        if [ $k = 0 ]; then live=$_live0; rep=$_rep; e0=$_env0
        else live=2; rep=""; e0=""; fi
        hosts_run $((k + 1)) env TODIST_JOB_TOKEN=$_tok TODIST_LOG=info \
            TODIST_LIVENESS=$live $_env $e0 timeout -k 5 90 todist-run -n 1 \
            --nnodes 2 --node-rank $k --master-addr "$(hosts_addr 1)" \
            --master-port $HOSTS_PORT --no-kill $rep \
            "$B/hosts/hosts_peer" $_op 1 "$_rdy" > "$HOSTS_DIR/node$k.out" 2>&1 &
        eval "l$k=\$!"
    done
    _t=0
    while [ ! -e "$_rdy" ] && [ $_t -lt 600 ]; do sleep 0.1; _t=$((_t + 1)); done
}

# pair OP R ENV REPLACE: launch with rank 0's TODIST_LIVENESS 30 and
# TODIST_COLL_TIMEOUT 300 (it is told, its all_reduce does not time out);
# host 1 (rank 0) is cut off until rank 1 dropped it, then restored; rank
# 1 recovers once rank 0 did (R.go).
pair() {
    launch "$1" "$2" "$3" "$4" 30 TODIST_COLL_TIMEOUT=300
    _rdy=$2
    hosts_cut 1
    : > "$_rdy.cut"
    # the dropper's all_reduce failed; it recovers after rank 0 did (R.go)
    wait_for "$HOSTS_DIR/node1.out" "^op=elheal step=1 rank=1 .* rc=-" 1
    hosts_restore 1
    wait_for "$HOSTS_DIR/node0.out" "^op=elheal recover " 1
    : > "$_rdy.go"
}

# check PART DROPPED "DROPPERS" WORLD SUM HOST OUT RC: RC is the job's
# status (the dropped rank's 3)
check() {
    ck_p=$1; ck_x=$2; ck_ds=$3; ck_w=$4; ck_sum=$5; ck_h=$6; ck_out=$7; ck_rc=$8
    ck_nd=$(echo $ck_ds | wc -w)
    unlike "$ck_out" "Assertion|ucs_assert|backtrace|Abort|FAIL " \
           "part $ck_p: no abort"
    is "$ck_rc" 3 "part $ck_p: the job ends, no hang (the dropped rank exits 3)"
    ck_n=0
    for ck_d in $ck_ds; do
        if printf '%s\n' "$ck_out" | grep -E "^op=elheal recover rank=$ck_d rc=0 epoch=1 world=$ck_w->$ck_nd lost=$ck_x " > /dev/null &&
           printf '%s\n' "$ck_out" | grep -E "^op=elheal step=2 rank=$ck_d epoch=1 world=$ck_nd rc=0 sum=$ck_sum " > /dev/null; then
            ck_n=$((ck_n + 1))
        fi
    done
    is "$ck_n" "$ck_nd" "part $ck_p: rank(s) $ck_ds recover to epoch 1 without rank $ck_x (world $ck_w -> $ck_nd) and all_reduce there ($ck_sum)"
    like "$ck_out" "op=elheal recover rank=$ck_x rc=-[0-9]+ .*err=elastic: rank $ck_x was dropped by rank [$(echo $ck_ds | tr -d ' ')] \\(on host h$ck_h, ranks there: $(echo $ck_ds)\\).*this rank leaves the job" \
         "part $ck_p: rank $ck_x's recovery fails: it was dropped, and by whom"
    unlike "$(printf '%s\n' "$ck_out" | grep "^op=elheal .*rank=$ck_x ")" \
           "recover rank=$ck_x rc=0 |step=[0-9] rank=$ck_x epoch=[1-9]" \
           "part $ck_p: rank $ck_x is in no epoch after 0"
    unlike "$(printf '%s\n' "$ck_out" | grep "^op=elheal recover rank=$ck_x ")" \
           "rank 0 was lost|is stale|no plan" \
           "part $ck_p: rank $ck_x is not told rank 0 was lost, nor stale"
    like "$ck_out" "rank $ck_x\\]: error: runtime: rank [$(echo $ck_ds | tr -d ' ')] \\(on host h$ck_h, ranks there: $(echo $ck_ds)\\) dropped this rank" \
         "part $ck_p: rank $ck_x's log says it was dropped"
}

# --- 1: 2+1, rank 0 serves the store; host 2 (rank 2) dropped ---
up
R="$TD_TMP/el1"
(TODIST_LOG=info HOSTS_TIMEOUT=90 hosts_launch 2,1 sh -c \
    'if [ "$TODIST_RANK" = 2 ]; then TODIST_LIVENESS=30
     TODIST_COLL_TIMEOUT=300; export TODIST_COLL_TIMEOUT; else
     TODIST_LIVENESS=2; fi; export TODIST_LIVENESS; exec "$@"' x \
    "$B/hosts/hosts_peer" elheal -1 "$R") > "$TD_TMP/el1.out" 2>&1 &
l=$!
_t=0
while [ ! -e "$R" ] && [ $_t -lt 600 ]; do sleep 0.1; _t=$((_t + 1)); done
hosts_cut 2
: > "$R.cut"
# the droppers recovered and stepped in epoch 1 (the store is theirs)
wait_for "$HOSTS_DIR/rank0.out $HOSTS_DIR/rank1.out" "^op=elheal step=2 " 2
hosts_restore 2
wait_for "$HOSTS_DIR/rank2.out" "^op=elheal recover " 1
# ... and rank 2 was told (transport.c L12) before the droppers may leave:
# its recovery can come first, from rank 1's EL5 abort (sent before rank
# 1 dropped it, held in TCP across the cut) and the store's declaration
# (EL12), while its own messages to the droppers, which a 'D' answers,
# are still in TCP's retransmission back-off; droppers that left then
# closed their endpoints, and rank 2 logged "lost rank 0" (CI, ASan, 1 run
# of 4; staged by holding the droppers' answers). Every rank 2 message
# sent after the cut reaches a dropper after the heal and is answered: its
# all_reduce's, its recovery's abort (EL5), its liveness pings.
wait_for "$HOSTS_DIR/rank2.out" \
    "rank 2\\]: error: runtime: rank [01] .* dropped this rank" 1
: > "$R.done"
wait $l
rc=$?
out=$(cat "$TD_TMP/el1.out")
f=$_tap_failed
check 1 2 "0 1" 3 3 1 "$out" "$rc"
report "$out" '^op=elheal|elastic: epoch'

# --- 2: 1+1 under todist-run --no-kill (host 1's launcher serves the
# store); host 1 (rank 0) dropped ---
up
R="$TD_TMP/el2"
pair elheal "$R" "" ""
wait_for "$HOSTS_DIR/node1.out" "^op=elheal (step=2|recover rank=1 rc=-)" 1
: > "$R.done"
wait $l0
rc0=$?
wait $l1
rc1=$?
out=$(cat "$HOSTS_DIR/node0.out" "$HOSTS_DIR/node1.out")
f=$_tap_failed
check 2 0 1 2 2 2 "$out" "$rc0"
is "$rc1" 0 "part 2: the dropper's launcher exits 0"
report "$out" '^op=elheal|elastic: epoch'
# --- 3: part 2 with a replacement for the dropped rank ---
up
R="$TD_TMP/el3"
pair elgrow "$R" TODIST_ELASTIC_ADMIT_WAIT=300 "--replace 1"
wait_for "$HOSTS_DIR/node0.out $HOSTS_DIR/node1.out" \
    "^op=elheal (step=3 |(recover|grew|joined) rank=[01] rc=-)" 2
: > "$R.done"
wait $l0
rc0=$?
wait $l1
rc1=$?
out=$(cat "$HOSTS_DIR/node0.out" "$HOSTS_DIR/node1.out")
f=$_tap_failed
unlike "$out" "Assertion|ucs_assert|backtrace|Abort|FAIL " "part 3: no abort"
like "$out" "op=elheal recover rank=0 rc=-[0-9]+ .*err=elastic: rank 0 was dropped by rank 1 \(on host h2, ranks there: 1\)" \
     "part 3: the dropped rank 0 leaves, told it was dropped by rank 1"
like "$out" "op=elheal grew rank=1 rc=0 epoch=2 world=1->2 " \
     "part 3: rank 1 admits rank 0's replacement: epoch 2, world 1 -> 2"
like "$out" "op=elheal joined rank=0 rc=0 epoch=2 world=1->2 " \
     "part 3: the replacement joins epoch 2"
is "$(printf '%s\n' "$out" | grep -c -E '^op=elheal step=3 rank=[01] epoch=2 world=2 rc=0 sum=3 ')" 2 \
   "part 3: both all_reduce in epoch 2 (sum 3)"
is "$rc0 $rc1" "0 0" "part 3: both launchers exit 0 (the dropped rank was replaced)"
report "$out" '^op=elheal|elastic: epoch|todist-run'
# --- 4: each host drops the other (TODIST_LIVENESS=2 on both); host 2
# (rank 1) cut off: rank 0, beside the store, declares rank 1 dead and
# forms epoch 1 alone; rank 1 recovers only once the link is back (R.go):
# never told (it failed rank 0 itself, so a 'D' is ignored, transport.c
# L12), it is refused as stale, and EL12's store read names the declarer ---
up
R="$TD_TMP/el4"
launch elheal "$R" "" "" 2
hosts_cut 2
: > "$R.cut"
wait_for "$HOSTS_DIR/node0.out" "^op=elheal step=2 rank=0 " 1
wait_for "$HOSTS_DIR/node1.out" "^op=elheal step=1 rank=1 .* rc=-" 1
hosts_restore 2
: > "$R.go"
wait_for "$HOSTS_DIR/node1.out" "^op=elheal recover rank=1 " 1
: > "$R.done"
wait $l0
rc0=$?
wait $l1
rc1=$?
out=$(cat "$HOSTS_DIR/node0.out" "$HOSTS_DIR/node1.out")
f=$_tap_failed
unlike "$out" "Assertion|ucs_assert|backtrace|Abort|FAIL " "part 4: no abort"
is "$rc0 $rc1" "0 3" "part 4: the job ends, no hang (rank 0's launcher exits 0, the dropped rank 3)"
like "$out" "op=elheal recover rank=0 rc=0 epoch=1 world=2->1 lost=1 " \
     "part 4: rank 0 recovers to epoch 1 without rank 1 (world 2 -> 1)"
like "$out" "op=elheal step=2 rank=0 epoch=1 world=1 rc=0 sum=1 " \
     "part 4: rank 0 all_reduces alone in epoch 1 (sum 1)"
unlike "$(grep -h 'rank 1\]' "$HOSTS_DIR/node1.out")" "dropped this rank" \
       "part 4: rank 1 was never told (it had dropped rank 0 first)"
like "$out" "op=elheal recover rank=1 rc=-[0-9]+ epoch=0 world=0->0 lost=-1 err=elastic: rank 1 was dropped by rank 0 \(on host h1, ranks there: 0\): it declared this rank lost, and epoch 1 was formed without it; this rank leaves the job \(the others go on without it\)\$" \
     "part 4: rank 1, stale, names its declarer from the store (EL12)"
unlike "$(printf '%s\n' "$out" | grep '^op=elheal .*rank=1 ')" \
       "recover rank=1 rc=0 |step=[0-9] rank=1 epoch=[1-9]" \
       "part 4: rank 1 is in no epoch after 0"
report "$out" '^op=elheal|elastic: epoch|todist-run|rank 1\]'
# --- 5: part 2 where the dropped rank 0, beside the store, enters the
# agreement before it is told (its all_reduce times out: TODIST_COLL_TIMEOUT
# =2) and its agreement timeout (TODIST_ELASTIC_TIMEOUT=4) passes while its
# dropper, cut off from the store, stays away (R.go): quorum.h Q13; rank
# 0's wait does not fail before R.hold (TODIST_TEST_ELASTIC_HOLD) ---
up
R="$TD_TMP/el5"
launch elheal "$R" "" "" 300 \
    "TODIST_COLL_TIMEOUT=2 TODIST_ELASTIC_TIMEOUT=4 TODIST_TEST_ELASTIC_HOLD=0:$R.hold"
hosts_cut 1
: > "$R.cut"
wait_for "$HOSTS_DIR/node1.out" "^op=elheal step=1 rank=1 .* rc=-" 1
# rank 0 passed its timeout: it formed epoch 1 alone (before Q13), or
# says it forms none on silence
wait_for "$HOSTS_DIR/node0.out" "^op=elheal recover rank=0 |forms no epoch 1 on silence" 1
hosts_restore 1
: > "$R.go"
# rank 1 formed epoch 1 (or failed); rank 0 may now give up
wait_for "$HOSTS_DIR/node1.out" "^op=elheal recover rank=1 " 1
: > "$R.hold"
wait_for "$HOSTS_DIR/node0.out $HOSTS_DIR/node1.out" "^op=elheal recover " 2
: > "$R.done"
wait $l0
rc0=$?
wait $l1
rc1=$?
out=$(cat "$HOSTS_DIR/node0.out" "$HOSTS_DIR/node1.out")
f=$_tap_failed
unlike "$out" "Assertion|ucs_assert|backtrace|Abort|FAIL " "part 5: no abort"
like "$out" "rank 0\]: elastic: rank 0 forms no epoch 1 on silence: rank\(s\) 1 neither joined nor were declared dead within 4 s, and 1 of the 2 members not declared dead is no majority \(Q13\)" \
     "part 5: rank 0, in the agreement before it was told, forms no epoch alone on silence (Q13)"
is "$rc0 $rc1" "3 0" "part 5: the job ends, no hang (the dropped rank exits 3, rank 1's launcher 0)"
like "$out" "op=elheal recover rank=1 rc=0 epoch=1 world=2->1 lost=0 " \
     "part 5: the dropper, back at the store, forms epoch 1 without rank 0 (world 2 -> 1)"
like "$out" "op=elheal step=2 rank=1 epoch=1 world=1 rc=0 sum=2 " \
     "part 5: rank 1 all_reduces in epoch 1 (sum 2)"
like "$out" "op=elheal recover rank=0 rc=-[0-9]+ .*err=elastic: rank 0 was dropped by rank 1 \(on host h2, ranks there: 1\): .*this rank leaves the job" \
     "part 5: rank 0's recovery fails: it was dropped, and by whom"
unlike "$(printf '%s\n' "$out" | grep '^op=elheal .*rank=0 ')" \
       "recover rank=0 rc=0 |step=[0-9] rank=0 epoch=[1-9]" \
       "part 5: rank 0 is in no epoch after 0"
report "$out" '^op=elheal|elastic: |todist-run'
done_testing
