"""Batching rules: NumPy's functions on values batched by ``vmap`` -- elementwise
functions, reductions, shapes, joining (products and linear algebra:
:mod:`.batching_products`; indexing: :mod:`.batching_indexing`).

Each rule gets the arguments with every batched value as its stack of examples along
axis 0 (see :mod:`dualbcast.core.batching`) and computes the function for every example
at once: elementwise operations align each example's axes to the right (as NumPy
broadcasts one example's arguments), reductions and shape operations move their axes
past the batch axis, products add the batch as a leading index.  An unbatched argument
is the same for every example; where a rule needs it batched it is broadcast (a view).

The rules compute with NumPy on the stacks, which may themselves be values of other
traces (a ``grad``'s boxes): those traces record what the rules compute.
"""
import math
import operator

import numpy as np

from ..core.box import _as_kind
from ..core.registry import define
from ..core.tape import Traced
from .common import nan_safe_product, nan_safe_sum, where_value


# ---------------------------------------------------------------------- helpers

def _shape(x):
    shape = getattr(x, "shape", None)
    return np.shape(x) if shape is None else tuple(shape)


def _ndim(x, batched=False):
    """The number of axes of one example of ``x``."""
    return len(_shape(x)) - (1 if batched else 0)


def _aligned(x, batched, ndim):
    """A batched ``x`` with each example's axes at the right of ``ndim`` axes (ones
    inserted after the batch axis), as NumPy aligns one example's operands."""
    if not batched:
        return x
    shape = _shape(x)
    missing = ndim - (len(shape) - 1)
    if missing <= 0:
        return x
    return np.reshape(x, shape[:1] + (1,) * missing + shape[1:])


def _lifted(size, x, batched):
    """``x`` with a batch axis: an unbatched value broadcast over it (a view)."""
    if batched:
        return x
    return np.broadcast_to(x, (size,) + _shape(x))


def _axis(axis, ndim):
    """One example's ``axis`` (of ``ndim`` axes) as the batched value's."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim + 1


def _axes(axis, ndim):
    """``axis`` (None: every axis; an int; a tuple) of one example as the batched
    value's."""
    if axis is None:
        return tuple(range(1, ndim + 1))
    if type(axis) in (tuple, list):
        return tuple(_axis(a, ndim) for a in axis)
    return _axis(axis, ndim)


def _flat(x):
    """Each example flattened: ``(batch, size)``."""
    shape = _shape(x)
    return np.reshape(x, (shape[0], math.prod(shape[1:])))


def _any(flags):
    """Whether any of ``flags`` (a bool per argument, a tuple of them for a list or
    tuple argument) says batched."""
    return any(b if type(b) is bool else any(b) for b in flags)


def _only_first(func, batched, what="its first argument"):
    if _any(batched[1:]):
        raise NotImplementedError(f"dualbcast.vmap: {_name(func)} is batched over {what} "
                                  f"only (another argument is batched here)")


def _name(func):
    return f"numpy.{getattr(func, '__name__', func)}"


# ---------------------------------------------------------------------- elementwise

_ARRAY_LIKE = (float, int, bool, list, tuple)     # (a list is an array constant)


def elementwise(size, func, args, batched, **kwargs):
    """A function applied elementwise with broadcasting (ufuncs, ``np.where``,
    ``np.clip``, the rules' own elementwise helpers)."""
    ndim = max((_ndim(v, b) for v, b in zip(args, batched)
                if b or hasattr(v, "shape") or type(v) in _ARRAY_LIKE), default=0)
    return func(*(_aligned(v, b, ndim) for v, b in zip(args, batched)), **kwargs)


define(np.ufunc, nan_safe_product, nan_safe_sum, where_value, np.isclose, np.round, np.around,
       batch=elementwise)


def astype(size, func, args, batched, **kwargs):
    return args[0].astype(*args[1:], **kwargs)      # (the stack may be a tape's box)


define(np.ndarray.astype, batch=astype)


def same_stack(size, func, args, batched, **kwargs):
    """A conversion between kinds of one example's value (a float, a NumPy scalar, a
    0-d array): the stack of examples is an array whatever they are."""
    return args[0]


