#!/bin/sh
# Across real network stacks (tests/hosts.sh): first the test bed itself
# (names, boot ids, PID namespaces, private /dev/shm and /tmp, byte
# counters, a cut link, a rate limit, a killed host, nothing left behind),
# then todist across its hosts at 2 hosts x 2 ranks, 3 hosts with 2+1+1
# ranks and 1+1: the collectives' matrix and point-to-point, RPC, remote
# references, distributed autograd (the my_add example), DDP, a peer UCX
# cannot reach (UCX_TLS=sm,self), with the
# store on host 1 and large bodies checked to have crossed the link.
# Runs are bounded by timeout; hosts.sh tears the bed down on exit.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hosts.sh"
B="$top_builddir/tests"   # peers in their folders

if ! hosts_supported; then
    skip_all "$HOSTS_WHY"
fi
plan 201

# ---- the bed -----------------------------------------------------------------
hosts_up 2 || { diag "hosts_up failed"; exit 1; }
is "$(hosts_run 1 cat /proc/sys/kernel/hostname) $(hosts_run 2 hostname)" \
   "h1 h2" "each host has its own name"
b1=$(hosts_run 1 cat /proc/sys/kernel/random/boot_id)
b2=$(hosts_run 2 cat /proc/sys/kernel/random/boot_id)
b0=$(cat /proc/sys/kernel/random/boot_id)
ok "$([ "$b1" != "$b2" ] && [ "$b1" != "$b0" ] && [ "$b2" != "$b0" ]; echo $?)" \
   "each host has its own boot id ($b1, $b2)"
like "$(hosts_run 1 getent hosts h2)" "^10\.91\.0\.2 +h2" \
     "host 1's /etc/hosts names host 2"
hosts_run 1 sh -c "echo \$\$ > '$TD_TMP/spid'; exec sleep 600" > /dev/null 2>&1 &
sleeper=$!
td_track_pid $sleeper
t=0
while [ ! -s "$TD_TMP/spid" ] && [ $t -lt 100 ]; do sleep 0.1; t=$((t + 1)); done
spid=$(cat "$TD_TMP/spid")
cmd() { hosts_run "$1" cat "/proc/$spid/cmdline" 2>/dev/null | tr '\0' ' '; }
is "$(cmd 1)" "sleep 600 " "a process of host 1 is seen on host 1 (pid $spid)"
is "$(cmd 2)" "" "...and not on host 2 (its own PID namespace)"
# a name of this run's own: a file the machine already has cannot pass
x=td-hosts-$$
hosts_run 1 sh -c "echo one > /dev/shm/$x; echo one > /tmp/$x"
is "$(hosts_run 2 sh -c "cat /dev/shm/$x /tmp/$x 2>/dev/null | wc -l")" 0 \
   "host 2 sees neither host 1's /dev/shm nor its /tmp"
is "$(hosts_run 1 cat /dev/shm/$x /tmp/$x | tr '\n' ' ')" "one one " \
   "host 1 sees its own again (one /dev/shm and /tmp per host)"
ok "$([ ! -e /dev/shm/$x ] && [ ! -e /tmp/$x ]; echo $?)" \
   "nothing reached the machine's own /dev/shm or /tmp"
hosts_run 2 sh -c "echo shared > '$TD_TMP/from2'"
is "$(cat "$TD_TMP/from2" 2>/dev/null)" "shared" \
   "the test's folder is shared with the hosts at its own path"

# Bytes through host 1's interface: a TCP connection to host 2 (refused,
# nothing listens) counts; with the link cut, a connect waits instead.
set -- $(hosts_bytes 1); tx0=$1
hosts_run 1 bash -c 'exec 3<>/dev/tcp/10.91.0.2/9' > /dev/null 2>&1
is "$?" 1 "a connection to host 2 is refused (the link carries it)"
set -- $(hosts_bytes 1)
ok "$([ "$1" -gt "$tx0" ]; echo $?)" "host 1's byte counters count it ($tx0 -> $1)"
hosts_cut 2
hosts_run 1 timeout 2 bash -c 'exec 3<>/dev/tcp/10.91.0.2/9' > /dev/null 2>&1
is "$?" 124 "with host 2's link cut, a connection is lost, not refused"
hosts_restore 2
hosts_run 1 timeout 5 bash -c 'exec 3<>/dev/tcp/10.91.0.2/9' > /dev/null 2>&1
is "$?" 1 "restored, it is refused again"
hosts_rate 2 10gbit
like "$(ip netns exec "$(_hosts_ns 2)" tc qdisc show dev eth0)" "tbf .*rate 10Gbit" \
     "host 2's link is shaped (tc tbf)"
