"""One rank of tests/torch/test_torch_backend.sh: torch.distributed with
backend "todist", checked against gloo (a gloo group of the same ranks in
the same process) or, where gloo lacks the operation, against the value
written out in closed form. Prints `PASS name` or `FAIL name: why` per
check. Usage: todist-run -n N python3 backend_peer.py MODE, MODE one of
collectives (3 ranks), async, ddp, mismatch (2 ranks), kill (3 ranks)."""
import os
import signal
import sys
import time

import warnings

import torch
import torch.distributed as dist
import todist

warnings.filterwarnings("ignore", "Running .* which does not belong")
MODE = sys.argv[1]
torch.set_num_threads(1)
if MODE == "kill":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # finish the checks
dist.init_process_group("todist")
R, N = dist.get_rank(), dist.get_world_size()
W = dist.group.WORLD
GLOO = dist.new_group(list(range(N)), backend="gloo")


def report(name, good, why=""):
    line = "PASS %s" % name if good else "FAIL %s: %s" % (name, why)
    sys.stdout.write(line.replace("\n", " ") + "\n")    # one write per line
    sys.stdout.flush()


def same(a, b):
    if a.dtype.is_floating_point:
        return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5,
                                                     atol=1e-6)
    return torch.equal(a, b)


def check(name, fn):
    """FN(group) returns a list of tensors; todist's must equal gloo's."""
    try:
        want = fn(GLOO)
    except RuntimeError as e:
        report(name, False, "gloo: %s" % e)
        return
    check_value(name, lambda: fn(W), want)


def check_value(name, fn, want):
    try:
        got = fn()
    except RuntimeError as e:
        report(name, False, str(e))
        return
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if not same(a, b)]
    report(name, not bad and len(got) == len(want),
           "got %s, want %s" % (got, want))


def ints(n, seed=0):
    return (torch.arange(n, dtype=torch.int64) * 7919 + 31 * R + seed) % 1009


def floats(n, seed=0):
    return torch.rand(n, generator=torch.Generator().manual_seed(R * 100 +
                                                                 seed))


