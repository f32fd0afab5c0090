"""When a large loop runs on Numba's threads: measured, per loop, while it runs.

A loop call is split across threads by a ``parallel=True`` driver (see loops.py):
Numba's threading layer starts a region in a few µs, where handing work to Python
threads took 50-100 µs here.

**Threads never a bet.**  On an idle machine two threads take the EAM gradient at 10^6
to 0.6x one thread's time; on a machine with other work they lost, up to 7x (the
ten-kernel chain at 10^5 beside two other threaded processes, GNU OpenMP): a parallel
region ends when its last thread is done, and a thread the OS has descheduled ends it
a time slice late.  So each place that may split a loop (a prepared kernel call, a
backward pass of a given size, a fused ``db.jit`` program) owns a :class:`ThreadChoice`
that times its calls both ways and runs the way that has been faster lately: threads
must win by 10% (they cost the machine a second core).  The other way is tried again
in short bursts, less often while it keeps losing (after 4 calls, then 8, ... up to
1024), and at once when the way taken slows down: never more than ~10% over the
better way in simulations with random stalls, though threads that stall rarely but
for 100x their time may be left for one thread.  ``config.adaptive_threads = False``
splits every large loop.

**Numba's TBB layer when it is installed** (``pip install dualbcast[tbb]``): its
threads steal work, so the calling thread finishes the chunks that a descheduled worker
never took, and idle workers sleep instead of spinning.  Measured here beside GNU
OpenMP (medians of interleaved rounds, default threads over one thread, 2 cores): busy
processes, other threaded processes or a BLAS process on the machine 1.07-1.16 against
0.8-7.2; idle alike (0.59 and 0.80).  pip puts TBB's library where the loader does not
look (``<venv>/lib``), so it is loaded here, before Numba picks its layer, unless the
Numba's threads already run; a layer the user chose (``NUMBA_THREADING_LAYER``) is
the one Numba takes.

Two limits of the layers are kept out of the user's way:

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
import collections
import ctypes
import importlib.metadata
import os
import threading
import time

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
    global _forked_after_launch, _launching
    if getattr(numba_parallel, "_is_initialized", True):
        _forked_after_launch = True
    _launching = threading.Lock()   # (another thread may have held it at the fork)


os.register_at_fork(after_in_child=_after_fork_in_child)

_TBB_LIBRARIES = ("libtbb.so.12", "libtbb.12.dylib", "tbb12.dll")


def _load_tbb():
    """Make Numba's TBB layer loadable where pip installed ``tbb`` (its library sits in
    ``<prefix>/lib``, off the loader's path): loaded once, globally, so that Numba's
    ``tbbpool`` finds it and Numba's default order (tbb, omp, workqueue) takes it.  A
    layer the user chose (``NUMBA_THREADING_LAYER``) is still the one Numba takes;
    nothing once Numba's threads run."""
    if getattr(numba_parallel, "_is_initialized", False):
        return
    try:
        files = importlib.metadata.distribution("tbb").files or ()
    except importlib.metadata.PackageNotFoundError:
        return
    for file in files:
        if file.name in _TBB_LIBRARIES:
            try:
                # Only a TBB that Numba takes (2021 update 6 or later): an older one,
                # loaded, would make Numba warn instead of passing it by quietly.
                if ctypes.CDLL(str(file.locate())).TBB_runtime_interface_version() >= 12060:
                    ctypes.CDLL(str(file.locate()), mode=ctypes.RTLD_GLOBAL)
            except (OSError, AttributeError):   # (a broken install: Numba takes OpenMP)
                pass
            return


_load_tbb()

_launched = False
_launching = threading.Lock()


