#!/bin/sh
# Collectives and point-to-point, multi-process through todist-run
# (tests/coll/coll_peer.c): every collective x op x dtype x count x group size
# {1,2,3,4,5,8} against naive references, then again with each algorithm
# forced in turn (sizes {2,3,5,8});
# point-to-point edge cases (tags out of order, TD_ANY_SOURCE, 200 in
# flight, 0 B and 256 MiB, size and dtype mismatch on both sides, bad
# input); subgroups concurrently with the world group, RPC and queued async
# work; the shared-segment algorithms on and off, and their fallback;
# point-to-point through the mailboxes (order, mismatch, sleepers,
# drops, a dead receiver) and with them off; every kind of mismatched
# collective; a rank that never arrives
# (timeout naming exactly it, 3 and 4 ranks, segment on and off); a member SIGKILLed mid all_reduce;
# a rank UCX cannot reach, and sends to a live rank failing. Each check must
# PASS on every rank that makes it; any FAIL line fails. Runs are bounded by
# timeout; lib.sh cleans up.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/coll/coll_peer"
run() { timeout -k 5 "$@"; }

matrix="matrix_all_reduce matrix_broadcast matrix_reduce matrix_all_gather
matrix_gather matrix_scatter matrix_reduce_scatter matrix_all_to_all
matrix_barrier matrix_all_gather_list"
p2p0="p2p_tags_out_of_order p2p_any_source p2p_irecv_any_source bad_null_tensor bad_rank
bad_src_rank bad_tag bad_noncontiguous bad_root bad_op_on_float bad_device
bad_not_member"
p2p01="p2p_many_in_flight p2p_zero_bytes p2p_256MiB_send p2p_size_mismatch
p2p_dtype_mismatch p2p_after_mismatch"
conc="concurrent_subgroup concurrent_world concurrent_rpc
concurrent_async_queue async_every_collective"
mism="mismatch_collective mismatch_size mismatch_dtype mismatch_op
mismatch_root mismatch_world_still_works"
kill="kill_fails_naming_it kill_by_detection kill_later_ops_fail"
early="early_kill_fails_naming_it early_kill_by_detection"
unreach="unreachable_coll_names_it unreachable_coll_by_detection
unreachable_coll_again unreachable_rpc"
sendbroken="send_broken_reported send_broken_by_detection send_broken_again"
dropped="dropped_queued_fails_naming_it dropped_queued_by_detection
dropped_arrival_fails_naming_it dropped_arrival_by_detection
dropped_coll_fails_naming_it dropped_coll_by_detection"
latepid="late_pid_address_looked_up late_pid_told late_pid_victim_gone
late_pid_fails_naming_it late_pid_by_detection"
mbox2="mbox_warm_up mbox_order_across_paths mbox_size_mismatch
mbox_unexpected_first mbox_sleeping_receiver mbox_sleeping_sender mbox_body_max
mbox_body_max_plus_one mbox_group_new"
count() { set -- $1; echo $#; }
plan $(( $(count "$matrix") + $(count "$p2p0") + $(count "$p2p01") + \
         $(count "$conc") + $(count "$mism") + $(count "$kill") + 68 + 2 * 4 + 4 + \
         3 * $(count "$early") + 3 + 2 + 2 * $(count "$latepid") + 2 + \
         $(count "$mbox2") + 2 + 5 + 3 + 2 + 2 + 1 + 6 + \
         1 + 3 * ($(count "$dropped") + 1) + 2 * 4 + \
         1 + $(count "$matrix") + 3 + 2 * 6 + 2 * 7 + 2 * 5 + 3 + 4 + 3 * 4 + \
         2 * 4 + 3 + 3 + 4 + 2 * 2 + 3 + 4 * 3 + \
         $(count "$unreach") + 1 + $(count "$sendbroken") + 1 + 3 + 4 * 3 ))

# expect OUTPUT N names...: "PASS name" printed exactly N times.
expect() {
    _out=$1; _n=$2; shift 2
    _bad=0
    for _c in "$@"; do
        _got=$(printf '%s\n' "$_out" | grep -cx "PASS $_c")
        if [ "$_got" = "$_n" ]; then
            ok 0 "$_c"
        else
            # the result line names the first rank's failure, or what
            # stopped a rank before it printed one (lib.sh td_out_why)
            _f=$(printf '%s\n' "$_out" | grep -F "FAIL $_c")
            ok 1 "$_c" "$_got of $_n PASS lines; ${_f:-$(td_out_why "$_out")}"
            diag "PASS lines: $_got, want $_n"
            [ -z "$_f" ] || printf '%s\n' "$_f" | sed 's/^/# /'
            _bad=1
        fi
    done
    [ "$_bad" = 0 ] || td_diag_logs "$_out"    # what the ranks logged
}
nofail() { # output desc
    _f=$(printf '%s\n' "$1" | grep '^FAIL')
    if [ -z "$_f" ]; then ok 0 "$2"; else ok 1 "$2" "$_f"; diag "$_f"; fi
}

out=$(run 300 todist-run -n 8 "$PEER" matrix 2>&1); rc=$?
expect "$out" 1 $matrix
is "$rc" 0 "matrix: every rank exits 0"
printf '%s\n' "$out" | grep '^# ' || true
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -40)"

