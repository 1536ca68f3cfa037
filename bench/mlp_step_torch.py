"""The PyTorch side of bench/mlp_step: the same 784-256-10 MLP step (forward,
cross-entropy, backward, SGD) at batch 256 on one thread.

Protocol (so both sides see the same machine noise, runs are interleaved):
prints "ready"; then for each line "N" on stdin runs N timed steps and
prints their times in ms on one line; exits at end of input. With an
argument STEPS instead, runs STEPS steps once and prints
`torch MEDIAN MIN MAX`."""
import sys
import time

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 784)
y = torch.randint(0, 10, (256,))


def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


def timed(n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


for _ in range(20):
    step()
if len(sys.argv) > 1:
    times = sorted(timed(int(sys.argv[1])))
    print("torch %.4f %.4f %.4f" % (times[len(times) // 2], times[0],
                                    times[-1]))
    sys.exit(0)
print("ready", flush=True)
for line in sys.stdin:
    print(" ".join("%.5f" % t for t in timed(int(line))), flush=True)
