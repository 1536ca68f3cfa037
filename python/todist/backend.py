"""The c10d backend "todist": torch.distributed over todist's groups.

A pure-Python ProcessGroup (torch 1.13's trampoline; torch >= 2 returns a
ProcessGroup subclass from the creator as is). Each operation wraps the
torch tensors' memory as todist tensors (td_tensor_from_blob: no copy; a
non-contiguous tensor is made contiguous and copied back) and calls the
matching td_* collective or point-to-point function.

How an operation completes:
  B1. Called by a torch.distributed function that waits at once (async_op
      False, send, recv), it runs blocking on the calling thread (no hand-off)
      and returns a finished work (B3).
  B2. Otherwise it is issued with the td_*_async form and returns torch's
      work over a future (_create_work_from_future: torch's C++ side, DDP's
      reducer say, waits on works without calling into Python); the one
      completion thread of the process waits on todist's work handles in
      turn and completes those futures: one thread in all, never one per
      call. Called from Python (async_op=True, isend, ...), the work is a
      Python one whose wait() raises the operation's error (torch 1.13's
      work over a future would swallow it). (An irecv from any source
      cannot tell its source; recv can.)
  B3. Every work's future holds the call's tensors (the output list; a
      barrier's is empty), never an empty stand-in: DDP's reducer takes the
      first tensor of its bucket's future value without a check, and torch
      1.13 then reads address 0 in Reducer::finalize_backward. A finished
      work of B1 is a C++ work over a completed future, not a Python one:
      a Python work held only by C++ loses its Python methods when its
      last Python reference goes (its wait() never returns, get_future()
      raises), so a C++ caller taken for a Python one still gets a work it
      can wait on and a value it can read. Only a receive from any source,
      whose sender torch.distributed's recv asks the work for, returns a
      Python work (_Done), to that Python caller.
  B4. The caller is read from the frame that called the ProcessGroup method.
      A torch.distributed function passes the options object it made (its
      local "opts") or none; a C++ caller (DDP's reducer) always passes its
      own. So a torch.distributed frame whose "opts" is not the options we
      got did not make this call (C++ came between: that frame is only the
      last Python one on the thread), and the call is taken as C++'s.
  B5. A finished work of B1 may be one made for an earlier call, given
      back when this call's one tensor is that call's very object (not
      merely the same memory): its value then holds this call's tensor,
      as B3 asks, for about 0.05 us where a new work costs about 1 us
      (torch 1.13). A tensor is kept referenced for that from its second
      call on (its first is remembered weakly, so a new tensor in every
      call is never kept), if its storage is at most _REUSE_BYTES (64 KiB)
      and it does not require grad (no autograd graph kept alive); at most
      _REUSE_MAX (8) are kept, all let go when one more comes. A kept
      tensor is checked at each call and each keep: one that requires grad
      since (an in-place op with a tensor requiring grad: a graph) or whose
      data pointer moved (resize_ or set_: its storage is another, maybe a
      larger one) is let go then, so what is kept stays within those
      bounds from the next call or keep on, not only from the next clear
      (+0.05 us a reused call, torch 1.13). A call without tensors (a
      barrier) gets one shared work, its value empty.
Errors (mismatched calls across ranks, a dead rank, a timeout) come back
as RuntimeError carrying todist's message, which names the ranks and both
calls.

Groups: torch's new_group is entered by every rank, but only members reach
the backend's creator, while td_group_new must be called by every world
rank in the same order. The package therefore wraps torch's
_new_process_group_helper (which every rank enters) to call td_group_new
on every rank; the creator then takes the member's handle."""
import ctypes
import functools
import os
import sys
import threading
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from . import _lib

NAME = "todist"

_DTYPES = {torch.float32: _lib.TD_FLOAT32, torch.float64: _lib.TD_FLOAT64,
           torch.int64: _lib.TD_INT64, torch.int32: _lib.TD_INT32,
           torch.uint8: _lib.TD_UINT8}