out=$(run 120 todist-run -n 3 "$PEER" p2p 2>&1); rc=$?
expect "$out" 1 $p2p0
expect "$out" 2 $p2p01
nofail "$out" "p2p: no failed check"
is "$rc" 0 "p2p: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"

# A receiver waiting for an isend whose sender stopped right after it
# had left (SIGSTOP after td__transport_flush: td_isend only queues while
# the progress thread holds the token): 32 KiB (eager through UCX), 64 KiB
# and 256 KiB (offered in place: the waiter reads it, cma.h C12) complete
# while it is stopped.
for c in 8192 16384 65536; do
    out=$(run 90 todist-run -n 2 "$PEER" p2p_stopped_sender $c 2>&1); rc=$?
    like "$out" "PASS p2p_stopped_sender_is_stopped" "stopped sender, $((c * 4)) B: the sender stopped"
    like "$out" "PASS p2p_stopped_sender_recv" "stopped sender, $((c * 4)) B: received while it was stopped"
    nofail "$out" "stopped sender, $((c * 4)) B: no failed check"
    is "$rc" 0 "stopped sender, $((c * 4)) B: every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"
done

# Offers to irecvs nobody waits for yet are read at once by the
# receiver's token holder (cma.h C17), not declined: intact, every send
# complete before the receiver waits on them.
out=$(run 90 todist-run -n 2 "$PEER" p2p_held_offer 2>&1); rc=$?
expect "$out" 1 held_offer_recv held_offer_read_by_holder
expect "$out" 1 held_offer_sends
is "$rc" 0 "held offer: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"

# The offer arrives after the receiver's first td_work_wait timed out:
# with a second wait already there it is read in place (C12); with
# nobody waiting it is declined and its body sent (C10). Either way the
# receive completes.
for gap in 0 300; do
    out=$(run 90 todist-run -n 2 "$PEER" p2p_late_offer 65536 $gap 2>&1); rc=$?
    like "$out" "PASS p2p_late_offer_first_wait" "late offer, gap $gap ms: the first wait timed out"
    like "$out" "PASS p2p_late_offer_recv" "late offer, gap $gap ms: received after it"
    nofail "$out" "late offer, gap $gap ms: no failed check"
    is "$rc" 0 "late offer, gap $gap ms: every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"
done

# An eager message of this host in one shared-memory segment (transport
# X11: UCX_MM_SEG_SIZE 60k): 40 messages of 32 KiB and of 56 KiB, each one
# UCX event at the receiver (UCX's own 8 KiB segments: 4 and 7 each).
for c in 8192 14336; do
    out=$(run 90 todist-run -n 2 "$PEER" p2p_segments $c 2>&1); rc=$?
    like "$out" "PASS p2p_segments_recv" "segments, $((c * 4)) B: received intact"
    like "$out" "PASS p2p_segments_one_each" "segments, $((c * 4)) B: one UCX event a message"
    nofail "$out" "segments, $((c * 4)) B: no failed check"
    is "$rc" 0 "segments, $((c * 4)) B: every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"
done

# Point-to-point through the mailboxes (mbox.c): after one exchange,
# small messages to a rank of this host go through its inbox; order across
# mailbox and transport, a mismatch, sleepers woken by a poke, a message
# dropped unreceived, and a receiver SIGKILLed with a send in its mailbox.
out=$(TODIST_LOG=debug run 120 todist-run -n 2 "$PEER" mbox 2>&1); rc=$?
expect "$out" 2 $mbox2
expect "$out" 1 mbox_dropped_fails_send mbox_dropped_then_recv
nofail "$out" "mbox: no failed check"
is "$rc" 0 "mbox: every rank exits 0"
like "$out" "point-to-point mailbox to rank 1 attached" \
     "mbox: rank 0 writes into rank 1's inbox"
# rank 0 pokes rank 1, asleep in td_recv; rank 1 pokes rank 0, asleep
# waiting for its send's ack (mbox.c M5)
for r in 0 1; do
    pokes=$(printf '%s\n' "$out" |
            sed -n "s/^todist\[rank $r\]: coll: \([0-9]*\) mailbox pokes sent.*/\1/p")
    ok "$([ "${pokes:-0}" -ge 1 ]; echo $?)" \
       "mbox: rank $r pokes a sleeping peer (${pokes:-0} pokes)"
done
# rank 0's blocking sends and rank 1's blocking receives used the mailbox
# themselves (mbox.c M9, M10). Not a matter of timing: a blocking send to
# an attached mailbox with no transport send unacked is written on the
# fast path (counted whether its ack comes within the spin or not), and
# mbox_unexpected_first's last receive finds its message already there
# (rank 0 says so through the store once td_isend has written it).
fast0=$(printf '%s\n' "$out" | sed -n "s/^todist\[rank 0\]: coll: \([0-9]*\) sends and [0-9]* receives done on the fast path.*/\1/p")
fast1=$(printf '%s\n' "$out" | sed -n "s/^todist\[rank 1\]: coll: [0-9]* sends and \([0-9]*\) receives done on the fast path.*/\1/p")
ok "$([ "${fast0:-0}" -ge 1 ]; echo $?)" \
   "mbox: rank 0 sends on the fast path (${fast0:-none})"
ok "$([ "${fast1:-0}" -ge 1 ]; echo $?)" \
   "mbox: rank 1 receives on the fast path (${fast1:-none})"
