"""The PyTorch side of bench/rref_latency: torch.distributed.rpc RRefs
(TensorPipe) between two local processes, rank 0 using rank 1's objects.

    rref_torch.py [CALLS]

    rref_call         rref.rpc_sync().noop() on an existing object
    rref_to_here      rref.to_here() of an existing object (one int)
    rref_create_call  rpc.remote(worker1, Obj), at once .rpc_sync().noop()
                      on it, then dropping the reference

Prints lines in the same format as the C program (median of 7 repetition
medians, min and max of the repetitions)."""
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


class Obj:
    def __init__(self):
        self.v = 42

    def noop(self):
        return None


def make_int():
    return 42


def measure(name, op, calls):
    for _ in range(max(calls // 4, 1)):
        op()
    meds = []
    for _ in range(7):
        lat = []
        for _ in range(calls):
            t0 = time.perf_counter()
            op()
            lat.append((time.perf_counter() - t0) * 1e6)
        meds.append(statistics.median(lat))
    meds.sort()
    print("%s median_us=%.2f min_us=%.2f max_us=%.2f"
          % (name, statistics.median(meds), meds[0], meds[-1]), flush=True)


def create_call():
    r = rpc.remote("worker1", Obj)
    r.rpc_sync().noop()
    del r


def worker(rank, port, calls):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4,
                                           rpc_timeout=600)
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=2,
                 rpc_backend_options=opts)
    if rank == 0:
        obj = rpc.remote("worker1", Obj)
        val = rpc.remote("worker1", make_int)
        measure("rref_call", lambda: obj.rpc_sync().noop(), calls)
        measure("rref_to_here", val.to_here, calls)
        measure("rref_create_call", create_call, max(calls // 2, 1))
        del obj, val
    rpc.shutdown()


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(port, n), nprocs=2, join=True)
