"""One rank of tests/torch/test_torch_works.sh: what the backend "todist"
hands back to torch (python/todist/backend.py B3, B4, C3). Prints `PASS
name` or `FAIL name: why` per check. Usage: todist-run -n 2 python3
works_peer.py MODE, MODE one of
  works    a finished work's future holds the call's tensors; a frame
           check that cannot be fooled by a torch.distributed frame above
           a C++ caller; the completion thread's own status (C3);
  reducer  DDP's reducer, with and without a comm hook, given the works of
           calls taken as waited on at once (B1) — what it would get if the
           frame check misread its calls: torch 1.13 read address 0 in
           Reducer::finalize_backward when their value was empty."""
import ctypes
import gc
import sys
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

import todist  # noqa: F401  registers the backend "todist"
from todist import _lib
from todist import backend

MODE = sys.argv[1]
torch.set_num_threads(1)
dist.init_process_group("todist")
R, N = dist.get_rank(), dist.get_world_size()
PG = dist.distributed_c10d._get_default_group()


def report(name, good, why=""):
    line = "PASS %s" % name if good else "FAIL %s: %s" % (name, why)
    sys.stdout.write(line.replace("\n", " ") + "\n")    # one write per line
    sys.stdout.flush()


def guarded(name, fn):
    try:
        fn()
    except Exception as e:          # a check that raised failed
        report(name, False, "%s: %s" % (type(e).__name__, e))


class Spy:
    """Counts the calls of _lib's function NAME (blocking or _async)."""

    def __init__(self, name):
        self.name, self.real, self.calls = name, getattr(_lib, name), 0

    def __call__(self, *args):
        self.calls += 1
        return self.real(*args)

    def __enter__(self):
        setattr(_lib, self.name, self)
        return self

    def __exit__(self, *exc):
        setattr(_lib, self.name, self.real)


# Calls made from frames that backend._caller_waits reads as
# torch.distributed's own (module name and function name), as torch's
# functions make them: with their own options object.
_SRC = '''
def all_reduce(pg, tensor, opts, async_op=False):
    return pg.allreduce([tensor], opts)

def broadcast(pg, tensor, opts, async_op=False):
    return pg.broadcast([tensor], opts)

def all_gather_into_tensor(pg, out, inp, async_op=False):
    return pg._allgather_base(out, inp)

def reduce_scatter_tensor(pg, out, inp, opts, async_op=False):
    return pg._reduce_scatter_base(out, inp, opts)

def send(pg, tensor, dst):
    return pg.send([tensor], dst, 0)

def recv(pg, tensor, src):
    return pg.recv([tensor], src, 0)

def barrier(pg, opts, async_op=False):
    return pg.barrier(opts)

def all_reduce_beside(pg, tensor, theirs, opts, async_op=False):
    """A torch.distributed frame under which C++ calls the method: the
    frame's own options are not the call's."""
    return pg.allreduce([tensor], theirs)
'''
C10D = {"__name__": dist.distributed_c10d.__name__}
exec(compile(_SRC, "<torch.distributed-like>", "exec"), C10D)
# The last one's code object carries the name of torch's all_reduce.
C10D["all_reduce_beside"].__code__ = C10D["all_reduce_beside"].__code__.replace(
    co_name="all_reduce")


def value_of(work):
    """The tensors of WORK's future value (torch 1.13's PyObject holder: a
    list)."""
    v = work.get_future().value()
    return list(v) if isinstance(v, (list, tuple)) else [v]


def holds(name, work, tensors, want, spy):
    """WORK, of a call taken as waited on (blocking: SPY saw one call),
    is finished and its value holds TENSORS themselves, equal to WANT."""
    got = value_of(work)
    ok = (spy.calls == 1 and work.is_completed() and work.wait() and
          len(got) == len(tensors) and
          all(g is t or g.data_ptr() == t.data_ptr()
              for g, t in zip(got, tensors)) and
          all(torch.equal(t, w) for t, w in zip(tensors, want)))
    report(name, ok, "blocking calls %d, value %s, tensors %s, want %s" % (
        spy.calls, got, tensors, want))


