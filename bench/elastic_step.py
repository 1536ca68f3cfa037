"""bench/elastic_step.py OUT STEPS KILL_AT [hold]: bench/elastic.sh's worker.

A PyTorch (gloo) training loop in miniature, the same program under both
launchers: every step is one all_reduce. In the first incarnation
(TORCHELASTIC_RESTART_COUNT 0), once every rank is past step KILL_AT,
rank 1 writes the wall clock to OUT.kill and SIGKILLs itself; the others
fail in the next all_reduce. In the restarted incarnation rank 0 writes the
wall clock to OUT.first when its first all_reduce has completed: the
launcher's recovery time is OUT.first - OUT.kill (the restart, Python and
torch's import, the rendezvous, one step). With "hold", the last rank
writes OUT.hold instead and waits: the benchmark then kills its whole host
and writes OUT.kill itself.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def stamp(path):
    with open(path + ".tmp", "w") as f:
        f.write("%.6f\n" % time.time())
    os.rename(path + ".tmp", path)


def main():
    out, steps, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    hold = len(sys.argv) > 4 and sys.argv[4] == "hold"
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    t = torch.ones(1)
    for step in range(1, steps + 1):
        dist.all_reduce(t)
        if restart > 0 and step == 1 and rank == 0:
            stamp(out + ".first")
        if restart == 0 and step == kill_at:
            dist.barrier()
            if hold and rank == dist.get_world_size() - 1:
                stamp(out + ".hold")
                while True:
                    time.sleep(60)      # until its host is killed
            if not hold and rank == 1:
                stamp(out + ".kill")
                os.kill(os.getpid(), signal.SIGKILL)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
