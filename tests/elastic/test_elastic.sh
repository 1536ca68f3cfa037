#!/bin/sh
# test_elastic: examples/fashion_mnist_ddp --elastic under todist-run.
#  1. 2 ranks, --max-restarts 2: rank 1 is SIGKILLed mid-training (once
#     the loss log shows step 20, both ranks are frozen with SIGSTOP, the
#     log is checked to be short of the end, rank 1 is killed and rank 0
#     let go); the launcher names it and restarts the
#     group, which resumes from the last checkpoint; training ends at the
#     expected last step with every step logged, and its last epoch's
#     train loss and test accuracy are within bounds (0.05, 0.01) of an
#     uninterrupted run's.
#  2. Another world size: 4 steps at 2 ranks (a checkpoint at step 4,
#     128 indices of epoch 1 consumed per rank), then the rest at 3 ranks:
#     without --elastic the load is refused naming num_replicas; with it
#     each of the 3 ranks goes on at ceil(128 * 2 / 3) = 86 and the run
#     ends at step 13 (3 more batches of epoch 1, 6 of epoch 2), every
#     step logged once. At 1 rank the position (256 indices, 8 batches)
#     is past --max-batches 6: epoch 1 is over, steps 5-10 are epoch 2's.
# Bounded by timeout; skipped without the Fashion-MNIST data.
. "$top_srcdir/tests/lib.sh"
plan 14
ex="$top_builddir/examples/fashion_mnist_ddp"
data=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
    skip 14 "dataset-fashion-mnist is not installed"
    done_testing
fi
epoch_field() { # OUTPUT FIELD: the last epoch line's FIELD
    printf '%s\n' "$1" | grep '^epoch=' | tail -n 1 |
        sed "s/.* $2=\([^ ]*\).*/\1/"
}

# --- 1: a rank killed mid-training ---
args="--epochs 2 --max-batches 900 --batch-size 32 --hidden 64 --threads 1
      --log-every 0 --optimizer sgd"
total=1800
out0=$(timeout -k 5 300 todist-run -n 2 "$ex" $args 2>&1); rc=$?
is "$rc" 0 "the uninterrupted run exits 0"
[ "$rc" = 0 ] || diag "$out0"

timeout -k 5 300 todist-run -n 2 --max-restarts 2 "$ex" $args --elastic \
    --checkpoint "$TD_TMP/ck.safetensors" --loss-log "$TD_TMP/cut.log" \
    > "$TD_TMP/out" 2> "$TD_TMP/err" &
pid=$!
td_track_pid $pid
n=0
while [ "$(cat "$TD_TMP/cut.log" 2>/dev/null | wc -l)" -lt 20 ] && [ $n -lt 3000 ]; do
    sleep 0.05; n=$((n + 1))
done
# the ranks: the launcher's children, by the TODIST_RANK they were given
victim="" r0=""
for c in $(pgrep -P "$(pgrep -P $pid -x todist-run)"); do
    r=$(tr '\0' '\n' < /proc/$c/environ 2>/dev/null | sed -n 's/^TODIST_RANK=//p')
    [ "$r" = 1 ] && victim=$c
    [ "$r" = 0 ] && r0=$c
done
if [ -n "$victim" ] && [ -n "$r0" ]; then
    kill -STOP "$r0" "$victim"
    at=$(wc -l < "$TD_TMP/cut.log" | tr -d ' ')
    kill -9 "$victim"
    kill -CONT "$r0"
fi
ok "$([ -n "$victim" ] && [ "${at:-$total}" -lt $total ]; echo $?)" \
   "rank 1 (pid ${victim:-none}) killed mid-training, at step ${at:-none} of $total"
wait $pid; rc=$?
out=$(cat "$TD_TMP/out"); err=$(cat "$TD_TMP/err")
is "$rc" 0 "the elastic run exits 0 after the kill"
[ "$rc" = 0 ] || diag "$out" "$err"
like "$err" "restarting the group \(1 of 2\), round 1: rank 1 \(pid $victim\) was killed by signal 9 \(Killed\); world 2 ranks" \
     "the restart names the killed rank, the round and the world"
