#!/usr/bin/python3
"""Generate tests/data/reference.safetensors with PyTorch 1.13 (Debian's
python3-torch): inputs, forward results and gradients of every op, in
float64 and float32, plus optimizer trajectories (SGD variants, Adam,
AdamW on a fixed MLP and batch), a grad-of-grad case and a 5-step MetaSGD
inner loop with its meta-gradient. Tests read the file; they do not need
torch. Run: /usr/bin/python3 tests/data/gen_reference.py

Naming: "<dtype>.<case>.in<i>" inputs, ".w" the fixed output weights,
".out" the forward result, ".grad<i>" d sum(out * w) / d in<i>. Index
tensors are "<case>.idx" (and ".off"), shared by both dtypes.

The file is written by hand in the safetensors layout (8-byte LE header
length, JSON header padded with spaces to 8 bytes, raw LE data), since the
`safetensors` package is not in Debian; if it is importable the file is
read back with it as a check."""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                   "reference.safetensors")
tensors = {}


def put(name, t):
    tensors[name] = t.detach().contiguous().clone()


def randn(*shape, positive=False, away=True):
    t = torch.randn(*shape, dtype=torch.float64)
    if positive:
        t = t.abs() + 0.5
    elif away:  # keep away from kinks of abs/relu
        t = torch.where(t.abs() < 0.05, torch.full_like(t, 0.1), t)
    return t


idx = torch.tensor([1, 4, 0, 4])
off = torch.tensor([0, 1, 1])
put("ce.idx", idx)
put("bag.idx", idx)
put("bag.off", off)

# name: (fn, [input shapes], positive)
CASES = {
    "add": (lambda a, b: a + b, [(3, 4), (4,)], False),
    "sub": (lambda a, b: a - b, [(3, 1), (1, 4)], False),
    "mul": (lambda a, b: a * b, [(2, 3, 4), (3, 1)], False),
    "div": (lambda a, b: a / b, [(3, 4), (4,)], True),
    "neg": (lambda a: -a, [(3, 4)], False),
    "pow3": (lambda a: a ** 3, [(3, 4)], False),
    "pow1_5": (lambda a: a ** 1.5, [(3, 4)], True),
    "exp": (torch.exp, [(3, 4)], False),
    "log": (torch.log, [(3, 4)], True),
    "sqrt": (torch.sqrt, [(3, 4)], True),
    "abs": (torch.abs, [(3, 4)], False),
    "tanh": (torch.tanh, [(3, 4)], False),
    "sigmoid": (torch.sigmoid, [(3, 4)], False),
    "relu": (torch.relu, [(3, 4)], False),
    "gelu": (F.gelu, [(3, 4)], False),
    "sum": (torch.sum, [(3, 4)], False),
    "mean": (torch.mean, [(3, 4)], False),
    "sum_dim1_keep": (lambda a: a.sum(1, keepdim=True), [(2, 3, 4)], False),
    "mean_dims02": (lambda a: a.mean((0, 2)), [(2, 3, 4)], False),
    "max_dim1": (lambda a: a.max(1)[0], [(3, 5)], False),
    "matmul": (torch.matmul, [(3, 4), (4, 5)], False),
    "matmul_bcast": (torch.matmul, [(2, 3, 4), (4, 2)], False),
    "matmul_batched": (torch.matmul, [(2, 3, 4), (2, 4, 2)], False),
    "matmul_vec": (torch.matmul, [(4,), (4, 3)], False),
    "linear": (F.linear, [(5, 4), (3, 4), (3,)], False),
    "softmax": (lambda a: torch.softmax(a, 1), [(3, 5)], False),
    "log_softmax": (lambda a: torch.log_softmax(a, -1), [(3, 5)], False),
    "ce_mean": (lambda a: F.cross_entropy(a, idx), [(4, 5)], False),
    "ce_sum": (lambda a: F.cross_entropy(a, idx, reduction="sum"), [(4, 5)],
               False),
    "nll": (lambda a: F.nll_loss(a, idx), [(4, 5)], False),
    "mse": (F.mse_loss, [(3, 4), (3, 4)], False),
    "embedding": (lambda w: F.embedding(idx, w), [(6, 3)], False),
    "bag_sum": (lambda w: F.embedding_bag(idx, w, off, mode="sum"), [(6, 3)],
                False),
    "bag_mean": (lambda w: F.embedding_bag(idx, w, off, mode="mean"), [(6, 3)],
                 False),
    "index_select": (lambda a: a.index_select(1, idx), [(2, 6)], False),
    "cat": (lambda a, b: torch.cat([a, b], 1), [(3, 2), (3, 3)], False),
    "transpose_reshape": (lambda a: a.t().reshape(-1), [(3, 4)], False),
}

