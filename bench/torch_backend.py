"""The Python side of bench/torch_backend.sh: dist.all_reduce through
torch's API with backend "todist" and with gloo, in one process (the default
group is todist's; gloo is a new_group of the same ranks), alternating
rounds so both see the same machine. Rank 0 prints, per size,
`all_reduce bytes=B todist_us=.. (min-max) gloo_us=.. (min-max) speedup=..x`
and whether the results are equal (integer sums bit for bit).
Usage: todist-run -n 2 python3 bench/torch_backend.py [ROUNDS]"""
import sys
import time

import torch
import torch.distributed as dist
import todist  # noqa: F401  (registers the backend)

torch.set_num_threads(1)
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
dist.init_process_group("todist")
rank, world = dist.get_rank(), dist.get_world_size()
groups = {"todist": dist.group.WORLD,
          "gloo": dist.new_group(list(range(world)), backend="gloo")}


def per_call(group, x, iters):
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x, group=group)
    return (time.perf_counter() - t0) / iters


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


for nbytes, iters in ((8, 2000), (64 << 20, 5)):
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    times = {"todist": [], "gloo": []}
    # Warm-up, untimed: connections, caches, and the backend's one-time
    # move of a reused large buffer onto huge pages (after 16 calls).
    for g in groups.values():
        per_call(g, x, 20)
    for _ in range(ROUNDS):
        for name, g in groups.items():
            times[name].append(per_call(g, x, iters))
    # Equal results: an integer sum bit for bit, a float sum to tolerance.
    res = {}
    for name, g in groups.items():
        xi = (torch.arange(nbytes // 8, dtype=torch.int64) * 7919 + rank) \
            % 1000003
        xf = torch.rand(nbytes // 4, generator=torch.Generator().manual_seed(
            rank))
        dist.all_reduce(xi, group=g)
        dist.all_reduce(xf, group=g)
        res[name] = (xi, xf)
    same_int = torch.equal(res["todist"][0], res["gloo"][0])
    close = torch.allclose(res["todist"][1], res["gloo"][1], rtol=1e-6)
    if rank == 0:
        t, g = median(times["todist"]), median(times["gloo"])
        print("all_reduce bytes=%d todist_us=%.1f (%.1f-%.1f) gloo_us=%.1f "
              "(%.1f-%.1f) speedup=%.1fx int_equal=%s float_close=%s" % (
                  nbytes, t * 1e6, min(times["todist"]) * 1e6,
                  max(times["todist"]) * 1e6, g * 1e6,
                  min(times["gloo"]) * 1e6, max(times["gloo"]) * 1e6,
                  g / t, same_int, close), flush=True)
dist.destroy_process_group()