hosts_rate 2 ""
hosts_kill 1
t=0
while kill -0 $sleeper 2>/dev/null && [ $t -lt 50 ]; do sleep 0.1; t=$((t + 1)); done
ok "$(! kill -0 $sleeper 2>/dev/null; echo $?)" "killing host 1 ends its processes"
id1=$HOSTS_ID
hosts_down
is "$(ip netns list | grep -c "^$id1")" 0 "hosts_down leaves no namespace"

# ---- todist across hosts ------------------------------------------------------
# job DESC LAYOUT PROG ARGS: runs it, checks every rank exits 0 with no
# FAIL line and some PASS lines (PASS_MIN, default 1). OUT holds the output.
job() {
    _d=$1; shift
    OUT=$(hosts_launch "$@" 2>&1); _rc=$?
    is "$_rc" 0 "$_d: every rank exits 0"
    _f=$(printf '%s\n' "$OUT" | grep -c '^FAIL')
    _p=$(printf '%s\n' "$OUT" | grep -c '^PASS')
    ok "$([ "$_f" = 0 ] && [ "$_p" -ge "${PASS_MIN:-1}" ]; echo $?)" \
       "$_d: no failed check ($_p passed, $_f failed)"
    [ "$_rc" = 0 ] && [ "$_f" = 0 ] || diag "$(printf '%s\n' "$OUT" | tail -30)"
}
# crossed I MIN: host I's interface sent and received at least MIN bytes
# since the last mark.
mark() { set -- $(hosts_bytes "$1"); tx0=$1; rx0=$2; }
crossed() {
    set -- "$1" "$2" $(hosts_bytes "$1")
    ok "$([ $(($3 - tx0)) -ge "$2" ] && [ $(($4 - rx0)) -ge "$2" ]; echo $?)" \
       "host $1 sent $(($3 - tx0)) and received $(($4 - rx0)) bytes (>= $2)"
}

hosts_up 3 || { diag "hosts_up failed"; exit 1; }
export HOSTS_TIMEOUT=240
# The liveness check fails a peer silent for TODIST_LIVENESS seconds: a
# timing, which the runs below are not about (once, at a load of 28 on 2
# cores, a rank was failed by a peer in the matrix). The losses at the end
# run with the default.
TODIST_LIVENESS=60; export TODIST_LIVENESS

mark 2
PASS_MIN=10 job "2x2 collectives matrix" 2,2 "$B/coll/coll_peer" matrix
crossed 2 1000000
PASS_MIN=10 job "2+1+1 collectives matrix" 2,1,1 "$B/coll/coll_peer" matrix

