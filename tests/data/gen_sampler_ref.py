#!/usr/bin/python3
"""Write tests/data/sampler_ref.txt: torch's DistributedSampler indices for
a set of configurations, read by tests/test_sampler (which needs no torch).
Run with Debian's /usr/bin/python3 (python3-torch):
    /usr/bin/python3 tests/data/gen_sampler_ref.py > tests/data/sampler_ref.txt
One line per (configuration, rank):
    len replicas rank shuffle seed drop_last epoch : i0 i1 ..."""
import torch
from torch.utils.data.distributed import DistributedSampler

CONFIGS = [
    # len, replicas, shuffle, seed, drop_last, epoch
    (10, 3, False, 0, False, 0),
    (10, 3, False, 0, True, 0),
    (10, 3, True, 0, False, 0),
    (10, 3, True, 0, True, 0),
    (10, 3, True, 0, False, 1),
    (3, 5, True, 1, False, 0),     # padding longer than the data: cycles
    (3, 5, True, 1, True, 0),      # drop_last leaves nothing
    (17, 4, True, 1234, False, 7),
    (17, 4, True, 1234, True, 7),
    (1000, 5, True, 42, False, 2),
    (60000, 4, True, 0, False, 3),
    (1, 1, True, 9, False, 0),
]

for n, reps, shuffle, seed, drop_last, epoch in CONFIGS:
    data = list(range(n))
    for rank in range(reps):
        s = DistributedSampler(data, num_replicas=reps, rank=rank,
                               shuffle=shuffle, seed=seed,
                               drop_last=drop_last)
        s.set_epoch(epoch)
        idx = list(iter(s))
        # keep the file small: the 60000 case checks its first 64 and last 64
        if len(idx) > 256:
            idx = idx[:64] + [-1] + idx[-64:]
        print(n, reps, rank, int(shuffle), seed, int(drop_last), epoch, ":",
              " ".join(map(str, idx)))
