"""Boxes: traced values that record NumPy operations onto their tape.

A :class:`Box` wraps a float array or scalar (``value``) and knows its tape slot.
Operators, methods and NumPy functions (through ``__array_ufunc__`` and
``__array_function__``) unwrap the boxes, run NumPy on the values, and record the
rule registered for the operation in :mod:`.registry`.  Anything without a rule raises
``NotImplementedError`` naming it: a gradient is never silently detached.  Writes into
a box (``x[i] = v``, ``x += v``, ``out=x``) raise ``TypeError``: a box is immutable.

Every place where a traced value leaves the tape as a plain constant (``bool(x)``, a
comparison, ``np.floor(x)``, ``np.argmax(x)``) goes through :func:`.tape.escape`, which
tells the tape's recorder, if it has one (:class:`.tape.Recorder`): whoever replays the
program must check those outcomes again.  The arithmetic operators' one-step path for
scalar code is :mod:`.operators`; their general path is :func:`_operator` here.
"""
import math
import operator
import os
import sys
import sysconfig

import numpy as np

from ..foreign import frozen_dask_array, is_dask_array
from .methods import install_array_methods
from .operators import binary
from .registry import NO_RULES, PRIMITIVES, define
from .tape import SCALARS, LinearRecord, Record, Traced, escape, raised

_NO_KWARGS = {}


def trace_inputs(args, vjps=None):
    """Unwrap the boxes among ``args``: ``(tape, values, parent_slots, argnums,
    others)``.

    ``argnums`` are the positions of traced arguments that are differentiated (those
    whose ``vjps`` entry is not None; all of them when ``vjps`` is None); ``others``
    the ``(position, slot)`` of the traced arguments that are not."""
    tape = None
    parents = argnums = others = ()
    values = args
    for i, arg in enumerate(args):
        if type(arg) is Box:
            if values is args:
                values = list(args)
            values[i] = arg.value
            if tape is None:
                tape = arg.tape
                if tape.closed:
                    raise RuntimeError(_USED_AFTER_RETURN)
            elif arg.tape is not tape:
                return _nested_inputs(args, vjps)
            if vjps is None or vjps[i] is not None:
                parents += (arg.slot,)
                argnums += (i,)
            else:
                others += ((i, arg.slot),)
        elif type(arg) not in SCALARS and isinstance(arg, Traced):
            return _nested_inputs(args, vjps)
    return tape, values, parents, argnums, others


_USED_AFTER_RETURN = ("a traced value was used after its grad/vjp call returned; return it "
                      "from the function instead")


def _nested_inputs(args, vjps):
    """:func:`trace_inputs` where values of several traces meet: the innermost trace
    (the highest level) records the operation, and the values of the others are
    constants to it (they stay boxes in ``values``: computing on them records on
    their own traces).  When the innermost is a trace of another kind (a ``vmap``'s),
    ``(that trace, None, (), (), ())``: it processes the operation (see :func:`apply`)."""
    foreign = inner_foreign(args)
    if foreign is not None:
        return foreign.trace, None, (), (), ()
    tapes = {id(arg.tape): arg.tape for arg in args if type(arg) is Box}.values()
    if not tapes:
        return None, args, (), (), ()
    for tape in tapes:
        if tape.closed:
            raise RuntimeError(_USED_AFTER_RETURN)
    levels = sorted(tape.level for tape in tapes)
    if len(set(levels)) != len(levels):
        raise ValueError("values traced by two different grad/vjp calls (or threads) met "
                         "in one operation")
    tape = max(tapes, key=lambda tape: tape.level)
    values = list(args)
    parents = argnums = others = ()
    for i, arg in enumerate(args):
        if type(arg) is Box and arg.tape is tape:
            values[i] = arg.value
            if vjps is None or vjps[i] is not None:
                parents += (arg.slot,)
                argnums += (i,)
            else:
                others += ((i, arg.slot),)
    return tape, values, parents, argnums, others