def collectives():
    ops = [("sum", dist.ReduceOp.SUM), ("product", dist.ReduceOp.PRODUCT),
           ("min", dist.ReduceOp.MIN), ("max", dist.ReduceOp.MAX),
           ("band", dist.ReduceOp.BAND), ("bor", dist.ReduceOp.BOR),
           ("bxor", dist.ReduceOp.BXOR)]
    for name, op in ops:
        def f(g, op=op):
            x = ints(37) % 13 + 1
            dist.all_reduce(x, op=op, group=g)
            return [x]
        check("all_reduce_int64_" + name, f)
    for dt in (torch.float32, torch.float64, torch.int32, torch.uint8):
        def f(g, dt=dt):
            x = (ints(1000) % 50).to(dt) if not dt.is_floating_point else \
                floats(1000).to(dt)
            dist.all_reduce(x, group=g)
            return [x]
        check("all_reduce_sum_%s" % str(dt).split(".")[1], f)
    big = (1 << 20) + 3                 # the ring algorithm, odd length

    def f(g):
        x = ints(big)
        dist.all_reduce(x, group=g)
        return [x]
    check("all_reduce_int64_4MiB_bit_for_bit", f)
    if hasattr(dist.ReduceOp, "AVG"):   # gloo has no AVG: the mean
        x = floats(100)
        want = sum(torch.rand(100, generator=torch.Generator().manual_seed(
            r * 100)) for r in range(N)) / N
        check_value("all_reduce_avg",
                    lambda: (dist.all_reduce(x, op=dist.ReduceOp.AVG), [x])[1],
                    [want])

    # gloo's answer differs from rank to rank on a non-contiguous tensor
    # (torch 1.13), and it has no float16: the values written out.
    x = ints(24).reshape(4, 6)[:, 1]
    y = ints(24).reshape(6, 4).t()
    want = [sum((torch.arange(24, dtype=torch.int64) * 7919 + 31 * r) % 1009
                for r in range(N)).reshape(4, 6)[:, 1],
            ((torch.arange(24, dtype=torch.int64) * 7919 + 31) % 1009)
            .reshape(6, 4).t()]
    check_value("non_contiguous_all_reduce_and_broadcast",
                lambda: (dist.all_reduce(x), dist.broadcast(y, 1), [x, y])[2],
                want)

    def f(g):
        x = ints(33) * (R + 1)
        dist.broadcast(x, 2, group=g)
        return [x]
    check("broadcast_int64", f)
    h = torch.full((9,), float(R), dtype=torch.float16)
    b = torch.tensor([R == 1, R == 0, True])
    check_value("broadcast_float16_bool",
                lambda: (dist.broadcast(h, 1), dist.broadcast(b, 1), [h, b])[2],
                [torch.ones(9, dtype=torch.float16),
                 torch.tensor([True, False, True])])

    def f(g):
        x = ints(50)
        dist.reduce(x, 1, op=dist.ReduceOp.MAX, group=g)
        return [x] if R == 1 else []
    check("reduce_max_root1", f)

    def f(g):
        outs = [torch.zeros(7, dtype=torch.int64) for _ in range(N)]
        dist.all_gather(outs, ints(7), group=g)
        return outs
    check("all_gather", f)

    agt = getattr(dist, "all_gather_into_tensor", None) or \
        dist._all_gather_base

    out = torch.zeros(N * 5)        # gloo (1.13) has no _allgather_base
    want = torch.cat([torch.rand(5, generator=torch.Generator().manual_seed(
        r * 100)) for r in range(N)])
    check_value("all_gather_into_tensor",
                lambda: (agt(out, floats(5)), [out])[1], [want])

    def f(g):
        outs = [torch.zeros(6, dtype=torch.int64) for _ in range(N)] \
            if R == 0 else None
        dist.gather(ints(6), outs, dst=0, group=g)
        return outs if R == 0 else []
    check("gather_root0", f)

    def f(g):
        out = torch.zeros(4, dtype=torch.int64)
        ins = [torch.arange(4) + 10 * i for i in range(N)] if R == 1 else None
        dist.scatter(out, ins, src=1, group=g)
        return [out]
    check("scatter_root1", f)

    # gloo (torch 1.13) has no reduce_scatter: rank r gets the sum of
    # every rank's block r, written out.
    want = sum((torch.arange(3 * N, dtype=torch.int64) * 7919 + 31 * r) % 1009
               for r in range(N))[3 * R:3 * R + 3]
    ins = list(ints(3 * N).chunk(N))
    out = torch.zeros(3, dtype=torch.int64)
    check_value("reduce_scatter",
                lambda: (dist.reduce_scatter(out, ins), [out])[1], [want])
    rst = getattr(dist, "reduce_scatter_tensor", None) or \
        dist._reduce_scatter_base
    out2 = torch.zeros(3, dtype=torch.int64)
    check_value("reduce_scatter_tensor",
                lambda: (rst(out2, ints(3 * N)), [out2])[1], [want])

    # all_to_all: block j of rank i's input lands as block i on rank j.
    want = torch.cat([((torch.arange(2 * N, dtype=torch.int64) * 7919 + 31 * r)
                       % 1009)[2 * R:2 * R + 2] for r in range(N)])
    out = torch.zeros(2 * N, dtype=torch.int64)
    check_value("all_to_all_single",
                lambda: (dist.all_to_all_single(out, ints(2 * N)), [out])[1],
                [want])
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(N)]
    check_value("all_to_all",
                lambda: (dist.all_to_all(outs, list(ints(2 * N).chunk(N))),
                         outs)[1], list(want.chunk(N)))
    check_value("barrier", lambda: (dist.barrier(), [])[1], [])

    # point-to-point in a ring, blocking and not
    nxt, prv = (R + 1) % N, (R - 1) % N
    got = torch.zeros(5, dtype=torch.int64)
    ws = [dist.isend(ints(5), nxt), dist.irecv(got, prv)]
    want = (torch.arange(5, dtype=torch.int64) * 7919 + 31 * prv) % 1009
    check_value("isend_irecv_ring", lambda: ([w.wait() for w in ws], [got])[1],
                [want])
    got2 = torch.zeros(5, dtype=torch.int64)

    def ring():
        if R % 2 == 0:
            dist.send(ints(5), nxt)
            dist.recv(got2, prv)
        else:
            dist.recv(got2, prv)
            dist.send(ints(5), nxt)
        return [got2]
    check_value("send_recv_ring", ring, [want])
    if R == 0:
        srcs = set()
        for _ in range(N - 1):
            t = torch.zeros(1, dtype=torch.int64)
            s = dist.recv(t)
            srcs.add((s, int(t)))
        report("recv_any_source_names_sender",
               srcs == {(r, 100 + r) for r in range(1, N)}, str(srcs))
    else:
        dist.send(torch.tensor([100 + R]), 0)
        report("recv_any_source_names_sender", True)

    # subgroups: [0, 2] then [1, 2]; rank 1 is outside the first
    sub = dist.new_group([0, 2])
    sub_gloo = dist.new_group([0, 2], backend="gloo")
    sub2 = dist.new_group([1, 2])
    if R != 1:
        def f(g):
            x = ints(11)
            dist.all_reduce(x, group=g)
            return [x]
        check("subgroup_0_2_all_reduce", lambda g: f(sub if g is W
                                                     else sub_gloo))
    else:
        x = ints(11)
        dist.all_reduce(x, group=sub)       # not a member: nothing happens
        report("subgroup_0_2_all_reduce", torch.equal(x, ints(11)),
               "a non-member's tensor changed")
    if R != 0:
        x = torch.tensor([R])
        dist.all_reduce(x, group=sub2)
        report("subgroup_1_2_after_0_2", int(x) == 3, str(x))
        report("subgroup_rank_and_size", dist.get_rank(sub2) == R - 1 and
               dist.get_world_size(sub2) == 2, "%d %d" % (
                   dist.get_rank(sub2), dist.get_world_size(sub2)))
    else:
        report("subgroup_1_2_after_0_2", True)
        report("subgroup_rank_and_size", dist.get_rank(sub2) < 0,
               str(dist.get_rank(sub2)))
    x = torch.ones(1)
    dist.all_reduce(x)
    report("world_after_subgroups", float(x) == N, str(x))
    report("world_accessors", todist.rank() == R and todist.world_size() == N
           and todist.local_rank() == R and dist.get_backend() == "todist",
           "%s %s" % (todist.world(), dist.get_backend()))


