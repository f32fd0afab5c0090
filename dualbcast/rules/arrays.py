"""VJPs of array building and rearranging: ``triu``/``tril``, ``diagonal``, ``trace``,
``diff``, ``sort``, ``take``, ``take_along_axis``, ``roll``, ``repeat``, ``tile``,
``pad`` (constant mode).

All are linear in the traced array, so each backward is another rearrangement of the
cotangent, written with NumPy functions that have rules (differentiable again), or a
primitive of this module whose own rule is the forward operation (the diagonal's
embedding); and each forward-mode tangent is the operation applied to the tangent
(``linear=True``), but for ``sort``'s: the tangent gathered by the sorting permutation.
Integer indices that may repeat (``take``, ``take_along_axis``, ``repeat`` with
per-element counts) send back a :class:`SparseCotangent`: the core's scatter-add
(``np.add.at`` semantics, as integer-array indexing does).  Array arguments that are
not traced (indices, shifts, pad widths, fill values) are positional arguments of the
record, so a replay watches them as constants."""
import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from ..core.box import apply, constant, inner_foreign, unbox
from ..core.tape import Traced
from ..core.registry import define
from ..core.tape import SparseCotangent
from .common import constant_dtype, no_out, numpy_only


def _register(func):
    def decorate(rule):
        define(func, trace=rule)
        return rule
    return decorate


# ------------------------------------------------------------------ triangles, diagonals

def _triangle(func):
    def vjp(g, ans, m, k=0):
        ct = func(g, k=k)
        return np.sum(ct, axis=0) if np.ndim(m) == 1 else ct   # (a vector's rows, stacked)

    def rule(m, k=0):
        return apply(func, (vjp,), (m,), {"k": k})
    define(func, trace=rule)


_triangle(np.triu)
_triangle(np.tril)


def _diagonal_vjp(g, ans, a, offset=0, axis1=0, axis2=1):
    return embed_diagonal(g, np.shape(a), offset, axis1, axis2)


@_register(np.diagonal)
def _diagonal_rule(a, offset=0, axis1=0, axis2=1):
    return apply(np.diagonal, (_diagonal_vjp,), (a,),
                 {"offset": offset, "axis1": axis1, "axis2": axis2})


def embed_diagonal(g, shape, offset=0, axis1=0, axis2=1):
    """The array of ``shape`` that is 0 but for its diagonal ``(offset, axis1, axis2)``,
    which is ``g``: the transpose of ``np.diagonal``, and a traced operation itself
    (its vjp is ``np.diagonal``)."""
    return apply(_embedded_diagonal, (_embed_vjp,), (g,),
                 {"shape": tuple(shape), "offset": offset, "axis1": axis1, "axis2": axis2})


def _embedded_diagonal(g, shape, offset, axis1, axis2):
    if isinstance(g, Traced):       # traced by an enclosing trace: recorded there
        return embed_diagonal(g, shape, offset, axis1, axis2)
    numpy_only(g, function="np.diagonal or np.trace")
    axis1, axis2 = normalize_axis_index(axis1, len(shape)), normalize_axis_index(axis2, len(shape))
    rest = [n for i, n in enumerate(shape) if i not in (axis1, axis2)]
    out = np.zeros(rest + [shape[axis1], shape[axis2]], np.result_type(g))
    steps = np.arange(np.shape(g)[-1])
    out[..., steps + max(0, -offset), steps + max(0, offset)] = g   # a fresh buffer
    return np.moveaxis(out, (-2, -1), (axis1, axis2))


def _embed_vjp(g, ans, diagonal, shape, offset, axis1, axis2):
    return np.diagonal(g, offset, axis1, axis2)