like "$out" 'resumed from .* after epoch [0-9] step [0-9]+ \(restart 1, world 2' \
     "round 1 resumes from the checkpoint"
is "$(tail -n 1 "$TD_TMP/cut.log" | cut -d' ' -f1)" $total \
   "training ends at step $total"
is "$(cut -d' ' -f1 "$TD_TMP/cut.log" | sort -n -u | wc -l | tr -d ' ')" $total \
   "every step 1..$total is logged"
l0=$(epoch_field "$out0" train_loss); l1=$(epoch_field "$out" train_loss)
a0=$(epoch_field "$out0" test_accuracy); a1=$(epoch_field "$out" test_accuracy)
ok "$(awk -v a="$l0" -v b="$l1" -v x="$a0" -v y="$a1" 'BEGIN {
        d = a - b; e = x - y; if (d < 0) d = -d; if (e < 0) e = -e
        exit !(a != "" && b != "" && x != "" && y != "" && d <= 0.05 && e <= 0.01) }'; echo $?)" \
   "last epoch within bounds: train loss $l1 vs $l0, accuracy $a1 vs $a0"

# --- 2: resume at another world size ---
args="--epochs 2 --max-batches 6 --batch-size 32 --hidden 32 --threads 1
      --log-every 0 --optimizer sgd"
ck="$TD_TMP/ws.safetensors"
o1=$(timeout -k 5 300 todist-run -n 2 "$ex" $args --elastic --checkpoint "$ck" \
     --checkpoint-every 2 --max-steps 4 --loss-log "$TD_TMP/ws.log" 2>&1); rc1=$?
o2=$(timeout -k 5 300 todist-run -n 3 "$ex" $args --resume --checkpoint "$ck" 2>&1)
rc2=$?
ok "$([ "$rc1" = 0 ] && [ "$rc2" != 0 ]; echo $?)" \
   "4 steps at 2 ranks (rc $rc1); at 3 ranks without --elastic the load is refused (rc $rc2)"
like "$o2" "num_replicas 2, this run's sampler has 3 \(resuming at another world size needs td_checkpoint_allow_reshard\)" \
     "the refusal names num_replicas and the way out"
o3=$(timeout -k 5 300 todist-run -n 3 "$ex" $args --elastic --checkpoint "$ck" \
     --loss-log "$TD_TMP/ws.log" 2>&1); rc3=$?
is "$rc3" 0 "the rest at 3 ranks exits 0"
[ "$rc3" = 0 ] || diag "$o1" "$o3"
like "$o3" "resumed from .* after epoch 0 step 4 \(restart 0, world 3, epoch position $(( (128 * 2 + 2) / 3 ))\)" \
     "each of 3 ranks goes on at ceil(128 * 2 / 3) = 86"
is "$(cut -d' ' -f1 "$TD_TMP/ws.log" | tr '\n' ' ')" "1 2 3 4 5 6 7 8 9 10 11 12 13 " \
   "steps 1-4 at 2 ranks, 5-13 at 3, each once"
# at 1 rank the same checkpoint puts epoch 1 at ceil(128 * 2 / 1) = 256
# indices, 8 batches: past --max-batches 6, so epoch 1 is over
ck1="$TD_TMP/ws1.safetensors"
timeout -k 5 300 todist-run -n 2 "$ex" $args --elastic --checkpoint "$ck1" \
    --checkpoint-every 2 --max-steps 4 --loss-log "$TD_TMP/ws1.log" > /dev/null 2>&1
o4=$(timeout -k 5 300 todist-run -n 1 "$ex" $args --elastic --checkpoint "$ck1" \
     --loss-log "$TD_TMP/ws1.log" 2>&1); rc4=$?
is "$rc4 $(cut -d' ' -f1 "$TD_TMP/ws1.log" | tr '\n' ' ')" "0 1 2 3 4 5 6 7 8 9 10 " \
   "at 1 rank epoch 1 is done (8 batches of 6): steps 5-10 are epoch 2's"
[ "$rc4" = 0 ] || diag "$o4"
done_testing
