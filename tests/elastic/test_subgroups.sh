#!/bin/sh
# test_subgroups: subgroups made with td_group_new shrink and grow with the
# world in an in-place recovery (todist/elastic.h EL10, coll group.c
# G1-G4), through tests/elastic/subgroup_worker on 4 ranks under
# todist-run --no-kill: groups A = {0,1}, B = {2,3}, C = {0,2}, rank 2
# killed before step 3. Every subgroup all_reduce's sum, size and group
# rank is checked against the members worked out in the worker from the
# layout and who is dead.
#  1. shrink: the survivors go on to step 6 with B = {3} and C = {0}
#     re-formed (A untouched); td_group_lost names rank 2 for B and C on
#     every survivor (members or not); rank 0's ZeRO optimizer over C
#     refuses to step, naming both sizes (zero.h Z5), and made again over
#     C and loaded from the checkpoint ranks 0 and 2 saved at step 2, its
#     re-cut momentum and parameters are the saved ones (elastic.c EL9).
#  2. grow (--replace 1): the replacement joins, makes the same groups,
#     and B and C are whole again for 3 more steps on all four ranks.
. "$top_srcdir/tests/lib.sh"
plan 11
w="$top_builddir/tests/elastic/subgroup_worker"
ok_lines() { printf '%s\n' "$1" | grep -c "^rank [0-9] subgroups checked [1-9][0-9]* bad 0 step $2 world $3\$"; }

out=$(timeout -k 5 120 todist-run -n 4 --no-kill "$w" shrink "$TD_TMP" 2>&1); rc=$?
is "$rc" 137 "shrink: the launcher exits with the dead rank's status"
is "$(ok_lines "$out" 6 3)" 3 \
   "shrink: every survivor's subgroup results, sizes and ranks are right through step 6"
[ "$(ok_lines "$out" 6 3)" = 3 ] || diag "$out"
is "$(printf '%s\n' "$out" | grep -c '^rank [013] lost: A=0 B=1(2) C=1(2)$')" 3 \
   "shrink: every survivor sees B and C lost rank 2, A nothing"
like "$out" "rank 0 zero over C: zero: its group has 1 members \\(this rank 0\\), the shards were cut for 2 \\(rank 0\\)" \
   "shrink: a ZeRO optimizer over a shrunk group refuses to step"
like "$out" "rank 0 zero rebuilt over C \\(1 rank\\) from the checkpoint: momentum 2.9 param -0.39 ok" \
   "shrink: made again over C and loaded, its re-cut state is the saved one"
is "$(printf '%s\n' "$out" | grep -c 'coll: epoch 1: group [23] (made with 2 ranks) re-formed: 2 -> 1 members')" 6 \
   "shrink: each survivor logs the re-forms of B and C once"

out=$(timeout -k 5 120 todist-run -n 4 --no-kill --replace 1 "$w" grow 2>&1); rc=$?
is "$rc" 0 "grow: the launcher exits 0 (the failure was replaced)"
[ "$rc" = 0 ] || diag "$out"
like "$out" "rank 2 joined at step [0-9]+" "grow: the replacement joins"
g=$(printf '%s\n' "$out" | sed -n 's/^rank 2 joined at step \([0-9]*\)$/\1/p')
is "$(ok_lines "$out" "$((g + 3))" 4)" 4 \
   "grow: all four ranks' subgroup results, sizes and ranks are right to step G+3"
is "$(printf '%s\n' "$out" | grep -c '^rank [013] lost: A=0 B=0 C=0$')" 3 \
   "grow: the members' B and C have lost no one again"
is "$(printf '%s\n' "$out" | grep -c '^rank [013] lost: A=0 B=1(2) C=1(2)$')" 3 \
   "grow: after the death they had lost rank 2"
done_testing
