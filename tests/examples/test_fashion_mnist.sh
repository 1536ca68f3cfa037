#!/bin/sh
# test_fashion_mnist: the example trains on the real data. One full epoch
# with the defaults (seconds on one core) must print the documented line
# and reach test accuracy >= 0.84; a bounded Adam run (100 batches) must
# beat chance by far; a missing data directory fails naming the file.
. "$top_srcdir/tests/lib.sh"
plan 8
ex="$top_builddir/examples/fashion_mnist"
data=/usr/share/datasets/fashion-mnist
# exit status 0 when awk finds "X OP" true
cmp_ok() { awk -v x="$1" "BEGIN { exit !(x $2) }"; echo $?; }
field() { printf '%s\n' "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p"; }
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
    skip 8 "dataset-fashion-mnist is not installed"
    done_testing
fi
out=$(timeout 300 "$ex" 2>&1)
like "$out" '^epoch=1 train_loss=[0-9]+\.[0-9]{4} test_accuracy=0\.[0-9]{4} seconds=[0-9]+\.[0-9]$' "epoch line format"
loss=$(field "$out" train_loss); acc=$(field "$out" test_accuracy)
ok "$(cmp_ok "$loss" '> 0 && x < 0.7')" "sgd: loss fell from 2.30 to $loss"
ok "$(cmp_ok "$acc" '>= 0.84')" "sgd: one epoch reaches test accuracy $acc >= 0.84"
out=$(timeout 300 "$ex" --max-batches 100 --optimizer adam --seed 3 2>&1)
acc=$(field "$out" test_accuracy)
ok "$(cmp_ok "$acc" '> 0.65')" "adam: test accuracy $acc > 0.65 after 100 batches"
ck="$TD_TMP/mlp.safetensors"
timeout 300 "$ex" --max-batches 5 --save "$ck" >/dev/null 2>&1
ok "$([ -s "$ck" ]; echo $?)" "--save writes a checkpoint"
like "$(head -c 400 "$ck" | tr -d '\000')" '"fc1.weight":\{"dtype":"F32","shape":\[256,784\]' "in safetensors layout with the layer names"
out=$("$ex" --data "$TD_TMP/nowhere" 2>&1); rc=$?
ok "$([ $rc -ne 0 ]; echo $?)" "missing data directory fails (rc=$rc)"
like "$out" 'nowhere/train-images-idx3-ubyte.gz' "and names the file"
done_testing
