"""Elementwise loops of a staged program: float64 records that give arrays of one
shape, computed per element in one compiled loop (:mod:`.staged_plan` finds them).

A replay runs ``gx * gx``, a NaN-safe product, a negation, a slice's cotangent
(zeros with the slice filled) and the sums of cotangents as a NumPy call each, every
one a pass over memory with a temporary array.  A loop reads each input once per
element, keeps what only the loop uses in registers, and writes the values read
outside it.  What a record computes per element is its rule's scalar form
(:class:`~dualbcast.core.registry.ScalarForm`, declared beside the rule), and only
operations that IEEE rounds exactly -- ``+ - * /``, negation, square roots, absolute
values, NaN-safe products, slices and their cotangents -- so that a loop gives the
bits NumPy's calls give.  ``exp``, ``log``, ``pow`` and the like stay NumPy calls
between loops: NumPy's vectorised versions round otherwise than the C library's.

A loop's source names no size and no constant: the shape and a slice's bounds are an
integer array argument, numbers float arguments, so one compile (cached on disk) serves
a group at every shape and value.  It checks every input's shape against the bounds it
was given (a shape that follows an integer input's values may change) and every value
it computes for finiteness: where NumPy would warn (or raise, under the replay's error
settings), the loop hands the group back and the records run as NumPy calls, which
meet it as the eager call does.
"""
import hashlib
import math
import operator
import time

import numpy as np

from ..compile_log import logger
from ..core.operators import OPERATOR_UFUNCS
from ..core.registry import SCALAR_FORMS
from ..core.tape import Record
from ..kernel.cache import load_loop
from ..rules.common import _scattered
from ..safe_cache import guarded_njit

# The fewest elements a loop is compiled for (about 0.4 s, once, then cached on disk):
# below, the NumPy calls it would replace cost a microsecond or two each, and a
# program replayed a few times would not win its compile back.
MIN_ELEMENTS = 2048

_FLOAT64 = np.dtype(np.float64)
_NUMBERS = (float, int, np.float64)
_POSITIONS = "xy"

# NumPy's power of an array by these constant exponents is another operation
# (its ``fast_scalar_power``): the loop computes that one.
_FAST_POWERS = {2: "{x} * {x}", 0.5: "math.sqrt({x})", -1: "1.0 / {x}", 1: "+{x}"}

_HEADER = ("import math\n"
           "import numpy as np\n"
           "from dualbcast.kernel.products import nan_safe_product\n\n")


def loop_form(record, values):
    """How a loop computes ``record`` per element: ``("form", template)``, the
    template over ``{x}`` and ``{y}`` (its arguments); ``("read", starts)`` for a basic
    slice ``a[1:, :-1]`` of an array (read at an offset); ``("scatter", bounds)`` for a
    slice's cotangent (its input where the slice is, 0 elsewhere); None when a loop
    does not compute it."""
    if type(record) is not Record or record.kwargs:
        return None
    answer = values[record.out]
    if type(answer) is not np.ndarray or answer.dtype != _FLOAT64 or not answer.size:
        return None
    func = record.func
    if func is _scattered:
        return _scatter_form(record, values, answer.shape)
    if func is operator.getitem:
        return _read_form(record, values, answer.shape)
    try:
        form = SCALAR_FORMS.get(OPERATOR_UFUNCS.get(func, func))
    except TypeError:               # (a record's function need not be hashable)
        return None
    traced = dict(zip(record.argnums, record.parents))
    traced.update(record.others)
    if form is None or len(record.args) > len(_POSITIONS) or not all(
            _loopable(values[traced[i]] if i in traced else arg, answer.shape)
            for i, arg in enumerate(record.args)):
        return None
    if OPERATOR_UFUNCS.get(func, func) is np.power:
        # (NumPy's pow of an array may round otherwise than the C library's: only its
        # fast paths for constant exponents, exact operations, are the loop's)
        exponent = record.args[1]
        if func is not operator.pow or 1 in traced or type(exponent) not in (int, float) \
                or exponent not in _FAST_POWERS:
            return None
        return ("form", _FAST_POWERS[exponent])
    return ("form", form.value)