[ "$rc" = 0 ] || diag "$out"

out=$(TODIST_COLL_P2P_SHM=0 TODIST_LOG=debug run 120 todist-run -n 3 "$PEER" \
      p2p 2>&1); rc=$?
nofail "$out" "TODIST_COLL_P2P_SHM=0: p2p checks pass"
is "$rc" 0 "TODIST_COLL_P2P_SHM=0: every rank exits 0"
unlike "$out" "mailbox to rank" "TODIST_COLL_P2P_SHM=0: no mailbox attached"
nfast=$(printf '%s\n' "$out" | grep -c ": coll: 0 sends and 0 receives done on the fast path")
is "$nfast" 3 "TODIST_COLL_P2P_SHM=0: nothing on the fast path, on each rank"

# other_host MODE: the path of a wrapper that runs "$PEER MODE" with rank 1
# on another "host": in its own mount namespace, where
# /proc/sys/kernel/random/boot_id (how todist tells hosts apart) says
# something else. Fails (status 1) where unshare --mount is not allowed.
echo 00000000-0000-4000-8000-00000000beef > "$TD_TMP/boot_id"
other_host() {
    cat > "$TD_TMP/host_$1.sh" <<EOS
#!/bin/sh
if [ "\$TODIST_RANK" = 1 ]; then
    exec unshare --mount sh -c 'mount --bind "$TD_TMP/boot_id" /proc/sys/kernel/random/boot_id && exec "$PEER" $1'
fi
exec "$PEER" $1
EOS
    chmod +x "$TD_TMP/host_$1.sh"
    unshare --mount sh -c "mount --bind '$TD_TMP/boot_id' /proc/sys/kernel/random/boot_id" 2>/dev/null &&
        echo "$TD_TMP/host_$1.sh"
}

# Across "hosts" (other_host): the inboxes rank 0 and rank 1 offer each
# other are refused, while rank 2, on rank 0's "host", attaches rank 0's;
# every p2p check passes.
if host_p2p=$(other_host p2p); then
    out=$(TODIST_LOG=debug run 120 todist-run -n 3 "$host_p2p" 2>&1)
    rc=$?
    nofail "$out" "two hosts: p2p checks pass"
    is "$rc" 0 "two hosts: every rank exits 0"
    like "$out" "rank 0\]: coll: rank 1 offered its inbox \(another host: not used\)" \
         "two hosts: rank 0 refuses rank 1's inbox"
    like "$out" "rank 1\]: coll: rank 0 offered its inbox \(another host: not used\)" \
         "two hosts: rank 1 refuses rank 0's inbox"
    unlike "$out" "rank [01]\]: coll: point-to-point mailbox to rank [01] attached" \
           "two hosts: no mailbox between them"
    like "$out" "rank 2\]: coll: point-to-point mailbox to rank 0 attached" \
         "two hosts: rank 2 on rank 0's host attaches its mailbox"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | grep -v debug | tail -30)"
else
    skip 6 "unshare --mount not permitted here"
fi

# Small bodies from another host are taken by coll's receive handler
# (transport.c S1, match.h C13): across "hosts" every 8 B and 256 B
# all_reduce's message was, and the values are exact at 8 B, 256 B and
# 1,028 B (early messages above COLL_UX_SMALL go the transport's way); on
# one host nothing is taken. The same calls' sends: across "hosts" some take
# the lean path (transport.c S2), on one host none, and no 1,028 B one
# (LEAN_MAX). On one host without the segment (TODIST_COLL_SHM=0), so that
# the transport carries the messages. Both ways every 8 B and 256 B call of
# the two ranks runs as one step begun with its receive posted (step.h
# C16), no 1,028 B one.
if host_taken=$(other_host taken); then
    out=$(run 120 todist-run -n 2 "$host_taken" 2>&1); rc=$?
    expect "$out" 2 taken_exact lean_bounded taken_some lean_some pair_all \
        pair_bounded
    is "$rc" 0 "two hosts: taken: every rank exits 0"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"
else
    skip 7 "unshare --mount not permitted here"
fi
out=$(TODIST_COLL_SHM=0 run 120 todist-run -n 2 "$PEER" taken 100 none 2>&1)
rc=$?
expect "$out" 2 taken_exact lean_bounded taken_none lean_none pair_all \
    pair_bounded
is "$rc" 0 "one host: taken: every rank exits 0"
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"

# The progress thread's nap (transport.c N1), on one host without the
# segment so that each call's wait drives the transport: a loop of short
# all_reduces lengthens it to its longest (1,000 us), one long wait brings
# it back to 100 us.
out=$(TODIST_COLL_SHM=0 run 120 todist-run -n 2 "$PEER" nap 2>&1); rc=$?
expect "$out" 2 nap_grows nap_back
is "$rc" 0 "nap: every rank exits 0"
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"

# Whether UCX gives the worker an event fd (transport.c N2): only where a
# thread may sleep on it (blocking progress, scarce cores, one core), and
# the calls are exact either way. Busy progress with a rank alone has none
# where it has two cores; two ranks have none only with four.
cores=$(nproc)
for c in "blocking 2 1" "busy 1 $([ "$cores" -ge 2 ] && echo 0 || echo 1)" \
         "busy 2 $([ "$cores" -ge 4 ] && echo 0 || echo 1)"; do
    set -- $c
    out=$(TODIST_PROGRESS=$1 run 120 todist-run -n "$2" "$PEER" wakeup "$3" 2>&1)
    rc=$?
    expect "$out" "$2" wakeup_fd wakeup_calls
    is "$rc" 0 "wakeup: $1 progress, $2 rank(s): every rank exits 0"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"