_CPU = _lib.Device(0, 0)
_R = dist.ReduceOp
# Compared in order (ReduceOp objects compare equal but do not hash apart).
_OPS = [(_R.SUM, 0), (_R.PRODUCT, 1), (_R.MIN, 2), (_R.MAX, 3),
        (_R.BAND, 5), (_R.BOR, 6), (_R.BXOR, 7)]
if hasattr(_R, "AVG"):
    _OPS.append((_R.AVG, 4))
# The same by the op's enum (ReduceOp.op, a RedOpType): one dict lookup
# where == on ReduceOp objects costs a microsecond each. torch 1.13's class
# attributes are ReduceOp objects, torch 2.x's the RedOpType values.
try:
    _OP_BY_VALUE = {getattr(r, "op", r).value: code for r, code in _OPS}
except (AttributeError, TypeError):
    _OP_BY_VALUE = {}
# By identity of torch's own ReduceOp objects (class attributes, alive for
# good), as torch.distributed's functions receive them: no call at all.
_OP_BY_ID = {id(r): code for r, code in _OPS}

# ---- tensors ---------------------------------------------------------------

# td tensors over torch memory, by (address, elements, torch dtype) for
# todist's own dtypes and (address, bytes, None) for others moved as bytes
# (only the slow path looks those up, after refusing them to reductions).
# Only CPU tensors enter (CUDA addresses never equal host ones). A td tensor is
# only a descriptor of the address (no deleter), so reusing it for a new
# torch tensor at the same address is exact; collectives in flight retain
# their own reference, so dropping the cache is always safe.
_CACHE_MAX = 1024
_cache = {}


def _blob(ptr, count, tdtype, key):
    out = ctypes.c_void_p()
    shape = ctypes.c_int64(count)
    _lib.check(_lib.td_tensor_from_blob(ptr or None, ctypes.byref(shape), 1,
                                        tdtype, _CPU, None, None,
                                        ctypes.byref(out)),
               "wrapping a torch tensor")
    if len(_cache) >= _CACHE_MAX:
        _cache_clear()
    h = _cache.setdefault(key, out.value)
    if h != out.value:
        _lib.td_tensor_release(out.value)
    return h


def _cache_clear():
    for h in list(_cache.values()):
        _lib.td_tensor_release(h)
    _cache.clear()


# Huge pages for torch's large buffers. A peer on this host reads a
# collective's buffer in place (process_vm_readv), page by page: over 4 KiB
# pages a 64 MiB all_reduce takes twice as long as over 2 MiB ones (12.5 ms
# against 6.1 ms, 2 ranks, bench/torch_backend.sh), and torch's allocator,
# unlike todist's, never asks for huge pages (THP is "madvise" on most
# distributions). Collapsing costs about a copy at ~1 GB/s (72 ms for
# 64 MiB), so a buffer is collapsed only once it has served _HUGE_USES
# collectives (a reused one: DDP's buckets, a benchmark's tensor), at most
# once per (address, elements, dtype), and never when TODIST_TORCH_HUGEPAGES
# is 0. The kernel keeps the contents; a kernel without MADV_COLLAPSE (< 6.1)
# answers EINVAL and nothing changes.
_HUGE_BYTES = 2 << 20
_HUGE_MIN = 8 << 20             # smaller buffers gain too little
_HUGE_USES = 16
_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25
_huge_on = os.environ.get("TODIST_TORCH_HUGEPAGES", "1") != "0"
# The one test on _wrap's hot path: elements at or past this may be large
# enough (8 bytes each at most); off: never.
_HUGE_GATE = _HUGE_MIN // 8 if _huge_on else sys.maxsize
_huge_uses = {}                 # key -> uses so far; -1 once advised
_libc = None


def _huge_advise(t, key):
    n = _huge_uses.get(key, 0)
    if n < 0:
        return
    nbytes = key[1] * t.element_size()
    if nbytes < _HUGE_MIN:
        _huge_uses[key] = -1
        return
    if n + 1 < _HUGE_USES:
        if len(_huge_uses) >= _CACHE_MAX:
            _huge_uses.clear()
        _huge_uses[key] = n + 1
        return
    _huge_uses[key] = -1
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int]
    lo = (key[0] + _HUGE_BYTES - 1) & ~(_HUGE_BYTES - 1)
    hi = (key[0] + nbytes) & ~(_HUGE_BYTES - 1)
    if hi > lo and _libc.madvise(lo, hi - lo, _MADV_HUGEPAGE) == 0:
        _libc.madvise(lo, hi - lo, _MADV_COLLAPSE)


