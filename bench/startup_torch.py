"""bench/startup_torch.py MODE: one rank of torch's start-up, for
bench/startup.sh (torch 1.13; under todist-run, which exports torchrun's
names). MODE gloo: init_process_group("gloo") then destroy_process_group;
rpc: init_rpc then rpc.shutdown. Prints the line bench/startup prints,
"rank=R init_ms=T fin_ms=F rss_kb=K vsz_kb=V", plus import_ms (importing
torch, not counted in init_ms)."""
import os
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402

t1 = time.perf_counter()


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


mode = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
if mode == "gloo":
    dist.init_process_group("gloo", rank=rank, world_size=world)
else:
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4,
                                           rpc_timeout=600,
                                           init_method="env://")
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=world,
                 rpc_backend_options=opts)
t2 = time.perf_counter()
rss, vsz = status_kb("VmRSS"), status_kb("VmSize")
if mode == "gloo":
    dist.barrier()       # as td_finalize's join: nobody leaves early
    dist.destroy_process_group()
else:
    rpc.shutdown()
t3 = time.perf_counter()
print("rank=%d init_ms=%.1f fin_ms=%.1f rss_kb=%d vsz_kb=%d import_ms=%.1f"
      % (rank, (t2 - t1) * 1e3, (t3 - t2) * 1e3, rss, vsz, (t1 - t0) * 1e3),
      flush=True)
