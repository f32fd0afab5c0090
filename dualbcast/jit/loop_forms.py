"""Which records of a staged program a compiled loop computes, and how, per element
(:mod:`.elementwise` writes the loops).

A record's form is its rule's scalar form (:class:`~dualbcast.core.registry.ScalarForm`,
declared beside the rule), and only operations that IEEE rounds exactly -- ``+ - * /``,
negation, square roots, absolute values, NaN-safe products -- or that make no new value
-- slices, their cotangents, ``np.where`` by a mask, the comparisons and logical
operations that make masks (:func:`_mask_form`) -- so that a loop gives the bits
NumPy's calls give.  ``exp``, ``log``, ``pow`` and the like stay NumPy calls between
loops: NumPy's vectorised versions round otherwise than the C library's.  ``np.maximum``
and ``np.minimum`` are a loop's but where zeros of both signs tie (:func:`_extremum_form`).

A gather's cotangent (``np.add.at`` of rows into zeros) is added in as the loop
computes its elements, in their order (:func:`_scatter_add_form`).  A kernel's map or
partials loop is computed per element by its scalar function, as
its own loop computes it (:func:`_kernel_form`, :mod:`.loop_kernels`).  A sum of a
value the loop computes is the loop's too, when NumPy's order of additions
is one a loop can follow (:func:`_sum_form`): the loop writes the terms, then adds
them up as NumPy would.
"""
import operator

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from ..core.operators import OPERATOR_UFUNCS
from ..core.registry import NO_RULES, PRIMITIVES, define
from ..core.tape import Record, traced_positions
from ..rules.common import scattered
from ..rules.fast_nested import KernelLoop
from ..rules.reductions import summed
from ..rules.shapes import take_rows
from . import policy

_FLOAT64 = np.dtype(np.float64)
_NUMBERS = (float, int, np.float64)

# The names of a form's operands in its template, by kind of form.
POSITIONS = {"form": "xy", "mask": "xy", "extremum": "xy", "piecewise": "xy", "select": "cxy"}

# NumPy's power of an array by these constant exponents is another operation
# (its ``fast_scalar_power``): the loop computes that one.
_FAST_POWERS = {2: "{x} * {x}", 0.5: "math.sqrt({x})", -1: "1.0 / {x}", 1: "+{x}"}


