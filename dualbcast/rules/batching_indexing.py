"""Batching rules of indexing: ``x[index]``, ``take``, ``take_along_axis``,
``searchsorted``, and the dense cotangents of indexing and of ``np.diagonal`` (see
:mod:`.batching`)."""
import math
import operator

import numpy as np

from ..core.registry import defbatch
from ..core.tape import Traced
from . import arrays as arrays_rules
from .batching import _any, _axis, _flat, _lifted, _ndim, _shape
from .common import gather, scattered


# ---------------------------------------------------------------------- indexing

def getitem(size, func, args, batched):
    (x, index), (bx, bi) = args, batched
    parts = index if type(index) is tuple else (index,)
    flags = bi if type(index) is tuple else (bi,)
    if any(flags):
        return _batched_gather(size, x, bx, parts, flags)
    x = _lifted(size, x, bx)
    rows = _rows(parts, _ndim(x, True))
    if type(rows) is np.ndarray:    # x[i], i an integer array: a gather along axis 1
        return np.take(x, rows, axis=1)
    out = gather(x, (slice(None),) + parts)     # (a traced index: the box's rule)
    advanced = _separated_arrays(parts)
    if advanced:
        # NumPy puts the axes of index arrays separated by a slice first, before the
        # batch axis
        shapes = [(int(np.count_nonzero(parts[i])),) if _is_mask(parts[i]) else
                  np.shape(parts[i]) for i in advanced]
        return np.moveaxis(out, len(np.broadcast_shapes(*shapes)), 0)
    return out


def _rows(parts, ndim):
    """The integer array ``i`` when an index of one example is ``i``, ``(i, :, ...)`` or
    ``(i, ...)``: rows of the example's first axis (``np.take``, and a scatter into the
    rows, are 2-5x faster than NumPy's general indexing)."""
    first = parts[0] if parts else None
    if not (type(first) is np.ndarray or isinstance(first, Traced)) or ndim == 0 \
            or first.dtype.kind not in "iu":
        return None
    rest = parts[1:]
    if sum(part is Ellipsis for part in rest) > 1 or len(rest) > ndim - 1 and \
            Ellipsis not in rest:
        return None
    if not all(part is Ellipsis or type(part) is slice and part == slice(None)
               for part in rest):
        return None
    return first


def _separated_arrays(parts):
    """The positions of the advanced parts of an index (arrays, and integers beside
    them) when there are arrays and a slice, None or Ellipsis separates them."""
    if all(isinstance(part, (slice, type(None), type(Ellipsis), int, np.integer))
           for part in parts):
        return []
    advanced = [i for i, part in enumerate(parts)
                if not isinstance(part, (slice, type(None), type(Ellipsis)))]
    return advanced if advanced != list(range(advanced[0], advanced[-1] + 1)) else []


def _is_mask(part):
    return getattr(part, "dtype", None) == np.bool_


def _batched_gather(size, x, bx, parts, flags):
    """``x[i]`` where the index ``i`` (one integer array, the first part) differs per
    example."""
    if len(parts) != 1 or not flags[0] or _is_mask(parts[0]):
        raise NotImplementedError("dualbcast.vmap: indexing with a batched index has a "
                                  "batching rule for one integer index array only "
                                  "(x[i], i batched)")
    index = parts[0]
    if not bx:
        return x[index]
    rows = np.arange(size).reshape((size,) + (1,) * (_ndim(index, True)))
    return x[rows, index]


defbatch(getitem, operator.getitem)


def take(size, func, args, batched, axis=None, **kwargs):
    (x, indices), (bx, bi) = args[:2], batched[:2]
    axis = args[2] if len(args) > 2 else axis
    if bi and bx:
        raise NotImplementedError("dualbcast.vmap: numpy.take with both the array and "
                                  "the indices batched")
    if bi:
        if axis is None:
            return np.take(x, indices, **kwargs)
        axis = axis % max(_ndim(x), 1)
        return np.moveaxis(np.take(x, indices, axis=axis, **kwargs), axis, 0)
    if axis is None:
        return np.take(_flat(x), indices, axis=1, **kwargs)
    return np.take(x, indices, axis=_axis(axis, _ndim(x, True)), **kwargs)


