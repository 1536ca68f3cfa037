#!/bin/sh
# test_resume: examples/fashion_mnist_ddp on 2 ranks under todist-run
# resumes exactly: 12 steps uninterrupted, and the same 12 steps cut twice
# (after step 4, mid-epoch 1, and after step 9, mid-epoch 2), each part a
# fresh todist-run that --resume's from the --checkpoint, give the same
# loss at every step, bit for bit (%a), and the same epoch lines. The
# checkpoint is a safetensors file whose JSON header names every state,
# and a hand parser reads its layout and values as a user would, and so
# does the format's own reader (the safetensors package from PyPI, which
# scripts/install-deps.sh installs where PyPI is reachable).
# Bounded by timeout; skipped without the Fashion-MNIST data.
. "$top_srcdir/tests/lib.sh"
plan 10
ex="$top_builddir/examples/fashion_mnist_ddp"
data=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
    skip 10 "dataset-fashion-mnist is not installed"
    done_testing
fi
args="--epochs 2 --max-batches 6 --batch-size 32 --hidden 32 --threads 1
      --log-every 0 --optimizer sgd"
run() { timeout -k 5 300 todist-run -n 2 "$ex" $args "$@" 2>&1; }
epochs() { printf '%s\n' "$1" | grep '^epoch=' | sed 's/ seconds=.*//'; }

out0=$(run --loss-log "$TD_TMP/whole.log"); rc=$?
is "$rc" 0 "the uninterrupted run exits 0"
[ "$rc" = 0 ] || diag "$out0"
ck="$TD_TMP/ck.safetensors"
out1=$(run --loss-log "$TD_TMP/cut.log" --checkpoint "$ck" --resume \
       --max-steps 4); rc1=$?
out2=$(run --loss-log "$TD_TMP/cut.log" --checkpoint "$ck" --resume \
       --max-steps 9); rc2=$?
out3=$(run --loss-log "$TD_TMP/cut.log" --checkpoint "$ck" --resume); rc3=$?
is "$rc1 $rc2 $rc3" "0 0 0" "the three cut runs exit 0"
[ "$rc1$rc2$rc3" = 000 ] || diag "$out1" "$out2" "$out3"
like "$out2" 'resumed from .* after epoch 0 step 4' \
     "the second run resumes at step 4, mid-epoch 1"
like "$out3" 'resumed from .* after epoch 1 step 9' \
     "the third at step 9, mid-epoch 2"
is "$(wc -l < "$TD_TMP/cut.log" | tr -d ' ')" 12 "12 steps in all"
ok "$(cmp -s "$TD_TMP/whole.log" "$TD_TMP/cut.log"; echo $?)" \
   "every step's loss equals the uninterrupted run's, bit for bit"
cmp -s "$TD_TMP/whole.log" "$TD_TMP/cut.log" ||
    diag "$(paste "$TD_TMP/whole.log" "$TD_TMP/cut.log")"
is "$(epochs "$(printf '%s\n%s\n%s\n' "$out1" "$out2" "$out3")")" "$(epochs "$out0")" \
   "the same epoch lines (train loss, test accuracy)"
hdr=$(python3 - "$ck" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
print(h["__metadata__"]["format"], h["step"]["dtype"],
      " ".join(k for k in ("fc1.weight", "optim.0.buf.0", "optim.0.step",
                           "optim.lr", "ddp.bucket_order", "sampler.state",
                           "epoch_loss_sum") if k in h))
PY
)
is "$hdr" "todist.checkpoint.v1 I64 fc1.weight optim.0.buf.0 optim.0.step optim.lr ddp.bucket_order sampler.state epoch_loss_sum" \
   "the checkpoint's JSON header names every state"
# A user can read it without todist: the safetensors layout read by hand
# (the format's rules: every entry's bytes are dtype size x elements, the
# entries tile the byte buffer from 0 to its end without a gap or an
# overlap), and the values: the step is 12, the weights finite and not 0.
body=$(python3 - "$ck" <<'PY'
import json, math, struct, sys
size = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
        "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
buf = data[8 + n:]
h.pop("__metadata__", None)
spans, bad = [], []
for k, e in h.items():
    b, end = e["data_offsets"]
    want = size[e["dtype"]] * math.prod(e["shape"])
    if end - b != want:
        bad.append(k)
    spans.append((b, end))
spans.sort()
at = 0
for b, end in spans:
    if b != at:
        bad.append("gap or overlap at %d" % b)
    at = end
if at != len(buf):
    bad.append("entries end at %d of %d bytes" % (at, len(buf)))
def arr(k, fmt):
    b, end = h[k]["data_offsets"]
    return struct.unpack("<%d%s" % ((end - b) // struct.calcsize(fmt), fmt),
                         buf[b:end])
w = arr("fc1.weight", "f")
print("bad: " + ", ".join(bad) if bad else "layout ok",
      "step", arr("step", "q")[0],
      "weights", "finite" if all(math.isfinite(x) for x in w) else "NOT finite",
      "nonzero" if any(w) else "zero", len(w))
PY
)
like "$body" "^layout ok step 12 weights finite nonzero [0-9]+$" \
   "read by hand, as a user would: the layout follows the format, step 12, finite weights"
# The format's own reader (strict: it refuses bad offsets, sizes, dtypes
# or metadata) loads every entry the header names, with the same values.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if "$py" -c 'import safetensors.numpy' 2>/dev/null; then
    ref=$("$py" - "$ck" <<'PY' 2>&1
import json, struct, sys
import numpy as np
from safetensors.numpy import load_file
t = load_file(sys.argv[1])
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
h.pop("__metadata__", None)
w = t["fc1.weight"]
print("loaded", len(t), "of", len(h), "step", int(t["step"].reshape(-1)[0]),
      w.dtype, "finite" if np.isfinite(w).all() else "NOT finite",
      "nonzero" if w.any() else "zero")
PY
)
    n_hdr=$(printf '%s\n' "$ref" | sed -n 's/^loaded [0-9]* of \([0-9]*\) .*/\1/p')
    like "$ref" "^loaded ${n_hdr:-X} of ${n_hdr:-Y} step 12 float32 finite nonzero$" \
         "read by the safetensors package: every entry, step 12, finite float32 weights"
else
    skip 1 "the safetensors package (PyPI) is not installed for $py"
fi
done_testing
