"""The PyTorch side of bench/ddp.sh: one epoch of Fashion-MNIST with torch's
DistributedDataParallel over gloo, the same recipe as
examples/fashion_mnist_ddp (784-256-10 MLP, batch 64 per rank, SGD lr 0.01
momentum 0.9, DistributedSampler with set_epoch, one thread per rank),
started by todist-run, which exports torchrun's variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 0 prints
`torch ddp ranks=N epoch_s=.. samples_per_s=.. test_accuracy=..`.
Usage: todist-run -n N /usr/bin/python3 bench/ddp_torch.py [DATA_DIR [BACKEND]]
(BACKEND gloo by default; todist needs python/todist importable, as
bench/torch_backend.sh arranges)."""
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler

torch.set_num_threads(1)
DATA = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
BACKEND = sys.argv[2] if len(sys.argv) > 2 else "gloo"
if BACKEND == "todist":
    import todist  # noqa: F401  registers the backend
MEAN, STD = 0.2860, 0.3530


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def images(name):
    x = torch.from_numpy(idx(name).astype(np.float32)).reshape(-1, 784)
    return (x / 255.0 - MEAN) / STD


dist.init_process_group(BACKEND)
rank, world = dist.get_rank(), dist.get_world_size()
tr_x, tr_y = images("train-images-idx3-ubyte.gz"), torch.from_numpy(
    idx("train-labels-idx1-ubyte.gz").astype(np.int64))
te_x, te_y = images("t10k-images-idx3-ubyte.gz"), torch.from_numpy(
    idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
sampler = DistributedSampler(range(len(tr_y)), num_replicas=world, rank=rank,
                             shuffle=True, seed=1)
sampler.set_epoch(1)
order = torch.tensor(list(iter(sampler)))
dist.barrier()
t0 = time.perf_counter()
for s in range(0, len(order), 64):
    b = order[s:s + 64]
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(ddp(tr_x[b]), tr_y[b])
    loss.backward()
    opt.step()
dist.barrier()
secs = time.perf_counter() - t0
with torch.no_grad():
    mine = torch.arange(rank, len(te_y), world)
    correct = (model(te_x[mine]).argmax(1) == te_y[mine]).sum().double()
    counts = torch.stack([correct, torch.tensor(float(len(mine)),
                                                dtype=torch.float64)])
    dist.all_reduce(counts)
if rank == 0:
    print("torch ddp ranks=%d epoch_s=%.2f samples_per_s=%.0f "
          "test_accuracy=%.4f backend=%s" % (world, secs, len(tr_y) / secs,
                                             (counts[0] / counts[1]).item(),
                                             BACKEND))
dist.destroy_process_group()
