"""Elementwise loops of a staged program: float64 records that give arrays of one
shape, computed per element in one compiled loop (:mod:`.staged_plan` finds them).

A replay runs ``gx * gx``, a NaN-safe product, a negation, a slice's cotangent
(zeros with the slice filled) and the sums of cotangents as a NumPy call each, every
one a pass over memory with a temporary array.  A loop reads each input once per
element, keeps what only the loop uses in registers, and writes the values read
outside it.  What each record computes per element, with NumPy's bits, is
:mod:`.loop_forms`'s to say.

A loop's source names no size and no constant: the shape and a slice's bounds are an
integer array argument, numbers float arguments, so one compile (cached on disk) serves
a group at every shape and value.  It checks every input's shape against the bounds it
was given (a shape that follows an integer input's values may change) and every value
it computes for finiteness: where NumPy would warn (or raise, under the replay's error
settings), the loop hands the group back and the records run as NumPy calls, which
meet it as the eager call does.
"""
import math
import time

import numba
import numpy as np

from ..compile_log import logger
from ..core.operators import OPERATOR_UFUNCS
from ..core.tape import traced_positions
from . import policy
from .loop_cache import LOOPS
from .loop_forms import POSITIONS
from .loop_kernels import KernelCall
from .loop_source import LoopSource
from .loop_sums import Reduction, ScatterAdd


_FLOAT64 = np.dtype(np.float64)
# The forms of a value per element (loop_forms.POSITIONS) other than a selection's
_VALUES = ("form", "mask", "extremum", "piecewise")
# Records that only copy or view their input: a group of nothing else runs as NumPy
# calls (as fast as a loop).
_COPIES = ("getitem", "take_rows")



class ArrayRead:
    """An array a loop reads: ``source`` (``("slot", n)`` or ``("constant", array)``),
    read as ``kind`` says -- ``"full"`` (broadcast to the group's shape: ``parts`` the
    index per axis), ``"read"`` (a slice: ``parts`` its offsets), ``"scatter"`` (a
    slice's cotangent: ``parts`` its lows and highs), ``"gather"`` (rows taken by the
    index array ``rows``: ``parts`` the index per axis), ``"index"`` (such an index
    array, read per row by its gathers) -- as ``name`` per element, from
    the loop's argument ``array``.  ``repeated``: its axes of stride 0, passed without
    them (``first`` indexes their first element); ``view``: ``(index, shape)``, a slice
    of whole rows taken by the caller of an array of ``shape`` (read as a full one)."""

    __slots__ = ("source", "kind", "name", "array", "parts", "repeated", "first", "view",
                 "rows")

    def __init__(self, source, kind, number, parts, repeated):
        self.source, self.kind, self.parts, self.repeated = source, kind, parts, repeated
        self.view = self.rows = None
        self.name, self.array = f"x{number}", f"a{number}"
        self.first = tuple(slice(0, 1) if axis in repeated else slice(None)
                           for axis in range(max(repeated, default=-1) + 1))


