#!/usr/bin/python3
"""bench/dist_backward_torch.py: the same my_add graph in
torch.distributed.autograd (PyTorch 1.13, TensorPipe RPC), two processes on
this machine. Prints the medians in microseconds:
  torch rpc_roundtrip_us=... forward_us=... backward_us=... total_us=...
Usage: dist_backward_torch.py [ITERS] [WARMUP] [SIZE]"""
import os
import statistics
import sys
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def my_add(t1, t2):
    return torch.add(t1, t2)


def bench(iters, warmup, size):
    torch.manual_seed(0)
    t1 = torch.rand((size, size), requires_grad=True)
    t2 = torch.rand((size, size), requires_grad=True)
    t4 = torch.rand((size, size), requires_grad=True)
    p1, p2 = t1.detach().clone(), t2.detach().clone()
    rtt, fwd, bwd, tot = [], [], [], []
    for i in range(-warmup, iters):
        a = time.perf_counter()
        rpc.rpc_sync("worker1", my_add, args=(p1, p2))
        b = time.perf_counter()
        with dist_autograd.context() as context_id:
            c = time.perf_counter()
            t3 = rpc.rpc_sync("worker1", my_add, args=(t1, t2))
            loss = torch.mul(t3, t4).sum()
            d = time.perf_counter()
            dist_autograd.backward(context_id, [loss])
            e = time.perf_counter()
        if i >= 0:
            rtt.append(b - a)
            fwd.append(d - c)
            bwd.append(e - d)
            tot.append(e - c)
    med = lambda v: statistics.median(v) * 1e6
    print("torch rpc_roundtrip_us=%.1f forward_us=%.1f backward_us=%.1f "
          "total_us=%.1f" % (med(rtt), med(fwd), med(bwd), med(tot)),
          flush=True)


def worker(rank, iters, warmup, size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=2)
    if rank == 0:
        bench(iters, warmup, size)
    rpc.shutdown()


if __name__ == "__main__":
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(iters, warmup, size, port), nprocs=2, join=True)