def apply(func, vjps, args, kwargs=_NO_KWARGS, scalar_vjps=None):
    """``func(*values of args, **kwargs)``, recorded when a differentiable argument is
    traced (``vjps[i]`` not None).  The one place where NumPy operations meet the tape.
    ``scalar_vjps``, if given, replace ``vjps`` when the result is a scalar."""
    tape, values, parents, argnums, others = trace_inputs(args, vjps)
    if values is None:              # the innermost trace is not a tape: it takes the call
        return tape.function(func, args, kwargs)
    try:
        ans = func(*values, **kwargs)
    except Exception:
        raised(tape)
        raise
    if not parents:
        if tape is not None:        # traced, but only through non-differentiable inputs
            return tape.left_as_constant(func, args, values, kwargs, ans, vjps)
        return ans
    if scalar_vjps is not None and type(ans) in SCALARS:
        vjps = scalar_vjps
    saved = tuple(value if type(arg) is Box else keep(tape, value)
                  for arg, value in zip(args, values))
    return record(tape, ans, parents, argnums, vjps, saved, kwargs, func, others)


def kind_of(x):
    """What a gradient or tangent of ``x`` is: "float" (a Python float), "scalar" (a
    NumPy scalar) or "array" (an ndarray, 0-d too, or a Dask array); through boxes, of
    the value they trace."""
    while type(x) is Box:
        x = x.value
    return "float" if type(x) is float else "scalar" if type(x) in SCALARS else "array"


def as_kind(x, kind):
    """``x`` as a value of ``kind`` (:func:`kind_of`), its dtype kept: when ``x`` is
    traced, recorded as an identity (a replay must give the type the eager call
    gives).  A batched value (``vmap``'s) stays one: its kind is its examples'."""
    if type(x) is Box and kind_of(x) == kind or _batched(x):
        return x
    return _as_kind(x, kind)


def _as_kind(x, kind):
    if type(x) is Box or _batched(x):
        return apply(_as_kind, _AS_KIND_VJPS, (x, kind))
    if kind == "array":
        return np.asarray(x)
    if kind == "float":
        return float(x)
    return x[()] if isinstance(x, np.ndarray) else np.result_type(x).type(x)


_AS_KIND_VJPS = (lambda g, ans, x, kind: g, None)
define(_as_kind, linear=True)


def keep(tape, constant):
    """What a record on ``tape`` keeps of a constant argument: its :func:`snapshot`,
    or what the tape's recorder keeps instead."""
    kept = snapshot(constant)
    if tape is None or tape.recorder is None:
        return kept
    return tape.recorder.constant(constant, kept)


def snapshot(constant):
    """What a record keeps of a constant argument for the backward pass: a writeable
    array is copied, since the program may write into it later (a reused buffer) and
    the gradient must use the value it had here; so is a list (and the arrays in it).
    Read-only arrays, scalars and tuples of them are kept as they are."""
    kind = type(constant)
    if kind in SCALARS:
        return constant
    if kind is np.ndarray:
        # (in its own memory order: a transposed view copied in C order would make a
        # BLAS product of the copy add up otherwise than of the view a replay reads)
        return constant.copy(order="K") if constant.flags.writeable else constant
    if kind is list:
        return [snapshot(item) for item in constant]
    if kind is tuple and any(type(item) in (np.ndarray, list) for item in constant):
        return tuple(snapshot(item) for item in constant)
    if is_dask_array(constant):
        return frozen_dask_array(constant)
    return constant


def record(tape, ans, parents, argnums, vjps, saved, kwargs, func, others=(), kind=Record):
    """Append a record (of type ``kind``, see :mod:`.tape`) of ``ans = func(*saved,
    **kwargs)`` to ``tape`` and return the box of its result.  ``saved``: the argument
    values the vjps see; ``others``: ``(position, slot)`` of traced arguments that are
    not parents."""
    if type(ans) is np.ndarray:
        if ans.dtype.kind == "c":
            _complex_result(tape, func)
    elif _is_complex(ans):
        _complex_result(tape, func)
    slot = len(tape.values)
    tape.values.append(ans)
    tape.records.append(kind(slot, parents, argnums, vjps, ans, saved, kwargs, func, others))
    return Box(ans, slot, tape)


