"""Batching rules of products and linear algebra: ``matmul``, ``dot``, ``einsum``,
``tensordot``, ``outer``, ``np.linalg``, and the linear-algebra rules' own helpers (see
:mod:`.batching`)."""
import string

import numpy as np

from ..core.batching import Unbatched
from ..core.registry import define
from . import linalg as linalg_rules
from .batching import _aligned, _axes, _first_and_rest, _flat, _lifted, _ndim, _shape, \
    _only_first, elementwise, ufunc_outer


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
    if bb and not ba and na == 2 and nb == 2 and _shape(b)[2] == 1 and not kwargs:
        # a matrix times each example's column (the blocks of a tall product's
        # cotangent): (m, n) @ (n, batch), 2x faster than a product per example
        return np.matmul(a, np.swapaxes(b[..., 0], 0, 1)).T[..., None]
    if na == 1:
        a = np.expand_dims(a, 1 if ba else 0)
    if nb == 1:
        b = np.expand_dims(b, -1)
    ndim = max(_ndim(a, ba), _ndim(b, bb))
    a, b = _aligned(a, ba, ndim), _aligned(b, bb, ndim)
    if _shape(a)[-1] == 1 and _shape(b)[-2] == 1 and not kwargs:
        # An outer product per example (a per-example weight gradient, x.T @ g): one
        # broadcast multiply, where a stack of one-term matrix products is a loop of
        # tiny BLAS calls, 6x slower for 256 of (8, 1) @ (1, 32)
        out = np.multiply(a, b)
    else:
        out = np.matmul(a, b, **kwargs)
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


define(np.matmul, batch=matmul)
define(np.dot, batch=dot)
define(np.einsum, batch=einsum)
define(np.tensordot, batch=tensordot)
define(np.outer, batch=outer)


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


define(np.linalg.inv, np.linalg.det, np.linalg.slogdet, batch=stacked_matrices)
define(np.linalg.solve, batch=solve)
define(np.linalg.norm, batch=norm)


def whole_batch(size, func, args, batched):
    """A choice a rule makes from its values (which formula of a gradient is better
    conditioned), made once for the whole batch: either choice is exact, so one for
    every example changes no result."""
    return Unbatched(func(*args))


def stacked(size, func, args, batched):
    """A function of NumPy's stacks of matrices, computed on the stack of examples."""
    return func(*(_lifted(size, x, b) for x, b in zip(args, batched)))


define(linalg_rules._well_conditioned, batch=whole_batch)
define(linalg_rules._lift, linalg_rules._det_local, batch=stacked)


def matrix_axes(size, func, args, batched, ord=None, axes=None):
    """A function of the matrices over ``axes`` of its operands (the matrix norms'
    gradients and Hessian products): those axes moved past the batch axis."""
    ndim = _ndim(args[0], batched[0])
    return func(*(_lifted(size, x, b) for x, b in zip(args, batched)), ord=ord,
                axes=_axes(tuple(axes), ndim))


define(linalg_rules._svd_norm_gradient, linalg_rules._svd_norm_hessian_product, batch=matrix_axes)