done
if taskset -c 0 true 2>/dev/null; then
    out=$(TODIST_PROGRESS=busy run 120 taskset -c 0 todist-run -n 2 "$PEER" wakeup 1 2>&1)
    rc=$?
    expect "$out" 2 wakeup_fd wakeup_calls
    is "$rc" 0 "wakeup: busy progress on one core: every rank exits 0"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"
else
    skip 3 "taskset not available"
fi

# Auto's choice, told by the mismatch check (coll_peer auto_is: rank 0
# forces ALGO, the others leave it to auto): on one host the shared
# segment; across two "hosts" (other_host: rank 1 alone on the second)
# the hierarchical algorithms (runtime/coll/hier.c H1). Then those
# forced, flat and auto against the exact values, on the world and on it
# reordered (coll_peer hier).
out=$(run 120 todist-run -n 3 "$PEER" auto_is shm 2>&1)
is "$(printf '%s\n' "$out" | grep -cx 'PASS auto_is')" 3 \
   "one host: auto picks shm"
# A waiter in the segment whose peer last posted from its own core
# yields at once instead of spinning (runtime/coll/shm.c S10): 2 ranks,
# 2000 all_reduces of 8 B, both on core 0 (taskset), then each on a core
# of its own. Each rank logs at debug, when the world group goes, how
# many of its waits yielded at once: some on one core, none on two.
# yielded OUT: the ranks' counts summed ("" when no rank logged one)
yielded() {
    printf '%s\n' "$1" | sed -n 's/.*group 0: \([0-9]*\) waits in a shared segment yielded at once.*/\1/p' |
        awk '{ s += $1; n++ } END { if (n == 2) print s }'
}
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    out=$(TODIST_LOG=debug run 120 todist-run -n 2 taskset -c 0 "$PEER" small 2>&1); rc=$?
    is "$rc $(printf '%s\n' "$out" | grep -c '^PASS small')" "0 2" \
       "2 ranks on one core: 2000 all_reduces of 8 B, exact"
    y=$(yielded "$out")
    ok "$([ "${y:-0}" -gt 0 ]; echo $?)" \
       "2 ranks on one core: waits yielded at once (${y:-no count logged})"
    cat > "$TD_TMP/own_core.sh" <<EOS
#!/bin/sh
exec taskset -c "\$TODIST_RANK" "$PEER" "\$@"
EOS
    chmod +x "$TD_TMP/own_core.sh"
    out=$(TODIST_LOG=debug run 120 todist-run -n 2 "$TD_TMP/own_core.sh" small 2>&1); rc=$?
    is "$rc $(printf '%s\n' "$out" | grep -c '^PASS small')" "0 2" \
       "2 ranks on two cores: 2000 all_reduces of 8 B, exact"
    is "$(yielded "$out")" 0 "2 ranks on two cores: no wait yielded at once"
else
    skip 4 "taskset and 2 cores needed"
fi
if host_auto=$(other_host "auto_is hier") && host_hier=$(other_host hier); then
    out=$(run 120 todist-run -n 3 "$host_auto" 2>&1)
    is "$(printf '%s\n' "$out" | grep -cx 'PASS auto_is')" 3 \
       "two hosts: auto picks hier"
    printf '%s\n' "$out" | grep '^FAIL' | sed 's/^/# /'
    out=$(run 400 todist-run -n 3 "$host_hier" 2>&1); rc=$?
    expect "$out" 1 $matrix
    nofail "$out" "two hosts: hier matrix: no failed check"
    is "$rc" 0 "two hosts: hier matrix: every rank exits 0"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -30)"
else
    skip $(( $(count "$matrix") + 3 )) "unshare --mount not permitted here"
fi

out=$(run 60 todist-run -n 2 "$PEER" mbox_kill 2>&1)
expect "$out" 1 mbox_kill_send_fails_naming_it mbox_kill_by_detection
printf '%s\n' "$out" | grep '^# rank 0: the send' || true

out=$(run 120 todist-run -n 4 "$PEER" concurrent 2>&1); rc=$?
expect "$out" 4 $conc
is "$rc" 0 "concurrent: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"

out=$(run 120 todist-run -n 3 "$PEER" mismatch 2>&1); rc=$?
expect "$out" 3 $mism
is "$(printf '%s\n' "$out" | grep -cx 'PASS timeout_names_ranks')" 2 \
   "timeout: both waiting ranks fail naming exactly the late rank"
# rank 1 called with 8 floats, the others with 16: the two calls named
# must be those two, each with its rank (either may be named first)
x8='rank 1 called all_reduce\(float32 x 8, sum, (rd|shm)\)'
x16='rank [02] called all_reduce\(float32 x 16, sum, (rd|shm)\)'
like "$out" "rank 2 mismatch_size: coll: mismatched collectives in group [0-9]+ at call #1: ($x8, $x16|$x16, $x8)" \
     "a mismatch names both ranks and both calls, on an uninvolved rank too"
