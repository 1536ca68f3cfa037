"""The PyTorch side of bench/mlp_step: the same 784-256-10 MLP step (forward,
cross-entropy, backward, SGD) at batch 256 on one thread. Prints the median
and min/max in ms on one line: `torch MEDIAN MIN MAX`."""
import sys
import time

import torch

torch.set_num_threads(1)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
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


for _ in range(20):
    step()
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    step()
    times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print("torch %.4f %.4f %.4f" % (times[len(times) // 2], times[0], times[-1]))