def take_along_axis(size, func, args, batched, axis=None):
    (x, indices), (bx, bi) = args[:2], batched[:2]
    axis = args[2] if len(args) > 2 else axis
    x, indices = _lifted(size, x, bx), _lifted(size, indices, bi)
    if axis is None:
        return np.take_along_axis(_flat(x), _flat(indices), axis=1)
    return np.take_along_axis(x, indices, axis=_axis(axis, _ndim(x, True)))


def searchsorted(size, func, args, batched, **kwargs):
    if batched[0]:
        raise NotImplementedError("dualbcast.vmap: numpy.searchsorted with the sorted "
                                  "array batched")
    return np.searchsorted(*args, **kwargs)


defbatch(take, np.take)
defbatch(take_along_axis, np.take_along_axis)
defbatch(searchsorted, np.searchsorted)


def scattered_rule(size, func, args, batched):
    """The dense cotangent of indexing (:func:`.common.scattered`): the values added
    into zeros at the index, for every example."""
    values, index, repeats, shape, dtype = args
    values = _lifted(size, values, batched[0])
    parts = index if type(index) is tuple else (index,)
    if _any(batched[1:]):
        return _scattered_per_example(size, values, parts, batched[1], shape, dtype)
    if _rows(parts, len(shape)) is not None:
        # Rows of each example: the batch axis moved behind the rows, so that the rows
        # of every example add up in one compiled scatter (in index order, as the
        # unbatched scatter adds them), then moved back in front.
        total = scattered(np.moveaxis(values, 0, 1), index, repeats,
                          (shape[0], size) + tuple(shape[1:]), dtype)
        return np.moveaxis(total, 1, 0)
    advanced = _separated_arrays(parts)
    if advanced:
        # (the gather put the batch axis behind the index arrays' axes: back there)
        shapes = [(int(np.count_nonzero(parts[i])),) if _is_mask(parts[i]) else
                  np.shape(parts[i]) for i in advanced]
        values = np.moveaxis(values, 0, len(np.broadcast_shapes(*shapes)))
    return scattered(values, (slice(None),) + parts, repeats, (size,) + tuple(shape), dtype)


def _scattered_per_example(size, values, parts, flags, shape, dtype):
    """The dense cotangent of ``x[i]``, ``i`` an integer array of each example's rows
    (``x`` unbatched or batched): every example's rows offset into one flat buffer of
    all examples' rows, added up by one compiled scatter."""
    flags = flags if type(flags) is tuple else (flags,)
    if _rows(parts, len(shape)) is None or any(flags[1:]):
        raise NotImplementedError("dualbcast.vmap: a gradient of indexing with a batched "
                                  "index has a batching rule for x[i] only (one integer "
                                  "array i of rows)")
    rows, n0 = parts[0], shape[0]
    index_shape = _shape(rows)[1:]
    offsets = np.reshape(np.arange(size) * n0, (size,) + (1,) * len(index_shape))
    flat = np.reshape(np.where(rows < 0, rows + n0, rows) + offsets, -1)
    rest = tuple(shape[1:])
    total = scattered(np.reshape(values, (size * math.prod(index_shape),) + rest), flat,
                      True, (size * n0,) + rest, dtype)
    return np.reshape(total, (size,) + tuple(shape))


defbatch(scattered_rule, scattered)


def embedded_diagonal(size, func, args, batched, shape, offset, axis1, axis2):
    """The cotangent of ``np.diagonal`` (the diagonal written into zeros), for every
    example: the axes past the batch axis."""
    ndim = len(shape)
    return func(_lifted(size, args[0], batched[0]), (size,) + tuple(shape), offset,
                _axis(axis1, ndim), _axis(axis2, ndim))


defbatch(embedded_diagonal, arrays_rules._embedded_diagonal)