like "$out" 'mismatch_root: .*root 0.*root 1' "a root mismatch names both roots"
nofail "$out" "mismatch: no failed check"
is "$rc" 0 "mismatch: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"

# A rank that never calls: every other rank's timeout names exactly it,
# whichever waiting rank reports first (late.c asks who has begun the
# call), on a group's first call and a warmed one, with and without the
# shared segment (its handshake goes through rank 0).
for n in 3 4; do
    for shm in 1 0; do
        out=$(TODIST_COLL_SHM=$shm run 120 todist-run -n $n "$PEER" \
              late_names 2>&1); rc=$?
        by=$(seq -f 'late_first_by%g' 0 $((n - 2)))
        expect "$out" $((n - 1)) $by late_warm late_first_rank1
        nofail "$out" "late_names (-n $n, TODIST_COLL_SHM=$shm): no failed check"
        is "$rc" 0 "late_names (-n $n, TODIST_COLL_SHM=$shm): every rank exits 0"
        [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | grep -v debug | tail -20)"
    done
done

# Rank 2 SIGKILLs itself in its 21st 4 MiB all_reduce.
out=$(run 60 todist-run -n 3 --grace-period 20 "$PEER" kill 2>&1); rc=$?
expect "$out" 2 $kill
nofail "$out" "kill: no failed check"
is "$rc" 137 "kill: the killed rank's status is reported"
[ "$rc" = 137 ] || diag "$out"

# Rank 2 SIGKILLs itself right after td_init: nobody ever talked to it.
# Both others' first all_reduce fails naming it within 2 s (their timeout
# is 30 s), through the segment's handshake and without a segment alike.
for shm in 1 0; do
    out=$(TODIST_COLL_SHM=$shm run 60 todist-run -n 3 --grace-period 20 \
          "$PEER" early_kill 2>&1); rc=$?
    expect "$out" 2 $early
    is "$rc" 137 "early_kill (TODIST_COLL_SHM=$shm): the killed rank's status is reported"
    [ "$rc" = 137 ] || diag "$out"
done
# The same, every send to rank 2 failing as UCX fails one to an endpoint
# it found broken, with a plain transport error, before anything says
# rank 2 died (CI, twice): still TD_ERR_PEER naming it (transport.c L10).
# Shared memory only: its endpoint to the dead rank is made without
# error, so the broken send, not the connect, is what fails first.
out=$(UCX_TLS=sm,self TODIST_COLL_SHM=0 TODIST_FAULT=break:coll:1:2 \
      run 60 todist-run -n 3 \
      --grace-period 20 "$PEER" early_kill 2>&1); rc=$?
expect "$out" 2 $early
is "$rc" 137 "early_kill, sends to rank 2 broken: the killed rank's status is reported"
[ "$rc" = 137 ] || diag "$out"

# No UCX transport connects the ranks (UCX_TLS=self): each rank's first
# all_reduce fails within seconds naming the other as unreachable, and
# why, not after its 60 s timeout; the next call and an RPC fail at once
# (transport.c L16). A run that waited out the timeout is killed at 50 s.
out=$(UCX_TLS=self run 50 todist-run -n 2 "$PEER" unreachable 2>&1); rc=$?
expect "$out" 2 $unreach
is "$rc" 0 "unreachable: every rank exits 0"

# Every collective message fails with a plain transport error, both
# ranks alive (TODIST_FAULT break): each rank's all_reduce reports its
# failed send after the transport's grace, not its 60 s timeout (coll
# wait.h C19); the next call fails with it at once.
out=$(TODIST_COLL_SHM=0 TODIST_FAULT=break:coll:1:-1 run 50 todist-run -n 2 \
      "$PEER" send_broken 2>&1); rc=$?
expect "$out" 2 $sendbroken
is "$rc" 0 "send_broken: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"

# The same for an offer in place whose header fails after it left the
# send call (TODIST_FAULT break of every collective message to rank 2):
# rank 1's ring step to rank 2 is such an offer, and its call must end
# with the failure after the grace, not at rank 2's 20 s timeout (wait.h
# C19; it did, when the offer's header went without a completion).
out=$(TODIST_COLL_SHM=0 TODIST_FAULT=break:coll:1:2 run 60 todist-run -n 3 \
      "$PEER" offer_broken 2>&1); rc=$?
expect "$out" 2 offer_broken_reported
expect "$out" 1 offer_broken_by_detection
is "$rc" 0 "offer_broken: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"

# Rank 2 dies after both others looked its address up, and rank 0 then
# writes a live process's pid (the launcher's) as rank 2's, as a
# replacement for an admitted joiner that died does (issue 32): both
# others' first all_reduce still fails naming it within 2 s, the liveness
# check watching the process whose address they fetched (liveness.h V5).
for shm in 1 0; do
    # (a grace period above the survivors' own 30 s bounds: SIGKILLed at
    # 20 s, a survivor slowed by ASan on a loaded machine printed nothing)
    out=$(TODIST_COLL_SHM=$shm run 100 todist-run -n 3 --grace-period 45 \
          "$PEER" late_pid 2>&1); rc=$?
    expect "$out" 2 $latepid
    is "$rc" 137 "late_pid (TODIST_COLL_SHM=$shm): the killed rank's status is reported"
    [ "$rc" = 137 ] || diag "$out"
done