@_register(np.trace)
def _trace_rule(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    # np.trace is np.add.reduce of the diagonal over its last axis: the same bits.
    no_out("trace", out)
    if constant_dtype("trace", dtype):
        return constant(np.trace, (a, offset, axis1, axis2, dtype))
    return np.sum(np.diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


# ------------------------------------------------------------------ diff

@_register(np.diff)
def _diff_rule(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    # NumPy's own steps, on traced values: join, then n times a[1:] - a[:-1].
    if n == 0:
        return a
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    ndim = np.ndim(unbox(a))
    if ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = normalize_axis_index(axis, ndim)
    joined = []
    for part in (prepend, a, append):
        if part is np._NoValue:
            continue
        if part is not a:
            part = part if isinstance(part, Traced) else np.asanyarray(part)
            if np.ndim(unbox(part)) == 0:
                shape = list(np.shape(unbox(a)))
                shape[axis] = 1
                part = np.broadcast_to(part, tuple(shape))
        joined.append(part)
    if len(joined) > 1:
        a = np.concatenate(joined, axis)
    upper = (slice(None),) * axis + (slice(1, None),)
    lower = (slice(None),) * axis + (slice(None, -1),)
    for _ in range(n):
        a = a[upper] - a[lower]
    return a


# ------------------------------------------------------------------ sort

def _sort_vjp(g, ans, a, axis=-1, kind=None, stable=None):
    numpy_only(g, a, function="np.sort")
    # Each sorted position's cotangent goes back to the element NumPy's stable sort put
    # there (ties: in their original order): a gather by the inverse permutation.
    shape = np.shape(a)
    if axis is None:
        a, axis = np.ravel(a), 0
    order = np.argsort(a, axis=axis, kind="stable")
    inverse = np.argsort(order, axis=axis, kind="stable")
    return np.reshape(np.take_along_axis(g, inverse, axis=axis), shape)


def _sort_jvp(tangents, ans, a, axis=-1, kind=None, stable=None):
    # The tangent of each sorted position is that of the element put there.
    t = tangents[0]
    if axis is None:
        a, t, axis = np.ravel(a), np.ravel(t), 0
    return np.take_along_axis(t, np.argsort(a, axis=axis, kind="stable"), axis=axis)


@_register(np.sort)
def _sort_rule(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise NotImplementedError("dualbcast: numpy.sort with order= (structured arrays) "
                                  "has no gradient rule")
    return apply(np.sort, (_sort_vjp,), (a,), {"axis": axis, "kind": kind, "stable": stable})


# ------------------------------------------------------------------ gathers

def _flat_index(flat, shape):
    """``flat`` (indices into the flattened array, negative ones too) as an index
    tuple of ``shape``."""
    size = int(np.prod(shape))
    return np.unravel_index(np.where(flat < 0, flat + size, flat), shape)


def _take(a, indices, **kwargs):
    """``np.take``, handed to the vmap that batches ``indices`` when ``a`` is not traced
    (NumPy's dispatch looks at ``a`` alone, and would convert the batch)."""
    foreign = inner_foreign((indices,))
    if foreign is not None and not isinstance(a, Traced):
        return foreign.trace.function(np.take, (a, indices), kwargs)
    return np.take(a, indices, **kwargs)


def _take_vjp(g, ans, a, indices, axis=None, mode="raise"):
    shape = np.shape(a)
    idx = indices if inner_foreign((indices,)) is not None else np.asarray(indices)
    if idx.dtype.kind == "b":
        idx = idx.astype(np.intp)
    n = int(np.prod(shape)) if axis is None else shape[normalize_axis_index(axis, len(shape))]
    if mode == "wrap":
        idx = idx % n
    elif mode == "clip":
        idx = np.clip(idx, 0, n - 1)
    if axis is None:
        if not shape:                   # a scalar: every index is its one element
            return np.sum(g)
        index = _flat_index(idx, shape)
    else:
        index = (slice(None),) * normalize_axis_index(axis, len(shape)) + (idx,)
    return SparseCotangent(index, g, True)          # repeats add up: the core's scatter


@_register(np.take)
def _take_rule(a, indices, axis=None, out=None, mode="raise"):
    no_out("take", out)
    return apply(_take, (_take_vjp, None), (a, indices), {"axis": axis, "mode": mode})


def _take_along_axis_vjp(g, ans, arr, indices, axis=-1):
    shape = np.shape(arr)
    idx = np.asarray(indices)
    if axis is None:
        return SparseCotangent(_flat_index(idx, shape), g, True)
    axis = normalize_axis_index(axis, len(shape))
    index = tuple(idx if i == axis else
                  np.arange(n).reshape((1,) * i + (n,) + (1,) * (len(shape) - i - 1))
                  for i, n in enumerate(shape))
    return SparseCotangent(index, g, True)


@_register(np.take_along_axis)
def _take_along_axis_rule(arr, indices, axis=-1):
    return apply(np.take_along_axis, (_take_along_axis_vjp, None), (arr, indices),
                 {"axis": axis})


# ------------------------------------------------------------------ roll, repeat, tile

@_register(np.roll)
def _roll_rule(a, shift, axis=None):
    return apply(np.roll, (_roll_vjp, None), (a, shift), {"axis": axis})


def _roll_vjp(g, ans, a, shift, axis=None):
    return np.roll(g, -np.asarray(shift), axis=axis)


@_register(np.repeat)
def _repeat_rule(a, repeats, axis=None):
    return apply(np.repeat, (_repeat_vjp, None), (a, repeats), {"axis": axis})


def _repeat_vjp(g, ans, a, repeats, axis=None):
    shape = np.shape(a)
    flat = (int(np.prod(shape)),) if axis is None else shape
    axis = 0 if axis is None else normalize_axis_index(axis, len(shape))
    counts = np.asarray(repeats)
    if counts.size == 1:
        # Each element repeated r times in a row: a reshape and a sum.
        r = int(counts.reshape(-1)[0])
        split = np.reshape(g, flat[:axis] + (flat[axis], r) + flat[axis + 1:])
        return np.reshape(np.sum(split, axis=axis + 1), shape)
    sources = np.repeat(np.arange(flat[axis]), counts)
    if len(flat) != len(shape):         # repeated along the flattened array
        return SparseCotangent(_flat_index(sources, shape), g, True)
    return SparseCotangent((slice(None),) * axis + (sources,), g, True)


@_register(np.tile)
def _tile_rule(A, reps):
    return apply(np.tile, (_tile_vjp, None), (A, reps))


def _tile_vjp(g, ans, A, reps):
    # tile's result, reshaped to (r0, s0, r1, s1, ...), is the (promoted) A broadcast
    # along the r axes: sum them.
    shape = np.shape(A)
    try:
        reps = tuple(int(r) for r in reps)
    except TypeError:
        reps = (int(reps),)
    ndim = max(len(reps), len(shape))
    reps = (1,) * (ndim - len(reps)) + reps
    padded = (1,) * (ndim - len(shape)) + shape
    split = np.reshape(g, tuple(n for pair in zip(reps, padded) for n in pair))
    return np.reshape(np.sum(split, axis=tuple(range(0, 2 * ndim, 2))), shape)


# ------------------------------------------------------------------ pad

@_register(np.pad)
def _pad_rule(array, pad_width, mode="constant", **kwargs):
    if mode != "constant":
        raise NotImplementedError(f"dualbcast: numpy.pad with mode={mode!r} on traced "
                                  f"values has no gradient rule (only mode='constant')")
    unsupported = set(kwargs) - {"constant_values"}
    if unsupported:
        raise ValueError(f"unsupported keyword arguments for mode 'constant': {unsupported}")
    return apply(_padded, (_pad_vjp_array, None, _pad_vjp_values),
                 (array, pad_width, kwargs.get("constant_values", 0)))


def _padded(array, pad_width, constant_values):
    return np.pad(array, pad_width, mode="constant", constant_values=constant_values)


def _pairs(pad_width, ndim):
    """``pad_width`` as one ``(before, after)`` per axis, as NumPy reads it."""
    x = np.asarray(pad_width)
    if x.size == 1:
        return [(int(x.reshape(-1)[0]),) * 2] * ndim
    if x.size == 2 and x.shape != (2, 1):
        return [tuple(int(v) for v in x.reshape(-1))] * ndim
    return [tuple(int(v) for v in pair) for pair in np.broadcast_to(x, (ndim, 2))]


def _pad_vjp_array(g, ans, array, pad_width, constant_values):
    shape = np.shape(array)
    return g[tuple(slice(before, before + n)
                   for (before, _), n in zip(_pairs(pad_width, len(shape)), shape))]


def _pad_vjp_values(g, ans, array, pad_width, constant_values):
    if np.ndim(constant_values) != 0:
        raise NotImplementedError("dualbcast: numpy.pad with traced per-axis "
                                  "constant_values has no gradient rule (a traced scalar has)")
    shape = np.shape(array)
    border = np.pad(np.zeros(shape, bool), _pairs(pad_width, len(shape)),
                    constant_values=True)
    return np.sum(np.where(border, g, np.zeros((), np.result_type(g))))


# Forward mode: linear in the traced array (pad: in the array and the fill value).
define(np.triu, np.tril, np.diagonal, _embedded_diagonal, np.take, _take, np.take_along_axis,
       np.roll, np.repeat, np.tile, _padded, linear=True)
define(np.sort, jvp=_sort_jvp)