# dualbcast differentiates real programs: NumPy's rules here are the real ones, and a
# complex value passing through them would give a wrong gradient (the imaginary part
# dropped at the end, with only a ComplexWarning).  So an operation that makes a traced
# value complex raises, before its result is handed back.  (The operators' one-step
# path in .operators never sees one: it takes real scalars only.)
_COMPLEX_SCALARS = frozenset({complex, np.complex64, np.complex128, np.clongdouble})


def _is_complex(ans):
    if type(ans) in SCALARS:
        return type(ans) in _COMPLEX_SCALARS
    dtype = getattr(ans, "dtype", None)         # (an array of any library)
    return dtype is not None and dtype.kind == "c"


def _complex_result(tape, func):
    raised(tape)
    name = getattr(func, "__name__", repr(func))
    if isinstance(func, np.ufunc):
        name = f"numpy.{name}"
    raise TypeError(f"{name} made a traced value complex: dualbcast differentiates real "
                    f"programs only (NumPy's rules here are the real ones, so a complex "
                    f"intermediate would give a wrong gradient); compute with real and "
                    f"imaginary parts as separate real arrays")


def constant(func, args, kwargs=_NO_KWARGS):
    """``func`` on the values of ``args`` (boxes may sit one list deep), a constant:
    see :meth:`.tape.Tape.left_as_constant`."""
    foreign = inner_foreign(args, kwargs)
    if foreign is not None:
        return foreign.trace.function(func, args, kwargs)
    tape, values, kw = _innermost_unboxed(args, kwargs)
    try:
        result = func(*values, **kw)
    except Exception:
        raised(tape)
        raise
    if tape is None or PRIMITIVES.get(func, NO_RULES).shape_only:
        return result
    # (a staging trace records an elementwise one -- a comparison, np.isnan, np.floor:
    # a mask the program computes, not a branch it took)
    return tape.left_as_constant(func, args, values, kwargs, result)


def _innermost_unboxed(args, kwargs):
    """The innermost trace among the boxes of ``args`` and ``kwargs`` (boxes may sit
    one list deep), and the arguments with its boxes unwrapped.  Boxes of enclosing
    traces stay boxes: computing on them records on their own traces (``w > t``, ``w``
    of a ``grad`` inside ``dualbcast.jit`` and ``t`` a jitted argument, is a constant
    to the ``grad`` and ``t``'s comparison to the jit trace)."""
    tape = None
    for item in _boxes_among(args, kwargs.values()):
        if tape is None or item.tape.level > tape.level:
            tape = item.tape
    if tape is None:
        return None, args, kwargs

    def unwrapped(x):
        if type(x) is Box:
            return x.value if x.tape is tape else x
        if type(x) in (list, tuple):
            return type(x)(item.value if type(item) is Box and item.tape is tape else item
                           for item in x)
        return x
    return tape, tuple(map(unwrapped, args)), {k: unwrapped(v) for k, v in kwargs.items()}


def _discrete_only(*groups):
    """Whether the boxes among ``groups`` of arguments (boxes may sit one list deep)
    all hold bools or integers a trace computed, and there is one: masks a staging
    trace computed (:func:`elementwise_constant`), their counts.  No gradient flows
    through them, so an operation without a rule, or a conversion to a plain value
    (``np.asarray(mask)``, ``data[mask]`` of a plain array, ``int(mask.sum())``),
    computes on their values as on any constant's, checked on every replay (a guard).
    (An integer input, a leaf, is not: ``dualbcast.jit`` makes the function's
    integer arrays constants when one meets such a use.)"""
    found = False
    for item in _boxes_among(*groups):
        kind = getattr(getattr(item.value, "dtype", None), "kind", "f")
        tape = item.tape
        if kind not in "biu" or item.slot < len(tape.values) - len(tape.records):
            return False
        found = True
    return found


