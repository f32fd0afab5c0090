"""VJPs of shape and selection operations: reshapes, transposes, flips, indexing,
concatenation, stacking, ``where``, ``clip`` and casts.  All linear, so each backward
is the matching reshape, transpose, slice or scatter of the cotangent (operations with
rules of their own: differentiable again), and each forward-mode tangent is the
operation itself applied to the tangents (``linear=True``)."""
import functools
import operator

import numpy as np

from ..core.box import Box, apply, constant, keep, unbox
from ..core.tape import Traced
from ..core.registry import define
from ..core.tape import SparseCotangent
from ..foreign import is_dask_array
from .common import constant_dtype, is_lazy, no_out, unbroadcast


def _register(func):
    def decorate(rule):
        define(func, trace=rule)
        return rule
    return decorate


def _linear(func, vjp):
    """A rule for ``func(a, *static)`` whose only traced input is ``a``."""
    def rule(a, *args, **kwargs):
        return apply(func, (vjp,), (a,) + args, kwargs)
    return rule


def _to_shape_of(g, ans, a, *args, **kwargs):
    return np.reshape(g, np.shape(a))


def _memory_order(a, order):
    # "A" and "K" mean "as laid out in memory": resolve them against the forward value
    # (the cotangent's own layout is unrelated), so the backward reshape undoes it.
    if order in ("A", "K"):
        while isinstance(a, Traced):    # traced by enclosing traces too: the array inside
            a = a.value
        flags = np.asarray(a).flags
        if flags.f_contiguous and not flags.c_contiguous:
            return "F"
        if order == "K" and not flags.c_contiguous and np.ndim(a) > 1:
            raise NotImplementedError("dualbcast: order='K' of a traced array that is "
                                      "neither C- nor Fortran-contiguous has no gradient rule")
        return "C"
    return order


def _reshape_rule(a, shape=None, order="C", *, newshape=None, copy=None):
    shape = newshape if shape is None else shape
    order = _memory_order(unbox(a), order)
    if is_dask_array(unbox(a)) and order == "C":
        return apply(np.reshape, (_reshape_vjp,), (a, shape))   # (Dask's takes no order=)
    return apply(np.reshape, (_reshape_vjp,), (a, shape), {"order": order})


def _reshape_vjp(g, ans, a, shape=None, order="C"):
    if order == "C":
        return np.reshape(g, np.shape(a))
    return np.reshape(g, np.shape(a), order=order)


def _ravel_rule(a, order="C"):
    order = _memory_order(unbox(a), order)
    if is_dask_array(unbox(a)) and order == "C":
        return apply(np.ravel, (_reshape_vjp,), (a,))     # (Dask's takes no order=)
    return apply(np.ravel, (_reshape_vjp,), (a,), {"order": order})


def _transpose_vjp(g, ans, a, axes=None):
    if axes is None:
        return np.transpose(g)
    return np.transpose(g, np.argsort([axis % np.ndim(a) for axis in axes]))


define(np.reshape, trace=_reshape_rule)
define(np.ravel, trace=_ravel_rule)
define(np.transpose, trace=_linear(np.transpose, _transpose_vjp))
define(np.swapaxes, trace=_linear(
    np.swapaxes, lambda g, ans, a, axis1, axis2: np.swapaxes(g, axis1, axis2)))
define(np.moveaxis, trace=_linear(
    np.moveaxis, lambda g, ans, a, source, destination: np.moveaxis(g, destination, source)))
define(np.expand_dims, trace=_linear(np.expand_dims, _to_shape_of))
define(np.squeeze, trace=_linear(np.squeeze, _to_shape_of))
define(np.broadcast_to, trace=_linear(
    np.broadcast_to, lambda g, ans, a, shape, subok=False: unbroadcast(g, np.shape(a))))
define(np.flip, trace=_linear(np.flip, lambda g, ans, m, axis=None: np.flip(g, axis)))
define(np.atleast_1d, trace=lambda *arrays: _atleast(arrays, 1))
define(np.atleast_2d, trace=lambda *arrays: _atleast(arrays, 2))


def _atleast(arrays, ndim):
    out = tuple(_at_least(a, ndim) for a in arrays)
    return out[0] if len(out) == 1 else out


def _at_least(a, ndim):
    shape = np.shape(unbox(a))
    if len(shape) >= ndim:
        return a
    # NumPy's rules: a scalar becomes (1,)*ndim, a vector (n,) becomes (1, n).
    return np.reshape(a, (1,) * (ndim - len(shape)) + shape)


@_register(np.copy)
def _copy(a, order="K", subok=False):
    return a                            # boxes are immutable: sharing is a copy


@_register(np.ndarray.astype)
def _astype(a, dtype, order="K", casting="unsafe", subok=True, copy=True):
    kind = np.dtype(dtype).kind
    if kind in "iub":
        return constant(_cast, (a, dtype))                  # an int or bool: a constant
    if kind != "f":
        raise NotImplementedError(f"dualbcast: casting a traced value to {np.dtype(dtype)} "
                                  f"has no gradient rule (only float dtypes are traced)")
    # The cotangent keeps flowing in the wider dtype; gradients are cast to each
    # argument's dtype when they are handed back.
    return apply(_cast, (lambda g, ans, a, dtype: g,), (a, dtype))