# Hierarchical collectives (runtime/coll/hier.c): auto picks them at 2x2
# and 2+1+1 (rank 0 forcing them would otherwise be a mismatch), and
# forced, flat and auto all give the exact values, on the world and on it
# reordered. Then the bytes host 2's link carries for 8 all_reduces of
# 4 MiB: the flat ring sends 6 MiB a call each way (two ring edges cross),
# the hierarchical one 4 MiB (one leader to the other): it must move less.
job "2x2 auto picks hier" 2,2 "$B/coll/coll_peer" auto_is hier
job "2+1+1 auto picks hier" 2,1,1 "$B/coll/coll_peer" auto_is hier
# Inside a host the hierarchical calls go through the host's shared
# segment (hier.c H8): each rank logs at debug, when the world group goes,
# the bytes it wrote into its host's segment and those it sent to a
# member of its own host through the transport. segs LAYOUT DESC: the
# matrix above ran; every rank of a host of two or more wrote into the
# segment and sent nothing to its host's members through the transport.
segs() {
    for _r in $(seq 0 $(($(echo "$1" | tr , '+') - 1))); do
        _line=$(printf '%s\n' "$OUT" |
                grep "^todist\[rank $_r\]: .*group 0: hierarchical calls moved")
        _seg=$(printf '%s\n' "$_line" | sed -n 's/.* moved \([0-9]*\) bytes through.*/\1/p')
        _tp=$(printf '%s\n' "$_line" | sed -n 's/.* and \([0-9]*\) bytes to members.*/\1/p')
        if [ "$_r" -lt "$3" ]; then
            ok "$([ "${_seg:-0}" -gt 1000000 ] && [ "${_tp:-1}" = 0 ]; echo $?)" \
               "$2: rank $_r wrote ${_seg:-?} bytes into its host's segment, sent ${_tp:-?} to its host's members by the transport"
        else
            ok "$([ "${_seg:-1}" = 0 ] && [ "${_tp:-1}" = 0 ]; echo $?)" \
               "$2: rank $_r, alone on its host, used no segment and sent nothing inside it (${_seg:-?}, ${_tp:-?})"
        fi
    done
}
PASS_MIN=10 TODIST_LOG=debug job "2x2 hierarchical matrix" 2,2 "$B/coll/coll_peer" hier
segs 2,2 "2x2 hierarchical matrix" 4
PASS_MIN=10 TODIST_LOG=debug job "2+1+1 hierarchical matrix" 2,1,1 "$B/coll/coll_peer" hier
segs 2,1,1 "2+1+1 hierarchical matrix" 2
# Where one host has no segment (TODIST_COLL_SHM=0 on host 2's ranks
# only), every host goes through the transport inside (H8): the leaders'
# messages still match and the values are exact.
cat > "$TD_TMP/shm_off2.sh" <<EOS
#!/bin/sh
[ "\$TODIST_NODE_RANK" = 1 ] && export TODIST_COLL_SHM=0
exec "$B/coll/coll_peer" "\$@"
EOS
chmod +x "$TD_TMP/shm_off2.sh"
PASS_MIN=10 TODIST_LOG=debug job "2x2 hierarchical matrix, no segment on host 2" \
    2,2 "$TD_TMP/shm_off2.sh" hier
_n=$(printf '%s\n' "$OUT" | grep -c "group 0: hierarchical calls moved 0 bytes through this host's segment and [1-9][0-9]* bytes")
is "$_n" 4 "2x2, no segment on host 2: all 4 ranks went through the transport inside their host"
# Chunks at their boundaries (coll_peer chunks: counts a rank below, at
# and above a chunk, several chunks and a bit, and blocks below a chunk;
# every element distinct): through the transport inside hosts (hier.c
# H11) at 2x2 and 2+1+1 (no segment on the host of two), and through the
# segments (H9).
cat > "$TD_TMP/shm_off1.sh" <<EOS
#!/bin/sh
[ "\$TODIST_NODE_RANK" = 0 ] && export TODIST_COLL_SHM=0
exec "$B/coll/coll_peer" "\$@"
EOS
chmod +x "$TD_TMP/shm_off1.sh"
# tp LAYOUT DESC: every rank logged that it went through the transport
# inside its host (H8's counts: 0 bytes through a segment)
tp() {
    is "$(printf '%s\n' "$OUT" | grep -c "group 0: hierarchical calls moved 0 bytes through this host's segment")" \
       "$(($(echo "$1" | tr , '+')))" "$2: every rank went through the transport inside its host"
}
PASS_MIN=4 TODIST_LOG=debug job "2x2 chunks, no segment on host 2" 2,2 \
    "$TD_TMP/shm_off2.sh" chunks
tp 2,2 "2x2 chunks, no segment on host 2"
PASS_MIN=4 TODIST_LOG=debug job "2+1+1 chunks, no segment on host 1" 2,1,1 \
    "$TD_TMP/shm_off1.sh" chunks
tp 2,1,1 "2+1+1 chunks, no segment on host 1"
PASS_MIN=4 job "2x2 chunks through the segments" 2,2 "$B/coll/coll_peer" chunks
# moved ALGO: bytes host 2 sent and received in 8 all_reduces of 4 MiB
moved() {
    set -- "$1" $(hosts_bytes 2)
    job "2x2 all_reduce 4 MiB ($1)" 2,2 env TODIST_COLL_ALGO=all_reduce:$1 \
        "$B/coll/coll_peer" allreduce_big 8
    set -- "$1" "$2" "$3" $(hosts_bytes 2)
    MOVED=$(( $4 - $2 + $5 - $3 ))
}
moved ring; flat=$MOVED
moved hier; hier=$MOVED
moved auto; auto=$MOVED
diag "host 2's link: flat ring $flat, hier $hier, auto $auto bytes"
ok "$([ "$hier" -ge $((2 * 8 * 4194316)) ]; echo $?)" \
   "hier: the bodies crossed the link ($hier bytes >= 2 x 8 x 4 MiB)"
