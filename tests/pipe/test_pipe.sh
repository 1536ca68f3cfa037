#!/bin/sh
# Pipeline parallelism over real point-to-point and UCX, through todist-run
# (tests/pipe/pipe_peer): gradients of every schedule equal single-process
# accumulation over the same micro-batches (float64 1e-12, float32 1e-5)
# for S = 1, 2, 3 stages and M = 1, 4, 7 micro-batches, two steps each
# (the second reusing the first's receive buffers), and with a stage that
# ends in a linear layer;
# 2 stages x 2 replicas average over the replicas; a stage whose forward
# fails fails every stage's step naming it; a stage killed mid-step fails
# every other stage within 2 s naming it; a stage waiting for a late
# neighbour drives the transport rather than sleeping (P8); stage 0
# computes its input's gradient only when asked (P9); each stage's
# trace holds its ops in order (P7); bad arguments are refused with
# clear errors. Bounded by timeout; lib.sh cleans up.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/pipe/pipe_peer"
run() { timeout -k 5 "$@"; }

grads=""
for sc in gpipe 1f1b zb; do
    for m in 1 4 7; do
        grads="$grads grad_M${m}_${sc}_f64 grad_M${m}_${sc}_f32"
    done
done
count() { set -- $1; echo $#; }
plan $(( 3 * ($(count "$grads") + 1) + 3 + 3 + 3 + 3 + 4 + 2 + 5 + 1 + 4 + 2 * 8 ))

for S in 1 2 3; do
    out=$(run 240 env TODIST_PIPE_POISON=1 todist-run -n $S "$PEER" grad 2>&1); rc=$?
    names=$(for g in $grads; do echo "$g" | sed "s/^grad_/grad_S${S}_/"; done)
    expect "$out" $names
    is "$rc" 0 "S=$S: every rank exits 0"
    [ "$rc" = 0 ] || diag "$out"
done

# stage 0 ends in a linear layer: ZB's W reads the received gradient,
# which the kept receive buffers must not reuse before W ran (P6). The
# buffers are poisoned as they go back to the pool (TODIST_PIPE_POISON),
# so one given back before its W fails every run, not only the runs where
# the next receive happened to land in it before W read it (1 in 8)
out=$(run 120 env TODIST_PIPE_POISON=1 todist-run -n 2 "$PEER" gradlin 2>&1); rc=$?
expect "$out" gradlin_S2_M4_1f1b gradlin_S2_M4_zb
is "$rc" 0 "gradlin: every rank exits 0"

out=$(run 120 todist-run -n 4 "$PEER" hybrid 2 2>&1); rc=$?
expect "$out" hybrid_S2_R2_1f1b hybrid_S2_R2_zb
is "$rc" 0 "hybrid: every rank exits 0"

# each stage's trace (P7): its ops in the schedule's order, a wait before
# and a send after each op that needs or makes a message, on one clock
out=$(run 120 todist-run -n 2 "$PEER" trace 2>&1); rc=$?
expect "$out" trace_S2_M4_gpipe trace_S2_M4_1f1b trace_S2_M4_zb
is "$rc" 0 "trace: every rank exits 0"

# P8: a stage waiting for a late neighbour drives the transport instead
# of sleeping (counted in the wait's own decisions to sleep, not in time
# nor in context switches, which load adds)
out=$(run 60 todist-run -n 2 "$PEER" spin 2>&1); rc=$?
expect "$out" spin_drives_instead_of_sleeping
is "$rc" 0 "spin: every rank exits 0"
printf '%s\n' "$out" | grep '^# stage 1 waiting'
# P8 with the ranks bound to a core each (TODIST_BIND=closest): they still
# have a core of their own, so the default spins
if [ "$(nproc)" -ge 2 ]; then
    out=$(TODIST_BIND=closest TODIST_LOG=debug run 60 todist-run -n 2 "$PEER" spinbound 2>&1); rc=$?
    expect "$out" spinbound_each_rank_bound_to_one_core spinbound_pipe_made
    is "$(printf '%s\n' "$out" | grep -c 'waiting stage drives the transport for 50 ms (P8; 2 ranks on this host, [0-9]* cores before placement)')" 2 \
        "spinbound: both bound stages keep P8's 50 ms"
    is "$rc" 0 "spinbound: every rank exits 0"
else
    skip 4 "spinbound: fewer than 2 cores"
fi

out=$(run 60 todist-run -n 3 "$PEER" error 2>&1); rc=$?
expect "$out" error_fails_every_stage_naming_it error_next_step_fails_at_once
is "$rc" 0 "error: every rank exits 0"

out=$(run 60 todist-run -n 3 --grace-period 20 "$PEER" kill 2>&1); rc=$?
is "$(printf '%s\n' "$out" | grep -c '^KILL rank=[02] step=1 failed=1 ')" 2 \
   "kill: both survivors' second step failed"
is "$(printf '%s\n' "$out" | grep '^KILL' | grep -c 'stage 1 (rank 1, replica 0) died')" 2 \
   "kill: each names the dead stage and rank"
is "$(printf '%s\n' "$out" | sed -n 's/^KILL .* after=\([0-9.]*\) .*/\1/p' |
      awk '$1 <= 10.0' | wc -l)" 2 "kill: each failed by detection (<= 10 s; the step's timeout is far above)"
[ "$(printf '%s\n' "$out" | grep -c '^KILL')" = 2 ] || diag "$out"

# P9: stage 0 computes no gradient of its input unless asked
# (opts.input_grad), in every schedule: the input-gradient products of
# its first op counted, not timed
for S in 1 2; do
    out=$(run 120 env TODIST_PIPE_POISON=1 todist-run -n $S "$PEER" ingrad 2>&1); rc=$?
    expect "$out" $(for sc in gpipe 1f1b zb; do
                        echo "ingrad_S${S}_${sc}_not_asked ingrad_S${S}_${sc}_asked"
                    done) ingrad_needs_an_input_that_requires_grad
    is "$rc" 0 "ingrad S=$S: every rank exits 0"
done

out=$(run 60 todist-run -n 2 "$PEER" badargs 2>&1); rc=$?
expect "$out" bad_zero_microbatches bad_more_stages_than_ranks \
    bad_batch_not_divisible bad_shape_changes_between_microbatches \
    bad_shape_changes_between_minibatches
is "$rc" 0 "badargs: every rank exits 0"
done_testing