def async_works():
    xs = [ints(1000, seed=k) for k in range(6)]
    ws = [dist.all_reduce(x, async_op=True) for x in xs]
    want = [sum((torch.arange(1000, dtype=torch.int64) * 7919 + 31 * r + k)
                % 1009 for r in range(N)) for k in range(6)]
    check_value("six_async_all_reduce_in_flight",
                lambda: ([w.wait() for w in ws], xs)[1], want)
    report("async_is_completed", all(w.is_completed() for w in ws), "")
    y = ints(100)
    fut = dist.all_reduce(y, async_op=True).get_future()
    got = fut.wait()
    report("async_future_value", isinstance(got, list) and got[0] is y and
           torch.equal(y, sum((torch.arange(100, dtype=torch.int64) * 7919 +
                               31 * r) % 1009 for r in range(N))), str(got))
    z = torch.zeros(4)
    w = dist.broadcast(z if R else torch.ones(4), 0, async_op=True)
    w.wait()
    report("async_broadcast", R == 0 or torch.equal(z, torch.ones(4)), str(z))
    w = dist.barrier(async_op=True)
    report("async_barrier", w.wait() is True, "")
    fut = dist.all_reduce(torch.ones(3), async_op=True).get_future().then(
        lambda f: f.value()[0] * 2)
    report("async_future_then", torch.equal(fut.wait(), torch.full((3,), 2.0 * N)),
           str(fut.wait()))


def ddp():
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(),
                                   torch.nn.Linear(30, 5))
    res = {}
    for name, g in (("todist", W), ("gloo", GLOO)):
        m = torch.nn.parallel.DistributedDataParallel(
            model(), process_group=g, bucket_cap_mb=0.001)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        gen = torch.Generator().manual_seed(R)
        for _ in range(4):
            opt.zero_grad()
            m(torch.randn(8, 20, generator=gen)).pow(2).sum().backward()
            opt.step()
        res[name] = [p.detach().clone() for p in m.parameters()]
    check_value("ddp_4_steps_weights_equal_gloo", lambda: res["todist"],
                res["gloo"])
    from torch.distributed.optim import ZeroRedundancyOptimizer
    res = {}
    for name, g in (("todist", W), ("gloo", GLOO)):
        m = model()
        opt = ZeroRedundancyOptimizer(m.parameters(), torch.optim.Adam,
                                      process_group=g, lr=0.01)
        gen = torch.Generator().manual_seed(R)
        for _ in range(3):
            opt.zero_grad()
            m(torch.randn(8, 20, generator=gen)).pow(2).sum().backward()
            for p in m.parameters():      # the same gradients everywhere
                dist.all_reduce(p.grad, group=g)
            opt.step()
        res[name] = [p.detach().clone() for p in m.parameters()]
    check_value("zero_redundancy_optimizer_equal_gloo", lambda: res["todist"],
                res["gloo"])