_PLAIN = frozenset({np.ndarray, float, int, bool, np.float64, np.float32, np.int64,
                    type(None), str, slice, type(Ellipsis)})


def _batched(x):
    """Whether ``x`` is a value of a trace that is not a tape (a ``vmap``'s)."""
    return type(x) is not Box and type(x) not in SCALARS and isinstance(x, Traced)


def inner_foreign(args, kwargs=_NO_KWARGS):
    """The value, among ``args`` and the values of ``kwargs`` (boxes and batched values
    may sit one list deep), of the innermost trace there when that trace is not a tape
    (a ``vmap``'s, :mod:`.batching`), else None: that trace processes the operation,
    the boxes of tapes constants to it."""
    for group in (args, kwargs.values()) if kwargs else (args,):
        for arg in group:           # (the common case first: no vmap's value anywhere)
            kind = type(arg)
            if kind is Box or kind in _PLAIN:
                continue
            if kind is list or kind is tuple:
                for item in arg:
                    if type(item) is not Box and type(item) not in _PLAIN \
                            and isinstance(item, Traced):
                        return _inner_foreign(args, kwargs.values())
            elif isinstance(arg, Traced):
                return _inner_foreign(args, kwargs.values())
    return None


def _inner_foreign(*groups):
    found = innermost(groups)
    return found if _batched(found) else None


def innermost(groups, above=0):
    """The value, among ``groups`` of arguments (boxes and batched values may sit one
    list deep), of the innermost trace there above level ``above`` (a box or a vmap's
    value), or None: the trace that processes an operation on them."""
    found, level = None, above
    for args in groups:
        for arg in args:
            for item in (arg if type(arg) in (list, tuple) else (arg,)):
                if type(item) is Box:
                    if item.tape.level > level:
                        found, level = item, item.tape.level
                elif _batched(item) and item.trace.level > level:
                    found, level = item, item.trace.level
    return found


_COMPARISON_UFUNCS = {operator.lt: np.less, operator.le: np.less_equal,
                      operator.gt: np.greater, operator.ge: np.greater_equal,
                      operator.eq: np.equal, operator.ne: np.not_equal}


def _boxes_among(*groups):
    """The boxes among ``groups`` of arguments, where boxes may sit one list deep."""
    for args in groups:
        for arg in args:
            for item in (arg if type(arg) in (list, tuple) else (arg,)):
                if type(item) is Box:
                    yield item


def plain_array(value, dtype=None, copy=None):
    """``np.asarray(value, dtype)``: what ``__array__`` gives of a mask."""
    return np.asarray(value, dtype)


_COMPARISONS = frozenset({operator.lt, operator.le, operator.gt, operator.ge, operator.eq,
                          operator.ne})


def elementwise_constant(func, args, kwargs, result):
    """Whether a constant computed from traced values is an array computed elementwise
    from its operands (a ufunc's or a comparison's), which a replay computes again from
    its own values: recorded by a staging trace, never checked, and never a branch
    (``bool()``, ``.any()`` of it are checked as any traced value's)."""
    return (type(result) is np.ndarray and result.ndim > 0 and not kwargs
            and (type(func) is np.ufunc or func in _COMPARISONS)
            and not any(type(arg) in (list, tuple) for arg in args))


def unbox(x):
    """The value of a box; anything else unchanged."""
    return x.value if type(x) is Box else x


def call_ufunc(ufunc, inputs):
    p = PRIMITIVES.get(ufunc, NO_RULES)
    if p.vjps is not None:
        return apply(ufunc, p.vjps, inputs, scalar_vjps=p.scalar_vjps)
    if p.constant or _discrete_only(inputs):
        return constant(ufunc, inputs)
    raise NotImplementedError(f"dualbcast has no gradient rule for {_ufunc_name(ufunc)} "
                              f"(called on a traced value)")


