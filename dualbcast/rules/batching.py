"""Batching rules: NumPy's functions on values batched by ``vmap``.

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
import string

import numpy as np

from ..core.batching import Unbatched
from ..core.registry import defbatch
from ..core.tape import Traced
from . import arrays as arrays_rules, linalg as linalg_rules
from .common import gather, nan_safe_product, nan_safe_sum, scattered, where_value
from ..core.box import _as_kind


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


defbatch(elementwise, np.ufunc, nan_safe_product, nan_safe_sum, where_value, np.isclose,
         np.round, np.around)


def astype(size, func, args, batched, **kwargs):
    return args[0].astype(*args[1:], **kwargs)      # (the stack may be a tape's box)


defbatch(astype, np.ndarray.astype)


def same_stack(size, func, args, batched, **kwargs):
    """A conversion between kinds of one example's value (a float, a NumPy scalar, a
    0-d array): the stack of examples is an array whatever they are."""
    return args[0]


defbatch(same_stack, _as_kind)


def where(size, func, args, batched, **kwargs):
    if len(args) + len(kwargs) != 3:
        raise NotImplementedError("dualbcast.vmap: numpy.where with one argument (the "
                                  "indices of a mask: a shape per example) has no batching "
                                  "rule")
    return elementwise(size, func, args, batched, **kwargs)


defbatch(where, np.where)
defbatch(elementwise, np.clip)


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


defbatch(reduction, np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin, np.var,
         np.std, np.any, np.all, np.count_nonzero, np.nansum, np.nanmean, np.nanmax,
         np.nanmin)
defbatch(_flattening(), np.argmax, np.argmin, np.cumsum, np.cumprod)
defbatch(_flattening(default=-1), np.sort, np.argsort)


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


defbatch(ufunc_reduce, (np.ufunc, "reduce"))
defbatch(ufunc_accumulate, (np.ufunc, "accumulate"))
defbatch(ufunc_outer, (np.ufunc, "outer"))


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


defbatch(reshape, np.reshape)
defbatch(ravel, np.ravel)
defbatch(transpose, np.transpose)
defbatch(swapaxes, np.swapaxes)
defbatch(moveaxis, np.moveaxis)
defbatch(squeeze, np.squeeze)
defbatch(expand_dims, np.expand_dims)
defbatch(broadcast_to, np.broadcast_to)
defbatch(atleast, np.atleast_1d, np.atleast_2d)
defbatch(copy, np.copy)
defbatch(flip, np.flip)
defbatch(roll, np.roll)
defbatch(diff, np.diff)
defbatch(pad, np.pad)
defbatch(tile, np.tile)
defbatch(repeat, np.repeat)
defbatch(matrix_part, np.tril, np.triu)
defbatch(diagonal, np.diagonal, np.trace)


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


defbatch(concatenate, np.concatenate)
defbatch(stack, np.stack)
defbatch(hstack, np.hstack)
defbatch(vstack, np.vstack)


# ---------------------------------------------------------------------- products

def matmul(size, func, args, batched, **kwargs):
    """``a @ b`` per example: a 1-d operand made a row (a) or a column (b), every
    example's stack axes aligned, the added axes dropped again."""
    (a, b), (ba, bb) = args[:2], batched[:2]
    na, nb = _ndim(a, ba), _ndim(b, bb)
    if na == 0 or nb == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    # One matrix product over the whole batch where the shapes allow (a stack of
    # matrix-vector products is a loop of small BLAS calls: 10x slower)
    if ba and not bb and na <= 2 and nb == 2:
        if na == 1:
            return np.matmul(a, b, **kwargs)                # (batch, n) @ (n, k)
        shape = _shape(a)
        rows = np.reshape(a, (shape[0] * shape[1], shape[2]))
        return np.reshape(np.matmul(rows, b, **kwargs), (shape[0], shape[1], _shape(b)[1]))
    if bb and not ba and na == 2 and nb == 1:
        return np.matmul(b, np.swapaxes(a, 0, 1), **kwargs)    # (batch, n) @ (n, m)
    if na == 1:
        a = np.expand_dims(a, 1 if ba else 0)
    if nb == 1:
        b = np.expand_dims(b, -1)
    ndim = max(_ndim(a, ba), _ndim(b, bb))
    out = np.matmul(_aligned(a, ba, ndim), _aligned(b, bb, ndim), **kwargs)
    if na == 1 and nb == 1:
        return out[..., 0, 0]
    if na == 1:
        return out[..., 0, :]
    if nb == 1:
        return out[..., 0]
    return out


def dot(size, func, args, batched, **kwargs):
    (a, b), (ba, bb) = args[:2], batched[:2]
    na, nb = _ndim(a, ba), _ndim(b, bb)
    if na == 0 or nb == 0:
        return elementwise(size, np.multiply, (a, b), (ba, bb))
    if na <= 2 and nb <= 2:
        return matmul(size, np.matmul, (a, b), (ba, bb))
    return tensordot(size, np.tensordot, (a, b, ([na - 1], [max(nb - 2, 0)])), (ba, bb, False))


def _letters(count, avoid=""):
    letters = [c for c in string.ascii_letters if c not in avoid]
    if count > len(letters):
        raise NotImplementedError("dualbcast.vmap: too many axes for one einsum")
    return letters[:count]