def _wrap(t, what, reduce):
    """The td tensor over contiguous CPU tensor T. Reductions need one of
    todist's dtypes; data movement takes any dtype as its bytes."""
    key = (t.data_ptr(), t.numel(), t.dtype)
    if key[1] >= _HUGE_GATE:
        _huge_advise(t, key)
    h = _cache.get(key)
    if h is not None:
        return h
    if t.device.type != "cpu":
        raise RuntimeError("todist: %s: the todist backend takes CPU tensors, "
                           "got one on %s" % (what, t.device))
    tdtype = _DTYPES.get(t.dtype)
    if tdtype is not None:
        return _blob(key[0], key[1], tdtype, key)
    if reduce:
        raise RuntimeError("todist: %s of dtype %s is not supported (float32, "
                           "float64, int32, int64, uint8)" % (what, t.dtype))
    nbytes = t.numel() * t.element_size()
    return _cache.get((key[0], nbytes, None)) or \
        _blob(key[0], nbytes, _lib.TD_UINT8, (key[0], nbytes, None))


def _contig(t, posts):
    """T itself when contiguous, else a contiguous copy that POSTS copies
    back into T once the operation succeeded."""
    if t.is_contiguous():
        return t
    c = t.contiguous()
    posts.append(lambda: t.copy_(c))
    return c


def _op(opts, what):
    op = opts.reduceOp
    try:
        return _OP_BY_VALUE[op.op.value]
    except (AttributeError, KeyError, TypeError):
        pass
    for r, code in _OPS:
        if op == r:
            return code
    raise RuntimeError("todist: %s: reduce op %s is not supported" % (what, op))


def _one(tensors, what):
    if len(tensors) != 1:
        raise RuntimeError("todist: %s takes one tensor per call, got %d"
                           % (what, len(tensors)))
    return tensors[0]


# ---- who waits -------------------------------------------------------------

_C10D = dist.distributed_c10d.__name__
_WAITS_AT_ONCE = {"send", "recv"}
_ASYNC_OP = {"all_reduce", "broadcast", "reduce", "all_gather",
             "_all_gather_base", "all_gather_into_tensor", "all_gather_single",
             "gather", "gather_single", "scatter", "reduce_scatter",
             "_reduce_scatter_base", "reduce_scatter_tensor",
             "reduce_scatter_single", "all_to_all", "all_to_all_single",
             "barrier"}


def _caller_waits(opts=None):
    """SYNC when our caller is a torch.distributed function that waits on
    the returned work at once (B1), PYTHON when it is another
    torch.distributed function (it hands the work to Python code), else
    None (C++, DDP's reducer say: its frame is some unrelated one). Frame
    0 is this function, 1 the ProcessGroup method, 2 the method's caller.
    torch >= 2.x says it in the options (asyncOp, True by default, so C++
    callers stay asynchronous). A frame holding options other than OPTS
    did not make the call (B4)."""
    if getattr(opts, "asyncOp", None) is False:
        return SYNC
    try:
        f = sys._getframe(2)
    except ValueError:          # called from a thread with no Python above
        return None
    if f.f_globals.get("__name__") != _C10D:
        return None
    name = f.f_code.co_name
    if name in _WAITS_AT_ONCE:
        return SYNC
    if name in _ASYNC_OP:
        loc = f.f_locals
        if opts is not None and loc.get("opts", opts) is not opts:
            return None
        _caller.op = loc.get("op")
        if loc.get("async_op", True) is False:
            return SYNC
    return PYTHON


SYNC, PYTHON = 1, 2
# The caller's `op` argument, seen by _caller_waits (per thread).
_caller = threading.local()


# ---- works -----------------------------------------------------------------

# torch.futures.Future's own class: its Python subclass's __init__ costs
# 0.3 us more a call (torch 1.13), and B1's future is only completed.
_Future = torch._C.Future


