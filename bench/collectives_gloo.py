"""collectives_gloo.py N [SIZES...]: the gloo baseline of bench/collectives.sh.

torch.distributed all_reduce (float32, sum, in place) over the gloo backend
on N local processes, printing rank 0's lines in bench/collectives's format:
  allreduce ranks=N size=BYTES median_us=T busbw_MBps=B
  # spread min_us=.. max_us=.. iters=..
each the median of repeated calls after a barrier (fewer repetitions than
todist's: gloo is slow; ITERS_SCALE multiplies them). Run with
/usr/bin/python3 (Debian's python3-torch)."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, n, sizes, port, scale):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for size in sizes:
        iters = 300 if size <= 4096 else 50 if size <= (1 << 20) else 6
        iters = max(3, int(iters * scale))
        t = torch.zeros(size // 4, dtype=torch.float32)
        times = []
        dist.barrier()
        for i in range(-(iters // 10 + 2), iters):
            t0 = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            if i >= 0:
                times.append(time.perf_counter() - t0)
        times.sort()
        med = times[len(times) // 2]
        if rank == 0:
            print("allreduce ranks=%d size=%d median_us=%.1f busbw_MBps=%.0f\n"
                  "# spread min_us=%.1f max_us=%.1f iters=%d" %
                  (n, size, med * 1e6, size / med * 2.0 * (n - 1) / n / 1e6,
                   times[0] * 1e6, times[-1] * 1e6, iters), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    n = int(sys.argv[1])
    sizes = [int(s) for s in sys.argv[2:]] or [8, 4096, 1 << 20, 64 << 20]
    scale = float(os.environ.get("ITERS_SCALE", "1") or 1)
    port = 29500 + os.getpid() % 1000
    mp.spawn(run, args=(n, sizes, port, scale), nprocs=n, join=True)
