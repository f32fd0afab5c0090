"""A prepared kernel call: everything that depends only on the mode, ``wrt`` and the
signature of the arguments (types, dtypes, shapes, strides), worked out on the first
call with that signature and reused by every later one.  What is left per call is
making the operands, allocating the outputs and one call into the compiled loop."""
import contextlib
import math
import time
from typing import Any, Callable, NamedTuple

import numba
import numpy as np
from numba.core.errors import NumbaError

from ..buffers import refuse_overlapping_out
from ..compile_log import logger, watching
from ..config import config
from .loops import ACCUMULATE, REGISTER, STORE, SUM_MODES
from .threads import ThreadChoice, enter_parallel_region, leave_parallel_region

CHUNK_ELEMENTS = 1 << 12     # elements per chunk of a loop (the unit threads share)
#: Seconds a call's loop runs on one thread, in calls that could split, before its
#: threaded driver is compiled (with ``config.adaptive_threads``; without, at the first
#: call that could split).  The driver is a Numba parallel function: 1.3-1.8 s to
#: compile, where the EAM loop at 10^6 takes ~3 ms on one thread and two threads save
#: half of that at best: compiled at the first call, the ten-kernel chain's first
#: gradient at 10^6 took 27 s, 16 of them drivers.  Paying for it once the loop has
#: spent as long on one thread (a ski rental) never costs more than twice what the
#: better of the two would have.
DRIVER_AFTER = 1.5
# A sum's scratch has a row per summed value, each a chunk long, and each row is padded
# by a cache line: unpadded, rows of 4096 float64s start 32 KiB apart, where they all
# share one set of the 8-way L1 cache, so a loop storing more than eight rows per
# element (a Hessian's stores 20) lost a line at every store (1.2-1.3x of its time).
SCRATCH_PAD = 8


class SumLoop(NamedTuple):
    """A prepared sum-and-partials loop, described for code that calls it from a
    compiled function of its own (``dualbcast.jit``'s fusion):

        loop(loop_shape, 0, nchunks, rows, *operands, *stored, totals, scratch)

    runs it over ``operands`` (``operands_for(args)``, the call's arguments bound as
    the kernel takes them), writing each ``STORE`` gradient whole into its 1-d buffer
    in ``stored`` (in argument order) and, per chunk ``c``, ``totals[c] = (sum,
    REGISTER gradients...)``; ``scratch``: a ``(totals_width, scratch_row)`` array.
    In the tangent modes the operands are the arguments then the tangents, ``stored``
    the gradients' buffers then their tangents', and ``totals[c] = (sum, its tangent,
    REGISTER gradients..., their tangents...)``."""
    loop: Any
    loop_shape: tuple
    rows: int
    nchunks: int
    scratch_row: int            # the length of a scratch row: a chunk, padded
    totals_width: int
    gradients: tuple            # per active argument: (kind, shape, dtype, is_array)
    dtype: np.dtype
    threaded: bool              # at or above config.parallel_threshold: runs on threads
    operands_for: Callable
    source: str                 # the loop's source file: it changes with the kernel


