"""When a large loop may run on Numba's threads, and the backward pass's scaling.

A loop call is split across threads by a ``parallel=True`` driver (see loops.py):
Numba's threading layer starts a region in a few µs, where handing work to Python
threads took 50-100 µs here.  Two limits of the layers are kept out of the user's way:

- GNU OpenMP (Numba's ``omp`` layer) kills a forked child that starts a parallel
  region once the parent has launched Numba's threads (``multiprocessing`` forks by
  default on Linux; compiling a threaded driver launches them): such a child runs
  everything on one thread.
- the ``workqueue`` layer cannot run two regions at once: a call that finds another
  thread of this process inside one runs on its own thread.

Either way only the speed changes: results never depend on the number of threads.

Threads share a loop's chunks through a queue (:func:`next_chunk`): each takes the
next chunk when it is done with one, so a thread slowed down (a busy core) takes fewer
and the others more; every chunk's results land in its own place, so the bits never
depend on who ran it.  (Numba's ``parallel_chunksize`` did not balance with the
``omp`` layer: it still splits the chunks evenly up front.)
"""
import os
import threading

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.ufunc import parallel as numba_parallel

from ..config import config
from ..safe_cache import guarded_njit

_region = threading.Lock()
_forked_after_launch = False    # this process was forked after Numba started its threads


def _after_fork_in_child():
    # Numba's omp layer kills a child that starts a region once the *parent* has launched
    # its thread pool, which compiling a threaded driver does, before any region runs.
    # (Numba's private flag; if it is ever gone, every forked child runs on one thread.)
    global _forked_after_launch
    if getattr(numba_parallel, "_is_initialized", True):
        _forked_after_launch = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def enter_parallel_region():
    """Whether this call may start a parallel region now (then it must call
    :func:`leave_parallel_region` after it)."""
    if _forked_after_launch:
        return False                # a child forked after the parent launched threads
    return _region.acquire(blocking=False)


def leave_parallel_region():
    _region.release()


def multiply_in_place(array, factor):
    """``array *= factor`` with NumPy's result (the product in NumPy's result dtype,
    stored in ``array``'s), on ``config.threads`` threads for a large contiguous
    float array."""
    if array.size >= config.parallel_threshold and config.threads > 1 \
            and array.dtype in _FLOATS and array.flags.c_contiguous:
        factor = np.result_type(array, factor).type(factor)
        if enter_parallel_region():
            try:
                _scale(array.reshape(-1), factor)
            finally:
                leave_parallel_region()
            return
    np.multiply(array, factor, out=array)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@guarded_njit(parallel=True, nogil=True, cache=True)
def _scale(flat, factor):
    for i in numba.prange(flat.size):
        flat[i] *= factor


@intrinsic
def next_chunk(typingctx, counter):
    """The next chunk of a loop shared by threads: ``counter[0]``, incremented
    atomically (a 1-element int64 array, 0 before the loop)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, signature.args[0], array,
                                           [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", pointer, context.get_constant(types.int64, 1),
                                  "monotonic")
    return types.int64(counter), codegen