def launch_threads():
    """Start Numba's threading layer, once, before the first parallel code compiles or
    runs.  Under GNU OpenMP (no TBB) its workers are made to sleep when idle
    (``OMP_WAIT_POLICY=PASSIVE``, read when the runtime loads, which is now; set for
    that moment only, and only when the user has not set it): by default they spin
    after every region, taking a core from whatever else runs, our own next loop
    included (the ten-kernel chain at 10^5 beside one busy process: 1.8x one thread,
    measured and timed anew as each call was; passive: 1.02x)."""
    global _launched
    if _launched:
        return
    with _launching:
        if not getattr(numba_parallel, "_is_initialized", True):
            chosen = "OMP_WAIT_POLICY" in os.environ
            if not chosen:
                os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
            try:
                numba_parallel._launch_threads()
            finally:
                if not chosen:
                    del os.environ["OMP_WAIT_POLICY"]
        _launched = True


def enter_parallel_region():
    """Whether this call may start a parallel region now (then it must call
    :func:`leave_parallel_region` after it)."""
    if _forked_after_launch:
        return False                # a child forked after the parent launched threads
    launch_threads()
    return _region.acquire(blocking=False)


def leave_parallel_region():
    _region.release()


class ThreadChoice:
    """Whether one place's large loop runs on threads, from its own measured times
    (see the module's docstring).  Per call::

        if choice.threaded() and enter_parallel_region():   # ... on threads
        seconds = ...;  choice.record(threaded, seconds)

    Each way keeps its last ``WINDOW`` times; the faster mean wins.  The other way is
    tried in bursts of ``BURST`` calls in a row, whatever they take (tries that went
    on while they were fast would never see a rare stall: switching on them made the
    choice flip back and forth at up to 2.6x the better way's time), unless the first
    loses by 2x; every ``interval`` calls: 4 at first, doubling up to 1024 while the
    bursts lose.  At once when the preferred way's mean becomes the slower, and when
    its median moves by 2x (a load came or went: the other way's times are stale and
    dropped).
    """
    __slots__ = ("prefer", "times", "warm", "interval", "countdown", "burst")

    WINDOW = 64                 # recent times kept per way
    BURST = 8                   # tries of the other way in a row
    FIRST_TRY, LAST_TRY = 4, 1024
    MARGIN = 0.9                # threads must take at most this much of one thread's time
    CHANGE = 2.0                # the preferred way's recent times over its earlier ones

    def __init__(self):
        self.prefer = True                  # threads, until measured
        self.times = ([], [])               # seconds per call: one thread, threads
        self.warm = [False, False]          # each way's first call is not a sample
        self.interval = self.FIRST_TRY      # calls between bursts of the other way
        self.countdown = 2                  # the second call tries one thread
        self.burst = 0                      # tries left in the current burst

    def threaded(self):
        """Whether this call should run on threads (the preferred way, or a try of
        the other)."""
        if not config.adaptive_threads:
            return True
        if self.burst:
            return not self.prefer
        self.countdown -= 1
        if self.countdown > 0:
            return self.prefer
        self.burst = self.BURST
        return not self.prefer

    def record(self, threaded, seconds):
        """A call took ``seconds`` on threads or one thread."""
        if not config.adaptive_threads:
            return
        tried = threaded != self.prefer
        if tried and self.burst:
            self.burst -= 1
            if self.burst == self.BURST - 1 and self.times[self.prefer] \
                    and seconds > 2 * _typical(self.times[self.prefer]):
                self.burst = 0              # its first try lost by 2x: that will do
        if not self.warm[threaded]:         # (it may have compiled or loaded code)
            self.warm[threaded] = True
        else:
            kept = self.times[threaded]
            kept.append(seconds)
            if len(kept) > self.WINDOW:
                del kept[0]
        if not tried:
            if self.burst:                  # a try refused (another region ran)
                return
            if self._changed():             # times from before the change are stale
                self.times[not self.prefer].clear()
                del self.times[self.prefer][:-self.BURST]
                self.interval, self.countdown = self.FIRST_TRY, 1
            elif self._threads_faster() != self.prefer:
                self.countdown = 1          # this way has become the slower: try now
            return
        if self.burst:
            return
        # A burst is over: switch when the other way is now the faster; otherwise try
        # it later and later.
        if not self.times[self.prefer] or not self.times[not self.prefer]:
            self.countdown = 2              # nothing to compare yet: again soon
            return
        faster = self._threads_faster()
        if faster != self.prefer:
            self.prefer = faster
        else:
            self.interval = min(2 * self.interval, self.LAST_TRY)
        self.countdown = self.interval

    def _threads_faster(self):
        return _typical(self.times[True]) <= self.MARGIN * _typical(self.times[False])

    def _changed(self):
        """Whether the preferred way's last few times moved by ``CHANGE`` from those
        before them (medians: a rare stall is not a change)."""
        kept = self.times[self.prefer]
        if len(kept) < 2 * self.BURST:
            return False
        recent = _median(kept[-self.BURST:])
        earlier = _median(kept[:-self.BURST])
        return recent > self.CHANGE * earlier or earlier > self.CHANGE * recent