def _loopable(value, shape):
    kind = type(value)
    if kind is np.ndarray:
        return value.dtype == _FLOAT64 and value.ndim <= len(shape) and all(
            n == m or n == 1 for n, m in zip(value.shape[::-1], shape[::-1]))
    return kind in _NUMBERS and (kind is not int or abs(value) < 2 ** 53)


def _step_one(index, shape):
    """Per axis of ``shape``, the ``(start, stop)`` of ``index`` (basic slices of step
    1 on the leading axes), or None for another index."""
    parts = index if type(index) is tuple else (index,)
    if len(parts) > len(shape) or not all(type(part) is slice for part in parts):
        return None
    bounds = []
    for part, n in zip(parts + (slice(None),) * (len(shape) - len(parts)), shape):
        start, stop, step = part.indices(n)
        if step != 1:
            return None
        bounds.append((start, max(start, stop)))
    return tuple(bounds)


def _scatter_form(record, values, shape):
    """``_scattered(g, index, False, shape, float64)``: ``g`` where the slice is."""
    g, index, repeats, full, dtype = record.args
    if repeats or dtype != _FLOAT64 or tuple(full) != shape or record.argnums != (0,):
        return None
    bounds = _step_one(index, shape)
    g = values[record.parents[0]]
    if bounds is None or type(g) is not np.ndarray or g.dtype != _FLOAT64 \
            or g.shape != tuple(stop - start for start, stop in bounds):
        return None
    return ("scatter", bounds)


def _read_form(record, values, shape):
    """``a[index]``, basic slices of step 1 of a float64 array: read at an offset."""
    if record.argnums != (0,) or record.others:
        return None
    base = values[record.parents[0]]
    if type(base) is not np.ndarray or base.dtype != _FLOAT64 or base.ndim != len(shape):
        return None
    bounds = _step_one(record.args[1], base.shape)
    if bounds is None or tuple(stop - start for start, stop in bounds) != shape:
        return None
    return ("read", tuple(start for start, _ in bounds), base.shape)