for name, (fn, shapes, positive) in CASES.items():
    ins64 = [randn(*s, positive=positive) for s in shapes]
    for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        ins = [x.to(dt).requires_grad_() for x in ins64]
        out = fn(*ins)
        w = torch.randn(out.shape, dtype=torch.float64).to(dt)
        grads = torch.autograd.grad((out * w).sum(), ins)
        for i, x in enumerate(ins):
            put(f"{tag}.{name}.in{i}", x)
            put(f"{tag}.{name}.grad{i}", grads[i])
        put(f"{tag}.{name}.w", w)
        put(f"{tag}.{name}.out", out)

# ---- second order: grad of grad through linear + tanh + cross_entropy ----
x = randn(4, 3)
W = randn(5, 3).requires_grad_()
b = randn(5).requires_grad_()
loss = F.cross_entropy(torch.tanh(F.linear(x, W, b)), idx)
gW, gb = torch.autograd.grad(loss, (W, b), create_graph=True)
h = (gW ** 2).sum() + (gb ** 2).sum()
hW, hb = torch.autograd.grad(h, (W, b))
for k, v in {"x": x, "W": W, "b": b, "hW": hW, "hb": hb, "h": h}.items():
    put(f"gg.{k}", v)

# ---- MetaSGD (TorchOpt): 5 inner SGD steps of a 3-8-2 MLP on a support
# set, outer loss on a query set, meta-gradient w.r.t. the initial params --
torch.manual_seed(7)
xs, ys = torch.randn(6, 3, dtype=torch.float64), torch.tensor([0, 1, 1, 0, 1, 0])
xq, yq = torch.randn(5, 3, dtype=torch.float64), torch.tensor([1, 0, 1, 1, 0])
p0 = [randn(8, 3) * 0.5, randn(8) * 0.1, randn(2, 8) * 0.5, randn(2) * 0.1]
params = [p.clone().requires_grad_() for p in p0]


def mlp(ps, inp):
    return F.linear(torch.tanh(F.linear(inp, ps[0], ps[1])), ps[2], ps[3])


fast = params
for _ in range(5):
    inner = F.cross_entropy(mlp(fast, xs), ys)
    gs = torch.autograd.grad(inner, fast, create_graph=True)
    fast = [p - 0.3 * g for p, g in zip(fast, gs)]
outer = F.cross_entropy(mlp(fast, xq), yq)
meta = torch.autograd.grad(outer, params)
put("maml.xs", xs)
put("maml.ys", ys)
put("maml.xq", xq)
put("maml.yq", yq)
for i in range(4):
    put(f"maml.p{i}", p0[i])
    put(f"maml.meta{i}", meta[i])
put("maml.outer", outer)

# ---- optimizers: 10 steps on a fixed 20-16-4 MLP and batch (float32) ----
torch.manual_seed(11)
ox = torch.randn(32, 20)
oy = torch.randint(0, 4, (32,))
init = [torch.randn(16, 20) * 0.2, torch.randn(16) * 0.1,
        torch.randn(4, 16) * 0.2, torch.randn(4) * 0.1]
put("opt.x", ox)
put("opt.y", oy)
for i, p in enumerate(init):
    put(f"opt.p{i}", p)