def within(name, fn, must, limit=2.0):
    """FN must raise RuntimeError within LIMIT s, naming every regex of
    MUST."""
    import re
    dist.barrier(group=GLOO)
    t0 = time.monotonic()
    try:
        fn()
        report(name, False, "no error")
        return
    except RuntimeError as e:
        secs, msg = time.monotonic() - t0, str(e)
    # one write per line: print() writes the newline apart, and the other
    # rank's line can land between the two on the shared pipe
    sys.stdout.write("# %s: rank %d raised after %.3f s: %s\n"
                     % (name, R, secs, msg.replace("\n", " ")))
    sys.stdout.flush()
    missing = [m for m in must if not re.search(m, msg)]
    report(name, not missing and secs < limit,
           "%.3f s, missing %s in %r" % (secs, missing, msg))


def mismatch():
    both = [r"rank 0 called", r"rank 1 called"]
    g = dist.new_group([0, 1])
    within("mismatch_size", lambda: dist.all_reduce(
        torch.ones(4 if R == 0 else 8), group=g),
        both + [r"float32 x 4", r"float32 x 8"])
    g = dist.new_group([0, 1])
    within("mismatch_dtype", lambda: dist.all_reduce(
        torch.ones(4, dtype=torch.float32 if R == 0 else torch.float64),
        group=g), both + ["float32", "float64"])
    g = dist.new_group([0, 1])
    within("mismatch_op", lambda: dist.all_reduce(
        torch.ones(4), op=dist.ReduceOp.SUM if R == 0 else dist.ReduceOp.MAX,
        group=g), both + ["sum", "max"])
    g = dist.new_group([0, 1])
    within("mismatch_collective", lambda: dist.all_reduce(torch.ones(4), group=g)
           if R == 0 else dist.broadcast(torch.ones(4), 0, group=g),
           both + ["all_reduce", "broadcast"])
    g = dist.new_group([0, 1])
    within("mismatch_root", lambda: dist.broadcast(torch.ones(4), R, group=g),
           both + ["root 0", "root 1"])
    g = dist.new_group([0, 1])
    within("mismatch_async_wait_raises", lambda: dist.all_reduce(
        torch.ones(4 if R == 0 else 8), group=g, async_op=True).wait(),
        both)
    x = torch.ones(2)
    dist.all_reduce(x)
    report("world_fine_after_mismatches", float(x[0]) == 2, str(x))


def kill():
    if R == N - 1:
        dist.barrier(group=GLOO)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    within("killed_rank_fails_all_reduce",
           lambda: dist.all_reduce(torch.ones(1000)),
           [r"rank %d\b" % (N - 1), "died|dead|failed"])
    # A survivor leaving early would be a death too: wait for the others
    # (files in TD_TEST_DIR: no message through todist or gloo).
    d = os.environ["TD_TEST_DIR"]
    open(os.path.join(d, "done.%d" % R), "w").close()
    while len([f for f in os.listdir(d) if f.startswith("done.")]) < N - 1:
        time.sleep(0.01)
    sys.stdout.flush()
    os._exit(0)     # todist's join cannot complete without the dead rank


def anon_huge_kb(t):
    """AnonHugePages (kB) of the mappings over tensor T's memory (advice
    on part of a mapping splits it: sum every piece that overlaps)."""
    lo = t.data_ptr()
    hi = lo + t.numel() * t.element_size()
    cur, kb = False, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                a, b = (int(v, 16) for v in head.split("-"))
                cur = a < hi and lo < b
            elif cur and head == "AnonHugePages:":
                kb += int(line.split()[1])
    return kb


def huge():
    """A reused 32 MiB buffer is collapsed onto huge pages after 16
    collectives (unless TODIST_TORCH_HUGEPAGES=0), keeping its contents;
    sums stay exact across the collapse."""
    x = torch.full(((32 << 20) // 8,), R + 1, dtype=torch.int64)
    before = anon_huge_kb(x)
    for _ in range(20):     # MAX keeps R+1 = N everywhere after the first
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
    after = anon_huge_kb(x)
    dist.all_reduce(x)      # every element N * N, exactly
    good = bool(torch.all(x == N * N))
    sys.stdout.write("HUGE before=%d after=%d exact=%s\n" % (before, after,
                                                            good))
    sys.stdout.flush()      # one write per line: ranks share the pipe


{"collectives": collectives, "huge": huge, "async": async_works, "ddp": ddp,
 "mismatch": mismatch, "kill": kill}[MODE]()
dist.destroy_process_group()