def _ufunc_name(ufunc):
    # SciPy's ufuncs (scipy.special.gammaln) say nothing of their module: name the one
    # users import them from.
    for module in ("numpy", "scipy.special"):
        if getattr(sys.modules.get(module), ufunc.__name__, None) is ufunc:
            return f"{module}.{ufunc.__name__}"
    return f"the ufunc {ufunc.__name__}"


def call_function(func, args, kwargs):
    for arg in args:                # (inner_foreign's first loop, inlined: the hot path)
        if type(arg) is not Box and type(arg) not in _PLAIN or kwargs:
            foreign = inner_foreign(args, kwargs)
            if foreign is not None:
                return foreign.trace.function(func, args, kwargs)
            break
    p = PRIMITIVES.get(func, NO_RULES)
    if p.trace is not None:
        return p.trace(*args, **kwargs)
    if p.constant or _discrete_only(args, kwargs.values()):
        return constant(func, args, kwargs)
    name = getattr(func, "__name__", repr(func))
    module = getattr(func, "__module__", None) or "numpy"
    raise NotImplementedError(f"dualbcast has no gradient rule for {module}.{name} "
                              f"(called on a traced value)")


def _unbox_nested(x):
    if type(x) in (list, tuple):
        return type(x)(map(unbox, x))
    return unbox(x)


def _operator(ufunc, op, x, y):
    other = y if type(x) is Box else x
    if type(other) not in _PLAIN and _batched(other):
        foreign = inner_foreign((x, y))
        if foreign is not None:
            return foreign.trace.ufunc(ufunc, "__call__", (x, y), _NO_KWARGS)
    p = PRIMITIVES.get(ufunc, NO_RULES)
    vjps = p.vjps
    if vjps is None:
        if p.constant:
            return constant(op, (x, y))
        return call_ufunc(ufunc, (x, y))    # raises NotImplementedError naming the ufunc
    # The hot path of scalar code (a fold, a polynomial of a kernel's sum): ``apply``
    # and ``record`` unrolled for two arguments of which one or both are traced.
    # ``saved``: what the record keeps for the backward pass (constants snapshotted).
    if type(x) is Box:
        tape = x.tape
        if type(y) is Box:
            if y.tape is not tape:
                return apply(op, vjps, (x, y))    # raises the mixed-traces error
            xv, yv = x.value, y.value
            parents, argnums, saved = (x.slot, y.slot), _BOTH, (xv, yv)
        else:
            xv, yv = x.value, y
            parents, argnums, saved = (x.slot,), _FIRST, (xv, keep(tape, y))
    else:
        tape = y.tape
        xv, yv = x, y.value
        parents, argnums, saved = (y.slot,), _SECOND, (keep(tape, x), yv)
    if tape.closed or None in vjps:
        return apply(op, vjps, (x, y))            # the general path and its errors
    try:
        ans = op(xv, yv)
    except Exception:               # 1.0 / x at x == 0.0, a Python float
        raised(tape)
        raise
    if type(ans) is np.ndarray:
        if ans.dtype.kind == "c":
            _complex_result(tape, ufunc)
    elif _is_complex(ans):
        _complex_result(tape, ufunc)
    values = tape.values
    slot = len(values)
    values.append(ans)
    if type(ans) in SCALARS:
        linear = p.partials
        if linear is not None:
            # x + y, x - y, x * y, x ** c on scalars: the local partials are cheap to
            # form, so the record keeps them and backward only multiplies.
            partials = linear if type(linear) is tuple else linear(*saved)
            if partials is not None:
                if argnums is not _BOTH:
                    partials = (partials[argnums[0]],)
                if None not in partials:        # (None: that partial has no cheap form)
                    tape.records.append(LinearRecord(slot, parents, partials, op, saved,
                                                     linear, argnums))
                    return Box(ans, slot, tape)
        vjps = p.scalar_vjps
    tape.records.append(Record(slot, parents, argnums, vjps, ans, saved, _NO_KWARGS, op, ()))
    return Box(ans, slot, tape)