def works():
    def sync_all_reduce():
        t = torch.full((4,), float(R + 1))
        opts = _c10d.AllreduceOptions()
        with Spy("td_all_reduce") as spy:
            w = C10D["all_reduce"](PG, t, opts)
        holds("sync_all_reduce_value_holds_the_tensor", w, [t],
              [torch.full((4,), float(sum(range(1, N + 1))))], spy)
    guarded("sync_all_reduce_value_holds_the_tensor", sync_all_reduce)

    def sync_broadcast():
        t = torch.arange(3.0) if R == 0 else torch.zeros(3)
        opts = _c10d.BroadcastOptions()
        opts.rootRank = 0
        with Spy("td_broadcast") as spy:
            w = C10D["broadcast"](PG, t, opts)
        holds("sync_broadcast_value_holds_the_tensor", w, [t],
              [torch.arange(3.0)], spy)
    guarded("sync_broadcast_value_holds_the_tensor", sync_broadcast)

    def sync_all_gather():
        out, inp = torch.zeros(2 * N), torch.full((2,), float(R))
        with Spy("td_all_gather") as spy:
            w = C10D["all_gather_into_tensor"](PG, out, inp)
        holds("sync_all_gather_into_tensor_value_holds_the_output", w, [out],
              [torch.arange(N, dtype=torch.float32).repeat_interleave(2)],
              spy)
    guarded("sync_all_gather_into_tensor_value_holds_the_output",
            sync_all_gather)

    def sync_reduce_scatter():
        out, inp = torch.zeros(2), torch.ones(2 * N)
        opts = _c10d.ReduceScatterOptions()
        with Spy("td_reduce_scatter") as spy:
            w = C10D["reduce_scatter_tensor"](PG, out, inp, opts)
        holds("sync_reduce_scatter_tensor_value_holds_the_output", w, [out],
              [torch.full((2,), float(N))], spy)
    guarded("sync_reduce_scatter_tensor_value_holds_the_output",
            sync_reduce_scatter)

    def sync_send_recv():
        t = torch.full((5,), 7.0) if R == 0 else torch.zeros(5)
        if R == 0:
            with Spy("td_send") as spy:
                w = C10D["send"](PG, t, 1)
        else:
            with Spy("td_recv") as spy:
                w = C10D["recv"](PG, t, 0)
        holds("sync_send_recv_value_holds_the_tensor", w, [t],
              [torch.full((5,), 7.0)], spy)
    guarded("sync_send_recv_value_holds_the_tensor", sync_send_recv)

    def sync_barrier():
        with Spy("td_group_barrier") as spy:
            w = C10D["barrier"](PG, _c10d.BarrierOptions())
        report("sync_barrier_finished", spy.calls == 1 and
               w.is_completed() and w.wait() and
               value_of(w) in ([], [None]), "calls %d" % spy.calls)
    guarded("sync_barrier_finished", sync_barrier)

    # B5: a blocking call on a tensor object used before may get that
    # call's work back; every work's value still holds its own call's
    # tensor object, never another one over the same memory (a view: same
    # address, elements and dtype), a newer tensor or an older one.
    def ar(x):
        return C10D["all_reduce"](PG, x, _c10d.AllreduceOptions())

    def bc(x):
        opts = _c10d.BroadcastOptions()
        opts.rootRank = 0
        return C10D["broadcast"](PG, x, opts)

    def reuse():
        t = torch.ones(2)
        u = t.view(2)
        v = torch.ones(2)
        calls = [(ar, t), (ar, t), (ar, u), (bc, t), (ar, v), (bc, u),
                 (ar, t), (ar, v), (ar, v)]
        got, bad = [], []
        for i, (f, x) in enumerate(calls):
            w = f(x)
            got.append(w)
            val = value_of(w)
            if not (w.is_completed() and w.wait() and len(val) == 1 and
                    val[0] is x):
                bad.append("call %d: value %s, not its tensor" % (i, val))
        for i, ((f, x), w) in enumerate(zip(calls, got)):
            if value_of(w)[0] is not x:
                bad.append("call %d's work now holds %s" % (
                    i, value_of(w)))
        report("sync_reuse_value_is_this_calls_tensor", not bad,
               "; ".join(bad))
        # kept from a tensor's second call on (the first only seen)
        report("sync_reuse_same_tensor_same_work",
               got[3] is got[1] and got[6] is got[1] and got[8] is got[7],
               "works %s" % [id(w) for w in got])
    guarded("sync_reuse_value_is_this_calls_tensor", reuse)

    # B5: only tensors called on twice, small and not requiring grad, are
    # kept (a small view keeps its large base's storage), at most
    # _REUSE_MAX of them.
    def kept():
        big = torch.ones(32 << 10)          # 128 KiB
        base = torch.ones(32 << 10)
        grad = torch.ones(2, requires_grad=True)
        small = torch.ones(2)
        once = torch.ones(2)
        refs = [(n, weakref.ref(x)) for n, x in (
            ("big", big), ("base", base), ("grad", grad), ("small", small),
            ("once", once))]
        for x in (big, base[:2], grad, small):
            ar(x).wait()
            ar(x).wait()
        ar(once).wait()
        del big, base, grad, small, once, x
        gc.collect()
        alive = [n for n, r in refs if r() is not None]
        for _ in range(3 * backend._REUSE_MAX):
            y = torch.ones(2)
            ar(y).wait()
            ar(y).wait()
        n, s = len(backend._reuse), len(backend._seen)
        report("sync_reuse_keeps_only_small_tensors",
               alive == ["small"] and 0 < n <= backend._REUSE_MAX and
               s <= backend._SEEN_MAX,
               "alive after del: %s (want only small), kept %d (max %d), "
               "seen %d (max %d)" % (alive, n, backend._REUSE_MAX, s,
                                     backend._SEEN_MAX))
    guarded("sync_reuse_keeps_only_small_tensors", kept)

    # B5: a kept tensor that grew past _REUSE_BYTES (resize_: new storage)
    # or joined an autograd graph (an in-place op with a tensor requiring
    # grad) after it was kept is let go at its next call, and one that
    # grew and is called no more at the next keep: once the program drops
    # it, its storage and graph are freed (before: held until the next
    # clear, which a program with few tensors never reaches).
    def changed():
        backend._reuse.clear()
        backend._seen.clear()
        grown, graphed, left = torch.ones(2), torch.ones(2), torch.ones(2)
        leaf = torch.ones(2, requires_grad=True)
        for x in (grown, graphed, left):
            ar(x).wait()
            ar(x).wait()
        grown.resize_(32 << 10).fill_(1)            # 128 KiB
        graphed.add_(leaf)                          # grad_fn: AddBackward
        left.resize_(32 << 10)
        bad = []
        for n, x in (("grown", grown), ("graphed", graphed)):
            want = x.detach() * N                   # every rank's alike
            w = ar(x)
            w.wait()
            val = value_of(w)
            if not (len(val) == 1 and val[0] is x and
                    torch.equal(x.detach(), want)):
                bad.append("%s: value %s, tensor %s" % (n, val, x))
        refs = [(n, weakref.ref(x)) for n, x in (
            ("grown", grown), ("graphed", graphed), ("leaf", leaf),
            ("left", left))]
        del grown, graphed, leaf, left, x, w, val, want
        y = torch.ones(2)
        ar(y).wait()
        ar(y).wait()                                # a keep
        gc.collect()
        alive = [n for n, r in refs if r() is not None]
        report("sync_reuse_lets_go_of_changed_tensors", not bad and not alive,
               "%s; alive after del: %s (want none; kept %d)" % (
                   bad, alive, len(backend._reuse)))
    guarded("sync_reuse_lets_go_of_changed_tensors", changed)

    # B4: the frame is torch's all_reduce(async_op=False), but the options
    # are not its own: a C++ caller below it. Asynchronous, and the value
    # holds the call's tensor (old code: blocking, and an empty value).
    def beside():
        t = torch.full((3,), float(R))
        with Spy("td_all_reduce") as spy, Spy("td_all_reduce_async") as spa:
            w = C10D["all_reduce_beside"](PG, t, _c10d.AllreduceOptions(),
                                          _c10d.AllreduceOptions())
            w.wait()
        got = value_of(w)
        report("frame_with_other_options_is_not_the_caller",
               spy.calls == 0 and spa.calls == 1 and len(got) == 1 and
               got[0].data_ptr() == t.data_ptr() and
               torch.equal(t, torch.full((3,), float(sum(range(N))))),
               "blocking %d, async %d, value %s, tensor %s" % (
                   spy.calls, spa.calls, got, t))
    guarded("frame_with_other_options_is_not_the_caller", beside)

    # C3: an operation that ends between its wait's slice running out and
    # the test is finished with its own status (old code: with the slice's
    # TD_ERR_TIMEOUT, a successful operation failed as timed out). A fake
    # handle; every other handle goes to the library.
    def completion_race():
        fake = 0x7d15700
        real = {n: getattr(_lib, n) for n in
                ("td_work_wait", "td_work_test", "td_work_release")}

        def wait(h, timeout):
            if h != fake:
                return real["td_work_wait"](h, timeout)
            return _lib.TD_ERR_TIMEOUT if timeout > 0 else _lib.TD_OK

        def test(h, done_p):
            if h != fake:
                return real["td_work_test"](h, done_p)
            done_p._obj.value = 1
            return _lib.TD_OK

        def release(h):
            if h != fake:
                real["td_work_release"](h)

        t = torch.ones(2)
        op = backend._Pending(fake, (t,), [], [t], "all_reduce")
        done = threading.Event()
        op.fut.then(lambda f: done.set())
        for n, f in (("td_work_wait", wait), ("td_work_test", test),
                     ("td_work_release", release)):
            setattr(_lib, n, f)
        try:
            backend._Completer().add(op)
            done.wait(60)
        finally:
            for n, f in real.items():
                setattr(_lib, n, f)
        try:
            got = op.fut.wait()
            report("completion_finishes_with_the_operations_status",
                   got[0] is t, str(got))
        except RuntimeError as e:
            report("completion_finishes_with_the_operations_status", False,
                   str(e))
    guarded("completion_finishes_with_the_operations_status",
            completion_race)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(),
                               torch.nn.Linear(30, 5))


