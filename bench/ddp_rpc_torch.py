#!/usr/bin/python3
"""bench/ddp_rpc_torch.py EPOCHS: PyTorch's "Combining Distributed
DataParallel with Distributed RPC Framework" tutorial as published, on the
CPU (no .cuda(), gloo for DDP, TensorPipe for RPC), four processes started
with torch.multiprocessing as the tutorial does; the baseline of
bench/ddp_rpc.sh. Each trainer times its training loop and prints
"torch ddp_rpc trainer=R steps=N seconds=S ms_per_step=M". Ports from
BENCH_PORT (default 29500) and the one above."""
import os
import random
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.optim as optim
from torch.distributed.nn import RemoteModule
from torch.distributed.optim import DistributedOptimizer
from torch.distributed.rpc import RRef, TensorPipeRpcBackendOptions
from torch.nn.parallel import DistributedDataParallel as DDP

NUM_EMBEDDINGS = 100
EMBEDDING_DIM = 16
PORT = int(os.environ.get("BENCH_PORT", "29500"))


class HybridModel(torch.nn.Module):
    def __init__(self, remote_emb_module):
        super().__init__()
        self.remote_emb_module = remote_emb_module
        self.fc = DDP(torch.nn.Linear(16, 8))

    def forward(self, indices, offsets):
        emb_lookup = self.remote_emb_module.forward(indices, offsets)
        return self.fc(emb_lookup)


def _run_trainer(remote_emb_module, rank, epochs):
    torch.set_num_threads(1)
    model = HybridModel(remote_emb_module)
    model_parameter_rrefs = model.remote_emb_module.remote_parameters()
    for param in model.fc.parameters():
        model_parameter_rrefs.append(RRef(param))
    opt = DistributedOptimizer(optim.SGD, model_parameter_rrefs, lr=0.05)
    criterion = torch.nn.CrossEntropyLoss()

    def get_next_batch(rank):
        for _ in range(10):
            num_indices = random.randint(20, 50)
            indices = torch.LongTensor(num_indices).random_(0, NUM_EMBEDDINGS)
            offsets = []
            start = 0
            batch_size = 0
            while start < num_indices:
                offsets.append(start)
                start += random.randint(1, 10)
                batch_size += 1
            offsets_tensor = torch.LongTensor(offsets)
            target = torch.LongTensor(batch_size).random_(0, 8)
            yield indices, offsets_tensor, target

    steps = 0
    t0 = time.perf_counter()
    for _epoch in range(epochs):
        for indices, offsets, target in get_next_batch(rank):
            with dist_autograd.context() as context_id:
                output = model(indices, offsets)
                loss = criterion(output, target)
                dist_autograd.backward(context_id, [loss])
                opt.step(context_id)
            steps += 1
    sec = time.perf_counter() - t0
    # one write per line: the two trainers print at the same time
    sys.stdout.write("torch ddp_rpc trainer=%d steps=%d seconds=%.3f "
                     "ms_per_step=%.3f\n" % (rank, steps, sec,
                                              1e3 * sec / steps))
    sys.stdout.flush()


def run_worker(rank, world_size, epochs):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(PORT)
    opts = TensorPipeRpcBackendOptions()
    opts.init_method = "tcp://localhost:%d" % (PORT + 1)
    if rank == 2:
        rpc.init_rpc("master", rank=rank, world_size=world_size,
                     rpc_backend_options=opts)
        remote_emb_module = RemoteModule(
            "ps", torch.nn.EmbeddingBag, args=(NUM_EMBEDDINGS, EMBEDDING_DIM),
            kwargs={"mode": "sum"})
        futs = []
        for trainer_rank in [0, 1]:
            futs.append(rpc.rpc_async("trainer%d" % trainer_rank,
                                      _run_trainer,
                                      args=(remote_emb_module, trainer_rank,
                                            epochs)))
        for fut in futs:
            fut.wait()
    elif rank <= 1:
        dist.init_process_group(backend="gloo", rank=rank, world_size=2,
                                init_method="tcp://localhost:%d" % PORT)
        rpc.init_rpc("trainer%d" % rank, rank=rank, world_size=world_size,
                     rpc_backend_options=opts)
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size,
                     rpc_backend_options=opts)
    rpc.shutdown()


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    mp.spawn(run_worker, args=(4, epochs), nprocs=4, join=True)
