"""The PyTorch side of bench/rpc_latency and bench/rpc_bandwidth:
torch.distributed.rpc (TensorPipe) between two local processes.

    rpc_torch.py latency [CALLS]   no-op rpc_sync with an 8-byte argument,
                                   and rpc_async with 8 in flight
    rpc_torch.py bandwidth [MiB]   rpc_sync echo of a float32 tensor

Prints lines in the same format as the C programs (medians over 7 or 15
repetitions, min and max of the repetitions)."""
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def noop(x):
    return None


def echo(t):
    return t


def run_latency(calls):
    arg = torch.zeros(1, dtype=torch.int64)  # the 8-byte argument
    for _ in range(max(calls // 4, 1)):
        rpc.rpc_sync("worker1", noop, args=(arg,))
    meds = []
    for _ in range(7):
        lat = []
        for _ in range(calls):
            t0 = time.perf_counter()
            rpc.rpc_sync("worker1", noop, args=(arg,))
            lat.append((time.perf_counter() - t0) * 1e6)
        meds.append(statistics.median(lat))
    meds.sort()
    print("rpc_sync_8B median_us=%.2f min_us=%.2f max_us=%.2f"
          % (statistics.median(meds), meds[0], meds[-1]), flush=True)
    rates = []
    n = calls * 5
    for _ in range(7):
        t0 = time.perf_counter()
        ring = [rpc.rpc_async("worker1", noop, args=(arg,)) for _ in range(8)]
        for i in range(8, n + 8):
            ring[i % 8].wait()
            if i < n:
                ring[i % 8] = rpc.rpc_async("worker1", noop, args=(arg,))
        rates.append(n / (time.perf_counter() - t0))
    rates.sort()
    print("rpc_async_8inflight calls_per_s=%.0f min=%.0f max=%.0f"
          % (statistics.median(rates), rates[0], rates[-1]), flush=True)


def run_bandwidth(mib):
    t = torch.arange(mib * 1048576 // 4, dtype=torch.float32)
    for _ in range(2):
        rpc.rpc_sync("worker1", echo, args=(t,))
    rtt = []
    for _ in range(15):
        t0 = time.perf_counter()
        back = rpc.rpc_sync("worker1", echo, args=(t,))
        rtt.append(time.perf_counter() - t0)
        assert back.numel() == t.numel()
    rtt.sort()
    med = statistics.median(rtt)
    print("rpc_echo size=%d median_ms=%.2f min_ms=%.2f max_ms=%.2f "
          "bw_MiBps=%.0f" % (t.numel() * 4, med * 1e3, rtt[0] * 1e3,
                             rtt[-1] * 1e3, 2 * t.numel() * 4 / med / 1048576),
          flush=True)


def worker(rank, port, mode, n):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4,
                                           rpc_timeout=600)
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=2,
                 rpc_backend_options=opts)
    if rank == 0:
        if mode == "latency":
            run_latency(n)
        else:
            run_bandwidth(n)
    rpc.shutdown()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "latency"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else (
        2000 if mode == "latency" else 64)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(port, mode, n), nprocs=2, join=True)