def _cast(value, dtype):
    if isinstance(value, Traced):   # traced by an enclosing trace (or vmap): its rule
        return value.astype(dtype)
    return np.asarray(value).astype(dtype)[()] if np.ndim(value) == 0 else value.astype(dtype)


# ------------------------------------------------------------------ indexing

_INDEX_PARTS = frozenset({int, slice, type(None), type(Ellipsis), np.ndarray, list})


@_register(operator.getitem)
def _getitem(a, index):
    parts = index if type(index) is tuple else (index,)
    for part in parts:
        if type(part) is Box or type(part) not in _INDEX_PARTS and isinstance(part, Traced):
            return _traced_index(a, index, parts)
    if is_dask_array(unbox(a)) and not _is_basic(parts):
        raise NotImplementedError("dualbcast: indexing a traced Dask array with index arrays "
                                  "or None has no lazy gradient rule (integers, slices and "
                                  "Ellipsis have)")
    if type(index) is tuple:            # index arrays are saved for the backward pass
        tape = a.tape if type(a) is Box else None
        index = tuple(keep(tape, part) for part in index)
    elif type(index) is np.ndarray and index.dtype.kind in "iu":
        return apply(take_rows, (take_rows_vjp, None), (a, index))
    return apply(operator.getitem, (_getitem_vjp, None), (a, index))


def take_rows(a, index):
    """``a[index]``, an integer array ``index``: ``np.take`` along the first axis, the
    same copy 2-4x faster (NumPy's advanced indexing goes through its general
    machinery: 12440 rows of 3 from 512, 85 µs against 22 µs), for a C-contiguous
    ``a``, whose rows both copy in C order (``a[index]`` keeps another layout's order
    within the rows, which a sum of the result then follows)."""
    if type(a) is np.ndarray and a.ndim and a.flags.c_contiguous \
            and not isinstance(index, Traced):      # (np.take dispatches on a only)
        return np.take(a, index, axis=0)
    return _indexed(a, index)


def take_rows_vjp(g, ans, a, index):
    return _getitem_vjp(g, ans, a, index)


def _traced_index(a, index, parts):
    """``a[index]`` with an index traced by a ``dualbcast.jit`` trace (an integer
    array argument is an input of the program) or batched by a vmap (an index per
    example): recorded with the index as an operand no gradient flows through, so that
    a replay gathers with the index it is given."""
    if any(isinstance(p, Traced) and p.dtype.kind not in "iub" for p in parts):
        raise TypeError("indexing with a traced float value: indices are integers or "
                        "booleans, which are never differentiated; use db.stop_gradient(i) "
                        "or an int")
    if type(index) is not tuple:
        if index.dtype.kind in "iu":
            return apply(take_rows, (take_rows_vjp, None), (a, index))
        return apply(operator.getitem, (_getitem_vjp, None), (a, index))
    return apply(_getitem_by_parts, (_getitem_by_parts_vjp,) + (None,) * len(parts),
                 (a, *parts))


def _getitem_by_parts(a, *parts):
    return _indexed(a, parts)


def _indexed(a, index):
    """``a[index]``; an index with a vmap's value among its parts taken by its trace
    (an array cannot be indexed by an object NumPy does not know)."""
    for part in (index if type(index) is tuple else (index,)):
        if type(part) is not Box and isinstance(part, Traced):
            return part.trace.function(operator.getitem, (a, index), {})
    return a[index]


def _getitem_by_parts_vjp(g, ans, a, *parts):
    return _getitem_vjp(g, ans, a, parts)


def _getitem_vjp(g, ans, a, index):
    if is_lazy(a) or is_lazy(g) and _is_basic(index if type(index) is tuple else (index,)):
        # Over Dask arrays: zeros with g written in at the index, a Dask graph (index
        # arrays, which may repeat a position, were refused on a Dask array; with a
        # NumPy one the sparse cotangent below is refused by the backward pass).
        dense = np.zeros_like(a) if is_lazy(a) else np.zeros_like(g, shape=np.shape(a),
                                                                  dtype=np.result_type(a))
        dense[index] = g
        return dense
    # Sparse: added in place into the parent's one gradient buffer by the backward pass.
    return SparseCotangent(index, g, _has_integer_array(index))


def _is_basic(parts):
    """Whether an index (its parts) takes integers, slices and Ellipsis only."""
    return all(part is Ellipsis or isinstance(part, (int, np.integer, slice)) for part in parts)


def _has_integer_array(index):
    # Anything but ints, slices, None, Ellipsis and boolean arrays (integer arrays,
    # lists, nested tuples) is an advanced index that may repeat a position: those
    # contributions must add up (np.add.at), not overwrite each other.
    for part in (index if type(index) is tuple else (index,)):
        if part is None or part is Ellipsis or isinstance(part, (int, np.integer, slice)):
            continue
        if isinstance(part, np.ndarray) and part.dtype.kind == "b":
            continue
        return True
    return False


# ------------------------------------------------------------------ joining