def einsum(size, func, args, batched, **kwargs):
    subscripts = args[0]
    if not isinstance(subscripts, str):
        raise NotImplementedError("dualbcast.vmap: numpy.einsum with subscripts given as "
                                  "lists (give a string)")
    if batched[0]:
        raise NotImplementedError("dualbcast.vmap: numpy.einsum's subscripts batched")
    spec = subscripts.replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if not arrow:               # NumPy's implicit output: letters used once, sorted
        letters = [c for c in inputs if c.isalpha()]
        output = ("..." if "..." in inputs else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1))
    letter = _letters(1, spec)[0]
    terms = [letter + term if b else term for term, b in zip(terms, batched[1:])]
    return np.einsum(",".join(terms) + "->" + letter + output, *args[1:], **kwargs)


def tensordot(size, func, args, batched, axes=2):
    (a, b), (ba, bb) = args[:2], batched[:2]
    axes = args[2] if len(args) > 2 else axes
    na, nb = _ndim(a, ba), _ndim(b, bb)
    if isinstance(axes, (int, np.integer)):
        a_axes, b_axes = list(range(na - axes, na)), list(range(axes))
    else:
        a_axes, b_axes = axes
        a_axes = [a_axes] if isinstance(a_axes, (int, np.integer)) else list(a_axes)
        b_axes = [b_axes] if isinstance(b_axes, (int, np.integer)) else list(b_axes)
    a_axes = [x % na for x in a_axes]
    b_axes = [x % nb for x in b_axes]
    letters = _letters(na + nb + 1)
    batch, a_letters, b_letters = letters[0], letters[1:na + 1], letters[na + 1:]
    for i, j in zip(a_axes, b_axes):
        b_letters[j] = a_letters[i]
    out = ([c for i, c in enumerate(a_letters) if i not in a_axes]
           + [c for j, c in enumerate(b_letters) if j not in b_axes])
    spec = (("" if not ba else batch) + "".join(a_letters) + ","
            + ("" if not bb else batch) + "".join(b_letters) + "->" + batch + "".join(out))
    return np.einsum(spec, a, b)


def outer(size, func, args, batched):
    (a, b), (ba, bb) = args, batched
    a = _flat(a) if ba else np.reshape(a, -1)
    b = _flat(b) if bb else np.reshape(b, -1)
    return ufunc_outer(size, None, (a, b), (ba, bb), np.multiply)


defbatch(matmul, np.matmul)
defbatch(dot, np.dot)
defbatch(einsum, np.einsum)
defbatch(tensordot, np.tensordot)
defbatch(outer, np.outer)


# ---------------------------------------------------------------------- linear algebra

def stacked_matrices(size, func, args, batched, **kwargs):
    """``inv``, ``det``, ``slogdet``: NumPy's own stacks of matrices."""
    _only_first(func, batched)
    return func(args[0], *args[1:], **kwargs)


def solve(size, func, args, batched):
    (a, b), (ba, bb) = args, batched
    vector = _ndim(b, bb) == 1
    a, b = _lifted(size, a, ba), _lifted(size, b, bb)
    if vector:
        return np.linalg.solve(a, np.expand_dims(b, -1))[..., 0]
    ndim = max(_ndim(a, True), _ndim(b, True))
    return np.linalg.solve(_aligned(a, True, ndim), _aligned(b, True, ndim))


def norm(size, func, args, batched, ord=None, axis=None, keepdims=False):
    x, ndim, rest = _first_and_rest(func, args, batched)
    ord = rest.pop(0) if rest else ord
    axis = rest.pop(0) if rest else axis
    if axis is None:
        if ord is None:
            out = np.linalg.norm(_flat(x), axis=1)
            return np.reshape(out, (-1,) + (1,) * ndim) if keepdims else out
        axis = tuple(range(ndim))
    return np.linalg.norm(x, ord, _axes(axis, ndim), keepdims)


defbatch(stacked_matrices, np.linalg.inv, np.linalg.det, np.linalg.slogdet)
defbatch(solve, np.linalg.solve)
defbatch(norm, np.linalg.norm)


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


def whole_batch(size, func, args, batched):
    """A choice a rule makes from its values (which formula of a gradient is better
    conditioned), made once for the whole batch: either choice is exact, so one for
    every example changes no result."""
    return Unbatched(func(*args))


def stacked(size, func, args, batched):
    """A function of NumPy's stacks of matrices, computed on the stack of examples."""
    return func(*(_lifted(size, x, b) for x, b in zip(args, batched)))


def embedded_diagonal(size, func, args, batched, shape, offset, axis1, axis2):
    """The cotangent of ``np.diagonal`` (the diagonal written into zeros), for every
    example: the axes past the batch axis."""
    ndim = len(shape)
    return func(_lifted(size, args[0], batched[0]), (size,) + tuple(shape), offset,
                _axis(axis1, ndim), _axis(axis2, ndim))


defbatch(whole_batch, linalg_rules._well_conditioned)
defbatch(embedded_diagonal, arrays_rules._embedded_diagonal)
defbatch(stacked, linalg_rules._lift, linalg_rules._det_local)


def matrix_axes(size, func, args, batched, ord=None, axes=None):
    """A function of the matrices over ``axes`` of its operands (the matrix norms'
    gradients and Hessian products): those axes moved past the batch axis."""
    ndim = _ndim(args[0], batched[0])
    return func(*(_lifted(size, x, b) for x, b in zip(args, batched)), ord=ord,
                axes=_axes(tuple(axes), ndim))


defbatch(matrix_axes, linalg_rules._svd_norm_gradient, linalg_rules._svd_norm_hessian_product)