# TODIST_COLL_ALGO from the environment: everywhere the same, the job
# runs with it; on one rank only, the choice differs and the mismatch
# check names both algorithms instead of mixing data.
# reduce_scatter whose output overlaps its input (a tensor over the
# input's memory: its own block, then the next rank's), several segments
# a block: the ring takes its last block into a scratch then (gather.c),
# not into the output, which it still reads; all_gather whose input is
# the output's own block (the ring sends it from there, not from a copy
# made between arrivals: ring.c R3).
for algo in ring direct shm ""; do
    out=$(TODIST_COLL_ALGO=${algo:+reduce_scatter:$algo,all_gather:$algo} run 120 \
          todist-run -n 3 "$PEER" rs_alias 2>&1); rc=$?
    expect "$out" 3 rs_alias_own_block rs_alias_next_block
    expect "$out" 3 ag_alias_own_block
done

out=$(TODIST_COLL_ALGO=all_reduce:ring run 120 todist-run -n 4 "$PEER" \
      concurrent 2>&1); rc=$?
is "$rc" 0 "TODIST_COLL_ALGO=all_reduce:ring: concurrent runs pass"
cat > "$TD_TMP/one.sh" <<EOS
#!/bin/sh
[ "\$TODIST_RANK" = 1 ] && export TODIST_COLL_ALGO=all_reduce:ring
exec "$PEER" one
EOS
chmod +x "$TD_TMP/one.sh"
out=$(run 60 todist-run -n 2 "$TD_TMP/one.sh" 2>&1); rc=$?
# rank 1 forced ring, rank 0 chose its own (rd, or shm on one host): each
# rank named with its own algorithm
line=$(printf '%s\n' "$out" | grep '^# rank 0 one: TD_ERR_INVALID ')
like "$line" 'rank 1 called all_reduce\(float32 x 16, sum, ring\)' \
     "a TODIST_COLL_ALGO set on one rank only: rank 1's ring is named"
like "$line" 'rank 0 called all_reduce\(float32 x 16, sum, (rd|shm)\)' \
     "and rank 0's own algorithm beside it"
is "$rc" 0 "TODIST_COLL_ALGO on one rank: both ranks exit 0"
[ "$rc" = 0 ] || diag "$out"
# TODIST_COLL_SHM=0 on one rank only (docs/collectives.md: it must be the
# same on every rank): the ranks choose different algorithms (shm and rd),
# and the call fails on both as a mismatch naming both and the variable,
# instead of hanging or mixing data. Rank 1 differs, then rank 0 (the
# segment's offerer).
for odd in 1 0; do
    cat > "$TD_TMP/shm$odd.sh" <<EOS
#!/bin/sh
[ "\$TODIST_RANK" = $odd ] && export TODIST_COLL_SHM=0
exec "$PEER" one
EOS
    chmod +x "$TD_TMP/shm$odd.sh"
    out=$(TODIST_COLL_SHM=1 run 60 todist-run -n 2 "$TD_TMP/shm$odd.sh" 2>&1); rc=$?
    for r in 0 1; do
        line=$(printf '%s\n' "$out" | grep "^# rank $r one: ")
        like "$line" "^# rank $r one: TD_ERR_INVALID coll: mismatched collectives in group 0 at call #0: rank [01] called all_reduce\(float32 x 16, sum, (rd|shm)\), rank [01] called all_reduce\(float32 x 16, sum, (rd|shm)\) \(only the algorithm differs: TODIST_COLL_ALGO or TODIST_COLL_SHM" \
             "TODIST_COLL_SHM=0 on rank $odd only: rank $r fails naming both calls and the variable"
        like "$line" "rank $odd called all_reduce\(float32 x 16, sum, rd\)" \
             "TODIST_COLL_SHM=0 on rank $odd only: rank $r names rank $odd's rd"
    done
    is "$rc" 0 "TODIST_COLL_SHM=0 on rank $odd only: both ranks exit 0"
    [ "$rc" = 0 ] || diag "$out"
done
# A broadcast whose non-root (rank 0) forces the binomial tree while the
# root picks the shared segment: each waits for a message the other never
# sends (the root for rank 0's segment offer, rank 0 for the root's
# data), so no step carries a description to compare. The probe of a long
# wait (late.h K4) finds the mismatch long before the collective timeout
# (120 s here; the run is killed at 60 s).
cat > "$TD_TMP/bcast0.sh" <<EOS
#!/bin/sh
[ "\$TODIST_RANK" = 0 ] && export TODIST_COLL_ALGO=broadcast:binomial
exec "$PEER" kind broadcast
EOS
chmod +x "$TD_TMP/bcast0.sh"
out=$(TODIST_COLL_SHM=1 TODIST_COLL_TIMEOUT=120 run 60 todist-run -n 2 \
      "$TD_TMP/bcast0.sh" 2>&1); rc=$?
for r in 0 1; do
    like "$(printf '%s\n' "$out" | grep "^# rank $r broadcast: ")" \
         "^# rank $r broadcast: TD_ERR_INVALID coll: mismatched collectives in group 0 at call #1: rank [01] called broadcast\(float32 x 16, root 1, (shm|binomial)\), rank [01] called broadcast\(float32 x 16, root 1, (shm|binomial)\) \(only the algorithm differs" \
         "forced binomial on a non-root against the root's segment: rank $r fails as a mismatch naming both algorithms"