class PreparedCall:
    __slots__ = ("kernel", "mode", "loop", "dependencies", "plan", "single", "scalar_type", "size",
                 "rows", "nchunks", "scratch_row", "totals_width", "splittable", "gradients",
                 "all_stored", "compiled", "sums", "threaded", "choice")

    def __init__(self, kernel, mode, loop, dependencies, plan, single, gradients, splittable):
        """``loop``: compiled with the kernel's ``dependencies`` as they are;
        ``gradients``: per active argument ``(kind, shape, dtype, is_array)`` (the kind
        only matters for sum_partials)."""
        self.kernel, self.mode, self.loop, self.plan = kernel, mode, loop, plan
        self.dependencies = dependencies
        self.single, self.gradients, self.splittable = single, gradients, splittable
        self.scalar_type = plan.dtype.type
        self.size = math.prod(plan.shape)
        loop_shape = plan.loop_shape
        inner = math.prod(loop_shape[1:])           # elements per step of the outer loop
        if not loop_shape:
            self.rows, self.nchunks = 1, 1
        else:
            # (no more rows than there are: a sum's scratch, allocated per call, is then
            # as small as the call, where a 100-element sum allocated 4096-element rows)
            self.rows = max(1, min(CHUNK_ELEMENTS // max(inner, 1), loop_shape[0]))
            self.nchunks = -(-loop_shape[0] // self.rows)
        self.scratch_row = self.rows * inner + SCRATCH_PAD     # elements per chunk, padded
        self.totals_width = loop.spec.totals_width
        # The common case, every gradient stored whole in its own dtype: no bookkeeping.
        self.all_stored = all(kind == STORE and _storable(dtype) == dtype
                              for kind, _, dtype, _ in gradients)
        self.compiled = False   # the first run compiles (or loads) the loop: one thread
        self.threaded = False   # its threaded driver compiled: it may run on threads
        self.choice = None      # threads or one thread, measured (kernel/threads.py)
        self.sums = mode in SUM_MODES

    def sum_loop(self):
        """This call of a sum mode (``sum_partials``; ``sum``, ``sum_tangent``,
        ``sum_partials_tangent``, whose loops take the tangents' operands after the
        arguments, and the tangents' buffers after the gradients') as a
        :class:`SumLoop`, or None: a map, or its loop not compiled yet."""
        if not self.sums or not self.compiled:
            return None
        return SumLoop(self.loop, self.plan.loop_shape, self.rows, self.nchunks,
                       self.scratch_row, self.totals_width, self.gradients, self.plan.dtype,
                       self.size >= config.parallel_threshold, self.plan.operands_for,
                       self.loop.py_func.__code__.co_filename)

    def prepared_for(self, operands):
        """The prepared call that runs ``operands``: this one (a tangent mode's
        :class:`~.tangents.TangentCall` has one per tangents' signature)."""
        return self

    # ------------------------------------------------------------------ the modes

    def map(self, args):
        out = np.empty(self.plan.shape, self.plan.dtype)
        self._run(args, (out if out.ndim == 1 else out.reshape(-1),))
        return out if out.ndim else out[()]

    def sum(self, args):
        return self.scalar_type(self._run(args, ())[0])

    def value_and_partials(self, args):
        plan, n = self.plan, len(self.gradients)
        out = np.empty(plan.shape, plan.dtype)
        parts = np.empty((n,) + plan.shape, plan.dtype)
        self._run(args, (out.reshape(-1), parts.reshape(n, -1)))
        if not plan.shape:
            out, parts = out[()], [p[()] for p in parts]
        return out, (parts[0] if self.single else tuple(parts))

    def sum_and_partials(self, args, out=None):
        """``out``: None, or per gradient None or the array to write it into."""
        if out is not None:
            out = self._check_out(out, args)
        if self.all_stored:
            grads = [np.empty(shape, dtype) if out is None or out[j] is None else out[j]
                     for j, (_, shape, dtype, _) in enumerate(self.gradients)]
            sums = self._run(args, tuple(g.reshape(-1) for g in grads))
            return self.scalar_type(sums[0]), (grads[0] if self.single else tuple(grads))
        buffers, loop_buffers = self._gradient_buffers()
        sums = self._run(args, tuple(loop_buffers))
        grads = self._gradients(buffers, sums[1:])
        if out is not None:
            grads = [g if target is None else _copied_into(target, g)
                     for g, target in zip(grads, out)]
        return self.scalar_type(sums[0]), (grads[0] if self.single else tuple(grads))

    def _gradient_buffers(self):
        """Per gradient: the array it is made from (None for a register) and the
        buffers the loop writes (not for a register)."""
        buffers, loop_buffers = [], []
        for kind, shape, dtype, _ in self.gradients:
            if kind == STORE:
                buffers.append(np.empty(shape, _storable(dtype)))
                loop_buffers.append(buffers[-1].reshape(-1))
            elif kind == ACCUMULATE:
                buffers.append(np.zeros(shape, np.float64))
                loop_buffers.append(self.plan.loop_view(buffers[-1]))
            else:
                buffers.append(None)
        return buffers, loop_buffers

    def _gradients(self, buffers, register_sums):
        """The gradients, each at its argument's shape and dtype, from the
        ``_gradient_buffers`` the loop wrote and its register sums, in order."""
        registers = iter(register_sums)
        grads = []
        for (kind, shape, dtype, is_array), buffer in zip(self.gradients, buffers):
            if kind == REGISTER:
                if is_array:
                    grads.append(np.full(shape, next(registers), dtype))
                else:
                    grads.append(dtype.type(next(registers)))   # a scalar argument
            else:
                grads.append(buffer.astype(dtype, copy=False))
        return grads

    # The tangent modes: ``operands`` are the arguments followed by the tangents
    # (see tangents.py); tuples of partials always.

    def tangent(self, operands):
        both = np.empty((2,) + self.plan.shape, self.plan.dtype)     # value, tangent
        self._run(operands, tuple(both.reshape(2, -1)))
        return both[0], both[1]

    def sum_tangent(self, operands):
        sums = self._run(operands, ())
        width = self.loop.spec.width
        tangents = tuple(map(self.scalar_type, sums[1:1 + width]))
        return self.scalar_type(sums[0]), (tangents[0] if width == 1 else tangents)

    def partials_tangent(self, operands):
        plan, n = self.plan, len(self.gradients)
        both = np.empty((2,) + plan.shape, plan.dtype)      # value, tangent
        parts = np.empty((2, n) + plan.shape, plan.dtype)   # partials, their tangents
        self._run(operands, (*both.reshape(2, -1), *parts.reshape(2, n, -1)))
        # (a 0-d call: indexing gives NumPy scalars, as value_and_partials returns)
        return both[0], both[1], tuple(parts[0]), tuple(parts[1])

    def sum_partials_tangent(self, operands):
        """``(total, its tangent, gradients, their tangents)``; with tangents in
        ``width`` > 1 directions, the tangent of the total is a tuple over the
        directions, and the gradients' tangents a tuple over the directions of tuples
        over the gradients."""
        width = self.loop.spec.width
        if width == 1 and self.all_stored:
            grads = tuple(np.empty(shape, dtype) for _, shape, dtype, _ in self.gradients)
            tangents = tuple(np.empty(shape, dtype) for _, shape, dtype, _ in self.gradients)
            sums = self._run(operands, tuple(g.reshape(-1) for g in grads + tangents))
            return self.scalar_type(sums[0]), self.scalar_type(sums[1]), grads, tangents
        total, tangents, grads, grad_tangents = self._sum_partials_tangents(operands, width)
        if width == 1:
            return total, tangents[0], grads, grad_tangents[0]
        return total, tangents, grads, grad_tangents

    def _sum_partials_tangents(self, operands, width):
        """:meth:`sum_partials_tangent` with the tangents per direction, whatever the
        gradients' kinds."""
        buffers, loop_buffers = self._gradient_buffers()
        directions = [self._gradient_buffers() for _ in range(width)]
        sums = self._run(operands, tuple(loop_buffers + [buffer for _, direction in directions
                                                         for buffer in direction]))
        # (the totals' row: the sum, its tangents; the register gradients; their
        # tangents in direction 0, in direction 1...)
        registers = len(sums) // (1 + width) - 1
        rest = sums[1 + width:]
        scalar = self.scalar_type
        return (scalar(sums[0]), tuple(map(scalar, sums[1:1 + width])),
                tuple(self._gradients(buffers, rest[:registers])),
                tuple(tuple(self._gradients(tangent_buffers,
                                            rest[registers * (1 + k):registers * (2 + k)]))
                      for k, (tangent_buffers, _) in enumerate(directions)))

    def _check_out(self, out, args):
        """``out`` as one entry per gradient, each None or an array to write into,
        which must be exactly what would be returned: shape, dtype, writeable (and
        C-contiguous, so the loop can store into it), overlapping no other out array
        and no argument (the loop stores gradients while it reads the arguments)."""
        name = self.kernel.__name__
        if self.single:
            out = (out,)
        elif not isinstance(out, (tuple, list)) or len(out) != len(self.gradients):
            raise TypeError(f"{name}.sum_and_partials: out must be a tuple of "
                            f"{len(self.gradients)} arrays (or None), one per wrt argument")
        for target, (_, shape, dtype, is_array) in zip(out, self.gradients):
            if target is None:
                continue
            if type(target) is not np.ndarray or target.shape != shape \
                    or target.dtype != dtype:
                got = (f"{type(target).__name__} of shape {np.shape(target)} and dtype "
                       f"{getattr(target, 'dtype', None)}")
                raise ValueError(f"{name}.sum_and_partials: out must be an array of shape "
                                 f"{shape} and dtype {dtype} (the gradient's); got {got}")
            if not target.flags.writeable or not target.flags.c_contiguous:
                raise ValueError(f"{name}.sum_and_partials: out must be writeable and "
                                 f"C-contiguous")
        refuse_overlapping_out(f"{name}.sum_and_partials", out,
                               ((i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray)))
        return tuple(out)

    # ------------------------------------------------------------------ running the loop

    def current(self):
        """Whether the loop was compiled with the values the names the kernel reads
        have now; if not, the kernel is compiled afresh and this call takes its loop
        (see dependencies.py)."""
        if self.dependencies.unchanged():
            return True
        kernel = self.kernel
        kernel._current_generation()
        self.loop = kernel._loop(self.loop.spec)
        self.dependencies = kernel._dependencies
        self.compiled = self.threaded = False       # (a new loop, and its own driver)
        self.choice = None
        return False

    def _run(self, args, outputs):
        """Run the loop over ``args`` into ``outputs``; for the sum modes, return the
        row ``(sum, register gradients...)`` added up over the chunks in order."""
        self.current()
        operands = self.plan.operands_for(args)
        sums = self.sums
        workers, choice = 1, None
        splits = self.splits()
        if splits and self.compiled and (self.threaded or not config.adaptive_threads):
            choice = self.choice
            if choice is None:
                choice = self.choice = ThreadChoice()
            if choice.threaded():
                workers = min(config.threads, self.nchunks)
        scratch = ()    # sums: (the rows each thread adds a chunk's values up in,)
        if sums:
            totals = np.empty((self.nchunks, self.totals_width))
            outputs += (totals,)
            scratch = (np.empty((workers, self.totals_width, self.scratch_row)),)
        try:
            start = time.perf_counter()
            if workers > 1 and enter_parallel_region():
                self._run_parallel(workers, operands, outputs, scratch)
                choice.record(True, time.perf_counter() - start)
            else:       # (also when another thread of ours is in a parallel region)
                arguments = (self.plan.loop_shape, 0, self.nchunks, self.rows, *operands,
                             *outputs, *_first_rows(scratch))
                if self.compiled:
                    self.loop(*arguments)
                    if choice is not None:
                        choice.record(False, time.perf_counter() - start)
                    elif splits:        # (per loop: calls of other shapes count too)
                        self.loop.one_thread += time.perf_counter() - start
                else:       # (the first run compiles: reported, off the hot path)
                    with self._watching(self.loop, ""):
                        self.loop(*arguments)
        except ZeroDivisionError as err:
            # Numba's float ** negative-int raises at 0 whatever the error model
            # (dual powers do not: they give inf like NumPy).  Say where it came from.
            raise ZeroDivisionError(
                f"@fast_broadcast kernel {self.kernel.__name__!r}: {err} (Numba raises for "
                f"0.0 ** negative int; write 1.0 / x ** n to get inf)") from err
        except NumbaError as err:
            self.kernel._diagnose(self.loop.spec, operands, err)
        self.compiled = True
        if splits and not self.threaded and (self.loop.one_thread >= DRIVER_AFTER
                                             or not config.adaptive_threads):
            self._compile_driver(operands, outputs)
        if sums:
            if self.nchunks == 1:
                return totals[0]
            # The chunks' partial sums added exactly (np.add.reduce's result would
            # depend on the memory alignment of ``totals``).
            return [_exact_sum(column) for column in totals.T.tolist()]
        return None

    def splits(self):
        """Whether this call may run on threads (splittable, and as large as
        ``config.parallel_threshold`` and two chunks for two threads)."""
        return self.splittable and self.size >= config.parallel_threshold \
            and min(config.threads, self.nchunks) > 1

    def _compile_driver(self, operands, outputs):
        """Compile the threaded driver now (see ``DRIVER_AFTER``), for the arguments of
        this call: the next one may run on threads without a pause."""
        workers = min(config.threads, self.nchunks)
        scratch = (np.empty((workers, self.totals_width, self.scratch_row)),) if self.sums else ()
        arguments = (workers, np.zeros(workers, np.bool_), self.plan.loop_shape, self.nchunks,
                     self.rows, *operands, *outputs, *scratch)
        driver = self.loop.parallel.made()
        try:
            with self._watching(driver, "the threaded driver of "):
                driver.compile(tuple(map(numba.typeof, arguments)))
        except Exception as error:
            # Not the user's error, and the loop works: this call stays on one thread.
            self.splittable = False
            logger.warning("@fast_broadcast kernel %r: the threaded driver of its %s loop "
                           "could not be compiled (%s: %s); it runs on one thread (please "
                           "report it)", self.kernel.__name__, self.loop.spec.mode,
                           type(error).__name__, error)
            return
        self.threaded = True

    def _watching(self, dispatcher, what):
        """Around the first run of ``dispatcher`` (the loop, or its threaded driver,
        ``what`` then naming it): its compile is reported (:mod:`dualbcast.compile_log`)."""
        spec = self.loop.spec
        return watching(dispatcher, lambda: (
            f"{what}@fast_broadcast kernel {self.kernel.__name__!r}, {spec.mode} loop "
            f"({', '.join(map(str, spec.argument_types()))}) over {self.plan.ndim}-d "
            f"arrays"))

    def _run_parallel(self, workers, operands, outputs, scratch):
        """The loop split between ``workers`` Numba threads (each sums in its own row
        of the scratch), in the parallel region the caller entered."""
        failed = np.zeros(workers, np.bool_)
        try:
            driver = self.loop.parallel.made()
            with self._watching(driver, "the threaded driver of ") if not self.threaded \
                    else _NOT_WATCHING:
                driver(workers, failed, self.plan.loop_shape, self.nchunks, self.rows,
                       *operands, *outputs, *scratch)
        finally:
            leave_parallel_region()
        self.threaded = True
        if failed.any():
            # The exception stayed in the worker's thread: one thread meets it again.
            self.loop(self.plan.loop_shape, 0, self.nchunks, self.rows, *operands,
                      *outputs, *_first_rows(scratch))
            raise RuntimeError(f"@fast_broadcast kernel {self.kernel.__name__!r}: a thread "
                               f"of the loop failed, but the loop on one thread did not")


_NOT_WATCHING = contextlib.nullcontext()


def _exact_sum(values):
    """``math.fsum(values)``, or where fsum raises (``inf`` and ``-inf`` met, or partial
    sums beyond the largest float) the sum in order: ``nan`` or ``inf`` as NumPy's."""
    try:
        return math.fsum(values)
    except (ValueError, OverflowError):
        return sum(values)


def _first_rows(scratch):
    return (scratch[0][0],) if scratch else ()      # the scratch of one thread


def _copied_into(target, gradient):
    target[...] = gradient
    return target


def _storable(dtype):
    # Gradients are stored in the argument's dtype where Numba can store it.
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)
