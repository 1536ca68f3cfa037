#!/usr/bin/python3
"""Generate tests/data/ddp_rpc_ref.safetensors, the reference for
examples/ddp_rpc (seed 002: PyTorch's "Combining Distributed DataParallel
with Distributed RPC Framework" tutorial), with PyTorch 1.13 (Debian's
python3-torch; run with /usr/bin/python3):

    /usr/bin/python3 tests/data/gen_ddp_rpc_ref.py [--epochs 5] [--out FILE]

The tutorial's model in one process: EmbeddingBag(100, 16, mode="sum")
(the parameter server's), Linear(16, 8) (each trainer's DDP replica),
CrossEntropyLoss, SGD lr 0.05, two trainers, 10 batches per epoch made by
the tutorial's get_next_batch (one Python and one torch generator per
trainer, seeded with the trainer's rank). One step, with the semantics the
C program makes deterministic (a barrier of the trainers after each
distributed optimizer step, see examples/ddp_rpc.c):
  - both trainers' forwards read the same weights;
  - the linear gets the average of the two trainers' gradients (DDP), the
    same update on both replicas;
  - the embedding gets one SGD update per trainer, each with that
    trainer's gradient (each trainer's DistributedOptimizer steps it with
    its own context), trainer 0's first.

Written (float32 unless said): "emb.weight" [100,16], "fc.weight" [8,16],
"fc.bias" [8] (initial values); per trainer T: "tT.indices", "tT.offsets",
"tT.targets" (int64, every step's concatenated), "tT.n_indices",
"tT.n_bags" (int64 [steps]: the lengths of each step's part), "tT.loss"
[steps]; "fc.weight.after" [steps,8,16] and "fc.bias.after" [steps,8] (the
linear after each step), "meta" (int64: epochs, batches per epoch).

The file is written by hand in the safetensors layout (8-byte LE header
length, JSON header padded with spaces to 8 bytes, raw LE data), as
tests/data/gen_reference.py does."""
import argparse
import json
import os
import random
import struct

import torch

NUM_EMBEDDINGS = 100
EMBEDDING_DIM = 16
LR = 0.05
BATCHES = 10


def get_next_batch(rng, gen):
    """The tutorial's generator, with explicit generators."""
    for _ in range(BATCHES):
        num_indices = rng.randint(20, 50)
        indices = torch.LongTensor(num_indices).random_(0, NUM_EMBEDDINGS,
                                                        generator=gen)
        offsets = []
        start = 0
        batch_size = 0
        while start < num_indices:
            offsets.append(start)
            start += rng.randint(1, 10)
            batch_size += 1
        offsets_tensor = torch.LongTensor(offsets)
        target = torch.LongTensor(batch_size).random_(0, 8, generator=gen)
        yield indices, offsets_tensor, target


def save(path, tensors):
    dtypes = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "ddp_rpc_ref.safetensors"))
    a = ap.parse_args()

    torch.manual_seed(0)
    emb = torch.nn.EmbeddingBag(NUM_EMBEDDINGS, EMBEDDING_DIM, mode="sum")
    fc = torch.nn.Linear(16, 8)
    criterion = torch.nn.CrossEntropyLoss()
    out = {"emb.weight": emb.weight.detach().clone(),
           "fc.weight": fc.weight.detach().clone(),
           "fc.bias": fc.bias.detach().clone(),
           "meta": torch.tensor([a.epochs, BATCHES], dtype=torch.int64)}
    rngs = [random.Random(t) for t in range(2)]
    gens = [torch.Generator().manual_seed(t) for t in range(2)]
    rec = [{"indices": [], "offsets": [], "targets": [], "n_indices": [],
            "n_bags": [], "loss": []} for _ in range(2)]
    w_after, b_after = [], []
    for _epoch in range(a.epochs):
        batches = [list(get_next_batch(rngs[t], gens[t])) for t in range(2)]
        for s in range(BATCHES):
            g_emb, g_fc = [], []
            for t in range(2):
                indices, offsets, target = batches[t][s]
                output = fc(emb(indices, offsets))
                loss = criterion(output, target)
                ge, gw, gb = torch.autograd.grad(
                    loss, [emb.weight, fc.weight, fc.bias])
                g_emb.append(ge)
                g_fc.append((gw, gb))
                r = rec[t]
                r["indices"].append(indices)
                r["offsets"].append(offsets)
                r["targets"].append(target)
                r["n_indices"].append(len(indices))
                r["n_bags"].append(len(offsets))
                r["loss"].append(loss.detach().reshape(1))
            with torch.no_grad():
                fc.weight -= LR * (g_fc[0][0] + g_fc[1][0]) / 2
                fc.bias -= LR * (g_fc[0][1] + g_fc[1][1]) / 2
                for t in range(2):
                    emb.weight -= LR * g_emb[t]
            w_after.append(fc.weight.detach().clone())
            b_after.append(fc.bias.detach().clone())
    for t in range(2):
        r = rec[t]
        for k in ("indices", "offsets", "targets", "loss"):
            out["t%d.%s" % (t, k)] = torch.cat(r[k])
        for k in ("n_indices", "n_bags"):
            out["t%d.%s" % (t, k)] = torch.tensor(r[k], dtype=torch.int64)
    out["fc.weight.after"] = torch.stack(w_after)
    out["fc.bias.after"] = torch.stack(b_after)
    save(a.out, out)
    print("wrote %s: %d epochs of %d batches, %d bytes" %
          (a.out, a.epochs, BATCHES, os.path.getsize(a.out)))


if __name__ == "__main__":
    main()