def loop_form(record, values):
    """How a loop computes ``record`` per element: ``("form", template)``, the
    template over ``{x}`` and ``{y}`` (its arguments); ``("select", template)`` for
    ``np.where`` (over ``{c}``, ``{x}``, ``{y}``); ``("read", starts, shape)`` for
    a basic slice ``a[1:, :-1]`` of an array of ``shape`` (read at the offsets
    ``starts``); ``("scatter", bounds)`` for a slice's cotangent (its input where the
    slice is, 0 elsewhere); ``("gather", index)`` for rows taken by an index array;
    ``("mask", template)`` for a comparison or a logical operation (a bool per
    element); ``("extremum", template)`` for ``np.maximum``/``np.minimum``;
    ``("piecewise", template)`` for ``np.sign``; ``("kernel", call, shape)`` and ``("part", j)`` for a kernel's loop and its
    outputs; ``("sum", kind, split, count)`` for a sum or a mean;
    ``("scatter_add", index, shape)`` for a gather's cotangent; None when a loop does
    not compute it (or a loop's result would not be NumPy's: another dtype, another
    memory order)."""
    if type(record) is not Record:
        return None
    if record.func is summed or record.func is np.mean:
        return _sum_form(record, values)
    if type(record.func) is KernelLoop:
        return _kernel_form(record, values)
    if record.kwargs:
        return None
    answer = values[record.out]
    if type(answer) is not np.ndarray or not answer.ndim or not answer.size:
        return None
    func = record.func
    if answer.dtype == np.bool_:
        return _mask_form(record, values, answer)
    if answer.dtype != _FLOAT64:
        return None
    try:
        special = PRIMITIVES.get(func, NO_RULES).loop_form
        form = PRIMITIVES.get(OPERATOR_UFUNCS.get(func, func), NO_RULES).form
    except TypeError:               # (a record's function need not be hashable)
        return None
    if special is not None and special[0]:      # (views: any layout)
        return special[1](record, values, answer.shape)
    if not answer.flags.c_contiguous:
        # (NumPy gave the layout of its operands, a transposed or Fortran-ordered one:
        # a loop writes C order, and what reads it next, a sum, would add otherwise)
        return None
    if special is not None:
        return special[1](record, values, answer.shape)
    traced = traced_positions(record)
    takes_masks = OPERATOR_UFUNCS.get(func, func) in _TAKE_MASKS
    if form is None or len(record.args) > len(POSITIONS["form"]) or not all(
            _loopable(values[traced[i]] if i in traced else arg, answer.shape, takes_masks)
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


def _kernel_form(record, values):
    """A kernel's map or partials loop (``k(x, a)``, ``k.value_and_partials``):
    ``("kernel", call, shape)``, computed per element by the kernel's scalar function
    as its own loop calls it (on dual numbers seeded alike: the same bits), when every
    output is a C-contiguous float64 array of ``shape`` and every operand a float64
    array broadcast to it or a number; its partials are read by ``("part", j)``."""
    call = record.func
    prepared = call.prepared
    answer = values[record.out]
    outputs = answer if type(answer) is tuple else (answer,)
    if call.loop not in ("map", "partials") or prepared is None or record.kwargs \
            or record.others or call.kernel.fastmath or prepared.plan.dtype != _FLOAT64 \
            or len(record.args) != call.nargs or call.kernel._dependencies is None \
            or not call.kernel._dependencies.unchanged():
        return None
    spec = prepared.loop.spec
    if call.loop == "partials" and (spec.mode != "partials" or tuple(call.spec) != spec.active
                                    or len(outputs) != 1 + spec.n):
        return None
    shape = outputs[0].shape if type(outputs[0]) is np.ndarray else None
    if shape is None or not shape or not all(
            type(out) is np.ndarray and out.dtype == _FLOAT64 and out.shape == shape
            and out.flags.c_contiguous for out in outputs):
        return None
    traced = traced_positions(record)
    if not all(_loopable(values[traced[i]] if i in traced else arg, shape)
               for i, arg in enumerate(record.args)):
        return None
    return ("kernel", call, shape)


def _part_form(record, values):
    """``parts[j]`` of a kernel's partials loop's outputs (a tuple): ``("part", j)``."""
    parts, index = values[record.parents[0]], record.args[1]
    if type(parts) is not tuple or type(index) is not int or not 0 <= index < len(parts) \
            or record.argnums != (0,) or record.others:
        return None
    return ("part", index)


def _select_form(record, values, shape):
    """``np.where(mask, x, y)``, ``mask`` a bool array (the program's, or a constant)
    or a bool: ``x`` where it is true, else ``y``."""
    traced = traced_positions(record)
    if len(record.args) != 3:
        return None
    mask = values[traced[0]] if 0 in traced else record.args[0]
    if not (type(mask) is np.ndarray and mask.dtype == np.bool_ and _broadcasts(mask, shape)
            or type(mask) is bool):
        return None
    if not all(_loopable(values[traced[i]] if i in traced else record.args[i], shape)
               for i in (1, 2)):
        return None
    return ("select", "({y} if not {c} else {x})")


def _extremum_form(record, values, shape):
    """``np.maximum(x, y)`` or ``np.minimum(x, y)`` of float64 values: ``("extremum",
    template)``, the larger (smaller) one, a NaN where either is one (the first where
    both are).  Which zero NumPy gives at a tie of 0.0 and -0.0 depends on where the
    element falls in the array (its vector loop gives the second, its scalar loop,
    for the tail, the first), which no loop can follow: a loop that meets one hands
    its group back to NumPy's calls for good."""
    traced = traced_positions(record)
    if len(record.args) != 2 or not all(
            _loopable(values[traced[i]] if i in traced else arg, shape)
            for i, arg in enumerate(record.args)):
        return None
    compare = ">" if record.func is np.maximum else "<"
    return ("extremum", f"({{x}} if {{x}} {compare} {{y}} or {{x}} != {{x}} else {{y}})")


def _sign_form(record, values, shape):
    """``np.sign(x)`` of float64 values: ``("piecewise", template)``: 1.0, -1.0, 0.0
    at either zero (as NumPy gives), a NaN at a NaN."""
    traced = traced_positions(record)
    if len(record.args) != 1 or not _loopable(
            values[traced[0]] if 0 in traced else record.args[0], shape):
        return None
    return ("piecewise", "(1.0 if {x} > 0.0 else (-1.0 if {x} < 0.0 else "
                         "(0.0 if {x} == 0.0 else {x})))")


def _loopable(value, shape, masks=False):
    """Whether a loop over ``shape`` reads ``value`` per element: a float64 array
    broadcast to it (or a mask, if ``masks``), or a number."""
    kind = type(value)
    if kind is np.ndarray:
        return (value.dtype == _FLOAT64 or masks and value.dtype == np.bool_) \
            and _broadcasts(value, shape)
    return kind in _NUMBERS and (kind is not int or abs(value) < 2 ** 53)


# Masks: comparisons of float64 values, tests of them and logical operations on
# masks, which make no new number (the same bits as NumPy's, by construction), and
# the ufuncs that take a mask as a number (NumPy casts it to 0.0 or 1.0 first, as a
# loop's arithmetic on a bool does: ``x * (x > 0)``, ``np.maximum``'s backward
# pass, ``wins + 0.5 * ties``).
_COMPARISONS = {np.greater: ">", np.greater_equal: ">=", np.less: "<", np.less_equal: "<=",
                np.equal: "==", np.not_equal: "!="}
_COMPARISONS.update({operator.gt: ">", operator.ge: ">=", operator.lt: "<", operator.le: "<=",
                     operator.eq: "==", operator.ne: "!="})
_TESTS = {np.isnan: "math.isnan({x})", np.isinf: "math.isinf({x})",
          np.isfinite: "math.isfinite({x})"}
_LOGICAL = {np.logical_and: "({x} & {y})", np.bitwise_and: "({x} & {y})",
            np.logical_or: "({x} | {y})", np.bitwise_or: "({x} | {y})",
            np.logical_xor: "({x} != {y})", np.bitwise_xor: "({x} != {y})",
            np.logical_not: "(not {x})", np.invert: "(not {x})"}
_TAKE_MASKS = frozenset({np.add, np.subtract, np.multiply, np.true_divide})


def _mask_form(record, values, answer):
    """A comparison, a test or a logical operation giving a C-contiguous mask:
    ``("mask", template)`` over ``{x}`` and ``{y}``, or None."""
    func = record.func
    try:
        template = _LOGICAL.get(func) or _TESTS.get(func)
        comparison = _COMPARISONS.get(func)
    except TypeError:               # (a record's function need not be hashable)
        return None
    if record.kwargs or not answer.flags.c_contiguous or not 1 <= len(record.args) <= 2:
        return None
    traced = traced_positions(record)
    operands = [values[traced[i]] if i in traced else arg for i, arg in enumerate(record.args)]
    if comparison is not None or func in _TESTS:
        if not all(_loopable(operand, answer.shape) for operand in operands):
            return None
        return ("mask", template or f"({{x}} {comparison} {{y}})")
    if template is None or not all(type(operand) is np.ndarray and operand.dtype == np.bool_
                                   and _broadcasts(operand, answer.shape)
                                   for operand in operands):
        return None
    return ("mask", template)


def _broadcasts(array, shape):
    return array.ndim <= len(shape) and all(
        n == m or n == 1 for n, m in zip(array.shape[::-1], shape[::-1]))


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
    """``scattered(g, index, False, shape, float64)``: ``g`` where the slice is."""
    g, index, repeats, full, dtype = record.args
    if repeats:
        return _scatter_add_form(record, values)
    if dtype != _FLOAT64 or tuple(full) != shape or record.argnums != (0,):
        return None
    bounds = _step_one(index, shape)
    g = values[record.parents[0]]
    if bounds is None or type(g) is not np.ndarray or g.dtype != _FLOAT64 \
            or g.shape != tuple(stop - start for start, stop in bounds):
        return None
    return ("scatter", bounds)


def _scatter_add_form(record, values):
    """``scattered(g, index, True, shape, float64)``, a gather's cotangent
    (``np.add.at(zeros(shape), index, g)``), ``index`` a 1-d signed integer array (an
    input, or a constant) along ``g``'s first axis, ``g`` float64 of one or two axes:
    ``("scatter_add", index, shape)``, the loop adding each element of ``g`` in
    where it goes, in ``g``'s order (np.add.at's)."""
    _, _, _, full, dtype = record.args
    if record.argnums != (0,):
        return None
    g = values[record.parents[0]]
    if dtype != _FLOAT64 or type(g) is not np.ndarray \
            or g.dtype != _FLOAT64 or g.ndim not in (1, 2) or not g.flags.c_contiguous \
            or type(full) is not tuple or len(full) != g.ndim or full[1:] != g.shape[1:]:
        return None
    source = _row_index(record, values, g.shape[0])
    return None if source is None else ("scatter_add", source, full)


def _gather_form(record, values, shape):
    """``a[index]`` (``take_rows``), ``index`` a 1-d signed integer array (an input, or
    a constant), ``a`` a float64 array of two axes or more whose rows are short (the
    loop reads each gathered row's index once, in its loop per axis)."""
    if record.argnums != (0,) or len(shape) < 2 or shape[-1] >= policy.LOOP_SHORT_ROWS:
        return None
    base = values[record.parents[0]]
    if type(base) is not np.ndarray or base.dtype != _FLOAT64 or base.shape[1:] != shape[1:]:
        return None
    source = _row_index(record, values, shape[0])
    return None if source is None else ("gather", source)


def _row_index(record, values, rows):
    """Where a gather's or its cotangent's index comes from (its second argument):
    ``("slot", n)`` (an input) or ``("constant", array)``, when it is a 1-d signed,
    native-endian integer array of ``rows`` entries (what a loop reads per row); else
    None."""
    if record.others:
        ((position, slot),) = record.others
        if position != 1:
            return None
        index, source = values[slot], ("slot", slot)
    else:
        index = record.args[1]
        source = ("constant", index)
    if type(index) is not np.ndarray or index.dtype.kind != "i" or not index.dtype.isnative \
            or index.shape != (rows,):
        return None
    return source


def _read_form(record, values, shape):
    """``a[index]``, basic slices of step 1 of a float64 array: read at an offset."""
    if record.argnums != (0,) or record.others:
        return None
    base = values[record.parents[0]]
    if type(base) is tuple:
        return _part_form(record, values)
    if type(base) is not np.ndarray or base.dtype != _FLOAT64 or base.ndim != len(shape):
        return None
    bounds = _step_one(record.args[1], base.shape)
    if bounds is None or tuple(stop - start for start, stop in bounds) != shape:
        return None
    return ("read", tuple(start for start, _ in bounds), base.shape)


def _sum_form(record, values):
    """``np.sum(a, axis)`` of a C-contiguous float64 array, as NumPy adds it up
    (axes of length 1 aside, which do not change its order): ``("sum", "whole", 0,
    count)`` over every axis (pairwise, as ``np.add.reduce`` adds a contiguous
    array); ``("sum", "trailing", split, count)`` over the axes from ``split`` on
    (pairwise, row by row); ``("sum", "leading", split, count)`` over those before
    it (row after row, in order, from 0.0).  Other axes: None (NumPy's iterator adds
    in another order).  ``np.mean`` is the same sum divided by ``count``, the number
    of elements added up into each (as NumPy divides it); a sum's count is None."""
    a = values[record.parents[0]] if record.argnums == (0,) and not record.others else None
    answer = values[record.out]
    if type(a) is not np.ndarray or a.dtype != _FLOAT64 or not a.flags.c_contiguous \
            or not a.size or set(record.kwargs) - {"axis", "keepdims"} \
            or type(answer) not in (np.ndarray, np.float64) or answer.dtype != _FLOAT64:
        return None
    axis = record.kwargs.get("axis")
    try:
        reduced = set(range(a.ndim) if axis is None else normalize_axis_tuple(axis, a.ndim))
    except (TypeError, ValueError):
        return None
    count = a.size // np.size(answer) if record.func is np.mean else None
    kept = [n > 1 and k not in reduced for k, n in enumerate(a.shape)]
    added = [n > 1 and k in reduced for k, n in enumerate(a.shape)]
    if not any(kept):
        return ("sum", "whole", 0, count)
    first_kept = kept.index(True)
    last_kept = len(kept) - 1 - kept[::-1].index(True)
    if not any(added):
        return None             # (nothing added up: not a loop's work)
    if not any(added[first_kept:]):
        return ("sum", "leading", first_kept, count)
    if not any(added[:last_kept]):
        return ("sum", "trailing", last_kept + 1, count)
    return None


# The records that are no scalar form's (ufuncs' are: their primitives' forms, beside their
# rules): (whether its answer may be of any layout, its form's maker).
define(scattered, loop_form=(True, _scatter_form))
define(operator.getitem, loop_form=(True, _read_form))
define(np.where, loop_form=(False, _select_form))
define(take_rows, loop_form=(False, _gather_form))
define(np.maximum, np.minimum, loop_form=(False, _extremum_form))
define(np.sign, loop_form=(False, _sign_form))