ok "$([ $((hier * 100)) -lt $((flat * 85)) ]; echo $?)" \
   "hier moves less across the link than the flat ring ($hier < 0.85 x $flat)"
ok "$([ $((auto * 100)) -lt $((flat * 85)) ]; echo $?)" \
   "auto moves as little ($auto < 0.85 x $flat)"

# The flat ring's sends paced by its arrivals where the next rank is on
# another host (ring.c R1), on chunks of 6,291,457 floats at 1+1 and
# half that at 2+1+1, in segments of 63 KiB across hosts (R2: 64512 B,
# the last one short) and 1 MiB inside one (2+1+1: rank 0 sends 1 MiB
# ones to rank 1 and receives 63 KiB ones from rank 3): exact values, and
# each rank logs, as its world group goes, how many of its sends waited
# for an arrival and their segment: ranks whose right neighbour is on
# another host did, rank 0 of 2+1+1 (rank 1, its right, is on its host)
# did not.
paced() {
    printf '%s\n' "$OUT" |
        sed -n "s/^todist\[rank $1\]: .*group 0: \([0-9]*\) ring sends waited for an arrival.*/\1/p"
}
segbytes() {
    printf '%s\n' "$OUT" |
        sed -n "s/^todist\[rank $1\]: .*group 0: .* ring sends waited for an arrival.* in segments of \([0-9]*\) B.*/\1/p"
}
# ring_cut LABEL RANKS...: each of RANKS logged paced sends (R1) in
# 64512-B segments (R2)
ring_cut() {
    _l=$1; shift
    for _r in "$@"; do
        _p=$(paced $_r)
        ok "$([ "${_p:-0}" -gt 0 ]; echo $?)" \
           "$_l: rank $_r's sends were paced by its arrivals (${_p:-none})"
        is "$(segbytes $_r)" 64512 \
           "$_l: rank $_r's segments to another host fit one UCX TCP segment (R2)"
    done
}
# R4: ranks whose left neighbour is on another host get their segments
# eager (63 KiB) and reduce each in the receive handler, from UCX's
# buffer; a rank whose left neighbour is on its host reads 1 MiB
# segments in place (cma.h) and reduces them itself, as before.
reduced() {
    printf '%s\n' "$OUT" |
        sed -n "s/^todist\[rank $1\]: .*group 0: \([0-9]*\) ring segments reduced as they arrived.*/\1/p"
}
# rx_cut LABEL MIN RANKS...: each of RANKS reduced at least MIN segments
# as they arrived (R4)
rx_cut() {
    _l=$1; _m=$2; shift 2
    for _r in "$@"; do
        _p=$(reduced $_r)
        ok "$([ "${_p:-0}" -ge "$_m" ]; echo $?)" \
           "$_l: rank $_r reduced segments from another host as they arrived (R4: ${_p:-none}, at least $_m)"
    done
}
PASS_MIN=2 TODIST_LOG=debug job "1+1 ring all_reduce of 24 MiB" 1,1 \
    env TODIST_COLL_ALGO=all_reduce:ring "$B/coll/coll_peer" allreduce_big 2 6291457
ring_cut "1+1 ring" 0 1
# 2 calls x 195 segments of the reduce-scatter's 12 MiB: most arrive
# after their receive was posted
rx_cut "1+1 ring" 100 0 1
PASS_MIN=4 TODIST_LOG=debug job "2+1+1 ring all_reduce of 24 MiB" 2,1,1 \
    env TODIST_COLL_ALGO=all_reduce:ring "$B/coll/coll_peer" allreduce_big 2 6291457
is "$(paced 0)" "" "2+1+1 ring: rank 0, whose right neighbour is on its host, sent at once"
ring_cut "2+1+1 ring" 1 2 3
rx_cut "2+1+1 ring" 1 0 2 3
is "$(reduced 1)" "" "2+1+1 ring: rank 1, whose left neighbour is on its host, reduced its segments itself"

# all_gather's and reduce_scatter's rings on ring.c's step at 1+1 (the
# chunk boundaries' exact values, up to 4 MiB a call): paced, in 63 KiB
# segments across the hosts, like all_reduce's; all_reduce is rd and
# broadcast linear there, so the rings counted are theirs.
PASS_MIN=2 TODIST_LOG=debug job "1+1 ring all_gather and reduce_scatter" 1,1 \
    "$B/coll/coll_peer" chunks \
    "all_reduce:rd,broadcast:linear,all_gather:ring,reduce_scatter:ring"
