"""Batching rules of indexing: ``x[index]``, ``take``, ``take_along_axis``,
``searchsorted``, and the dense cotangents of indexing and of ``np.diagonal`` (see
:mod:`.batching`)."""
import math
import operator

import numpy as np

from ..core.registry import define
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
    return [] if _adjacent(advanced) else advanced


def _adjacent(positions):
    """Whether the index arrays at ``positions`` stand side by side (NumPy then puts
    their axes where they stand, else first)."""
    return positions == list(range(positions[0], positions[-1] + 1))


def _is_mask(part):
    return getattr(part, "dtype", None) == np.bool_


def _batched_gather(size, x, bx, parts, flags):
    """``x[index]`` where index arrays (or integers) of the index differ per example:
    one gather, the batch's rows a leading index array beside them (JAX's batched
    gather), its axes then moved where NumPy puts one example's."""
    if len(parts) == 1 and not bx and not _is_mask(parts[0]):
        return x[parts[0]]                      # x[i], x the same for every example
    x = _lifted(size, x, bx)
    index, arrays, at = _batched_index(size, parts, flags, _ndim(x, True))
    out = gather(x, index)
    if at:
        out = np.moveaxis(out, range(1, 1 + arrays), range(1 + at, 1 + at + arrays))
    return out


def _batched_index(size, parts, flags, ndim):
    """The index of all examples at once for one example's ``parts``, some batched:
    ``(index, k, at)``, where the gather puts the ``k`` axes of the index arrays
    right after the batch axis, and one example's has them at axis ``at``."""
    if any(flag and _is_mask(part) for part, flag in zip(parts, flags)):
        raise NotImplementedError("dualbcast.vmap: indexing with a batched boolean mask "
                                  "(the result's shape would differ per example); use "
                                  "np.where(mask, x, 0) or np.take_along_axis")
    parts, flags = _index_arrays_expanded(parts, flags, ndim)
    advanced = [i for i, part in enumerate(parts)
                if not isinstance(part, (slice, type(None)))]
    shape = np.broadcast_shapes(*(_shape(parts[i])[1:] if flags[i] else _shape(parts[i])
                                  for i in advanced))
    rows = np.arange(size).reshape((size,) + (1,) * len(shape))
    index = (rows,) + tuple(
        np.reshape(part, (size,) + (1,) * (len(shape) + 1 - _ndim(part)) + _shape(part)[1:])
        if flag else part for part, flag in zip(parts, flags))
    # (side by side, after the axes of the slices and Nones before them)
    return index, len(shape), advanced[0] if _adjacent(advanced) else 0


def _index_arrays_expanded(parts, flags, ndim):
    """An index's parts with its Ellipsis as full slices, lists as arrays and constant
    boolean masks as their integer arrays (``m.nonzero()``, as NumPy takes them)."""
    out, out_flags = [], []
    for part, flag in zip(parts, flags):
        if type(part) is list:
            part = np.asarray(part)
        if type(part) is bool or _is_mask(part) and not _shape(part)[flag:]:
            raise NotImplementedError("dualbcast.vmap: a boolean scalar (x[True, i]) in an "
                                      "index with batched index arrays")
        if not flag and _is_mask(part):
            arrays = np.nonzero(part)
            out += arrays
            out_flags += [False] * len(arrays)
        else:
            out.append(part)
            out_flags.append(flag)
    consumed = sum(part is not None and part is not Ellipsis for part in out)
    ellipses = [at for at, part in enumerate(out) if part is Ellipsis]
    if ellipses:
        at = ellipses[0]
        out[at:at + 1] = [slice(None)] * (ndim - consumed)
        out_flags[at:at + 1] = [False] * (ndim - consumed)
    return out, out_flags


define(operator.getitem, batch=getitem, itemwise=(tuple,))


def take(size, func, args, batched, axis=None, **kwargs):
    (x, indices), (bx, bi) = args[:2], batched[:2]
    axis = args[2] if len(args) > 2 else axis
    if bi and bx:                   # x[..., i] with each example's x and i
        if axis is None:
            x, axis = _flat(x), 0
        axis = axis % max(_ndim(x, True), 1)
        n, mode = _shape(x)[1 + axis], kwargs.get("mode", "raise")
        if mode == "wrap":
            indices = indices % n
        elif mode == "clip":
            indices = np.clip(indices, 0, n - 1)
        return _batched_gather(size, x, True, (slice(None),) * axis + (indices,),
                               (False,) * axis + (True,))
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


def unravel_index(size, func, args, batched, **kwargs):
    if any(batched[1:]):
        raise NotImplementedError("dualbcast.vmap: numpy.unravel_index with the shape "
                                  "batched")
    return np.unravel_index(*args, **kwargs)      # elementwise in the indices


define(np.take, batch=take)
define(np.unravel_index, batch=unravel_index)
define(np.take_along_axis, batch=take_along_axis)
define(np.searchsorted, batch=searchsorted)


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
    """The dense cotangent of ``x[index]``, index arrays of it batched (``x``
    unbatched or batched), added up by one scatter of all examples: for ``x[i]``, ``i``
    rows, every example's rows offset into one flat buffer of all examples' rows (the
    compiled scatter); else at the gather's index of all examples (np.add.at's)."""
    flags = flags if type(flags) is tuple else (flags,)
    if _rows(parts, len(shape)) is None or any(flags[1:]):
        index, arrays, at = _batched_index(size, parts, flags, len(shape))
        if at:
            values = np.moveaxis(values, range(1 + at, 1 + at + arrays),
                                 range(1, 1 + arrays))
        return scattered(values, index, True, (size,) + tuple(shape), dtype)
    rows, n0 = parts[0], shape[0]
    index_shape = _shape(rows)[1:]
    offsets = np.reshape(np.arange(size) * n0, (size,) + (1,) * len(index_shape))
    flat = np.reshape(np.where(rows < 0, rows + n0, rows) + offsets, -1)
    rest = tuple(shape[1:])
    total = scattered(np.reshape(values, (size * math.prod(index_shape),) + rest), flat,
                      True, (size * n0,) + rest, dtype)
    return np.reshape(total, (size,) + tuple(shape))


define(scattered, batch=scattered_rule, itemwise=(tuple,))


def embedded_diagonal(size, func, args, batched, shape, offset, axis1, axis2):
    """The cotangent of ``np.diagonal`` (the diagonal written into zeros), for every
    example: the axes past the batch axis."""
    ndim = len(shape)
    return func(_lifted(size, args[0], batched[0]), (size,) + tuple(shape), offset,
                _axis(axis1, ndim), _axis(axis2, ndim))


define(arrays_rules._embedded_diagonal, batch=embedded_diagonal)