def _made(result):
    """A new C++ work over a completed future holding RESULT (B3)."""
    fut = _Future([])
    fut.set_result(result)
    return _c10d._create_work_from_future(fut)


# B5's finished works, by the id of the one tensor each one's future holds
# (held here, so no other object has that id while it is here), and the
# tensors of single-tensor calls seen once, weakly (not kept alive: a new
# tensor in every call, say torch.tensor([loss]), is never kept), at most
# _SEEN_MAX of them (a small dict: a large one's table, freed and made
# again at each clear, moved torch's next buffers to new addresses, which
# _wrap then had to wrap anew).
_REUSE_BYTES = 64 << 10
_REUSE_MAX = 8
_reuse = {}
_seen = {}
_SEEN_MAX = 8
_weak = weakref.ref
_storage = getattr(torch.Tensor, "untyped_storage", None) or \
    torch.Tensor._storage       # torch 1.13 has only this name


def _finished(result):
    """A finished operation's work, its future holding RESULT, the call's
    own tensors (B1, B3, B5)."""
    if len(result) != 1:
        return _made(result) if result else _EMPTY_DONE
    t = result[0]
    k = id(t)
    e = _reuse.get(k)
    if e is not None and e[0] is t:
        if not t.requires_grad and t.data_ptr() == e[2]:
            return e[1]
        del _reuse[k]                   # grown or in a graph since: let go
    w = _made(result)
    r = _seen.get(k)
    if r is None or r() is not t:       # its first call: seen
        if len(_seen) >= _SEEN_MAX:
            _seen.clear()
        try:
            _seen[k] = _weak(t)
        except TypeError:               # not a tensor (all_gather's list)
            pass
    elif not t.requires_grad and _storage(t).nbytes() <= _REUSE_BYTES:
        if len(_reuse) >= _REUSE_MAX:   # its second: kept
            _reuse.clear()
        else:                           # those changed since, let go
            for j in [j for j, (x, _, p) in _reuse.items()
                      if x.requires_grad or x.data_ptr() != p]:
                del _reuse[j]
        _reuse[k] = (t, w, t.data_ptr())
    return w


# The finished work of a call without tensors (a barrier, a gather's
# non-root; B5): its value is empty, so one serves them all.
_EMPTY_DONE = _made([])


class _Done(_c10d.Work):
    """A finished receive that knows its sender (B1, B3): for
    torch.distributed's recv, which asks the work for it."""

    def __init__(self, result, source=-1):
        super().__init__()
        self._result = result
        self._source = source

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return self._result

    def source_rank(self):
        return self._source

    _source_rank = source_rank

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._result)
        return fut


class _FutureWork(_c10d.Work):
    """The work of B2 handed to Python code: wait() raises the operation's
    error (torch 1.13's work over a future swallows it; its C++ callers read
    the future's value, which raises)."""

    def __init__(self, op):
        super().__init__()
        self._op = op
        self._fut = op.fut

    def source_rank(self):
        self.wait()
        return self._op.source

    _source_rank = source_rank

    def wait(self, timeout=None):
        self._fut.wait()            # raises the RuntimeError set by finish
        return True

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        return self.exception() is None and self._fut.done()

    def exception(self):
        if not self._fut.done():
            return None
        try:
            self._fut.wait()
        except RuntimeError as e:
            return e
        return None

    def result(self):
        return self._fut.wait()

    def get_future(self):
        return self._fut