_FIRST, _SECOND, _BOTH = (0,), (1,), (0, 1)


def _operator_unary(ufunc, op, x):
    p = PRIMITIVES[ufunc]
    return apply(op, p.vjps, (x,), scalar_vjps=p.scalar_vjps)


def _comparison(op):
    def compare(self, other):
        if _batched(other) and inner_foreign((self, other)) is not None:
            return other.trace.ufunc(_COMPARISON_UFUNCS[op], "__call__", (self, other),
                                     _NO_KWARGS)
        if type(other) is Box:
            if other.tape is not self.tape:
                return constant(op, (self, other))      # values of two traces
            value = other.value
        else:
            value = other
        try:
            result = op(self.value, value)
        except Exception:
            raised(self.tape)
            raise
        return self.tape.left_as_constant(op, (self, other), (self.value, value),
                                          _NO_KWARGS, result)
    return compare


def _logical(ufunc):
    # ~mask, mask & other, mask | other, mask ^ other: masks are constants (traced
    # by a staging trace only, as the comparisons that made them).
    def forward(self, other):
        return constant(ufunc, (self, other))

    def reflected(self, other):
        return constant(ufunc, (other, self))
    return forward, reflected


def _in_place(name):
    def method(self, other):
        if not isinstance(self.value, np.ndarray):
            # A float or NumPy scalar is immutable: x += y rebinds x to x + y (Python
            # falls back to the binary operator), as it would untraced.
            return NotImplemented
        raise TypeError(f"in-place {name} on a traced array: traced values are immutable "
                        f"(a write would change a value the gradient depends on); write "
                        f"x = x {name[:-1]} y instead")
    return method


def _writing(name, instead):
    def method(self, *args, **kwargs):
        raise TypeError(f"x.{name}(...) writes into a traced array in place: traced values "
                        f"are immutable (a write would change a value the gradient depends "
                        f"on); use {instead} instead")
    return method


_LIBRARY_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[key]) + os.sep
                       for key in ("purelib", "platlib", "stdlib")})
_OUR_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep


def _library_caller():
    """``" inside scipy.special._logsumexp.logsumexp, ..."`` when the conversion happens
    in an installed library's function called with a traced value (the user called
    that function, not np.asarray), else ``""``."""
    frame, outermost = sys._getframe(2), None
    while frame is not None:
        path = os.path.realpath(frame.f_code.co_filename)
        if path.startswith(_OUR_DIR):
            pass
        elif path.startswith(_LIBRARY_DIRS):
            outermost = frame
        else:
            break               # the user's code: the library frames below it are theirs
        frame = frame.f_back
    if outermost is None or outermost.f_globals.get("__name__", "").startswith("numpy"):
        return ""
    code, module = outermost.f_code, outermost.f_globals.get("__name__", "?")
    name = f"{module}.{getattr(code, 'co_qualname', code.co_name)}"     # (3.11+: qualname)
    return (f" (inside {name}, which converts its arguments to NumPy arrays: dualbcast "
            f"has no gradient rule for it)")


def _detaching(what, convert):
    def method(self, *args, **kwargs):
        if _discrete_only((self,)):
            # (see _discrete_only; whether it raises depends on the shape and dtype only,
            # which NumPy's protocols probe: int() of a mask before np.asarray, data[m])
            return escape(self.tape, convert, (self, *args), kwargs,
                          convert(self.value, *args, **kwargs))
        raise TypeError(f"{what} of a traced value{_library_caller()} would detach it "
                        f"from the gradient; "
                        f"build arrays of traced values with np.stack, np.concatenate, "
                        f"np.where or arithmetic instead (a list of traced scalars, then "
                        f"np.stack(list)), or call dualbcast.stop_gradient(x) first if a "
                        f"constant is what you mean")
    return method


