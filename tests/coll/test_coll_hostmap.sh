#!/bin/sh
# One host map per group (runtime/coll/run.c A1, hier.c H2): a member
# whose lookup of a peer's host fails must still choose what its peers
# choose. TODIST_TEST_HOST_UNKNOWN=R:P (a test knob) makes world rank R's
# lookup of rank P's host fail, as a store request that timed out does.
# 4 ranks on this host:
#  - rank 1 cannot look up rank 2: rank 0's map (one host) wins, every
#    member picks the shared segment (each member's own map made rank 1
#    see 2 hosts and pick "hier": a mismatch);
#  - rank 0 cannot look up rank 2: every member takes rank 0's map, where
#    rank 2 is a host of its own, and picks "hier" (each member's own made
#    ranks 1-3 pick the segment: a mismatch); rank 0 warns, naming rank 2.
# coll_peer auto_is ALGO: rank 0 forces ALGO, the others leave it to auto,
# so the calls pass only if auto picked ALGO on every other rank.
# 2 ranks: a broadcast's binomial links and a ring's links are cut by
# whether they cross hosts (tree.c T1, ring.c R2), so the two ends of a
# link must agree on that too: with each member's own lookups, one that
# failed made every large call fail ("rank 1 sent 64512 bytes for step 0
# ..., rank 0 expects 1048572").
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/coll/coll_peer"
run() { timeout -k 5 "$@"; }
plan 19

# case KNOB ALGO SPANS: SPANS is how many ranks log that the world spans
# 2 hosts.
case_() {
    _knob=$1; _algo=$2; _spans=$3
    out=$(TODIST_TEST_HOST_UNKNOWN=$_knob TODIST_COLL_SHM=1 TODIST_LOG=debug \
          run 120 todist-run -n 4 "$PEER" auto_is "$_algo" 2>&1); rc=$?
    is "$(printf '%s\n' "$out" | grep -cx "PASS auto_is")" 4 \
       "lookup $_knob fails: auto picks $_algo on ranks 1-3, as rank 0 forces"
    unlike "$out" "mismatched collectives" \
           "lookup $_knob fails: no mismatch"
    is "$(printf '%s\n' "$out" |
          grep -c "coll: group 0 (4 members) spans 2 hosts")" "$_spans" \
       "lookup $_knob fails: $_spans ranks see the world span 2 hosts"
    is "$rc" 0 "lookup $_knob fails: every rank exits 0"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | grep -v DEBUG | tail -30)"
    out2=$(TODIST_TEST_HOST_UNKNOWN=$_knob TODIST_COLL_SHM=1 \
           run 120 todist-run -n 4 "$PEER" small 50 2>&1); rc=$?
    is "$(printf '%s\n' "$out2" | grep -cx "PASS small")" 4 \
       "lookup $_knob fails: 50 all_reduces of auto's choice pass on all 4"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out2" | tail -30)"
}

case_ 1:2 shm 0
unlike "$out" "host of rank 2 unknown" \
       "lookup 1:2 fails: rank 1's failed lookup is not used, nor warned about"
case_ 0:2 hier 4
like "$(printf '%s\n' "$out" | grep "^todist\[rank 0\]")" \
     "host of rank 2 unknown, counted as a host of its own by every member: runtime: rank 2 never published its address \(TODIST_TEST_HOST_UNKNOWN" \
     "lookup 0:2 fails: rank 0 warns, naming rank 2 and why"
unlike "$(printf '%s\n' "$out" | grep -v "^todist\[rank 0\]")" "host of rank 2 unknown" \
       "lookup 0:2 fails: only rank 0 looks the hosts up"
# two2 KNOB: 2 ranks, the rings and the binomial broadcast forced, the
# chunks' sizes (64 KiB to 8 MiB) with exact values
two2() {
    out=$(TODIST_TEST_HOST_UNKNOWN=$1 TODIST_COLL_SHM=0 \
          run 120 todist-run -n 2 "$PEER" chunks \
          "all_reduce:ring,broadcast:binomial,all_gather:ring,reduce_scatter:ring" \
          2>&1); rc=$?
    is "$(printf '%s\n' "$out" | grep -cx "PASS chunks")" 2 \
       "2 ranks, lookup $1 fails: the rings and the binomial broadcast pass on both"
    unlike "$out" "sent [0-9]+ bytes for step" \
           "2 ranks, lookup $1 fails: both ends of each link cut it alike"
    is "$rc" 0 "2 ranks, lookup $1 fails: both exit 0"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -20)"
}
two2 1:0
two2 0:1
done_testing