ring_cut "1+1 all_gather/reduce_scatter rings" 0 1
rx_cut "1+1 reduce_scatter ring" 1 0 1
# The binomial broadcast across hosts in 63 KiB pieces (tree.c T1): at
# 1+1 the root (rank 1) sends its 7 broadcasts (2-6 MiB each) in pieces
# of 64512 B, more than 66 in all (whole, there would be 7); rank 0, a
# leaf, sends none.
tp() {
    printf '%s\n' "$OUT" |
        sed -n "s/^todist\[rank $1\]: .*group 0: broadcast sent \([0-9]*\) pieces of \([0-9]*\) B.*/\1 \2/p"
}
PASS_MIN=2 TODIST_LOG=debug job "1+1 binomial broadcast" 1,1 \
    "$B/coll/coll_peer" chunks \
    "all_reduce:rd,broadcast:binomial,all_gather:direct,reduce_scatter:direct"
set -- $(tp 1)
ok "$([ "${1:-0}" -ge 66 ]; echo $?)" \
   "1+1 binomial broadcast: the root sent ${1:-no} pieces (>= 66, T1)"
is "${2:-none}" 64512 "1+1 binomial broadcast: its pieces fit one UCX TCP segment (T1)"
is "$(tp 0)" "" "1+1 binomial broadcast: the leaf sent no pieces"

