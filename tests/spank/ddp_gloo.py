"""PyTorch DDP over gloo, as srun --todist wires it (env://): STEPS steps
of a Linear(512, 512) (1 MiB of gradients, all-reduced every step), each
rank on its own batch; then every rank checks its parameters equal every
other rank's and a reference trained in one process on the average of
all ranks' gradients. One line per rank:
    rank=R world=W host=HOSTNAME ddp=ok|differs|wrong
tests/spank/test_spank_hosts.sh runs it across two hosts."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS, DIM, BATCH = 4, 512, 8


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, DIM, generator=g)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    ref = torch.nn.Linear(DIM, DIM)
    model = torch.nn.Linear(DIM, DIM)
    model.load_state_dict(ref.state_dict())
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        ddp(batch(step, rank)).square().mean().backward()
        opt.step()
        # the reference: the mean of every rank's gradients, in one process
        ref_opt.zero_grad()
        for r in range(world):
            (ref(batch(step, r)).square().mean() / world).backward()
        ref_opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
    if not all(torch.equal(every[0], t) for t in every):
        verdict = "differs"
    elif not torch.allclose(flat, want, rtol=1e-4, atol=1e-6):
        verdict = "wrong"
    else:
        verdict = "ok"
    # one write per line: the ranks share srun's pipe
    os.write(1, ("rank=%d world=%d host=%s ddp=%s\n" %
                 (rank, world, os.uname().nodename, verdict)).encode())
    dist.destroy_process_group()


main()