define(_as_kind, batch=same_stack)


def where(size, func, args, batched, **kwargs):
    if len(args) + len(kwargs) != 3:
        raise NotImplementedError("dualbcast.vmap: numpy.where with one argument (the "
                                  "indices of a mask: a shape per example) has no batching "
                                  "rule")
    return elementwise(size, func, args, batched, **kwargs)


define(np.where, batch=where)
define(np.clip, batch=elementwise)


# ---------------------------------------------------------------------- reductions

def reduction(size, func, args, batched, axis=None, **kwargs):
    """``func(x, axis=...)`` reducing over one example's axes."""
    _only_first(func, batched)
    x, rest = args[0], list(args[1:])
    if rest:
        axis, rest = rest[0], rest[1:]
    return func(x, _axes(axis, _ndim(x, True)), *rest, **kwargs)


def _flattening(keyword="axis", default=None):
    """A function whose ``axis=None`` flattens the example (argmax, cumsum, sort...)."""
    def rule(size, func, args, batched, **kwargs):
        _only_first(func, batched)
        x, rest = args[0], list(args[1:])
        axis = rest.pop(0) if rest else kwargs.pop(keyword, default)
        if axis is None:
            out = func(_flat(x), *rest, **{keyword: 1}, **kwargs)
            if kwargs.get("keepdims"):      # (argmax: every axis of the example kept)
                out = np.reshape(out, (_shape(x)[0],) + (1,) * _ndim(x, True))
            return out
        return func(x, *rest, **{keyword: _axis(axis, _ndim(x, True))}, **kwargs)
    return rule


define(np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin, np.var, np.std, np.any, np.all,
       np.count_nonzero, np.nansum, np.nanmean, np.nanmax, np.nanmin, batch=reduction)
define(np.argmax, np.argmin, np.cumsum, np.cumprod, batch=_flattening())
define(np.sort, np.argsort, batch=_flattening(default=-1))


def ufunc_reduce(size, func, args, batched, ufunc, axis=0, **kwargs):
    _only_first(func, batched)
    x, rest = args[0], list(args[1:])
    if rest:
        axis, rest = rest[0], rest[1:]
    return ufunc.reduce(x, _axes(axis, _ndim(x, True)), *rest, **kwargs)


def ufunc_accumulate(size, func, args, batched, ufunc, axis=0, **kwargs):
    _only_first(func, batched)
    x = args[0]
    return ufunc.accumulate(x, axis=_axis(axis, _ndim(x, True)), **kwargs)


def ufunc_outer(size, func, args, batched, ufunc, **kwargs):
    """``ufunc.outer(a, b)``: each example's axes of ``a``, then of ``b``."""
    (a, b), (ba, bb) = args, batched
    na, nb = _ndim(a, ba), _ndim(b, bb)
    a = np.reshape(a, _shape(a) + (1,) * nb)
    if bb:
        b = np.reshape(b, _shape(b)[:1] + (1,) * na + _shape(b)[1:])
    return ufunc(a, b, **kwargs)


define((np.ufunc, "reduce"), batch=ufunc_reduce)
define((np.ufunc, "accumulate"), batch=ufunc_accumulate)
define((np.ufunc, "outer"), batch=ufunc_outer)


# ---------------------------------------------------------------------- shapes

def _first_and_rest(func, args, batched):
    _only_first(func, batched)
    return args[0], _ndim(args[0], True), list(args[1:])


