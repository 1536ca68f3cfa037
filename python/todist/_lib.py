"""libtodist through ctypes: finding the library and declaring the C
functions the package calls (include/todist/*.h is the reference).

The library is found, first match wins, at:
  1. TODIST_LIBRARY (a path to libtodist.so*);
  2. the libdir `make install` recorded next to this file (_install.py);
  3. the dynamic linker's search (LD_LIBRARY_PATH, which `module load
     todist` sets, and the ld.so cache): libtodist.so.0;
  4. the build tree beside the sources: <srcdir>/build/.libs.
Every function here raises OSError only when the library cannot be loaded;
C errors come back as td_status_t and are turned into exceptions by the
callers (see check())."""
import ctypes
import os

SONAME = "libtodist.so.0"

# td_status_t codes used by the package (include/todist/status.h).
TD_OK = 0
TD_ERR_TIMEOUT = -5
TD_ERR_PEER = -6
TD_ERR_STATE = -9

# td_dtype_t (include/todist/tensor.h)
TD_FLOAT32, TD_FLOAT64, TD_INT64, TD_INT32, TD_UINT8 = range(5)
TD_ANY_SOURCE = -1


class World(ctypes.Structure):
    """td_world_t (include/todist/world.h)."""
    _fields_ = [("rank", ctypes.c_int),
                ("world_size", ctypes.c_int),
                ("local_rank", ctypes.c_int),
                ("local_world_size", ctypes.c_int),
                ("node_rank", ctypes.c_int),
                ("nnodes", ctypes.c_int),
                ("master_addr", ctypes.c_char * 256),
                ("master_port", ctypes.c_uint16),
                ("torch_port", ctypes.c_uint16),
                ("source", ctypes.c_int),
                ("worker_name", ctypes.c_char * 32)]


class Device(ctypes.Structure):
    """td_device_t, passed by value."""
    _fields_ = [("type", ctypes.c_int), ("index", ctypes.c_int)]


def _candidates():
    env = os.environ.get("TODIST_LIBRARY")
    if env:
        yield env
        return
    try:
        from . import _install          # written by `make install`
        yield os.path.join(_install.LIBDIR, SONAME)
    except ImportError:
        pass
    yield SONAME
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "..", "..", "build", ".libs", SONAME)


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s (%s)" % (path, e))
    raise OSError("todist: cannot load libtodist; tried " + "; ".join(errors) +
                  ". Set TODIST_LIBRARY to the path of libtodist.so.0")


lib = _load()

P = ctypes.c_void_p
I = ctypes.c_int
D = ctypes.c_double
PP = ctypes.POINTER(ctypes.c_void_p)


def _fn(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


td_last_error = _fn("td_last_error", ctypes.c_char_p)
td_status_name = _fn("td_status_name", ctypes.c_char_p, I)
td_world_from_env = _fn("td_world_from_env", I, ctypes.POINTER(World))
td_init = _fn("td_init", I, P)
td_finalize = _fn("td_finalize", I)
td_initialized = _fn("td_initialized", ctypes.c_bool)
td_world = _fn("td_world", ctypes.POINTER(World))

td_tensor_from_blob = _fn("td_tensor_from_blob", I, P,
                          ctypes.POINTER(ctypes.c_int64), I, I, Device, P, P,
                          PP)
td_tensor_release = _fn("td_tensor_release", None, P)

td_group_world = _fn("td_group_world", P)
td_group_new = _fn("td_group_new", I, ctypes.POINTER(ctypes.c_int), I, PP)
td_group_rank = _fn("td_group_rank", I, P)
td_group_size = _fn("td_group_size", I, P)
td_group_destroy = _fn("td_group_destroy", None, P)

td_work_wait = _fn("td_work_wait", I, P, D)
td_work_test = _fn("td_work_test", I, P, ctypes.POINTER(I))
td_work_source = _fn("td_work_source", I, P, ctypes.POINTER(I))
td_work_release = _fn("td_work_release", None, P)

td_isend = _fn("td_isend", I, P, P, I, I, PP)
td_irecv = _fn("td_irecv", I, P, P, I, I, PP)
td_send = _fn("td_send", I, P, P, I, I)
td_recv = _fn("td_recv", I, P, P, I, I, ctypes.POINTER(I))

td_broadcast = _fn("td_broadcast", I, P, P, I)
td_reduce = _fn("td_reduce", I, P, P, I, I)
td_all_reduce = _fn("td_all_reduce", I, P, P, I)
td_all_gather = _fn("td_all_gather", I, P, P, P)
td_gather = _fn("td_gather", I, P, P, P, I)
td_scatter = _fn("td_scatter", I, P, P, P, I)
td_reduce_scatter = _fn("td_reduce_scatter", I, P, P, P, I)
td_all_to_all = _fn("td_all_to_all", I, P, P, P)
td_group_barrier = _fn("td_group_barrier", I, P)

td_broadcast_async = _fn("td_broadcast_async", I, P, P, I, PP)
td_reduce_async = _fn("td_reduce_async", I, P, P, I, I, PP)
td_all_reduce_async = _fn("td_all_reduce_async", I, P, P, I, PP)
td_all_gather_async = _fn("td_all_gather_async", I, P, P, P, PP)
td_gather_async = _fn("td_gather_async", I, P, P, P, I, PP)
td_scatter_async = _fn("td_scatter_async", I, P, P, P, I, PP)
td_reduce_scatter_async = _fn("td_reduce_scatter_async", I, P, P, P, I, PP)
td_all_to_all_async = _fn("td_all_to_all_async", I, P, P, P, PP)
td_group_barrier_async = _fn("td_group_barrier_async", I, P, PP)

td_coll_set_timeout = _fn("td_coll_set_timeout", I, D)


def message(status):
    """The calling thread's last todist error, or the code's name."""
    msg = td_last_error()
    if msg:
        return msg.decode(errors="replace")
    return td_status_name(status).decode()


def check(status, what):
    """Raise RuntimeError naming WHAT and todist's message unless OK."""
    if status != TD_OK:
        raise RuntimeError("todist: %s failed: %s (%s)" % (
            what, message(status), td_status_name(status).decode()))