def _median(times):
    ordered = sorted(times)
    return ordered[len(ordered) // 2]


def _typical(times):
    """The mean of ``times``: what a user pays per call.  (A trimmed mean or a median
    hid the stalls: under GNU OpenMP with more busy threads than cores, one threaded
    call in five waited 10-25 ms for a descheduled worker, against 0.1 ms for the
    rest.)"""
    return sum(times) / len(times) if times else float("inf")


class ChoicesBySize:
    """One :class:`ThreadChoice` per size of a pass (a backward product run over many
    sizes): a bounded table, the size least recently met forgotten first."""

    def __init__(self, limit=256):
        self.table, self.limit = collections.OrderedDict(), limit

    def __getitem__(self, size):
        choice = self.table.get(size)
        if choice is None:
            if len(self.table) >= self.limit:
                self.table.popitem(last=False)
            choice = self.table[size] = ThreadChoice()
        else:
            self.table.move_to_end(size)
        return choice


def split_if_it_pays(choices, size, chunk, parallel, serial, *args):
    """``parallel(*args, workers)`` on ``config.threads`` threads sharing chunks of
    ``chunk`` elements, or ``serial(*args)`` on this one: serial below
    ``config.parallel_threshold`` elements, otherwise as ``choices[size]`` (a
    :class:`ChoicesBySize`) finds faster."""
    workers = min(config.threads, -(-size // chunk))
    if size < config.parallel_threshold or workers < 2:
        return serial(*args)
    return run_as_chosen(choices[size], lambda: parallel(*args, workers),
                         lambda: serial(*args))


def run_as_chosen(choice, threaded_run, serial_run):
    """``threaded_run()`` in a parallel region when ``choice`` says threads and the
    region is free, else ``serial_run()``; its time recorded in ``choice``."""
    threaded = choice.threaded() and enter_parallel_region()
    start = time.perf_counter()
    try:
        result = threaded_run() if threaded else serial_run()
    finally:
        if threaded:
            leave_parallel_region()
    choice.record(threaded, time.perf_counter() - start)
    return result


def multiply_in_place(array, factor):
    """``array *= factor`` with NumPy's result (the product in NumPy's result dtype,
    stored in ``array``'s), on threads for a large contiguous float array."""
    if array.dtype in _FLOATS and array.flags.c_contiguous:
        factor = np.result_type(array, factor).type(factor)
        split_if_it_pays(_SCALE_CHOICES, array.size, _SCALE_CHUNK, _scale_parallel,
                         _scale, array.reshape(-1), factor)
    else:
        np.multiply(array, factor, out=array)


def _scale(flat, factor):
    np.multiply(flat, factor, out=flat)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_SCALE_CHOICES = ChoicesBySize()
_SCALE_CHUNK = 1 << 14


@guarded_njit(parallel=True, nogil=True, cache=True)
def _scale_parallel(flat, factor, workers):
    n = flat.size
    queue = np.zeros(1, np.int64)       # chunks taken as threads get free
    for _ in numba.prange(workers):
        c = next_chunk(queue)
        while c * _SCALE_CHUNK < n:
            for i in range(c * _SCALE_CHUNK, min((c + 1) * _SCALE_CHUNK, n)):
                flat[i] *= factor
            c = next_chunk(queue)


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