def omlp(ps, inp):
    return F.linear(torch.relu(F.linear(inp, ps[0], ps[1])), ps[2], ps[3])


OPTS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_mom": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9,
                                          dampening=0.1, weight_decay=0.01),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9,
                                               nesterov=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adam_wd_ams": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1,
                                               amsgrad=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}
for oname, make in OPTS.items():
    ps = [p.clone().requires_grad_() for p in init]
    opt = make(ps)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = F.cross_entropy(omlp(ps, ox), oy)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    put(f"opt.{oname}.losses", torch.tensor(losses, dtype=torch.float64))
    for i, p in enumerate(ps):
        put(f"opt.{oname}.final{i}", p)

# ---- batch norm (own seed, so the cases above keep their values):
# functional batch_norm in train mode (with and without affine, as ordinary
# cases), and a BatchNorm1d module over 3 train steps (running statistics
# after each) then one eval step, with the gradients of each step ----
torch.manual_seed(21)
BN_CASES = {
    "bn_train": (lambda x, w, b: F.batch_norm(x, None, None, w, b,
                                              training=True), [(6, 4), (4,), (4,)]),
    "bn_train_noaffine": (lambda x: F.batch_norm(x, None, None, training=True),
                          [(5, 3)]),
}
for name, (fn, shapes) in BN_CASES.items():
    ins64 = [randn(*s) for s in shapes]
    for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        ins = [x.to(dt).requires_grad_() for x in ins64]
        out = fn(*ins)
        w = torch.randn(out.shape, dtype=torch.float64).to(dt)
        grads = torch.autograd.grad((out * w).sum(), ins)
        for i, x in enumerate(ins):
            put(f"{tag}.{name}.in{i}", x)
            put(f"{tag}.{name}.grad{i}", grads[i])
        put(f"{tag}.{name}.w", w)
        put(f"{tag}.{name}.out", out)

bn_w, bn_b = randn(5), randn(5)
bn_xs = [randn(8, 5) * 2 + 1 for _ in range(4)]
bn_ws = [torch.randn(8, 5, dtype=torch.float64) for _ in range(4)]
for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
    m = torch.nn.BatchNorm1d(5).to(dt)
    with torch.no_grad():
        m.weight.copy_(bn_w)
        m.bias.copy_(bn_b)
    put(f"{tag}.bn1d.weight", m.weight)
    put(f"{tag}.bn1d.bias", m.bias)
    for step in range(4):
        if step == 3:
            m.eval()
        x = bn_xs[step].to(dt).requires_grad_()
        out = m(x)
        w = bn_ws[step].to(dt)
        gx, gw, gb = torch.autograd.grad((out * w).sum(), (x, m.weight, m.bias))
        for k, v in {"x": x, "w": w, "out": out, "gx": gx, "gw": gw, "gb": gb,
                     "rm": m.running_mean, "rv": m.running_var}.items():
            put(f"{tag}.bn1d.{step}.{k}", v)

# ---- write safetensors by hand ----
DT = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
header, blobs, offset = {}, [], 0
for name in sorted(tensors):
    t = tensors[name]
    raw = t.numpy().tobytes()
    header[name] = {"dtype": DT[t.dtype], "shape": list(t.shape),
                    "data_offsets": [offset, offset + len(raw)]}
    blobs.append(raw)
    offset += len(raw)
hj = json.dumps(header, separators=(",", ":")).encode()
hj += b" " * ((8 - len(hj) % 8) % 8)
with open(OUT, "wb") as f:
    f.write(struct.pack("<Q", len(hj)))
    f.write(hj)
    for raw in blobs:
        f.write(raw)
print(f"wrote {len(tensors)} tensors, {os.path.getsize(OUT)} bytes to {OUT}")

try:
    from safetensors.torch import load_file
except ImportError:
    sys.exit(0)
back = load_file(OUT)
assert all(torch.equal(back[k], tensors[k]) for k in tensors)
print("read back with the safetensors package: ok")