# all_reduce's leader exchange in 63 KiB pieces (hier.c H12), through
# the segments and through the transport inside hosts: at 2x2 the leaders
# (ranks 0 and 2) each sent pieces of 64512 B, at least 2 x 66 of them
# in 2 calls of 4,194,316 B (in whole chunks there would be 2 x 5 or
# fewer); the members (ranks 1 and 3) sent none.
xp() {
    printf '%s\n' "$OUT" |
        sed -n "s/^todist\[rank $1\]: .*group 0: all_reduce's leader exchange sent \([0-9]*\) pieces of \([0-9]*\) B.*/\1 \2/p"
}
# leaders_cut WHAT FN MIN INV: leaders 0 and 2 sent at least MIN pieces of
# 64512 B (FN: xp or xq), the members 1 and 3 none.
leaders_cut() {
    for _r in 0 2; do
        set -- "$1" "$2" "$3" "$4" $($2 $_r)
        ok "$([ "${5:-0}" -ge "$3" ]; echo $?)" \
           "$1: leader $_r sent ${5:-no} pieces (>= $3, $4)"
        is "${6:-none}" 64512 "$1: leader $_r's pieces fit one UCX TCP segment ($4)"
    done
    is "$($2 1)$($2 3)" "" "$1: the members sent no pieces"
}
for _v in "segments:" "transport inside:TODIST_COLL_SHM=0"; do
    PASS_MIN=4 TODIST_LOG=debug job "2x2 hier all_reduce of 4 MiB (${_v%%:*})" 2,2 \
        env ${_v#*:} TODIST_COLL_ALGO=all_reduce:hier "$B/coll/coll_peer" allreduce_big 2
    leaders_cut "2x2 hier all_reduce (${_v%%:*})" xp 132 H12
done
# A vector of fewer than 4 slots goes in 4 chunks (hier.c H13): 262,144
# floats (1 MiB) in 4 chunks of 256 KiB, 5 pieces each, 20 pieces a call
# from each leader (in one chunk: 17).
PASS_MIN=4 TODIST_LOG=debug job "2x2 hier all_reduce of 1 MiB" 2,2 \
    env TODIST_COLL_ALGO=all_reduce:hier "$B/coll/coll_peer" allreduce_big 2 262144
for _r in 0 2; do
    set -- $(xp $_r)
    is "${1:-none}" 40 "2x2 hier, 1 MiB: leader $_r sent 4 chunks of 5 pieces a call (H13)"
done
# all_gather's and reduce_scatter's leader units in 63 KiB pieces (hier.c
# H14), through the segments and the transport inside hosts: at 2x2 the
# chunk boundaries' exact values (up to 4 MiB a rank), the leaders each
# sent at least 66 pieces of 64512 B (a unit of up to 1 MiB is 17); the
# members none.
xq() {
    printf '%s\n' "$OUT" |
        sed -n "s/^todist\[rank $1\]: .*group 0: all_gather's and reduce_scatter's leader units sent \([0-9]*\) pieces of \([0-9]*\) B.*/\1 \2/p"
}
for _v in "segments:" "transport inside:TODIST_COLL_SHM=0"; do
    PASS_MIN=4 TODIST_LOG=debug job "2x2 hier all_gather and reduce_scatter (${_v%%:*})" 2,2 \
        env ${_v#*:} "$B/coll/coll_peer" chunks \
        "all_reduce:rd,broadcast:linear,all_gather:hier,reduce_scatter:hier"
    leaders_cut "2x2 hier all_gather/reduce_scatter (${_v%%:*})" xq 66 H14
done

# Algorithms chosen differently across hosts fail fast (late.h K4): at
# 1+1, rank 0 (not the root) forces the hierarchical broadcast and waits
# for its leader's exchange; the root (auto: the segment's handshake,
# which rank 0 offers) waits for rank 0. Both must fail as a mismatch
# naming both algorithms, not wait out the collective timeout (100 s;
# each rank is killed at 60 s).
cat > "$TD_TMP/bcast_hier.sh" <<EOS
#!/bin/sh
[ "\$TODIST_RANK" = 0 ] && export TODIST_COLL_ALGO=broadcast:hier
exec "$B/coll/coll_peer" kind broadcast
EOS
chmod +x "$TD_TMP/bcast_hier.sh"
OUT=$(export TODIST_COLL_TIMEOUT=100 HOSTS_TIMEOUT=60
      hosts_launch 1,1 "$TD_TMP/bcast_hier.sh" 2>&1); rc=$?
for r in 0 1; do
    like "$(printf '%s\n' "$OUT" | grep "^# rank $r broadcast: ")" \
         "TD_ERR_INVALID coll: mismatched collectives in group 0 at call #1: rank [01] called broadcast\(float32 x 16, root 1, [a-z]+\), rank [01] called broadcast\(float32 x 16, root 1, [a-z]+\) \(only the algorithm differs.*" \
         "1+1 broadcast, hier forced on rank 0 only: rank $r fails as a mismatch"
done
like "$OUT" "rank 0 called broadcast\(float32 x 16, root 1, hier\)" \
     "1+1 broadcast, hier forced on rank 0 only: rank 0's hier is named"
is "$rc" 0 "1+1 broadcast, hier on rank 0 only: both ranks exit 0, before the timeout"
[ "$rc" = 0 ] || diag "$OUT"

# No UCX transport crosses the hosts (UCX_TLS=sm,self: shared memory and
# self only): each rank's first all_reduce, the next, and an RPC fail
# within seconds naming the other as unreachable (transport.c L16), not
# after the collective's 60 s timeout (each rank is killed at 45 s); the
# log names the other's host.
OUT=$(export UCX_TLS=sm,self HOSTS_TIMEOUT=45
      hosts_launch 1,1 "$B/coll/coll_peer" unreachable 2>&1); rc=$?
is "$rc" 0 "1+1 under UCX_TLS=sm,self: both ranks exit 0, before the timeout"
is "$(printf '%s\n' "$OUT" | grep -c '^PASS unreachable_')" 8 \
   "1+1 under UCX_TLS=sm,self: each rank's call and RPC fail naming the other unreachable (4 checks each)"
like "$OUT" "rank 1 \(on host h2, ranks there: 1\) is unreachable: UCX has no transport to it" \
     "1+1 under UCX_TLS=sm,self: rank 0's log names rank 1's host"
[ "$rc" = 0 ] || diag "$OUT"

# Large bodies (1.2 MB, above the single-copy threshold) between ranks on
# two hosts: they cross the link, and no in-place read is offered across.
mark 2
TODIST_LOG=debug job "1+1 large bodies" 1,1 "$B/coll/coll_peer" big
crossed 2 2400000
unlike "$OUT" "read in place|cannot read" \
       "1+1 large bodies: no in-place read offered across hosts"
TODIST_LOG=debug job "2+1 large bodies" 2,1 "$B/coll/coll_peer" big
like "$OUT" "p2p body of [0-9]+ bytes from rank [01] read in place" \
     "2+1 large bodies: ranks 0 and 1, on host 1, read in place"

# A rank that gets no CPU as the closes begin, after a join that
# completed (TODIST_TEST_CLOSE_STALL=0:4, a test knob: rank 0 stops 4 s
# before its flushes): rank 1's flush of its endpoint to rank 0, when it
# has to wait for rank 0 (3 of 3 plain runs, not in one ASan run), gives
# up after 2 s. Every message was delivered, so both td_finalize succeed,
# and rank 1 says it at info, never as td_finalize's error (once, under a
# loaded make check, a rank's finalize failed this way: "rank 1 did not
# close its endpoint within 2 s").
TODIST_TEST_CLOSE_STALL=0:4 TODIST_LOG=info \
    job "1+1, rank 0 stalled in its close" 1,1 "$B/coll/coll_peer" small 20
unlike "$OUT" "td_finalize: .*did not close" \
       "1+1, rank 0 stalled in its close: no td_finalize fails for it"
printf '%s\n' "$OUT" | grep "^todist\[rank 1\]: finalize: " >/dev/null ||
    diag "rank 1's flush did not wait for rank 0 this time"

# Bodies of up to 1 MiB go eager to a peer on another host (UCX's
# rendezvous over TCP costs a round trip more), larger ones by rendezvous;
# a user's UCX_RNDV_THRESH wins (the transport's own echo, rank 1 echoing).
OUT=$(hosts_launch 1,1 "$B/transport/transport_peer" protocol 2>&1)
is "$?" 0 "1+1 protocol: 32 KiB, 1 MiB and 2 MiB echoes"
like "$OUT" 'ok protocol: 32768 B by rendezvous 0, 1048576 B by rendezvous 0, 2097152 B by rendezvous 1' \
     "1+1: bodies up to 1 MiB come back eager across hosts, 2 MiB by rendezvous"
OUT=$(UCX_RNDV_THRESH=4096 hosts_launch 1,1 "$B/transport/transport_peer" protocol 2>&1)
like "$OUT" 'ok protocol: 32768 B by rendezvous 1, 1048576 B by rendezvous 1,' \
     "1+1 under UCX_RNDV_THRESH=4096: UCX's threshold wins across hosts too"

job "2+1 point-to-point" 2,1 "$B/coll/coll_peer" p2p
job "1+1+1 point-to-point" 1,1,1 "$B/coll/coll_peer" p2p
job "1+1 RPC" 1,1 "$B/rpc/rpc_peer" basic
job "2+1 RPC barrier" 2,1 "$B/rpc/rpc_peer" barrier
job "1+1+1 remote references" 1,1,1 "$B/rpc/rpc_peer" rref
job "2+1 map-reduce" 2,1 "$B/rpc/rpc_peer" mapreduce
job "1+1+1 distributed autograd" 1,1,1 "$B/dist_autograd/dist_peer" basic

OUT=$(hosts_launch 1,1 "$top_builddir/examples/my_add" --seed 7 2>&1)
is "$?" 0 "1+1 my_add: exits 0"
like "$OUT" "^check=ok$" "1+1 my_add: gradients check"

job "2x2 DDP" 2,2 "$B/ddp/ddp_peer"
job "2+1+1 DDP" 2,1,1 "$B/ddp/ddp_peer"

# ---- a host cut off, a host killed ---------------------------------------------
# lose HOW OP: 2+1+1 ranks warm up, ranks 0-2 start OP and host 3 (rank 3)
# is cut off (HOW=hosts_cut) or killed (hosts_kill). Each of ranks 0-2
# must see OP fail well before OP's own 120 s timeout (the bound here, 30
# s, is loose on purpose: the liveness check takes 3 s, a kill much less;
# bench/hosts.sh measures), and its log must name host h3 and its rank.
lose() {
    _how=$1; _op=$2
    hosts_up 3 || { diag "hosts_up failed"; return 1; }
    rm -f "$TD_TMP/ready" "$TD_TMP/ready.done"
    HOSTS_TIMEOUT=150 hosts_launch 2,1,1 "$B/hosts/hosts_peer" "$_op" 3 \
        "$TD_TMP/ready" > "$TD_TMP/lose.out" 2>&1 &
    _l=$!
    _t=0
    while [ ! -e "$TD_TMP/ready" ] && [ $_t -lt 600 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    _t0=$(td_now)
    $_how 3
    # ranks 0-2 report, then exit (ready.done); rank 3 (cut off) is killed
    _t=0
    while [ $_t -lt 600 ]; do
        _n=$(cat "$HOSTS_DIR"/rank[012].out 2>/dev/null | grep -c "^op=")
        [ "$_n" -ge 3 ] && break
        sleep 0.1; _t=$((_t + 1))
    done
    touch "$TD_TMP/ready.done"
    hosts_kill 3
    wait $_l
    OUT=$(cat "$TD_TMP/lose.out")
    _worst=0
    for _r in 0 1 2; do
        _line=$(printf '%s\n' "$OUT" | grep "^op=$_op rank=$_r ")
        _tt=$(printf '%s\n' "$_line" | sed -n 's/.* t=\([0-9.]*\) .*/\1/p')
        _d=$(awk -v a="${_tt:-99999}" -v b="$_t0" 'BEGIN { printf "%.2f", a - b }')
        _worst=$(awk -v a="$_d" -v b="$_worst" 'BEGIN { print (a > b) ? a : b }')
        like "$_line" "rc=-[0-9]+ " "$_how $_op: rank $_r's $_op fails"
    done
    ok "$(awk -v w="$_worst" 'BEGIN { exit !(w < 30) }'; echo $?)" \
       "$_how $_op: all fail well within their timeout (the last after ${_worst} s)"
    like "$OUT" "lost rank 3 \\(on host h3, ranks there: 3\\)" \
         "$_how $_op: the log names the host and its ranks"
    for _r in 0 1 2; do
        like "$(printf '%s\n' "$OUT" | grep "^op=$_op rank=$_r ")" \
             "err=.*on host h3, ranks there: 3" \
             "$_how $_op: rank $_r's error names the host and its ranks"
    done
    [ "$_worst" != 99999 ] || diag "$OUT"
}
# ---- a rank stopped is not a host lost (transport.c L6, L7) -------------------
# 1+1, TODIST_LIVENESS=3 (the default): rank 0 waits in an all_reduce while rank 1 is
# held stopped (SIGSTOP) for 5 s: its pings go unanswered, but host 2's
# kernel acknowledges them, so rank 1 is not failed. Then both ranks are
# held stopped for 5 s (a machine that gave no rank the CPU): on waking,
# neither fails the other, whose silence it did not watch. Without L7
# rank 0 failed rank 1 after 3 s; without L6 the first rank to wake
# failed the other at once.
stall_pid() { # RANK [SUFFIX]: the pid rank RANK wrote, once it did
    _t=0
    while [ ! -s "$TD_TMP/stall.$1$2" ] && [ $_t -lt 600 ]; do
        sleep 0.1; _t=$((_t + 1))
    done
    cat "$TD_TMP/stall.$1$2" 2>/dev/null
}
hosts_up 2 || { diag "hosts_up failed"; exit 1; }
rm -f "$TD_TMP"/stall.*
TODIST_LIVENESS=3 TODIST_LOG=info HOSTS_TIMEOUT=90 hosts_launch 1,1 \
    "$B/hosts/hosts_peer" stall 0 "$TD_TMP/stall" > "$TD_TMP/stall.out" 2>&1 &
_l=$!
p0=$(stall_pid 0); p1=$(stall_pid 1)
hosts_run 2 kill -STOP "$p1"
touch "$TD_TMP/stall.go"
sleep 5
hosts_run 2 kill -CONT "$p1"
p0=$(stall_pid 0 .2); p1=$(stall_pid 1 .2)
hosts_run 1 kill -STOP "$p0"; hosts_run 2 kill -STOP "$p1"
touch "$TD_TMP/stall.go2"
sleep 5
hosts_run 1 kill -CONT "$p0"; hosts_run 2 kill -CONT "$p1"
wait $_l
OUT=$(cat "$TD_TMP/stall.out")
for _r in 0 1; do
    like "$OUT" "op=stall round=1 rank=$_r rc=0 sum=2 " \
         "rank 1 stopped 5 s (TODIST_LIVENESS=3): rank $_r's all_reduce completes"
    like "$OUT" "op=stall round=2 rank=$_r rc=0 sum=2 " \
         "both stopped 5 s: rank $_r's all_reduce completes"
done
like "$OUT" "rank 1 answered nothing for [0-9.]+ s, but its host acknowledged our data [0-9]+ ms ago: busy, not lost" \
     "rank 0 says why it keeps waiting for rank 1"
unlike "$OUT" "unreachable|lost rank" "no rank is taken for lost"
[ "$_tap_failed" = 0 ] || diag "$OUT"

unset TODIST_LIVENESS
lose hosts_cut coll
lose hosts_cut rpc
lose hosts_cut barrier
lose hosts_kill coll

done_testing