class _Pending:
    """An operation in flight over todist work handle HANDLE (B2): what
    the completion thread needs to finish it. Only that thread touches it
    after creation, so it needs no lock."""
    __slots__ = ("handle", "keep", "posts", "result", "what", "fut", "recv",
                 "source")

    def __init__(self, handle, keep, posts, result, what, recv=False):
        self.recv = recv            # a receive: note the sender
        self.source = -1
        self.handle = handle
        self.keep = keep            # the torch tensors todist reads/writes
        self.posts = posts          # copies back, run on success
        self.result = result        # the future's value
        self.what = what
        self.fut = torch.futures.Future()

    def finish(self, status):
        """Complete the future with STATUS (a td_status_t) and drop the
        handle; on the completion thread only."""
        msg = None
        if status == _lib.TD_OK and self.recv:
            src = ctypes.c_int(-1)
            if _lib.td_work_source(self.handle, ctypes.byref(src)) == 0:
                self.source = src.value
        if status == _lib.TD_OK:
            try:
                for p in self.posts:
                    p()
            except Exception as e:      # a copy back failed: say so
                msg = "copying the result back: %s" % e
        elif status is not None:
            msg = "%s (%s)" % (_lib.message(status),
                               _lib.td_status_name(status).decode())
        _lib.td_work_release(self.handle)
        self.handle = self.keep = self.posts = None
        if msg is None:
            self.fut.set_result(self.result)
        else:
            self.fut.set_exception(RuntimeError("todist: %s failed: %s" % (
                self.what, msg)))


class _Completer:
    """B2: the one thread that completes the futures of asynchronous
    operations from todist's work handles.

    Invariants (CV's lock guards PENDING and THREAD):
      C1. PENDING holds the operations in flight, oldest first; only the
          thread removes them, after finishing them.
      C2. The thread blocks on the oldest one's handle (one group's
          collectives finish in order, so that is the one to wait for) in
          slices of SLICE_S, and tests the others between slices, so a
          point-to-point operation finished out of order waits at most one
          slice. The wait releases the GIL (ctypes).
      C3. An operation is finished with its own status, never with the
          slice's TD_ERR_TIMEOUT: one that ends between the slice running
          out and the test is asked again (a successful operation could
          otherwise fail as timed out)."""
    SLICE_S = 0.005

    def __init__(self):
        self._cv = threading.Condition()
        self._pending = []
        self._thread = None

    def add(self, op):
        with self._cv:
            self._pending.append(op)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run,
                                                name="todist-completion",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self):
        done = ctypes.c_int(0)
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                batch = list(self._pending)
            finished = set()
            st = _lib.td_work_wait(batch[0].handle, self.SLICE_S)
            if st == _lib.TD_ERR_TIMEOUT and self._done(batch[0], done):
                st = _lib.td_work_wait(batch[0].handle, 0.0)     # C3
            if st != _lib.TD_ERR_TIMEOUT or self._done(batch[0], done):
                batch[0].finish(st)
                finished.add(id(batch[0]))
            for op in batch[1:]:
                if self._done(op, done):
                    op.finish(_lib.td_work_wait(op.handle, 0.0))
                    finished.add(id(op))
            if finished:
                with self._cv:
                    self._pending = [op for op in self._pending
                                     if id(op) not in finished]

    @staticmethod
    def _done(op, done):
        done.value = 0
        _lib.td_work_test(op.handle, ctypes.byref(done))
        return bool(done.value)


_completer = _Completer()

# ---- the process group -----------------------------------------------------