def _concatenate_vjp(i, g, ans, *arrays, axis=0, **_):
    if axis is None:
        start = sum(np.size(a) for a in arrays[:i])
        return g[start:start + np.size(arrays[i])].reshape(np.shape(arrays[i]))
    axis = axis % np.ndim(ans)
    start = sum(np.shape(a)[axis] for a in arrays[:i])
    window = (slice(None),) * axis + (slice(start, start + np.shape(arrays[i])[axis]),)
    return g[window]


def _stack_vjp(i, g, ans, *arrays, axis=0, **_):
    return g[(slice(None),) * (axis % np.ndim(ans)) + (i,)]


def _joining(join, vjp):
    """The rule of ``join(arrays, axis, dtype, casting)``: a record with one traced
    input per array, whose cotangent is its slice of the output's."""
    name = join.__name__

    @functools.lru_cache(maxsize=None)
    def vjps(n):
        return tuple(functools.partial(vjp, i) for i in range(n))

    def joined(*arrays, **kwargs):
        return join(arrays, **kwargs)

    def rule(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
        no_out(name, out)
        arrays = tuple(arrays)
        kwargs = {"axis": axis, "dtype": dtype, "casting": casting}
        if dtype is None and casting == "same_kind" \
                and any(is_dask_array(unbox(a)) for a in arrays):
            kwargs = {"axis": axis}                 # (Dask's take no dtype= or casting=)
        if constant_dtype(name, dtype):
            return constant(join, (list(arrays),), kwargs)
        return apply(joined, vjps(len(arrays)), arrays, kwargs)
    define(join, trace=rule)
    define(joined, linear=True)               # (what the rule records)
    return rule


_concatenate_rule = _joining(np.concatenate, _concatenate_vjp)
_joining(np.stack, _stack_vjp)


@_register(np.vstack)
def _vstack_rule(tup, *, dtype=None, casting="same_kind"):
    return _concatenate_rule([_at_least(a, 2) for a in tup], axis=0, dtype=dtype,
                             casting=casting)


@_register(np.hstack)
def _hstack_rule(tup, *, dtype=None, casting="same_kind"):
    arrays = [_at_least(a, 1) for a in tup]
    axis = 0 if arrays and np.ndim(unbox(arrays[0])) == 1 else 1
    return _concatenate_rule(arrays, axis=axis, dtype=dtype, casting=casting)


# ------------------------------------------------------------------ selection

def _where_vjp_x(g, ans, condition, x, y):
    return unbroadcast(np.where(condition, g, np.zeros((), np.result_type(g))), np.shape(x))


def _where_vjp_y(g, ans, condition, x, y):
    return unbroadcast(np.where(condition, np.zeros((), np.result_type(g)), g), np.shape(y))


@_register(np.where)
def _where_rule(condition, x=None, y=None):
    if x is None and y is None:
        return constant(np.where, (condition,))     # indices: a constant
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    return apply(np.where, (None, _where_vjp_x, _where_vjp_y), (condition, x, y))


@_register(np.clip)
def _clip_rule(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    # clip = minimum(maximum(a, low), high): the same values as np.clip, and at a bound
    # the cotangent is shared half and half, as np.maximum/np.minimum share it.  At a
    # tie of 0.0 and -0.0 NumPy's maximum gives its second operand; np.clip keeps ``a``
    # against a number bound (clip(-0.0, 0.0, 1.0) is -0.0) and gives an array bound:
    # the operands in that order.
    no_out("clip", out)
    if kwargs:
        raise NotImplementedError(f"dualbcast: numpy.clip on traced values does not support "
                                  f"the keywords {sorted(kwargs)}")
    low = a_min if min is None else min
    high = a_max if max is None else max
    if low is not None:
        a = np.maximum(low, a) if np.ndim(low) == 0 else np.maximum(a, low)
    if high is not None:
        a = np.minimum(high, a) if np.ndim(high) == 0 else np.minimum(a, high)
    return a


# Forward mode: each of these is linear in its traced arguments (np.where in x and y).
define(np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis, np.expand_dims, np.squeeze,
       np.broadcast_to, np.flip, _cast, operator.getitem, np.where, _getitem_by_parts, take_rows,
       linear=True)


# Results that depend on traced values but not differentiably (indices, masks, rounding,
# shapes): constants.  The shape-only ones need no check when a program is replayed.
_SHAPE_ONLY = {
    np.shape, np.ndim, np.size, np.result_type, np.zeros_like, np.ones_like, np.empty_like,
    np.iscomplexobj, np.isrealobj,      # (not full_like: its fill value may be traced)
}
for _func in (np.shape, np.ndim, np.size, np.result_type, np.argmax, np.argmin, np.argsort,
              np.nonzero, np.flatnonzero, np.count_nonzero, np.isclose, np.allclose,
              np.array_equal, np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.any,
              np.all, np.sign, np.round, np.around, np.floor, np.ceil, np.isnan, np.isfinite,
              np.isinf, np.searchsorted, np.iscomplexobj, np.isrealobj):
    define(_func, constant=True, shape_only=_func in _SHAPE_ONLY)