class ElementwiseGroup:
    """Records computed per element in one loop over arrays of ``shape``.

    The loop runs over the rows of the last axis (the leading axes as outer loops),
    each row cut into segments where every slice's cotangent is wholly inside or
    outside its slice; per segment it takes a 1-d view of every array it reads and
    writes, so that the innermost loop reads contiguous memory at a constant offset
    (LLVM vectorises it)."""

    def __init__(self, shape):
        self.shape = shape
        self.records = []
        self.names = []             # per record, its function's name
        self.plain = []             # per record, whether it is a plain ufunc's call
        self.slots = set()          # the slots of its records
        self.outputs = set()        # the slots it writes (read outside it)
        self.ints = list(shape)     # the loop's integer argument: sizes, then bounds
        self.inputs = []            # per array input: ("slot", slot) or ("constant", array)
        self.scalars = []           # per float input: the same
        self.checks = []            # the loop's checks of its inputs' shapes
        self.hoisted = []           # lines before the loops (scalar inputs)
        self.row = []               # lines per row (which slices it is in)
        self.segment = []           # lines per segment (the inputs' views)
        self.element = []           # lines per element (reads, then the records)
        self.cuts = []              # per slice's cotangent, its bounds on the last axis
        self._names = {}            # input key -> its name in the loop
        self.fused = False          # whether it runs as a loop (decided by finish)
        self.function = self.source = None
        self.failed = False
        self.calls = 0

    # ------------------------------------------------------------ building

    def add(self, record, form, rename, values):
        """Take ``record`` (its slot's value, per element, ``v<slot>``)."""
        traced = dict(zip(record.argnums, record.parents))
        traced.update(record.others)
        kind = form[0]
        if kind in ("read", "scatter"):
            slot = rename.get(record.parents[0], record.parents[0])
            array = self._array(("slot", slot))
            value = (self._read(array, form[1], form[2]) if kind == "read"
                     else self._scatter(array, form[1]))
        else:
            operands = []
            for i, arg in enumerate(record.args):
                if i in traced:
                    slot = rename.get(traced[i], traced[i])
                    operands.append(f"v{slot}" if slot in self.slots else
                                    self._input(("slot", slot), values[slot]))
                else:
                    operands.append(self._input(("constant", id(arg)), arg))
            value = form[1].format(**dict(zip(_POSITIONS, operands)))
        self.element.append(f"v{record.out} = {value}")
        if kind == "form":
            self.element.append(f"bad |= v{record.out} - v{record.out} != 0.0")
        self.records.append(record)
        self.names.append(getattr(record.func, "__name__", type(record.func).__name__))
        self.plain.append(kind == "read" or kind == "form" and isinstance(
            OPERATOR_UFUNCS.get(record.func, record.func), np.ufunc))
        self.slots.add(record.out)

    def _int(self, value):
        self.ints.append(value)
        return f"n[{len(self.ints) - 1}]"

    def _array(self, key):
        self.inputs.append(key)
        return f"a{len(self.inputs) - 1}"

    def _input(self, key, value):
        """The name of an input's element in the loop, reading it on first use."""
        name = self._names.get(key)
        if name is not None:
            return name
        name = self._names[key] = f"x{len(self._names)}"
        if type(value) is not np.ndarray or value.ndim == 0:
            self.scalars.append(key if key[0] == "slot" else ("constant", value))
            self.hoisted.append(f"{name} = s{len(self.scalars) - 1}")
            return name
        array = self._array(key if key[0] == "slot" else ("constant", value))
        lead = len(self.shape) - value.ndim
        index = []
        for axis, n in enumerate(value.shape):
            if n == 1 and self.shape[lead + axis] != 1:
                self.checks.append(f"{array}.shape[{axis}] != 1")
                index.append("0")
            else:
                self.checks.append(f"{array}.shape[{axis}] != n{lead + axis}")
                index.append(f"i{lead + axis}")
        if index and index[-1] == "0" or not index:
            # (constant along the row: read once per segment)
            self.segment.append(f"{name} = {array}[{', '.join(index) or '()'}]")
        else:
            index[-1] = "lo:hi"
            self.segment.append(f"r{name} = {array}[{', '.join(index)}]")
            self.element.append(f"{name} = r{name}[j]")
        return name

    def _read(self, array, starts, shape):
        # a[b0:, b1:...]: row i0 + b0, columns from b1 + lo
        for axis, n in enumerate(shape):
            self.checks.append(f"{array}.shape[{axis}] != {self._int(n)}")
        offsets = [self._int(start) for start in starts]
        index = [f"i{axis} + {offset}" for axis, offset in enumerate(offsets[:-1])]
        index.append(f"{offsets[-1]} + lo:{offsets[-1]} + hi")
        self.segment.append(f"r{array} = {array}[{', '.join(index)}]")
        return f"r{array}[j]"

    def _scatter(self, array, bounds):
        # g where the slice is, 0 elsewhere: per row, whether the row is in it; per
        # segment (cut at the slice's bounds on the last axis), whether the segment is
        lows, highs = [], []
        for axis, (start, stop) in enumerate(bounds):
            lows.append(self._int(start))
            highs.append(self._int(stop))
            self.checks.append(f"{array}.shape[{axis}] != {highs[-1]} - {lows[-1]}")
        rows = " and ".join(f"{lo} <= i{axis} < {hi}"
                            for axis, (lo, hi) in enumerate(zip(lows[:-1], highs[:-1])))
        self.row.append(f"in{array} = {rows or 'True'}")
        self.cuts += [lows[-1], highs[-1]]
        index = [f"i{axis} - {lo}" for axis, lo in enumerate(lows[:-1])]
        index.append(f"lo - {lows[-1]}:hi - {lows[-1]}")
        self.segment.append(f"r{array} = {array}[{', '.join(index)}] if in{array} and "
                            f"{lows[-1]} <= lo and hi <= {highs[-1]} else zeros[:hi - lo]")
        return f"r{array}[j]"

    def finish(self):
        """Decide whether the group runs as a loop: over :data:`MIN_ELEMENTS` or more,
        and not for one plain ufunc (or a view), as fast as a NumPy call; a NaN-safe
        product (three passes in NumPy) or a slice's cotangent (zeros, then a write)
        gains alone."""
        self.fused = math.prod(self.shape) >= MIN_ELEMENTS and (
            not all(self.plain) or sum(name != "getitem" for name in self.names) > 1)
        if self.fused:
            self.source = self._source()
            self.outputs = sorted(self.outputs)
            self.ints = np.array(self.ints, np.int64)

    def _source(self):
        outputs = sorted(self.outputs)
        last = len(self.shape) - 1
        params = (["n"] + [f"o{k}" for k in range(len(outputs))]
                  + [f"a{k}" for k in range(len(self.inputs))]
                  + [f"s{k}" for k in range(len(self.scalars))])
        lines = [f"def loop({', '.join(params)}):"]
        lines += [f"    n{axis} = n[{axis}]" for axis in range(last + 1)]
        if self.checks:
            lines.append(f"    if {' or '.join(self.checks)}:")
            lines.append("        return 1")
        lines += ["    " + line for line in self.hoisted]
        if self.cuts:
            lines.append(f"    zeros = np.zeros(n{last})")
            lines.append(f"    cuts = np.array([0, n{last}, {', '.join(self.cuts)}])")
            lines.append("    cuts.sort()")
        lines.append("    bad = False")
        indent = "    "
        for axis in range(last):
            lines.append(f"{indent}for i{axis} in range(n{axis}):")
            indent += "    "
        lines += [indent + line for line in self.row]
        if self.cuts:
            lines.append(f"{indent}for c in range({len(self.cuts) + 1}):")
            indent += "    "
            lines += [f"{indent}lo, hi = cuts[c], cuts[c + 1]", f"{indent}if lo >= hi:",
                      f"{indent}    continue"]
        else:
            lines.append(f"{indent}lo, hi = 0, n{last}")
        lead = "".join(f"i{axis}, " for axis in range(last))
        lines += [indent + line for line in self.segment]
        lines += [f"{indent}p{k} = o{k}[{lead}lo:hi]" for k in range(len(outputs))]
        lines.append(f"{indent}for j in range(hi - lo):")
        indent += "    "
        lines += [indent + line for line in self.element]
        lines += [f"{indent}p{k}[j] = v{slot}" for k, slot in enumerate(outputs)]
        lines.append("    return 2 if bad else 0")
        return _HEADER + "\n".join(lines) + "\n"

    # ------------------------------------------------------------ running

    def __call__(self, values):
        """Run the loop on ``values`` (by slot), writing its outputs there: True, or
        False with nothing written when the records must run as NumPy calls instead
        (an input of another shape, a value that is not finite, no loop compiled)."""
        function = self.function
        if function is None:
            if self.failed:
                return False
            function = self._compile()
            if function is None:
                return False
        args = [self.ints]
        outputs = []
        for _ in self.outputs:
            out = np.empty(self.shape)
            outputs.append(out)
            args.append(out)
        for kind, value in self.inputs:
            array = values[value] if kind == "slot" else value
            # (contiguous rows: the loop's views of them are what LLVM vectorises)
            args.append(array if array.flags.c_contiguous else np.ascontiguousarray(array))
        for kind, value in self.scalars:
            args.append(float(values[value]) if kind == "slot" else float(value))
        if self.calls == 0:
            try:
                start = time.perf_counter()
                code = function(*args)
            except Exception as error:  # not a user's error: the records run as NumPy calls
                self.failed, self.function = True, None
                logger.warning(f"db.jit: an elementwise loop ({describe(self)}) failed to "
                               f"compile ({type(error).__name__}: {error}); its records run "
                               f"as NumPy calls")
                return False
            logger.debug(f"db.jit: an elementwise loop ({describe(self)}) compiled or "
                         f"loaded in {time.perf_counter() - start:.2f} s")
        else:
            code = function(*args)
        self.calls += 1
        if code:
            return False
        for slot, out in zip(self.outputs, outputs):
            values[slot] = out
        return True

    def _compile(self):
        """The loop's dispatcher (compiled at its first call), from the disk cache's
        file of its source where there is one."""
        source = self.source
        module = load_loop(source, {}, "elementwise", hashlib.sha256(source.encode()).hexdigest()[:24])
        if module is None:
            namespace = {}
            exec(compile(source, "<dualbcast elementwise loop>", "exec"), namespace)
            self.function = guarded_njit(error_model="numpy", nogil=True)(namespace["loop"])
        else:
            self.function = guarded_njit(error_model="numpy", nogil=True, cache=True)(module.loop)
        return self.function


def describe(group):
    """A group, for the log and ``explain()``."""
    return f"{len(group.names)} records over {group.shape} ({', '.join(group.names)})"

