"""Fashion-MNIST with PyTorch's DistributedDataParallel over todist.

The whole recipe of a data-parallel PyTorch job (docs/pytorch.md):
init_process_group("todist"), DDP, DistributedSampler with set_epoch,
the test accuracy summed over ranks, and a checkpoint written by rank 0
only. The images are Debian's (dataset-fashion-mnist), read as
bench/ddp_torch.py reads them; the model is bench/ddp.sh's (784-256-10,
SGD lr 0.01 momentum 0.9, batch 64 per rank).

    todist-run -n 2 examples/torch_ddp.py --epochs 1
    srun -N2 --ntasks-per-node=2 --todist python3 examples/torch_ddp.py

Options: --epochs E (1), --batch B (64), --limit N (train on the first N
images only), --data DIR, --checkpoint FILE (written by rank 0 after every
epoch; resumed from when it exists), --backend NAME (todist; gloo for a
comparison). Rank 0 prints `epoch=E loss=.. test_accuracy=.. seconds=..`."""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import todist  # noqa: F401  registers the backend "todist"

MEAN, STD = 0.2860, 0.3530


def idx(data, name):
    """One IDX file (gzip): a uint8 array of the shape its header gives."""
    with gzip.open(os.path.join(data, name)) as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data, split, limit=None):
    x = idx(data, "%s-images-idx3-ubyte.gz" % split)[:limit]
    y = idx(data, "%s-labels-idx1-ubyte.gz" % split)[:limit]
    x = torch.from_numpy(x.astype(np.float32)).reshape(-1, 784)
    return TensorDataset((x / 255.0 - MEAN) / STD,
                         torch.from_numpy(y.astype(np.int64)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--backend", default="todist")
    a = p.parse_args()
    torch.set_num_threads(1)

    # Under todist-run or srun --todist the environment says everything.
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    train, test = load(a.data, "train", a.limit), load(a.data, "t10k")
    sampler = DistributedSampler(train, shuffle=True, seed=1)
    loader = DataLoader(train, batch_size=a.batch, sampler=sampler)

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    first = 0
    if a.checkpoint and os.path.exists(a.checkpoint):
        state = torch.load(a.checkpoint)        # every rank reads rank 0's
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        first = state["epoch"] + 1
    ddp = DistributedDataParallel(model)        # broadcasts rank 0's weights

    for epoch in range(first, first + a.epochs):
        sampler.set_epoch(epoch)                # a new shuffle per epoch
        t0 = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()                     # gradients averaged here
            opt.step()
        secs = time.perf_counter() - t0

        with torch.no_grad():                   # each rank a share of test
            mine = torch.arange(rank, len(test), world)
            x, y = test.tensors[0][mine], test.tensors[1][mine]
            counts = torch.tensor([(model(x).argmax(1) == y).sum().item(),
                                   len(mine)], dtype=torch.float64)
            dist.all_reduce(counts)
        if rank == 0:
            print("epoch=%d loss=%.4f test_accuracy=%.4f seconds=%.2f" % (
                epoch, loss.item(), counts[0] / counts[1], secs), flush=True)
            if a.checkpoint:                    # rank 0 only, then rename
                tmp = a.checkpoint + ".tmp"
                torch.save({"model": model.state_dict(),
                            "optimizer": opt.state_dict(),
                            "epoch": epoch}, tmp)
                os.replace(tmp, a.checkpoint)
        dist.barrier()                          # the checkpoint is complete

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
