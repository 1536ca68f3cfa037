#!/usr/bin/python3
"""pipeline_rpc_torch.py: the "Distributed Pipeline Parallelism Using RPC"
tutorial's form on torch 1.13, for bench/pipeline.sh: a master and two
workers (3 processes, spawned here, loopback); the same MLP as
examples/pipeline_mlp split in two shards, each an object on its worker
reached through a remote reference; every mini-batch is cut into
micro-batches whose forwards run asynchronously through the shards (RPC
futures), backward through distributed autograd, and a
DistributedOptimizer (SGD, momentum 0.9) steps both shards. Random data of
Fashion-MNIST's shape (the data loader is not what is measured). Prints
"torch rpc_pipeline samples_per_s=X" after --warmup steps."""
import argparse
import os
import socket
import threading
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.optim import DistributedOptimizer


def layers(lo, hi, n, hidden):
    mods = []
    for i in range(lo, hi):
        mods.append(nn.Linear(784 if i == 0 else hidden, 10 if i == n - 1 else hidden))
        if i < n - 1:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


class Shard(nn.Module):
    def __init__(self, lo, hi, n, hidden):
        super().__init__()
        torch.set_num_threads(1)
        self.net = layers(lo, hi, n, hidden)
        self._lock = threading.Lock()

    def forward(self, x_rref):
        x = x_rref.to_here()
        with self._lock:
            return self.net(x)

    def parameter_rrefs(self):
        return [rpc.RRef(p) for p in self.parameters()]


class Pipeline(nn.Module):
    def __init__(self, split_size, n, hidden):
        super().__init__()
        self.split_size = split_size
        mid = n // 2
        self.p1 = rpc.remote("worker1", Shard, args=(0, mid, n, hidden))
        self.p2 = rpc.remote("worker2", Shard, args=(mid, n, n, hidden))

    def forward(self, xs):
        futs = []
        for x in iter(xs.split(self.split_size, dim=0)):
            x_rref = rpc.RRef(x)
            y_rref = self.p1.remote().forward(x_rref)
            futs.append(self.p2.rpc_async().forward(y_rref))
        return torch.cat(torch.futures.wait_all(futs))

    def parameter_rrefs(self):
        return (self.p1.remote().parameter_rrefs().to_here() +
                self.p2.remote().parameter_rrefs().to_here())


def run_master(a):
    torch.manual_seed(1)
    model = Pipeline(a.batch_size // a.microbatches, a.layers + 1, a.hidden)
    opt = DistributedOptimizer(torch.optim.SGD, model.parameter_rrefs(),
                               lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(a.batch_size, 784)
    y = torch.randint(0, 10, (a.batch_size,))
    t0 = None
    for step in range(a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        with dist_autograd.context() as ctx:
            out = model(x)
            dist_autograd.backward(ctx, [loss_fn(out, y)])
            opt.step(ctx)
    dt = time.perf_counter() - t0
    print("torch rpc_pipeline samples_per_s=%.0f" %
          ((a.steps - a.warmup) * a.batch_size / dt), flush=True)


def run_worker(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16,
                                           rpc_timeout=300)
    name = "master" if rank == 0 else "worker%d" % rank
    rpc.init_rpc(name, rank=rank, world_size=3, rpc_backend_options=opts)
    if rank == 0:
        run_master(a)
    rpc.shutdown()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))          # a free port, not a fixed one
    port = s.getsockname()[1]
    s.close()
    mp.spawn(run_worker, args=(args, port), nprocs=3, join=True)
