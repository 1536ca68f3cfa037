#!/bin/sh
# Fault injection (TODIST_FAULT, test-only; issue 18): messages dropped,
# corrupted and delayed by kind at a seeded rate. RPC, remote objects,
# collectives and point-to-point, distributed backward and the distributed
# optimizer's step each end in exactly the reference value or an error with
# a message, within their timeout: never a wrong value reported as success,
# never a hang, never a crash; both outcomes occur. td_finalize ends within
# its timeout on every rank. A malformed TODIST_FAULT, or one naming an
# unknown kind, is refused. Bounded by timeout; lib.sh cleans up.
. "$top_srcdir/tests/lib.sh"
plan 41
B=$top_builddir/tests
run() { timeout -k 5 "$@"; }

# no hang (timeout's 124/137) and no crash (signals, UCX assertions)
ended() { # rc output what
    case $1 in 124|137|134|139) ok 1 "$3: ended (rc $1)";; *) ok 0 "$3: ended (rc $1)";; esac
    unlike "$2" 'Assertion|Segmentation|killed by signal (6|11)|Aborted' "$3: no crash"
}

out=$(TODIST_FAULT=drop:call run 30 "$B/transport/transport_peer" barrier 2>&1)
like "$out" "TODIST_FAULT='drop:call' is not a list" \
     "a malformed TODIST_FAULT makes td_init fail, naming it"
out=$(TODIST_FAULT=drop:colll:0.1 run 30 "$B/transport/transport_peer" barrier 2>&1)
like "$out" "TODIST_FAULT='drop:colll:0.1' is not a list.*KIND any\|call" \
     "an unknown message kind is refused (a rule that could never fire)"
out=$(TODIST_FAULT=break:coll:1 run 30 "$B/transport/transport_peer" barrier 2>&1)
like "$out" "TODIST_FAULT='break:coll:1' is not a list.*break:KIND:RATE:RANK" \
     "a break rule without its rank is refused"

F="drop:call:0.03,drop:reply:0.03,corrupt:any:0.03,delay:any:0.02:20,seed=7"
out=$(TODIST_RPC_TIMEOUT=5 TODIST_FINALIZE_TIMEOUT=60 TODIST_FAULT=$F \
      run 240 todist-run -n 3 "$B/rpc/rpc_peer" faults 2>&1); rc=$?
is "$rc" 0 "rpc under faults: every rank exits 0"
expect "$out" fault_rpc_no_wrong_result fault_rpc_bounded \
    fault_rref_no_wrong_result fault_rref_bounded
like "$out" 'faults: [0-9]+ calls ok, [1-9][0-9]* failed with an error' \
     "faults were injected (some calls failed, with messages)"
is "$(printf '%s\n' "$out" | grep -c 'td_finalize ended in')" 3 \
   "td_finalize ended on all 3 ranks under faults"
is "$(printf '%s\n' "$out" | sed -n 's/.*td_finalize ended in \([0-9.]*\) s.*/\1/p' |
      awk '$1 > 60 + 10' | wc -l)" 0 \
   "td_finalize ended within its timeout (60 s) on every rank"
[ "$rc" = 0 ] || diag "$out"

# One fault_peer scenario (MODE, ITERS, TODIST_FAULT=F, extra env...):
# every call printed OK (exact reference), ERROR (with a message) or WRONG;
# no WRONG, both OK and ERROR seen, every rank's td_finalize ended in time.
scenario() { # what mode iters fault env...
    _what=$1 _mode=$2 _n=$3 _f=$4; shift 4
    _out=$(env TODIST_FINALIZE_TIMEOUT=30 TODIST_FAULT=$_f "$@" \
           timeout -k 5 240 todist-run -n 3 "$B/transport/fault_peer" "$_mode" "$_n" 2>&1)
    _rc=$?
    ended "$_rc" "$_out" "$_what under faults"
    unlike "$_out" '^(WRONG|SETUP FAILED)' \
        "$_what: no wrong result reported as success, no silent error, none past its bound"
    like "$_out" '^OK ' "$_what: some calls end with exactly the reference value"
    like "$_out" '^ERROR [^:]+: .' "$_what: some calls end in an error with a message"
    is "$(printf '%s\n' "$_out" | grep 'td_finalize ended in' |
          grep -vc 'PAST ITS TIMEOUT')" 3 \
       "$_what: td_finalize ended within its timeout on all 3 ranks"
    case $_rc in 0) ;; *) diag "$(printf '%s\n' "$_out" | tail -40)";; esac
    printf '%s\n' "$_out" | grep -E '^(WRONG|SETUP)' | head -5 | sed 's/^/# /'
}

# collectives and point-to-point: coll messages (data, acks, single-copy
# offers, aborts, the shared segment's handshake) and mailbox messages
# dropped, corrupted and delayed; a fresh group per round. Then again with
# the shared segment and the point-to-point mailboxes off
# (TODIST_COLL_SHM=0, TODIST_COLL_P2P_SHM=0), so that every byte goes
# through messages.
F="drop:coll:0.01,corrupt:coll:0.005,delay:coll:0.01:5"
scenario collectives coll 8 "$F,drop:mbox:0.02,corrupt:mbox:0.02,seed=2" \
    TODIST_COLL_TIMEOUT=2
scenario "collectives (transport only)" coll 8 \
    "drop:coll:0.01,corrupt:coll:0.005,delay:coll:0.01:5,seed=2" \
    TODIST_COLL_TIMEOUT=2 TODIST_COLL_SHM=0 TODIST_COLL_P2P_SHM=0

# point-to-point through the mailboxes (runtime/coll/mbox.c): corrupted
# mailbox messages are rejected by the receiver (TD_ERR_PROTOCOL on the
# sender, naming it malformed), intact ones arrive whole and in order,
# none is lost; the receiver logs each one it rejected.
out=$(TODIST_FAULT=corrupt:mbox:0.2,seed=4 TODIST_COLL_TIMEOUT=1 \
      run 60 todist-run -n 2 "$B/coll/coll_peer" mbox_fault 2>&1); rc=$?
ended "$rc" "$out" "mailbox messages under faults"
expect "$out" mbox_fault_sender_told mbox_fault_received_whole \
    mbox_fault_none_lost
like "$out" "rejected a malformed mailbox message from rank 0" \
     "mailbox faults: the receiver names the sender of a malformed message"
printf '%s\n' "$out" | grep '^# rank [01]: [0-9]* sent' || true
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -30)"

# distributed backward: propagate and release calls dropped and corrupted,
# replies lost, everything delayed now and then
scenario "distributed backward" backward 14 \
    "drop:fn=_td.dist:0.06,corrupt:fn=_td.dist:0.03,drop:reply:0.02,delay:any:0.02:5,seed=3" \
    TODIST_RPC_TIMEOUT=2 TODIST_DIST_BACKWARD_TIMEOUT=2

# the distributed optimizer: step calls (and the backward before them)
# dropped, replies lost (a step applied on an owner but reported failed),
# calls corrupted; parameters read back after every step
scenario "distributed optimizer" optim 14 \
    "drop:fn=todist.dist_optim:0.1,drop:fn=_td.dist:0.04,drop:reply:0.03,corrupt:call:0.02,seed=5" \
    TODIST_RPC_TIMEOUT=2 TODIST_DIST_BACKWARD_TIMEOUT=2
done_testing