class ElementwiseGroup(LoopSource):
    """Records computed per element in one loop over arrays of ``shape``.

    How the loop runs over the elements depends on what it reads (:meth:`_mode`):
    arrays all of its shape are read as one flat row; otherwise (arrays broadcast to
    it, slices, slices' cotangents) short rows by a loop per axis, the rows' length
    written in the source, and long rows (or a slice's cotangent among short ones) as
    rows of the last axis cut into segments where the slice is wholly in or out, each
    segment's arrays taken as 1-d views, the innermost loop contiguous at a constant
    offset (so that LLVM vectorises it)."""

    def __init__(self, shape):
        self.shape = shape
        self.records = []
        self.names = []             # per record, its function's name
        self.plain = []             # per record, whether it is a plain ufunc's call
        self.slots = set()          # the slots of its records
        self.outputs = set()        # the slots it writes (read outside it)
        self.written = []           # the same in the loop's order (set by finish)
        self.sums = []              # the sums it adds up after its elements (Reduction)
        self.reductions = set()     # their slots (not values per element)
        self.scatters = []          # the scatter-adds it makes per element (ScatterAdd)
        self.kernels = []           # the kernel calls it makes per element (KernelCall)
        self.tuples = set()         # their slots of partials loops (tuples: never written)
        self.masks = set()          # the slots of its records that give bools
        self.ties = False           # whether it meets ties of zeros (np.maximum's)
        self.buffers = []           # the slots whose elements it writes (set by finish):
        #                             the written ones, then the terms of its sums
        self.ints = list(shape)     # the loop's integer argument: sizes, then bounds
        self.int_args = None        # the same as an array (set by finish)
        self.scalars = []           # per float input: ("slot", slot) or ("constant", value)
        self.checks = []            # the loop's checks of its inputs' shapes
        self.reads = []             # per array input, an ArrayRead
        self.element = []           # the records' lines per element
        self._names = {}            # input key -> its element's name in the loop
        self.fused = False          # whether it runs as a loop (decided by finish)
        self.mode = None            # how (see _mode)
        self.function = self.source = None
        self.failed = False
        self.calls = self.handed_back = 0

    # ------------------------------------------------------------ building

    def add(self, record, form, rename, values):
        """Take ``record`` (its slot's value, per element, ``v<slot>``)."""
        traced = traced_positions(record)
        kind = form[0]
        if kind in ("sum", "scatter_add"):
            operand = rename.get(record.parents[0], record.parents[0])
            if kind == "sum":
                count = None if form[3] is None else self._int(form[3])
                self.sums.append(Reduction(record.out, operand, form[1], form[2],
                                           values[record.out], count))
            else:
                self.scatters.append(self._scatter_add(record.out, operand, form[1],
                                                       form[2], rename))
            self.reductions.add(record.out)
            self.records.append(record)
            self.names.append(kind)
            self.plain.append(False)
            return
        if kind == "kernel":
            call = KernelCall(form[1], len(self.kernels), record.out)
            self.kernels.append(call)
            self.element += call.element(self._operands(record, traced, rename, values))
            if call.loop == "partials":
                self.tuples.add(record.out)
            self._took(record, getattr(form[1], "__name__", "kernel"), True)
            return
        if kind == "part":
            parts = rename.get(record.parents[0], record.parents[0])
            self.element.append(f"v{record.out} = v{parts}_{form[1]}")
            self._took(record, "getitem", True)
            return
        if kind in ("read", "scatter", "gather"):
            slot = rename.get(record.parents[0], record.parents[0])
            if kind == "read":
                value = self._read(("slot", slot), form[1], form[2])
            elif kind == "scatter":
                value = self._scatter(("slot", slot), form[1])
            else:
                value = self._gather(("slot", slot), self._index_rows(form[1], rename))
        else:
            operands = self._operands(record, traced, rename, values)
            names = POSITIONS[kind]
            value = form[1].format(**dict(zip(names, operands)))
        self.element.append(f"v{record.out} = {value}")
        if kind == "form":          # (a selection, a mask make no new number: no check)
            self.element.append(f"bad |= v{record.out} - v{record.out} != 0.0")
        elif kind == "mask":
            self.masks.add(record.out)
        elif kind == "extremum":    # (a tie of 0.0 and -0.0: NumPy's, see loop_forms)
            x, y = operands
            self.element.append(f"tie |= ({x} == {y}) & (math.copysign(1.0, {x}) != "
                                f"math.copysign(1.0, {y}))")
            self.ties = True
        ufunc = kind in _VALUES and isinstance(
            OPERATOR_UFUNCS.get(record.func, record.func), np.ufunc)
        self._took(record, getattr(record.func, "__name__", type(record.func).__name__),
                   kind in ("read", "gather") or ufunc)

    def _took(self, record, name, plain):
        """``record`` is the group's: named ``name`` (the log's), ``plain``: as fast
        alone as a NumPy call (a group of one plain record is not worth a loop)."""
        self.records.append(record)
        self.names.append(name)
        self.plain.append(plain)
        self.slots.add(record.out)

    def _operands(self, record, traced, rename, values):
        """The names of ``record``'s operands per element: its own values, inputs."""
        operands = []
        for i, arg in enumerate(record.args):
            if i in traced:
                slot = rename.get(traced[i], traced[i])
                operands.append(f"v{slot}" if slot in self.slots else
                                self._input(("slot", slot), values[slot]))
            else:
                operands.append(self._input(("constant", id(arg)), arg))
        return operands

    def _int(self, value):
        self.ints.append(value)
        return f"n[{len(self.ints) - 1}]"

    def _array(self, key, kind, parts, repeated=()):
        """A new array input read per element as ``kind`` says: its element's name.
        ``repeated``: its axes of stride 0, taken as length 1."""
        self.reads.append(ArrayRead(key, kind, len(self.reads), parts, repeated))
        return self.reads[-1].name

    def _input(self, key, value):
        """The name of an argument's element in the loop (a number: a float argument;
        an array broadcast to the group's shape: read at its index)."""
        name = self._names.get(key)
        if name is not None:
            return name
        if type(value) is not np.ndarray or value.ndim == 0:
            self.scalars.append(key if key[0] == "slot" else ("constant", value))
            name = f"s{len(self.scalars) - 1}"
        else:
            # (an axis of stride 0 -- a broadcast view, np.broadcast_to's -- is read as
            # the one element it repeats: the caller passes the view without it)
            repeated = tuple(axis for axis, (n, stride) in enumerate(zip(value.shape,
                                                                         value.strides))
                             if stride == 0 and n > 1)
            lead = len(self.shape) - value.ndim
            index = [("0" if (n == 1 or axis in repeated) and self.shape[lead + axis] != 1
                      else f"i{lead + axis}") for axis, n in enumerate(value.shape)]
            name = self._array(key if key[0] == "slot" else ("constant", value), "full", index,
                               repeated)
        self._names[key] = name
        return name

    def _read(self, key, starts, shape):
        """``a[b0:e0, b1:e1, ...]``: ``a`` read at the offsets ``b``; a slice of whole
        rows (``x[1:]``, ``u[:-1, :]``: contiguous, as ``a`` is) taken by the caller
        and read as a full array (with only such reads the loop is flat, and
        vectorised: rows of 3 shifted by one ran 4x slower read at an offset)."""
        if all(start == 0 and n == m for start, n, m in zip(starts[1:], self.shape[1:],
                                                              shape[1:])):
            name = self._array(key, "full", [f"i{axis}" for axis in range(len(self.shape))])
            self.reads[-1].view = (tuple(slice(start, start + n) for start, n
                                         in zip(starts, self.shape)), tuple(shape))
            return name
        name = self._array(key, "read", [self._int(start) for start in starts])
        self.checks += [f"a{name[1:]}.shape[{axis}] != {self._int(n)}"
                        for axis, n in enumerate(shape)]
        return name

    def _index_rows(self, index, rename):
        """An index array read per row ``i0`` (a gather's, a scatter-add's): its name in
        the loop; ``index`` its source (:func:`.loop_forms._row_index`)."""
        if index[0] == "slot":
            index = ("slot", rename.get(index[1], index[1]))
        self._array(index, "index", [])
        rows = self.reads[-1].array
        self.checks.append(f"{rows}.shape[0] != n0")
        return rows

    def _gather(self, key, rows):
        """``a[index]`` (``np.take`` along the first axis), ``index`` a 1-d integer
        array read as ``rows``: per row, its entry (wrapped once if negative, as NumPy
        does; out of range, the group is handed back and NumPy raises); ``a``'s other
        axes the group's."""
        name = self._array(key, "gather", [f"k{len(self.reads)}"] + [
            f"i{axis}" for axis in range(1, len(self.shape))])
        gathered = self.reads[-1]
        gathered.rows = rows
        self.checks += [f"{gathered.array}.shape[{axis}] != n{axis}"
                        for axis in range(1, len(self.shape))]
        return name

    def _scatter_add(self, slot, operand, index, shape, rename):
        """A gather's cotangent into ``slot`` (see :class:`.loop_sums.ScatterAdd`), its
        rows sent where ``index`` (a source, as a gather's) says."""
        rows = self._index_rows(index, rename)
        inner = self._int(shape[1]) if len(shape) > 1 else "1"
        return ScatterAdd(slot, operand, rows, shape, self._int(shape[0]), inner)

    def _scatter(self, key, bounds):
        """A slice's cotangent: its input where the slice is, 0 elsewhere."""
        lows = [self._int(start) for start, _ in bounds]
        highs = [self._int(stop) for _, stop in bounds]
        name = self._array(key, "scatter", (lows, highs))
        self.checks += [f"a{name[1:]}.shape[{axis}] != {hi} - {lo}"
                        for axis, (lo, hi) in enumerate(zip(lows, highs))]
        return name

    def finish(self):
        """Decide whether the group runs as a loop: over
        :data:`.policy.LOOP_MIN_ELEMENTS` or more, and not for one plain ufunc (or a
        view), as fast as a NumPy call; a NaN-safe product (three passes in NumPy) or a
        slice's cotangent (zeros, then a write) gains alone."""
        self.fused = math.prod(self.shape) >= policy.LOOP_MIN_ELEMENTS and (
            not all(self.plain) or sum(name not in _COPIES for name in self.names) > 1) \
            and not self.outputs & self.tuples    # (a kernel's outputs read as a tuple)
        if self.fused:
            self.mode = self._mode()
            self.fused = self.mode is not None
        if self.fused:
            if self.mode == "expanded":
                # (the caller hands the loop every array at the group's shape)
                whole = [f"i{axis}" for axis in range(len(self.shape))]
                for read in self.reads:
                    if read.kind == "full":
                        read.parts, read.repeated, read.first = whole, (), ()
            elif self.mode == "short":
                # (the rows' length is written in the source: checked)
                self.checks.append(f"n{len(self.shape) - 1} != {self.shape[-1]}")
            self.written = sorted(self.outputs)
            self.buffers = self.written + sorted({reduction.operand for reduction in self.sums}
                                                 - self.outputs)
            self.int_args = np.array(self.ints, np.int64)
            self.source = self._source()

    def _mode(self):
        """How the loop runs over the elements: ``flat`` (every array of the group's
        shape: one row of them all), for rows shorter than
        :data:`.policy.LOOP_SHORT_ROWS` (x, y, z coordinates) ``expanded`` (arrays
        broadcast along them written out by the caller, and the loop flat) or
        ``short`` (slices among them: a loop per axis, the rows' length written in
        the source), and ``rows`` (1-d views of each row, cut into segments at
        slices' cotangents' bounds).

        Short rows of broadcast arrays, measured over 5856 and 12440 rows of 3 (the
        potential's backward pass): writing an array out costs ~0.4 ns an element, and
        a short loop's body runs unvectorised, ~0.25 ns an element slower per
        operation than a flat one's (9 operations, 3 arrays written out: 32 µs
        expanded, 53 short), so a group of arrays only is expanded.  With slices
        among its reads, the short loop ran 2x faster than the loop per axis with the
        long axis innermost that it replaces."""
        whole = [f"i{axis}" for axis in range(len(self.shape))]
        if self.scatters and len(self.shape) > 2:
            return None             # (rows of one axis: where a scatter-add's go)
        reads = [read for read in self.reads if read.kind != "index"]
        if all(read.kind == "full" and read.parts == whole for read in reads):
            return "flat"
        if any(read.kind == "gather" for read in self.reads):
            # (a gather's row index read per row, in the loop per axis: short rows)
            return "short" if self.shape[-1] < policy.LOOP_SHORT_ROWS and all(
                read.kind != "scatter" for read in self.reads) else None
        if self.shape[-1] >= policy.LOOP_SHORT_ROWS or any(read.kind == "scatter"
                                                            for read in self.reads):
            return "rows"
        if all(read.kind == "full" for read in reads):
            return "expanded"
        return "short"

    # ------------------------------------------------------------ running

    def __call__(self, values):
        """Run the loop on ``values`` (by slot), writing its outputs there: True, or
        False with nothing written when the records must run as NumPy calls instead
        (an input of another shape, a value that is not finite, no loop compiled)."""
        if self.failed:
            return False
        if self.kernels and not all(call.current() for call in self.kernels):
            # (a name a kernel reads was bound to another value: its own loop runs,
            # compiled afresh, from now on)
            self.failed, self.function = True, None
            logger.debug(f"db.jit: an elementwise loop ({describe(self)}) calls a kernel "
                         f"whose globals changed: its records run as NumPy calls")
            return False
        function = self.function
        if function is None:
            try:
                function = self._compile()
            except Exception as error:  # not a user's error: the records run as NumPy calls
                return self._failed(error)
            if function is None:
                return False
        outputs = [np.empty(self.shape, np.bool_ if slot in self.masks else np.float64)
                   for slot in self.written]
        sums = [np.empty(max(1, math.prod(reduction.shape))) for reduction in self.sums] + [
            np.zeros(math.prod(scatter.shape)) for scatter in self.scatters]
        args = self._arguments(values, outputs + sums)
        if args is None:
            return False
        if self.calls == 0:
            # (compiled apart from the call: an error a kernel raises is the user's, and
            # the replay meets it)
            try:
                start = time.perf_counter()
                function.compile(tuple(map(numba.typeof, args)))
            except Exception as error:  # not a user's error: the records run as NumPy calls
                return self._failed(error)
            logger.debug(f"db.jit: an elementwise loop ({describe(self)}) compiled or "
                         f"loaded in {time.perf_counter() - start:.2f} s")
        code = function(*args)
        self.calls += 1
        if code == 3:
            # (which zero NumPy gives depends on where the element falls: the group's
            # records run as NumPy calls from now on, rather than twice every call)
            self.failed, self.function = True, None
            logger.debug(f"db.jit: an elementwise loop ({describe(self)}) met a tie of 0.0 "
                         f"and -0.0 in np.maximum or np.minimum: its records run as NumPy "
                         f"calls from now on")
            return False
        if code:
            self.handed_back += 1
            if self.handed_back == policy.LOOP_HAND_BACKS:
                # (inputs that are not finite, or not of the trace's shapes, every time)
                self.failed, self.function = True, None
                logger.debug(f"db.jit: an elementwise loop ({describe(self)}) handed its "
                             f"records back {policy.LOOP_HAND_BACKS} calls in a row: they "
                             f"run as NumPy calls from now on")
            return False
        self.handed_back = 0
        for slot, out in zip(self.written, outputs):
            values[slot] = out
        for reduction, out in zip(self.sums, sums):
            values[reduction.slot] = out.reshape(reduction.shape) if reduction.array else out[0]
        for scatter, out in zip(self.scatters, sums[len(self.sums):]):
            values[scatter.slot] = out.reshape(scatter.shape)
        return True

    def _arguments(self, values, outputs):
        """The loop's arguments: sizes and bounds, ``outputs``, the arrays it reads as
        it reads them (C-contiguous; broadcast views without their repeated axes, or
        written out along short rows), its numbers; None where an array is not as the
        trace had it."""
        args = [self.int_args] + outputs
        expanded = self.mode == "expanded"
        for read in self.reads:
            kind, value = read.source
            array = values[value] if kind == "slot" else value
            if read.view is not None:
                index, shape = read.view
                if array.shape != shape:
                    return None             # (another shape than the trace's)
                array = array[index]
            if expanded and read.kind == "full" and (array.shape != self.shape
                                                     or not array.flags.c_contiguous):
                array = _expanded(array, self.shape)
                if array is None:
                    return None             # (another shape than the trace's)
            elif read.repeated:
                strides = array.strides
                for axis in read.repeated:
                    if strides[axis]:
                        return None         # (not the broadcast view the trace had)
                array = array[read.first]
            # (contiguous rows: the loop's views of them are what LLVM vectorises)
            args.append(array if array.flags.c_contiguous else np.ascontiguousarray(array))
        for kind, value in self.scalars:
            args.append(float(values[value]) if kind == "slot" else float(value))
        return args

    def _failed(self, error):
        self.failed, self.function = True, None
        logger.warning(f"db.jit: an elementwise loop ({describe(self)}) failed to compile "
                       f"({type(error).__name__}: {error}); its records run as NumPy calls")
        return False

    def _compile(self):
        """The loop's dispatcher: the process's one for its source (see
        :data:`.loop_cache.LOOPS`), or a new one (compiled at its first call, from the
        disk cache's file of its source where there is one); None past
        :data:`.policy.MAX_LOOPS`."""
        function = LOOPS.dispatcher(self.source, {
            call.name: call.scalar for call in self.kernels},
            all(call.cache_key is not None for call in self.kernels))
        if function is None:
            self.failed = True
        self.function = function
        return function


def _expanded(array, shape):
    """``array`` broadcast to ``shape`` (short rows) as a new C-contiguous array, or
    None if it does not broadcast.  A column repeated along the rows (of length 1 or
    stride 0) is written column by column (3x faster than NumPy's copy of the
    broadcast view)."""
    out = np.empty(shape, array.dtype)
    if array.shape[:-1] == shape[:-1] and (array.shape[-1] == 1 or array.shape == shape
                                           and array.strides[-1] == 0):
        column = array[..., 0]
        for k in range(shape[-1]):
            out[..., k] = column
        return out
    try:
        out[...] = np.broadcast_to(array, shape)
    except ValueError:
        return None
    return out


def describe(group):
    """A group, for the log and ``explain()``."""
    return f"{len(group.names)} records over {group.shape} ({', '.join(group.names)})"