def local_grads(steps):
    """The gradients of STEPS steps of every rank's batch, averaged: what
    DDP must give (no optimizer step, so the weights stay)."""
    m = model()
    out = []
    for _ in range(steps):
        m.zero_grad()
        total = [torch.zeros_like(p) for p in m.parameters()]
        for r in range(N):
            gen = torch.Generator().manual_seed(r)
            m.zero_grad()
            m(torch.randn(8, 20, generator=gen)).pow(2).sum().backward()
            for a, p in zip(total, m.parameters()):
                a += p.grad
        out.append([a / N for a in total])
    return out


def reducer():
    # Every call taken as one waited on at once (B1), DDP's reducer's too.
    backend._caller_waits = lambda opts=None: backend.SYNC
    want = local_grads(2)

    def run(name, hook=None):
        m = torch.nn.parallel.DistributedDataParallel(model(),
                                                      bucket_cap_mb=0.001)
        if hook is not None:
            m.register_comm_hook(None, hook)
        good, why = True, ""
        for step in range(2):
            m.zero_grad()
            gen = torch.Generator().manual_seed(R)
            m(torch.randn(8, 20, generator=gen)).pow(2).sum().backward()
            for g, w in zip((p.grad for p in m.parameters()), want[step]):
                if not torch.allclose(g, w, rtol=1e-5, atol=1e-6):
                    good, why = False, "step %d: %s != %s" % (step, g, w)
        report(name, good, why)

    # A hook that reads its all_reduce's future value, as torch's own
    # allreduce_hook does (old code: [] there, IndexError in the hook).
    def hook(state, bucket):
        buf = bucket.buffer().div_(N)
        return dist.all_reduce(buf, async_op=True).get_future().then(
            lambda f: f.value()[0])
    guarded("reducer_comm_hook_reads_the_value",
            lambda: run("reducer_comm_hook_reads_the_value", hook))
    # The reducer's own hook: parseCppCommHookResult takes the value's first
    # tensor unchecked (old code: SIGSEGV in Reducer::finalize_backward).
    guarded("reducer_default_reads_the_value",
            lambda: run("reducer_default_reads_the_value"))


{"works": works, "reducer": reducer}[MODE]()
dist.barrier()
dist.destroy_process_group()