class NoGradientRule(NotImplementedError, AttributeError):
    """An ndarray attribute or method used on a traced value that has no gradient rule.
    Also an ``AttributeError``, so ``hasattr(x, name)`` and ``getattr(x, name, default)``
    still answer as for any object lacking the attribute."""


class Box(Traced):
    """A traced float array or scalar inside ``grad``, ``value_and_grad`` or ``vjp``."""

    __slots__ = ("value", "slot", "tape")
    __hash__ = None         # like ndarray: == is elementwise

    def __init__(self, value, slot, tape):
        self.value = value
        self.slot = slot
        self.tape = tape

    def __repr__(self):
        self._printed()
        return f"Box({self.value!r})"

    def __format__(self, spec):
        self._printed()
        return format(self.value, spec)         # printing a value detaches nothing

    def _printed(self):
        # What a program prints is no record: a replay would skip it.
        tape = self.tape
        if tape.recorder is not None and not tape.closed:
            tape.recorder.opaque(tape, "a traced value was printed")

    # --------------------------------------------------------------- array protocol
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        for arg in inputs:          # (inner_foreign's first loop, inlined: the hot path)
            if type(arg) is not Box and type(arg) not in _PLAIN or kwargs:
                foreign = inner_foreign(inputs, kwargs)
                if foreign is not None:
                    return foreign.trace.ufunc(ufunc, method, inputs, kwargs)
                break
        if "out" in kwargs:
            raise TypeError(f"numpy.{ufunc.__name__}(..., out=...) with traced values: an "
                            f"in-place write would detach or corrupt the gradient; use the "
                            f"returned value instead")
        if (method != "__call__" or kwargs) and _discrete_only(inputs, kwargs.values()):
            return constant(getattr(ufunc, method), inputs, kwargs)    # (np.add.reduce(m))
        if method != "__call__":
            raise NotImplementedError(f"dualbcast has no gradient rule for "
                                      f"numpy.{ufunc.__name__}.{method}")
        if kwargs:
            raise NotImplementedError(f"dualbcast: numpy.{ufunc.__name__} on traced values "
                                      f"does not support the keywords {sorted(kwargs)}")
        return call_ufunc(ufunc, inputs)

    def __array_function__(self, func, types, args, kwargs):
        return call_function(func, args, kwargs)

    # NumPy calls these too when a traced value is written into a plain array
    # (buf[0] = x calls __float__, buf[:1] = x calls __array__); for buf[0] = x it then
    # replaces the error by "setting an array element with a sequence" (a box has
    # __getitem__), keeping this one as its cause.
    __array__ = _detaching("Converting to a plain NumPy array (np.asarray, np.array, "
                           "buf[...] = x into a plain array, or a NumPy function without a "
                           "gradient rule)", plain_array)
    __float__ = _detaching("float() (also what buf[i] = x, writing into a plain NumPy "
                           "array, calls)", float)
    __int__ = _detaching("int()", int)
    __index__ = _detaching("operator.index()", operator.index)
    __complex__ = _detaching("complex()", complex)
    item = _detaching(".item()", np.ndarray.item)
    tolist = _detaching(".tolist()", np.ndarray.tolist)

    def __bool__(self):
        # Control flow on a value is fine: the branch taken is what gets differentiated.
        try:
            result = bool(self.value)
        except Exception:           # an array of several elements
            raised(self.tape)
            raise
        return escape(self.tape, bool, (self,), _NO_KWARGS, result)

    # --------------------------------------------------------------- attributes
    # (a value may itself be a box of an enclosing trace: asked, not np.shape'd)
    shape = property(lambda self: getattr(self.value, "shape", ()))
    ndim = property(lambda self: len(getattr(self.value, "shape", ())))
    size = property(lambda self: math.prod(getattr(self.value, "shape", ())))
    dtype = property(lambda self: self.value.dtype if type(self.value) is Box
                     else np.result_type(self.value))
    T = property(lambda self: call_function(np.transpose, (self,), {}))

    def __len__(self):
        return len(self.value)

    def __iter__(self):
        return (self[i] for i in range(len(self.value)))

    # --------------------------------------------------------------- operators
    __add__, __radd__ = binary(np.add, operator.add, _operator)
    __sub__, __rsub__ = binary(np.subtract, operator.sub, _operator)
    __mul__, __rmul__ = binary(np.multiply, operator.mul, _operator)
    __truediv__, __rtruediv__ = binary(np.true_divide, operator.truediv, _operator)
    __floordiv__, __rfloordiv__ = binary(np.floor_divide, operator.floordiv, _operator)
    __mod__, __rmod__ = binary(np.remainder, operator.mod, _operator)
    __pow__, __rpow__ = binary(np.power, operator.pow, _operator)
    __matmul__, __rmatmul__ = binary(np.matmul, operator.matmul, _operator)
    # Comparisons act on values and give plain bools: control flow is not differentiated.
    __lt__, __le__ = _comparison(operator.lt), _comparison(operator.le)
    __gt__, __ge__ = _comparison(operator.gt), _comparison(operator.ge)
    __eq__, __ne__ = _comparison(operator.eq), _comparison(operator.ne)
    __and__, __rand__ = _logical(np.bitwise_and)
    __or__, __ror__ = _logical(np.bitwise_or)
    __xor__, __rxor__ = _logical(np.bitwise_xor)

    def __invert__(self):
        return constant(np.invert, (self,))

    def __neg__(self):
        return _operator_unary(np.negative, operator.neg, self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _operator_unary(np.absolute, abs, self)

    __iadd__, __isub__ = _in_place("+="), _in_place("-=")
    __imul__, __itruediv__ = _in_place("*="), _in_place("/=")
    __ifloordiv__, __imod__ = _in_place("//="), _in_place("%=")
    __ipow__, __imatmul__ = _in_place("**="), _in_place("@=")

    # --------------------------------------------------------------- indexing
    def __getitem__(self, index):
        return call_function(operator.getitem, (self, index), {})

    def __setitem__(self, index, value):
        raise TypeError("x[...] = v on a traced array: traced values are immutable (a write "
                        "would change a value the gradient depends on); build the result "
                        "with np.where, np.concatenate or arithmetic instead")

    # --------------------------------------------------------------- methods
    # (the NumPy ones, x.sum(...), are installed below: .methods)
    # NumPy's in-place methods (x.sort() returns None) name the function to use instead.
    sort = _writing("sort", "x = np.sort(x)")
    partition = _writing("partition", "x = np.sort(x)")
    fill = _writing("fill", "np.full_like(x, value)")
    put = _writing("put", "np.where or np.concatenate")

    def conj(self):
        return np.conjugate(self)   # a ufunc: through __array_ufunc__
    conjugate = conj

    def copy(self):
        return self                 # boxes are immutable: sharing is a copy

    def astype(self, dtype, **kwargs):
        return call_function(np.ndarray.astype, (self, dtype), kwargs)


def _without_rule(name):
    def attribute(self):
        raise NoGradientRule(f"dualbcast has no gradient rule for the ndarray attribute "
                             f".{name} (used on a traced value); use a NumPy function that "
                             f"has one, or dualbcast.stop_gradient(x).{name} for a constant")
    return property(attribute)


install_array_methods(Box, call_function)


# The public ndarray attributes a box lacks (x.round, x.real, x.sort) say that they have
# no rule, rather than "'Box' object has no attribute".  Class attributes, not a
# __getattr__: that would slow every attribute access of the operators' hot path.
for _name in dir(np.ndarray):
    if not _name.startswith("_") and not hasattr(Box, _name):
        setattr(Box, _name, _without_rule(_name))
