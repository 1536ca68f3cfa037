#!/usr/bin/python3
"""bench/batchnorm_torch.py: torch's BatchNorm1d forward + backward, the
same shapes, loss and timing rule as bench/batchnorm.c (float32, one
thread, best of 3 repetitions)."""
import time

import torch

torch.set_num_threads(1)
for n, c in ((64, 256), (256, 1024), (4096, 256)):
    iters = 20000000 // (n * c) + 5
    bn = torch.nn.BatchNorm1d(c)
    x = torch.randn(n, c, requires_grad=True)
    w = torch.randn(n, c)
    best = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            y = bn(x)
            torch.autograd.grad((y * w).sum(), (x, bn.weight, bn.bias))
        best = min(best, (time.perf_counter() - t0) / iters * 1e6)
    print(f"torch batchnorm1d n={n} c={c} fwd_bwd_us={best:.1f}")