class ProcessGroupTodist(dist.ProcessGroup):
    """torch.distributed's ProcessGroup over todist group G (a pointer)."""

    def __init__(self, rank, size, group):
        super().__init__(rank, size)
        self._g = group

    def getBackendName(self):
        return NAME

    def _get_backend_name(self):
        return NAME

    def name(self):
        return NAME

    def __del__(self):
        g, self._g = getattr(self, "_g", None), None
        if g and g != _lib.td_group_world() and _lib.td_initialized():
            _lib.td_group_destroy(g)

    def _go(self, what, sync, blocking, issue, args, keep, posts, result,
            recv=False):
        """Run one operation: blocking when the caller waits at once (B1),
        else issued asynchronously (B2)."""
        if sync == SYNC and blocking is not None:
            if recv:
                src = ctypes.c_int(-1)
                st = blocking(*args, ctypes.byref(src))
            else:
                src = None
                st = blocking(*args)
            _lib.check(st, what)
            for p in posts:
                p()
            if src is None:
                return _finished(result)
            return _Done(result, src.value)
        w = ctypes.c_void_p()
        _lib.check(issue(*args, ctypes.byref(w)), what)
        op = _Pending(w.value, keep, posts, result, what, recv)
        _completer.add(op)
        if sync == PYTHON:
            return _FutureWork(op)
        return _c10d._create_work_from_future(op.fut)

    # -- collectives ---------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        _caller.op = None
        sync = _caller_waits(opts)
        t = _one(tensors, "all_reduce")
        op = _OP_BY_ID.get(id(_caller.op))
        if op is None:
            op = _op(opts if opts is not None else _c10d.AllreduceOptions(),
                     "all_reduce")
        if sync == SYNC and t.is_contiguous():
            # _go's B1 for the commonest blocking call, without its
            # generality (no copy back, no receive)
            _lib.check(_lib.td_all_reduce(self._g,
                                          _wrap(t, "all_reduce", True), op),
                       "all_reduce")
            return _finished(tensors)
        posts = []
        c = _contig(t, posts)
        h = _wrap(c, "all_reduce", True)
        return self._go("all_reduce", sync, _lib.td_all_reduce,
                        _lib.td_all_reduce_async, (self._g, h, op), (c,),
                        posts, tensors)

    def broadcast(self, tensors, opts=None):
        sync = _caller_waits(opts)
        t = _one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        posts = []
        c = _contig(t, posts)
        h = _wrap(c, "broadcast", False)
        return self._go("broadcast", sync, _lib.td_broadcast,
                        _lib.td_broadcast_async, (self._g, h, root), (c,),
                        posts, tensors)

    def reduce(self, tensors, opts=None):
        sync = _caller_waits(opts)
        t = _one(tensors, "reduce")
        op = _op(opts, "reduce")
        posts = []
        c = _contig(t, posts)
        h = _wrap(c, "reduce", True)
        return self._go("reduce", sync, _lib.td_reduce, _lib.td_reduce_async,
                        (self._g, h, opts.rootRank, op), (c,), posts, tensors)

    def _allgather_base(self, output, input, opts=None):
        sync = _caller_waits(opts)
        posts = []
        ci = _contig(input, [])
        co = _contig(output, posts)
        if co.numel() != ci.numel() * self.size():
            raise RuntimeError("todist: all_gather_into_tensor: output has %d "
                               "elements, expected %d x %d" % (
                                   co.numel(), self.size(), ci.numel()))
        return self._go("all_gather_into_tensor", sync, _lib.td_all_gather,
                        _lib.td_all_gather_async,
                        (self._g, _wrap(co, "all_gather", False),
                         _wrap(ci, "all_gather", False)),
                        (co, ci), posts, [output])

    def allgather(self, output_tensors, input_tensors, opts=None):
        sync = _caller_waits(opts)
        outs = _one(output_tensors, "all_gather")
        t = _one(input_tensors, "all_gather")
        if len(outs) != self.size():
            raise RuntimeError("todist: all_gather: %d output tensors for a "
                               "group of %d" % (len(outs), self.size()))
        ci = _contig(t, [])
        flat = torch.empty(self.size() * ci.numel(), dtype=ci.dtype)
        posts = [lambda: [o.copy_(f.view_as(o)) for o, f in
                          zip(outs, flat.chunk(self.size()))]]
        return self._go("all_gather", sync, _lib.td_all_gather,
                        _lib.td_all_gather_async,
                        (self._g, _wrap(flat, "all_gather", False),
                         _wrap(ci, "all_gather", False)),
                        (flat, ci), posts, output_tensors)

    def gather(self, output_tensors, input_tensors, opts):
        sync = _caller_waits(opts)
        t = _one(input_tensors, "gather")
        root = opts.rootRank
        ci = _contig(t, [])
        flat, posts, ho = None, [], None
        if self.rank() == root:
            outs = _one(output_tensors, "gather")
            flat = torch.empty(self.size() * ci.numel(), dtype=ci.dtype)
            posts.append(lambda: [o.copy_(f.view_as(o)) for o, f in
                                  zip(outs, flat.chunk(self.size()))])
            ho = _wrap(flat, "gather", False)
        return self._go("gather", sync, _lib.td_gather, _lib.td_gather_async,
                        (self._g, ho, _wrap(ci, "gather", False), root),
                        (flat, ci), posts, output_tensors)

    def scatter(self, output_tensors, input_tensors, opts):
        sync = _caller_waits(opts)
        t = _one(output_tensors, "scatter")
        root = opts.rootRank
        posts = []
        co = _contig(t, posts)
        flat, hi = None, None
        if self.rank() == root:
            ins = _one(input_tensors, "scatter")
            flat = torch.cat([x.reshape(-1) for x in ins])
            hi = _wrap(flat, "scatter", False)
        return self._go("scatter", sync, _lib.td_scatter, _lib.td_scatter_async,
                        (self._g, _wrap(co, "scatter", False), hi, root),
                        (co, flat), posts, output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        sync = _caller_waits(opts)
        op = _op(opts if opts is not None else _c10d.ReduceScatterOptions(),
                 "reduce_scatter")
        posts = []
        co = _contig(output, posts)
        ci = _contig(input, [])
        return self._go("reduce_scatter_tensor", sync, _lib.td_reduce_scatter,
                        _lib.td_reduce_scatter_async,
                        (self._g, _wrap(co, "reduce_scatter", True),
                         _wrap(ci, "reduce_scatter", True), op),
                        (co, ci), posts, [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        sync = _caller_waits(opts)
        op = _op(opts if opts is not None else _c10d.ReduceScatterOptions(),
                 "reduce_scatter")
        t = _one(output_tensors, "reduce_scatter")
        ins = _one(input_tensors, "reduce_scatter")
        posts = []
        co = _contig(t, posts)
        flat = torch.cat([x.reshape(-1) for x in ins])
        return self._go("reduce_scatter", sync, _lib.td_reduce_scatter,
                        _lib.td_reduce_scatter_async,
                        (self._g, _wrap(co, "reduce_scatter", True),
                         _wrap(flat, "reduce_scatter", True), op),
                        (co, flat), posts, output_tensors)

    def alltoall_base(self, output, input, output_split_sizes,
                      input_split_sizes, opts=None):
        sync = _caller_waits(opts)
        n = self.size()
        for s, t in ((output_split_sizes, output), (input_split_sizes, input)):
            if s and any(x != t.shape[0] // n for x in s):
                raise RuntimeError("todist: all_to_all_single with uneven "
                                   "splits %s is not supported" % (list(s),))
        posts = []
        co = _contig(output, posts)
        ci = _contig(input, [])
        return self._go("all_to_all_single", sync, _lib.td_all_to_all,
                        _lib.td_all_to_all_async,
                        (self._g, _wrap(co, "all_to_all", False),
                         _wrap(ci, "all_to_all", False)),
                        (co, ci), posts, [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        sync = _caller_waits(opts)
        sizes = {t.numel() for t in list(output_tensors) + list(input_tensors)}
        if len(sizes) > 1:
            raise RuntimeError("todist: all_to_all with tensors of different "
                               "sizes %s is not supported" % sorted(sizes))
        flat_in = torch.cat([x.reshape(-1) for x in input_tensors])
        flat_out = torch.empty_like(flat_in)
        outs = list(output_tensors)
        posts = [lambda: [o.copy_(f.view_as(o)) for o, f in
                          zip(outs, flat_out.chunk(len(outs)))]]
        return self._go("all_to_all", sync, _lib.td_all_to_all,
                        _lib.td_all_to_all_async,
                        (self._g, _wrap(flat_out, "all_to_all", False),
                         _wrap(flat_in, "all_to_all", False)),
                        (flat_out, flat_in), posts, output_tensors)

    def barrier(self, opts=None):
        sync = _caller_waits(opts)
        return self._go("barrier", sync, _lib.td_group_barrier,
                        _lib.td_group_barrier_async, (self._g,), (), [], [])

    def gather_single(self, output, input, opts):
        """torch >= 2.x's gather into one tensor (root: n x input)."""
        sync = _caller_waits(opts)
        root = opts.rootRank
        ci = _contig(input, [])
        posts, co, ho = [], None, None
        if self.rank() == root:
            co = _contig(output, posts)
            ho = _wrap(co, "gather", False)
        return self._go("gather", sync, _lib.td_gather, _lib.td_gather_async,
                        (self._g, ho, _wrap(ci, "gather", False), root),
                        (co, ci), posts, [output])

    # torch >= 2.x's names of the single-tensor forms
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base

    # -- point-to-point ------------------------------------------------------

    def send(self, tensors, dstRank, tag=0):
        sync = _caller_waits()
        t = _one(tensors, "send")
        c = _contig(t, [])
        return self._go("send to rank %d" % dstRank, sync, _lib.td_send,
                        _lib.td_isend,
                        (self._g, _wrap(c, "send", False), dstRank, tag),
                        (c,), [], tensors)

    def recv(self, tensors, srcRank, tag=0):
        sync = _caller_waits()
        t = _one(tensors, "recv")
        posts = []
        c = _contig(t, posts)
        return self._go("recv from rank %d" % srcRank, sync, _lib.td_recv,
                        _lib.td_irecv,
                        (self._g, _wrap(c, "recv", False), srcRank, tag),
                        (c,), posts, tensors, recv=True)

    def recv_anysource(self, tensors, tag=0):
        sync = _caller_waits()
        t = _one(tensors, "recv")
        posts = []
        c = _contig(t, posts)
        return self._go("recv from any rank", sync, _lib.td_recv,
                        _lib.td_irecv,
                        (self._g, _wrap(c, "recv", False), _lib.TD_ANY_SOURCE,
                         tag), (c,), posts, tensors, recv=True)


# ---- creation --------------------------------------------------------------

# Handles made by td_group_new for the member's next creator call (the
# wrapped helper and the creator run back to back on one thread).
_next_group = []


def _group_hook(helper):
    """Wrap torch's _new_process_group_helper(size, rank, global_ranks,
    backend, ...): every rank enters it, so td_group_new runs on every
    rank in the same order; members keep the handle for the creator."""
    @functools.wraps(helper)
    def wrapped(group_size, group_rank, global_ranks_in_group, backend,
                *args, **kwargs):
        if global_ranks_in_group and NAME in str(backend).lower():
            ranks = (ctypes.c_int * len(global_ranks_in_group))(
                *global_ranks_in_group)
            g = ctypes.c_void_p()
            _lib.check(_lib.td_group_new(ranks, len(global_ranks_in_group),
                                         ctypes.byref(g)),
                       "new_group(%s)" % list(global_ranks_in_group))
            if _lib.td_group_rank(g.value) >= 0:
                _next_group.append(g.value)
            else:
                _lib.td_group_destroy(g.value)
        try:
            return helper(group_size, group_rank, global_ranks_in_group,
                          backend, *args, **kwargs)
        finally:
            del _next_group[:]
    wrapped._todist = True
    return wrapped


def create(store, rank, size, timeout):
    """The creator torch calls (store and timeout: torch's; todist uses its
    own store and world). Starts todist's runtime on first use."""
    from . import init
    init()
    if "TODIST_COLL_TIMEOUT" not in os.environ and \
            isinstance(timeout, timedelta) and timeout.total_seconds() > 0:
        _lib.td_coll_set_timeout(timeout.total_seconds())
    if _next_group:
        g = _next_group.pop()
    else:
        g = _lib.td_group_world()
    if _lib.td_group_rank(g) != rank or _lib.td_group_size(g) != size:
        raise RuntimeError(
            "todist: torch asks for rank %d of %d, but todist's group has this "
            "process as rank %d of %d: start the job with todist-run or srun "
            "--todist and let init_process_group take rank and world_size "
            "from the environment" % (rank, size, _lib.td_group_rank(g),
                                      _lib.td_group_size(g)))
    return ProcessGroupTodist(rank, size, g)


def register():
    """Register backend "todist" with torch.distributed (once)."""
    if NAME.upper() not in dist.Backend._plugins:
        try:
            dist.Backend.register_backend(NAME, create, devices=["cpu"])
        except TypeError:           # torch < 2.1: no devices argument
            dist.Backend.register_backend(NAME, create)
    c10d = dist.distributed_c10d
    if not getattr(c10d._new_process_group_helper, "_todist", False):
        c10d._new_process_group_helper = _group_hook(
            c10d._new_process_group_helper)