done
is "$rc" 0 "forced binomial on a non-root: both ranks exit 0, before the timeout"
[ "$rc" = 0 ] || diag "$out"
out=$(TODIST_COLL_ALGO=all_reduce:nosuch run 60 todist-run -n 1 "$PEER" \
      concurrent 2>&1); rc=$?
like "$out" "TODIST_COLL_ALGO: all_reduce has no algorithm 'nosuch'|unknown algorithm 'nosuch'" \
     "a bad TODIST_COLL_ALGO is named at td_init"
out=$(TODIST_COLL_TIMEOUT=soon run 60 todist-run -n 1 "$PEER" one 2>&1)
like "$out" "TODIST_COLL_TIMEOUT='soon' is not a positive number" \
     "a bad TODIST_COLL_TIMEOUT is named at td_init"
out=$(TODIST_COLL_TIMEOUT=0.5 run 60 todist-run -n 2 "$PEER" late 2>&1)
like "$out" "rank 0 one: TD_ERR_TIMEOUT coll: all_reduce timed out after 0.5 s on rank 0 waiting for rank\\(s\\) 1" \
     "TODIST_COLL_TIMEOUT=0.5: a late rank is named after half a second"
like "$out" "rank 1 one: TD_ERR_TIMEOUT coll: all_reduce timed out after 0.5 s on rank 0 waiting for rank\\(s\\) 1 \\(reported by rank 0\\)" \
     "and the late rank fails its call with that error too"
# Messages for a group destroyed here (match.h C11): queued ones freed at
# td_group_destroy, later ones dropped on arrival; nothing kept; both
# answered (C14), so the sender's sends fail at once naming the rank.
out=$(TODIST_COLL_TIMEOUT=30 TODIST_LOG=debug run 90 todist-run -n 2 "$PEER" \
      destroyed 2>&1); rc=$?
is "$rc" 0 "destroyed group: every rank exits 0"
like "$out" "group 1 destroyed with 1 unreceived messages: freed" \
     "destroying a group frees the messages queued for it"
like "$out" "dropped a message from rank 1 for group 1, destroyed here" \
     "a message for a destroyed group is dropped on arrival"
is "$(printf '%s\n' "$out" | grep -cx 'PASS destroyed_send_fails_naming_it')" 2 \
   "and the sender's sends fail TD_ERR_CANCELED naming the rank (C14)"
expect "$out" 1 destroyed_send_by_detection
[ "$rc" = 0 ] || diag "$out"
# A 256 KiB send (an offer in place; a UCX rendezvous with
# TODIST_COLL_CMA=0) or broadcast (the segment's handshake; a transport
# step with TODIST_COLL_SHM=0) to a rank that destroyed the group, before
# or after it arrived: answered (C14), the sender fails naming it within
# 5 s, not after its 20 s timeout.
for env in TODIST_COLL_CMA=1 TODIST_COLL_CMA=0 TODIST_COLL_SHM=0; do
    out=$(export "$env"; run 120 todist-run -n 2 "$PEER" dropped 2>&1); rc=$?
    expect "$out" 1 $dropped
    is "$rc" 0 "dropped ($env): every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"
done
# The same when the receiver's group fails (quietly: a member digest that
# differs, seen by rank 1 alone) with a 256 KiB message queued: it and the
# message that failed it are answered, each sender fails naming rank 1.
for env in TODIST_COLL_CMA=1 TODIST_COLL_CMA=0; do
    out=$(export "$env"; run 120 todist-run -n 3 "$PEER" dropped_broken 2>&1); rc=$?
    expect "$out" 1 dropped_broken_queued_told dropped_broken_mismatch_told
    expect "$out" 2 dropped_broken_by_detection
    is "$rc" 0 "dropped_broken ($env): every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"
done
# The single-copy path (process_vm_readv) for bodies of 64 KiB and more:
# on by default; off with TODIST_COLL_CMA=0; and with rank 1 in its own
# pid namespace, where the pids in offers name nobody (or the wrong
# process: the token check refuses it), every offer falls back to the body
# through UCX, and the results are still right.
for cfg in default off netns; do
    case $cfg in
    default) out=$(TODIST_LOG=debug run 60 todist-run -n 3 "$PEER" big 2>&1)
             rc=$?
             like "$out" "p2p body of 1200028 bytes from rank 0 read in place" \
                  "large p2p bodies are read in place by default" ;;
    off) out=$(TODIST_COLL_CMA=0 TODIST_LOG=debug run 60 todist-run -n 3 \
               "$PEER" big 2>&1); rc=$?
         unlike "$out" "read in place" "TODIST_COLL_CMA=0: nothing read in place" ;;
    netns)
        cat > "$TD_TMP/ns.sh" <<EOS
