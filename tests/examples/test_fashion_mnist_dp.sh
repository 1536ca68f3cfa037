#!/bin/sh
# test_fashion_mnist_dp: TorchOpt's data-parallel recipe on 4 local workers
# through todist-run, on the real data. One full epoch with the defaults
# must print examples/fashion_mnist's epoch line and reach test accuracy
# >= 0.84; a bad option fails on every rank without hanging.
. "$top_srcdir/tests/lib.sh"
plan 5
ex="$top_builddir/examples/fashion_mnist_dp"
data=/usr/share/datasets/fashion-mnist
cmp_ok() { awk -v x="$1" "BEGIN { exit !(x $2) }"; echo $?; }
field() { printf '%s\n' "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p"; }
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
    skip 5 "dataset-fashion-mnist is not installed"
    done_testing
fi
out=$(timeout -k 5 600 todist-run -n 4 "$ex" 2>&1); rc=$?
is "$rc" 0 "4 workers: every rank exits 0"
like "$out" '^epoch=1 train_loss=[0-9]+\.[0-9]{4} test_accuracy=0\.[0-9]{4} seconds=[0-9]+\.[0-9]$' "epoch line format"
loss=$(field "$out" train_loss); acc=$(field "$out" test_accuracy)
ok "$(cmp_ok "$loss" '> 0 && x < 0.7')" "loss fell from 2.30 to $loss"
ok "$(cmp_ok "$acc" '>= 0.84')" "one epoch on 4 workers reaches test accuracy $acc >= 0.84"
[ "$rc" = 0 ] || diag "$out"
out=$(timeout -k 5 60 todist-run -n 2 "$ex" --data "$TD_TMP/nowhere" 2>&1); rc=$?
ok "$([ $rc -ne 0 ] && [ $rc -ne 124 ]; echo $?)" "missing data fails, no hang (rc=$rc)"
done_testing
