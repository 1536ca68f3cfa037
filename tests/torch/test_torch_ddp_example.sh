#!/bin/sh
# examples/torch_ddp.py, the recipe of docs/pytorch.md, runs under
# todist-run as `todist-run -n 2 examples/torch_ddp.py` (a .py under
# $PYTHON), learns (test accuracy), writes its checkpoint from rank 0 and
# resumes from it at the next epoch. Skipped without torch or the data.
. "$top_srcdir/tests/lib.sh"
td_sanitized && skip_all "$TD_SANITIZED_WHY"
PY=${TD_PYTHON:-/usr/bin/python3}
[ -x /usr/bin/python3 ] && ! "$PY" -c 'import torch' 2>/dev/null && PY=/usr/bin/python3
"$PY" -c 'import torch.distributed, numpy' 2>/dev/null ||
    skip_all "torch and numpy not importable by $PY"
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    skip_all "Fashion-MNIST not installed (dataset-fashion-mnist)"
plan 5
export PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}"
export TODIST_LIBRARY="$top_builddir/.libs/libtodist.so.0"
export OMP_NUM_THREADS=1 PYTHON=$PY
ck=$TD_TMP/ck.pt
ex() { timeout -k 5 300 todist-run -n 2 "$top_srcdir/examples/torch_ddp.py" \
           --limit 12000 --epochs 1 --checkpoint "$ck" 2>&1; }
out=$(ex); rc=$?
is "$rc" 0 "todist-run -n 2 examples/torch_ddp.py exits 0"
acc=$(printf '%s\n' "$out" | sed -n 's/^epoch=0 .*test_accuracy=\([0-9.]*\).*/\1/p')
ok "$(awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.70) }'; echo $?)" \
   "one epoch of 12,000 images learns: test accuracy $acc > 0.70"
ok "$([ -s "$ck" ]; echo $?)" "rank 0 wrote the checkpoint"
[ "$rc" = 0 ] || diag "$out"
out=$(ex); rc=$?
is "$rc" 0 "a second run exits 0"
like "$out" "^epoch=1 " "the second run resumed from the checkpoint (epoch 1)"
done_testing
