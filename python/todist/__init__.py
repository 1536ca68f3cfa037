"""todist for Python: the job's world and the c10d backend "todist".

    import todist                    # registers backend "todist" with torch
    todist.rank(), todist.world_size(), todist.local_rank()
    torch.distributed.init_process_group("todist")

The world comes from the launcher's environment (todist-run, srun --todist,
torchrun or Slurm: include/todist/world.h) without starting anything.
The runtime (td_init) starts on the first init() -- which
init_process_group("todist") calls -- and stops at interpreter exit
(td_finalize, a graceful join of every rank). See docs/pytorch.md."""
import atexit
import ctypes
import sys
import threading

from . import _lib

__all__ = ["rank", "world_size", "local_rank", "local_world_size",
           "node_rank", "nnodes", "master_addr", "worker_name", "world",
           "init", "finalize", "is_initialized"]

_lock = threading.Lock()
_world = None


def world():
    """The resolved world as a dict (rank, world_size, local_rank,
    local_world_size, node_rank, nnodes, master_addr, master_port,
    worker_name). Raises RuntimeError when the environment is inconsistent
    (the message names the variable)."""
    global _world
    with _lock:
        if _world is None:
            w = _lib.World()
            _lib.check(_lib.td_world_from_env(ctypes.byref(w)),
                       "resolving the world from the environment")
            _world = {"rank": w.rank, "world_size": w.world_size,
                      "local_rank": w.local_rank,
                      "local_world_size": w.local_world_size,
                      "node_rank": w.node_rank, "nnodes": w.nnodes,
                      "master_addr": w.master_addr.decode(),
                      "master_port": w.master_port,
                      "worker_name": w.worker_name.decode()}
        return dict(_world)


def rank():
    return world()["rank"]


def world_size():
    return world()["world_size"]


def local_rank():
    return world()["local_rank"]


def local_world_size():
    return world()["local_world_size"]


def node_rank():
    return world()["node_rank"]


def nnodes():
    return world()["nnodes"]


def master_addr():
    return world()["master_addr"]


def worker_name():
    return world()["worker_name"]


def is_initialized():
    return bool(_lib.td_initialized())


def init():
    """Start the runtime (td_init) once; later calls do nothing."""
    with _lock:
        if not _lib.td_initialized():
            _lib.check(_lib.td_init(None), "td_init")
            atexit.register(_finalize_at_exit)


def finalize():
    """Stop the runtime (td_finalize): waits until every rank has no
    outstanding work. Runs at exit by itself; a no-op when not started."""
    with _lock:
        if _lib.td_initialized():
            _lib.check(_lib.td_finalize(), "td_finalize")


def _finalize_at_exit():
    # After a failure (a dead rank, say) the join cannot succeed: one line
    # on stderr says so instead of a traceback.
    try:
        finalize()
    except RuntimeError as e:
        sys.stderr.write("%s\n" % e)


try:
    import torch.distributed as _dist
except ImportError:             # torch absent: the world API still works
    _dist = None

if _dist is not None and _dist.is_available():
    from . import backend as _backend
    _backend.register()
