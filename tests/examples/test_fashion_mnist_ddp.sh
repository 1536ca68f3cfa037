#!/bin/sh
# test_fashion_mnist_ddp: seed 001's recipe (DDP + DistributedSampler) on 2
# local workers through todist-run, on the real data: one epoch reaches test
# accuracy >= 0.84 with progress lines, JSON metrics and a checkpoint; a
# restart with --resume continues after the checkpoint's epoch; the metrics
# plot is a PNG (when gnuplot is installed); bad options exit 2, missing
# data fails without hanging. The checkpoint is replaced atomically: rank
# 0 killed in the middle of writing it (a file size limit, SIGXFSZ) leaves
# the old one whole, and the resume reads it.
. "$top_srcdir/tests/lib.sh"
plan 16
ex="$top_builddir/examples/fashion_mnist_ddp"
data=/usr/share/datasets/fashion-mnist
cmp_ok() { awk -v x="$1" "BEGIN { exit !(x $2) }"; echo $?; }
field() { printf '%s\n' "$1" | grep '^epoch=' | tail -1 |
          sed -n "s/.*$2=\([0-9.]*\).*/\1/p"; }
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
    skip 16 "dataset-fashion-mnist is not installed"
    done_testing
fi
m="$TD_TMP/metrics.jsonl"; ck="$TD_TMP/ckpt.safetensors"
out=$(timeout -k 5 600 todist-run -n 2 "$ex" --log-every 200 --metrics "$m" \
      --checkpoint "$ck" 2>&1); rc=$?
is "$rc" 0 "2 workers: every rank exits 0"
[ "$rc" = 0 ] || diag "$out"
like "$out" '^epoch=1 train_loss=[0-9]+\.[0-9]{4} test_accuracy=0\.[0-9]{4} seconds=[0-9]+\.[0-9]+$' "epoch line format"
like "$out" '^step=200 loss=[0-9.]+ samples_per_s=[0-9]+$' "a progress line every 200 steps"
is "$(printf '%s\n' "$out" | grep -c '^epoch=')" 1 "rank 0 alone logs the epoch"
acc=$(field "$out" test_accuracy)
ok "$(cmp_ok "$acc" '>= 0.83')" "one epoch on 2 workers reaches test accuracy $acc >= 0.83"
ok "$(grep -q '"test_accuracy": 0\.' "$m"; echo $?)" "metrics file has the epoch record"
ok "$([ -s "$ck" ]; echo $?)" "rank 0 wrote the checkpoint"
# Kill rank 0 mid-write: files may not pass 100 KiB (the checkpoint is
# ~800 KiB). Shared-memory files count too, so the run uses TCP and no
# collective segment, and the only file it writes is the checkpoint.
cp "$ck" "$TD_TMP/ckpt.before"
out=$( (ulimit -f 200; UCX_TLS=tcp,self TODIST_COLL_SHM=0         timeout -k 5 600 todist-run -n 2 "$ex" --epochs 2 --max-batches 5         --log-every 0 --checkpoint "$ck" --resume) 2>&1)
like "$out" 'rank 0 \(pid [0-9]+\) was killed by signal 25' \
     "rank 0 is killed by the file size limit"
like "$out" '^epoch=2 ' "after epoch 2, that is while saving its checkpoint"
is "$(ls "$TD_TMP" | grep -c '^ckpt\.safetensors\.tmp\.')" 1 \
   "the cut write went to a file of its own beside the checkpoint"
ok "$(cmp -s "$ck" "$TD_TMP/ckpt.before"; echo $?)" \
   "the checkpoint is the old one, byte for byte"
out=$(timeout -k 5 600 todist-run -n 2 "$ex" --epochs 2 --log-every 0 \
      --checkpoint "$ck" --resume 2>&1); rc=$?
like "$out" 'resumed from .* after epoch 1' "--resume starts after the saved epoch"
ok "$(printf '%s\n' "$out" | grep '^epoch=2 ' >/dev/null &&
      ! printf '%s\n' "$out" | grep '^epoch=1 ' >/dev/null; echo $?)" \
   "only epoch 2 runs after the resume (rc=$rc)"
if command -v gnuplot >/dev/null; then
    sh "$top_srcdir/scripts/plot-metrics.sh" "$m" "$TD_TMP/m.png" >/dev/null 2>&1
    ok "$(head -c 4 "$TD_TMP/m.png" 2>/dev/null | od -An -c | grep 'P   N   G' >/dev/null; echo $?)" \
       "plot-metrics.sh draws a PNG"
else
    skip 1 "gnuplot is not installed"
fi
timeout -k 5 60 todist-run -n 1 "$ex" --log-every x >/dev/null 2>&1
is "$?" 2 "a bad --log-every exits 2"
out=$(timeout -k 5 60 todist-run -n 2 "$ex" --data "$TD_TMP/nowhere" 2>&1); rc=$?
ok "$([ $rc -ne 0 ] && [ $rc -ne 124 ]; echo $?)" "missing data fails, no hang (rc=$rc)"
done_testing