def reshape(size, func, args, batched, order="C", **kwargs):
    x, ndim, rest = _first_and_rest(func, args, batched)
    shape = rest[0] if rest else kwargs.pop("shape", kwargs.pop("newshape", None))
    if order != "C":
        raise NotImplementedError(f"dualbcast.vmap: numpy.reshape with order={order!r}")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if -1 in shape:             # (resolved per example: an empty batch cannot say)
        example = _shape(x)[1:]
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or math.prod(example) % known:
            raise ValueError(f"cannot reshape an array of shape {example} into shape "
                             f"{shape}")
        shape = tuple(math.prod(example) // known if n == -1 else n for n in shape)
    return np.reshape(x, (_shape(x)[0],) + shape)


def ravel(size, func, args, batched, order="C"):
    x, ndim, rest = _first_and_rest(func, args, batched)
    if (rest[0] if rest else order) != "C":
        raise NotImplementedError("dualbcast.vmap: numpy.ravel with an order other than 'C'")
    return _flat(x)


def transpose(size, func, args, batched, axes=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    axes = rest[0] if rest else axes
    if axes is None:
        return np.transpose(x, (0,) + tuple(range(ndim, 0, -1)))
    return np.transpose(x, (0,) + _axes(tuple(axes), ndim))


def swapaxes(size, func, args, batched, axis1=None, axis2=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    axis1, axis2 = (rest + [axis1, axis2])[:2] if rest else (axis1, axis2)
    return np.swapaxes(x, _axis(axis1, ndim), _axis(axis2, ndim))


def moveaxis(size, func, args, batched, source=None, destination=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    source, destination = (rest + [source, destination])[:2] if rest else (source, destination)
    one = isinstance(source, (int, np.integer))
    source = _axes((source,) if one else tuple(source), ndim)
    destination = _axes((destination,) if one else tuple(destination), ndim)
    return np.moveaxis(x, source, destination)


def squeeze(size, func, args, batched, axis=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    axis = rest[0] if rest else axis
    if axis is None:
        axis = tuple(i for i, n in enumerate(_shape(x)[1:]) if n == 1)
    return np.squeeze(x, _axes(axis, ndim) if type(axis) in (tuple, list) else
                      (_axis(axis, ndim),))


def expand_dims(size, func, args, batched, axis=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    axis = rest[0] if rest else axis
    axes = tuple(axis) if type(axis) in (tuple, list) else (axis,)
    return np.expand_dims(x, _axes(axes, ndim + len(axes)))


def broadcast_to(size, func, args, batched, shape=None, **kwargs):
    x, ndim, rest = _first_and_rest(func, args, batched)
    shape = rest[0] if rest else shape
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return np.broadcast_to(_aligned(x, True, len(shape)), (_shape(x)[0],) + shape, **kwargs)


def atleast(size, func, args, batched):
    least = 1 if func is np.atleast_1d else 2
    results = []
    for x, b in zip(args, batched):
        x = _lifted(size, x, b)
        ndim = _ndim(x, True)
        if ndim < least:        # (NumPy's: a scalar a 1x1, a vector a row)
            shape = _shape(x)
            x = np.reshape(x, shape[:1] + (1,) * (least - ndim) + shape[1:])
        results.append(x)
    return results[0] if len(results) == 1 else tuple(results)


def copy(size, func, args, batched, **kwargs):
    _only_first(func, batched)
    return args[0]


def flip(size, func, args, batched, axis=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    return np.flip(x, _axes(rest[0] if rest else axis, ndim))


def roll(size, func, args, batched, shift=None, axis=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    shift = rest.pop(0) if rest else shift
    axis = rest.pop(0) if rest else axis
    if axis is None:
        return np.reshape(np.roll(_flat(x), shift, axis=1), _shape(x))
    return np.roll(x, shift, axis=_axes(axis, ndim))


def diff(size, func, args, batched, n=1, axis=-1, **kwargs):
    x, ndim, rest = _first_and_rest(func, args, batched)
    n = rest.pop(0) if rest else n
    axis = rest.pop(0) if rest else axis
    for key in ("prepend", "append"):       # (an array beside every example: lifted)
        if key in kwargs and np.ndim(kwargs[key]) > 0:
            kwargs[key] = _lifted(size, kwargs[key], False)
    return np.diff(x, n, _axis(axis, ndim), **kwargs)


def pad(size, func, args, batched, pad_width=None, mode="constant", **kwargs):
    x, ndim, rest = _first_and_rest(func, args, batched)
    pad_width = rest.pop(0) if rest else pad_width
    mode = rest.pop(0) if rest else mode
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.intp), (ndim, 2)).tolist()
    for key in ("constant_values", "end_values", "stat_length"):
        # per axis, (before, after) pairs: a pair for the batch axis too (it pads nothing)
        value = kwargs.get(key)
        if value is not None and np.ndim(value) != 0:
            if isinstance(value, Traced):
                raise NotImplementedError(f"dualbcast.vmap: numpy.pad with a traced "
                                          f"{key} per axis")
            value = np.broadcast_to(np.asarray(value), (ndim, 2))
            kwargs[key] = np.concatenate([value[:1], value])
    return np.pad(x, [[0, 0]] + widths, mode, **kwargs)


def tile(size, func, args, batched, reps=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    reps = rest[0] if rest else reps
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    total = max(ndim, len(reps))
    x = _aligned(x, True, total)
    return np.tile(x, (1,) + (1,) * (total - len(reps)) + reps)


def repeat(size, func, args, batched, repeats=None, axis=None):
    x, ndim, rest = _first_and_rest(func, args, batched)
    repeats = rest.pop(0) if rest else repeats
    axis = rest.pop(0) if rest else axis
    if axis is None:
        return np.repeat(_flat(x), repeats, axis=1)
    return np.repeat(x, repeats, axis=_axis(axis, ndim))


def matrix_part(size, func, args, batched, k=0):
    x, ndim, rest = _first_and_rest(func, args, batched)
    if ndim < 2:
        raise NotImplementedError(f"dualbcast.vmap: {_name(func)} of a 1-d example (it "
                                  f"builds a matrix) has no batching rule")
    return func(x, rest[0] if rest else k)


def diagonal(size, func, args, batched, offset=0, axis1=0, axis2=1, **kwargs):
    x, ndim, rest = _first_and_rest(func, args, batched)
    offset, axis1, axis2 = (rest + [offset, axis1, axis2][len(rest):])[:3]
    return func(x, offset, _axis(axis1, ndim), _axis(axis2, ndim), **kwargs)


define(np.reshape, batch=reshape)
define(np.ravel, batch=ravel)
define(np.transpose, batch=transpose)
define(np.swapaxes, batch=swapaxes)
define(np.moveaxis, batch=moveaxis)
define(np.squeeze, batch=squeeze)
define(np.expand_dims, batch=expand_dims)
define(np.broadcast_to, batch=broadcast_to)
define(np.atleast_1d, np.atleast_2d, batch=atleast)
define(np.copy, batch=copy)
define(np.flip, batch=flip)
define(np.roll, batch=roll)
define(np.diff, batch=diff)
define(np.pad, batch=pad)
define(np.tile, batch=tile)
define(np.repeat, batch=repeat)
define(np.tril, np.triu, batch=matrix_part)
define(np.diagonal, np.trace, batch=diagonal)


# ---------------------------------------------------------------------- joining

def _lifted_all(size, items, flags):
    return [_lifted(size, x, b) for x, b in zip(items, flags)]


def concatenate(size, func, args, batched, axis=0, **kwargs):
    items = _lifted_all(size, args[0], batched[0])
    axis = args[1] if len(args) > 1 else axis
    if axis is None:
        return np.concatenate([_flat(x) for x in items], axis=1, **kwargs)
    return np.concatenate(items, axis=_axis(axis, _ndim(items[0], True)), **kwargs)


def stack(size, func, args, batched, axis=0, **kwargs):
    items = _lifted_all(size, args[0], batched[0])
    axis = args[1] if len(args) > 1 else axis
    return np.stack(items, axis=_axis(axis, _ndim(items[0], True) + 1), **kwargs)


def hstack(size, func, args, batched, **kwargs):
    items = [atleast(size, np.atleast_1d, (x,), (True,))
             for x in _lifted_all(size, args[0], batched[0])]
    axis = 1 if _ndim(items[0], True) == 1 else 2
    return np.concatenate(items, axis=axis, **kwargs)


def vstack(size, func, args, batched, **kwargs):
    items = [atleast(size, np.atleast_2d, (x,), (True,))
             for x in _lifted_all(size, args[0], batched[0])]
    return np.concatenate(items, axis=1, **kwargs)


define(np.concatenate, batch=concatenate, itemwise=(list, tuple))
define(np.stack, batch=stack, itemwise=(list, tuple))
define(np.hstack, batch=hstack, itemwise=(list, tuple))
define(np.vstack, batch=vstack, itemwise=(list, tuple))
