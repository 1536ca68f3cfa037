#!/bin/sh
# test_zero_elastic: ZeRO re-shards itself in an in-place recovery
# (todist/zero.h R1-R4) through tests/elastic/zero_el_worker on 4 ranks
# under todist-run --no-kill. Each worker steps, in its own process, a
# reference Adam over the whole vector with the same (exactly summed)
# averaged gradients at each committed step's world size; every survivor's
# loss must equal the reference's bit for bit at every step, and its
# shard's Adam moments and step count the reference's elements after each
# re-shard and at the end (the gradients are quarter-integers, so no sum
# depends on the collective's order: bit for bit is the right tolerance).
#  1. avg (td_zero_step_averaged), rank 1 killed after step 4's gradient
#     all-reduce: the survivors step their shards and fail in the
#     all-gather; step 4 is dropped (their snapshots, R3), rank 1's shard
#     comes from rank 0's replica, and steps 4-7 run at world 3. At step 2
#     every rank saved a checkpoint and loaded it back (the replica is
#     read from the shard files too: rank 0's must be right at step 4).
#  2. rs (td_zero_step: the replica's gradient sent by its owner, R2), rank
#     3 killed before step 3: its shard from rank 2's replica.
#  3. avg under --replace 1 (TODIST_ELASTIC_ADMIT_WAIT=60), rank 2 killed
#     before step 3: the replacement joins at step G (td_zero_join), is
#     healed with its shard and replica, and all four run 3 more steps.
#  4. ranks 1 and 2 killed before step 3: shard 2's owner and its replica
#     keeper are both gone: every survivor's td_zero_set_group refuses,
#     naming shard 2.
#  5. rank 1 killed before step 4 without replicate: refused, naming
#     shard 1 and the missing replica.
# Bounded by timeout.
. "$top_srcdir/tests/lib.sh"
plan 23
w="$top_builddir/tests/elastic/zero_el_worker"

# every "loss L ref L'" line of OUT has L = L' (prints the bad ones)
loss_bad() { printf '%s\n' "$1" | grep ' loss ' | awk '$8 != $10'; }
nloss() { printf '%s\n' "$1" | grep -c "^rank [0-9] step $2 world $3 loss "; }

# --- 1: death inside a step (avg), shard from the replica ---
out=$(timeout -k 5 120 todist-run -n 4 --no-kill "$w" avg 1 -1 4 mid 7 rep "$TD_TMP" 2>&1)
rc=$?
is "$(printf '%s\n' "$out" | grep -c '^rank [0-3] saved and loaded at step 2$')" 4 \
   "1: every rank saves, frees its optimizer and loads the state into a new one at step 2"
is "$rc" 137 "1: the launcher exits with the dead rank's status"
is "$(printf '%s\n' "$out" | grep -c '^rank [023] recovered: epoch 1 step 3 behind 0 world 4 -> 3$')" 3 \
   "1: step 4 is dropped on every survivor (world 4 -> 3)"
ok "$([ "$(printf '%s\n' "$out" | grep -c '^rank [023] step 4 failed in the ZeRO step$')" -ge 1 ]; echo $?)" \
   "1: a survivor had stepped its shard when the all-gather failed"
is "$(printf '%s\n' "$out" | grep -c '^rank [023] state ok after the re-shard$')" 3 \
   "1: every re-cut shard holds the reference's moments and step"
is "$(nloss "$out" 7 3)" 3 "1: every survivor reaches step 7 at world 3"
is "$(loss_bad "$out")" "" "1: every loss equals the reference's, bit for bit"
is "$(printf '%s\n' "$out" | grep -c '^rank [023] state ok at the end$')" 3 \
   "1: and every shard's state at the end"
[ "$rc" = 137 ] || diag "$out"

# --- 2: td_zero_step (reduce-scatter), death before a step ---
out=$(timeout -k 5 120 todist-run -n 4 --no-kill "$w" rs 3 -1 3 before 6 rep 2>&1)
rc=$?
is "$(printf '%s\n' "$out" | grep -c '^rank [012] recovered: epoch 1 step 2 behind 0 world 4 -> 3$')" 3 \
   "2: step 3 is dropped on every survivor"
is "$(printf '%s\n' "$out" | grep -c '^rank [012] state ok after the re-shard$')" 3 \
   "2: rank 3's shard comes back from rank 2's replica"
is "$(nloss "$out" 6 3)" 3 "2: every survivor reaches step 6 at world 3"
is "$(loss_bad "$out")" "" "2: every loss equals the reference's"
is "$(printf '%s\n' "$out" | grep -c '^rank [012] state ok at the end$')" 3 \
   "2: and every shard's state at the end"
[ "$rc" = 137 ] || diag "$out"

# --- 3: a replacement joins and is healed with its shard ---
out=$(TODIST_ELASTIC_ADMIT_WAIT=60 timeout -k 5 120 todist-run -n 4 \
      --no-kill --replace 1 "$w" avg 2 -1 3 before -1 rep 2>&1)
rc=$?
is "$rc" 0 "3: the launcher exits 0 (the failure was replaced)"
g=$(printf '%s\n' "$out" | sed -n 's/^rank 2 joined at step \([0-9]*\)$/\1/p')
ok "$([ -n "$g" ]; echo $?)" "3: the replacement joins at step G (${g:-none})"
is "$(printf '%s\n' "$out" | grep -c '^rank 2 state ok after the join$')" 1 \
   "3: its shard holds the reference's state at G"
is "$(printf '%s\n' "$out" | grep -c '^rank [013] state ok after the growth$')" 3 \
   "3: and every member's re-cut shard"
is "$(nloss "$out" "$((${g:-0} + 3))" 4)" 4 "3: all four reach step G + 3 at world 4"
is "$(loss_bad "$out")" "" "3: every loss equals the reference's"
is "$(printf '%s\n' "$out" | grep -c '^rank [0-3] state ok at the end$')" 4 \
   "3: and every shard's state at the end"
[ "$rc" = 0 ] || diag "$out"

# --- 4: a shard and its replica both lost ---
out=$(timeout -k 5 120 todist-run -n 4 --no-kill "$w" avg 1 2 3 before 6 rep 2>&1)
is "$(printf '%s\n' "$out" | grep -c '^rank [03] reshard refused: zero: re-shard: the optimizer state of shard 2 of 4 (11 elements) at step 2 is lost: its owner (old rank 2) and the rank keeping its replica (old rank 1) both left')" 2 \
   "4: two neighbours lost: every survivor refuses, naming shard 2"
is "$(printf '%s\n' "$out" | grep -c ' loss ')" 8 "4: no step after the deaths"

# --- 5: no replica ---
out=$(timeout -k 5 120 todist-run -n 4 --no-kill "$w" avg 1 -1 4 before 7 norep 2>&1)
is "$(printf '%s\n' "$out" | grep -c '^rank [023] reshard refused: .*shard 1 of 4 (11 elements) at step 3 is lost: its owner (old rank 1) left and the optimizer keeps no replica')" 3 \
   "5: without replicate every survivor refuses, naming shard 1"
done_testing