#!/bin/sh
if [ "\$TODIST_RANK" = 1 ]; then exec unshare --pid --fork "$PEER" big; fi
exec "$PEER" big
EOS
        chmod +x "$TD_TMP/ns.sh"
        if unshare --pid --fork true 2>/dev/null; then
            out=$(TODIST_LOG=debug run 60 todist-run -n 3 "$TD_TMP/ns.sh" 2>&1)
            rc=$?
        else
            skip 10 "unshare --pid not permitted here"
            continue
        fi ;;
    esac
    is "$(printf '%s\n' "$out" | grep -cx 'PASS big_all_reduce')" 3 \
       "large all_reduce right ($cfg)"
    is "$(printf '%s\n' "$out" | grep -cx 'PASS big_broadcast')" 3 \
       "large broadcast right ($cfg)"
    for c in big_p2p_recv_0to1 big_p2p_recv_1to0 big_p2p_send_0to1 \
             big_p2p_send_1to0 big_p2p_late_irecv big_p2p_late_irecv_send; do
        is "$(printf '%s\n' "$out" | grep -cx "PASS $c")" 1 "$c ($cfg)"
    done
    is "$(printf '%s\n' "$out" | grep -cx 'PASS big_p2p_irecv_then_send')" 2 \
       "large irecv-then-send on both ranks: no deadlock, right ($cfg)"
    [ "$rc" = 0 ] || diag "$out"
    if [ $cfg = netns ]; then
        # another PID namespace is another host (runtime/hostmap.h): no
        # offer is made to it, none read from it (cma.h C11)
        unlike "$out" "cannot read [0-9]+ bytes in place from rank" \
               "no offer across pid namespaces (another host)"
    fi
done

# all_reduce and barrier through a shared segment (runtime/coll/shm.c):
# auto picks it, and a group gets it when all its members are on one host; TODIST_COLL_SHM=0 turns it off; and with rank
# 1 in its own pid namespace (its own /proc), rank 0's segment cannot be
# opened there, so every member runs the transport algorithms instead
# (shm.c S1) and the results are still right. (Those two runs force
# "shm": the world then spans two hosts, and auto would pick the
# hierarchical algorithms without trying the segment, hier.c H1.)
SHM_ALL=all_reduce:shm,broadcast:shm,all_gather:shm,reduce_scatter:shm,barrier:shm
for cfg in default off private otherhost; do
    case $cfg in
    default) out=$(TODIST_LOG=debug run 120 todist-run -n 4 "$PEER" \
                   concurrent 2>&1); rc=$?
             like "$out" "group 0: collectives through shared memory" \
                  "one node: collectives through a shared segment" ;;
    off) out=$(TODIST_COLL_SHM=0 TODIST_LOG=debug run 120 todist-run -n 4 \
               "$PEER" concurrent 2>&1); rc=$?
         unlike "$out" "through shared memory" \
                "TODIST_COLL_SHM=0: no shared segment" ;;
    private)
        cat > "$TD_TMP/shm.sh" <<EOS
#!/bin/sh
if [ "\$TODIST_RANK" = 1 ]; then
    UCX_TLS=tcp,self exec unshare --pid --fork --mount-proc "$PEER" concurrent
fi
exec "$PEER" concurrent
EOS
        chmod +x "$TD_TMP/shm.sh"
        if unshare --pid --fork --mount-proc true 2>/dev/null; then
            out=$(TODIST_COLL_ALGO=$SHM_ALL TODIST_LOG=debug run 120 \
                  todist-run -n 4 "$TD_TMP/shm.sh" 2>&1); rc=$?
            like "$out" "group 0: no shared segment on every member" \
                 "a member without the segment: every member falls back"
        else
            skip 3 "unshare --pid --mount-proc not permitted here"
            continue
        fi ;;
    otherhost)
        # rank 1 on another "host" (other_host): groups with it fall
        # back, the subgroup {0, 2} of one "host" keeps its segment
        if host_conc=$(other_host concurrent); then
            out=$(TODIST_COLL_ALGO=$SHM_ALL TODIST_LOG=debug run 120 \
                  todist-run -n 4 "$host_conc" 2>&1); rc=$?
            like "$out" "rank 1\]: coll: group 0: rank 0's segment is on another host" \
                 "a member on another host: the world group falls back"
            like "$out" "rank 2\]: coll: group 1: collectives through shared memory" \
                 "and a subgroup on one host keeps its segment"
        else
            skip 4 "unshare --mount not permitted here"
            continue
        fi ;;
    esac
    is "$(printf '%s\n' "$out" | grep -c '^PASS')" 20 \
       "concurrent: every check passes on every rank ($cfg)"
    is "$rc" 0 "concurrent: every rank exits 0 ($cfg)"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | grep -v debug | tail -30)"
done

# A process maps at most 32 segments (up to 8 MiB each): with 40 live
# groups the later ones go through the transport, and all are right.
out=$(TODIST_LOG=debug run 120 todist-run -n 2 "$PEER" many_groups 2>&1); rc=$?
like "$out" "32 shared segments mapped already" \
     "past 32 segments per process, groups use the transport"
is "$(printf '%s\n' "$out" | grep -cx 'PASS many_groups_right')" 2 \
   "40 groups: every all_reduce right on both ranks"
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | grep -v debug | tail -20)"

# examples/ring_allreduce: seed 004's ring from isend/irecv, checked
# against td_all_reduce on 3 and 4 ranks.
for n in 3 4; do
    out=$(run 120 todist-run -n $n "$top_builddir/examples/ring_allreduce" \
          100003 2>&1); rc=$?
    like "$out" "ring_allreduce: ranks=$n count=100003 max_abs_diff=0 ranks_disagreeing=0" \
         "examples/ring_allreduce on $n ranks agrees with td_all_reduce"
    [ "$rc" = 0 ] || diag "$out"
done
done_testing
