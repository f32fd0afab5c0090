"""Whole derivative matrices, ``jacobian`` and ``hessian``, a column (``jvp``) or a row
(a ``vjp`` pullback) at a time.

A row of a Jacobian costs one backward pass over a tape recorded once; a column costs a
whole forward-mode run of the function.  So ``jacobian`` takes rows unless there are
more outputs than inputs, and ``hessian`` is the Jacobian of the gradient taken by rows:
the gradient is traced once (its backward pass recorded as operations of an enclosing
trace: reverse over reverse) and each row is one pullback of it, a Hessian-vector
product with a unit vector, without running ``f`` again.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence, Union

import numpy as np

from ..foreign import is_dask_array
from .api import grad, jvp, vjp
from .box import Box
from .trace import ArgumentPositions, name_of

Argnums = Union[int, Sequence[int]]


def jacobian(f: Callable, argnums: Argnums = 0, *, mode: str = "auto") -> Callable:
    """The Jacobian of ``f`` with respect to the ``argnums`` arguments (float scalars
    or float arrays; ``f`` returns a float array or scalar): an array of shape
    ``out.shape + x.shape``, a tuple of them for a tuple ``argnums`` (like
    ``jax.jacobian``).

    ``mode``: "reverse" takes a row per output element (one trace of ``f``, then one
    backward pass per row), "forward" a column per input element (a forward-mode run
    of ``f`` per column); "auto" (the default) takes rows unless ``f`` has more
    outputs than inputs.

    >>> import numpy as np, dualbcast as db
    >>> db.jacobian(lambda x: x[:2] * x[1:])(np.array([1.0, 2.0, 3.0]))
    array([[2., 1., 0.],
           [0., 3., 2.]])
    """
    if mode not in ("auto", "forward", "reverse"):
        raise ValueError(f"jacobian: mode must be 'auto', 'forward' or 'reverse', not "
                         f"{mode!r}")
    positions_for = _positions(argnums, f)
    single = positions_for.single

    @functools.wraps(f)
    def jacobian_f(*args):
        inputs, of_inputs = _restricted(f, args, positions_for, _checked_output)
        sizes = [_size(x) for x in inputs]
        if mode == "forward":
            blocks = _by_columns(of_inputs, inputs, sizes)
        else:
            out, pullback = vjp(of_inputs, *inputs)
            if mode == "auto" and _size(out) > sum(sizes):
                blocks = _by_columns(of_inputs, inputs, sizes, _shape(out))
            else:
                blocks = _by_rows(out, pullback, inputs)
        return blocks[0] if single else tuple(blocks)
    return jacobian_f


def hessian(f: Callable, argnums: Argnums = 0) -> Callable:
    """The Hessian of the scalar function ``f`` with respect to the ``argnums``
    arguments: an array of shape ``x.shape + x.shape`` (for a tuple ``argnums``, a
    tuple of tuples of blocks, like ``jax.hessian``).

    Reverse over reverse: the gradient of ``f`` is traced once, with its backward
    pass recorded, and each row of the Hessian is one backward pass over that
    recording (a Hessian-vector product with a unit vector); ``f`` runs once.  A
    kernel's rows come from its second-order loop.

    >>> import numpy as np, dualbcast as db
    >>> db.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    """
    positions_for = _positions(argnums, f)
    single = positions_for.single
    gradient = grad(f, argnums)

    @functools.wraps(f)
    def hessian_f(*args):
        inputs, gradient_of_inputs = _restricted(
            lambda *full: gradient(*full) if single else _flat_concatenation(gradient(*full)),
            args, positions_for)
        blocks = _by_rows(*vjp(gradient_of_inputs, *inputs), inputs)
        if single:
            return blocks[0]
        # blocks[j]: the rows of the concatenated gradient against argument j
        rows, start = [], 0
        for x in inputs:
            size = _size(x)
            rows.append(tuple(np.reshape(block[start:start + size], np.shape(x) + np.shape(y))
                              for block, y in zip(blocks, inputs)))
            start += size
        return tuple(rows)
    return hessian_f


def _restricted(f, args, positions_for, check=None):
    """The differentiated arguments of a call of ``f`` (``positions_for``: its
    :class:`.trace.ArgumentPositions`) and ``f`` as a function of them alone (the other
    arguments as given)."""
    chosen = positions_for(len(args))[0]
    for i in chosen:
        _check_input(args[i], i)

    def of_inputs(*xs):
        full = list(args)
        for i, x in zip(chosen, xs):
            full[i] = x
        out = f(*full)
        return out if check is None else check(out, f)
    return [args[i] for i in chosen], of_inputs


def _flat_concatenation(gradients):
    return np.concatenate([np.reshape(g, -1) for g in gradients])


def _by_rows(out, pullback, inputs):
    """The Jacobian blocks (one per input) from a pullback per output element
    (``out, pullback``: a vjp of the function)."""
    out_shape = np.shape(out) if type(out) is not Box else out.shape
    count = int(np.prod(out_shape, dtype=np.int64))
    dtype = out.dtype if isinstance(out, (np.ndarray, np.generic, Box)) else np.float64
    rows = [[] for _ in inputs]
    seed = np.zeros(count, dtype)
    for row in range(count):
        seed[row] = 1.0
        cotangents = pullback(seed.reshape(out_shape))   # (the pullback copies it)
        seed[row] = 0.0
        for block, ct in zip(rows, cotangents):
            block.append(np.reshape(ct, -1))
    return [_stacked(block, 0, (count, _size(x)), x).reshape(out_shape + _shape(x))
            for block, x in zip(rows, inputs)]


def _by_columns(f, inputs, sizes, out_shape=None):
    """The Jacobian blocks from one forward-mode run of ``f`` per input element
    (``out_shape``: the shape of ``f``'s output, when the caller knows it)."""
    if out_shape is None and not any(sizes):
        # No column to run: the output's shape is still the blocks' leading shape.
        out_shape = _shape(f(*inputs))
    blocks = []
    zeros = [_zero_tangent(x) for x in inputs]
    for k, (x, size) in enumerate(zip(inputs, sizes)):
        columns = []
        for element in range(size):
            basis = np.zeros(size, _float(x))
            basis[element] = 1.0
            tangents = list(zeros)
            tangents[k] = basis.reshape(_shape(x)) if _shape(x) else basis[0]
            out, tangent = jvp(f, tuple(inputs), tuple(tangents))
            out_shape = np.shape(out) if type(out) is not Box else out.shape
            columns.append(np.reshape(tangent, -1))
        blocks.append((columns, x))
    return [_stacked(columns, -1, (int(np.prod(out_shape, dtype=np.int64)), _size(x)), x)
            .reshape(out_shape + _shape(x)) for columns, x in blocks]


def _stacked(vectors, axis, shape, like):
    if not vectors:
        return np.zeros(shape, _float(like))
    return np.stack(vectors, axis=axis)


def _zero_tangent(x):
    return np.zeros(_shape(x), _float(x)) if _shape(x) else _float(x).type(0.0)


def _shape(x):
    return x.shape if type(x) is Box else np.shape(x)


def _float(x):
    dtype = x.dtype if type(x) is Box else np.result_type(x)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def _size(x):
    return int(np.prod(_shape(x), dtype=np.int64))


def _positions(argnums, f):
    """``argnums`` checked as ``grad`` checks them (the same errors: a repeated or
    out-of-range argument), and not empty: a Jacobian of nothing is a mistake."""
    positions_for = ArgumentPositions(argnums, f)
    if not positions_for.single and not len(argnums):
        raise ValueError(f"{name_of(f)}: argnums must name at least one argument, "
                         f"got {argnums!r}")
    return positions_for


def _check_input(x, i):
    """A float scalar or float array (Jacobians of nested structures are not
    supported), or a value traced by an enclosing transform."""
    if is_dask_array(x):
        raise TypeError(_DASK.format(what=f"argument {i}"))
    if type(x) is not Box and not (isinstance(x, (float, np.floating)) or
                                   isinstance(x, np.ndarray) and x.dtype.kind == "f"):
        raise TypeError(f"jacobian/hessian: argument {i} must be a float scalar or a float "
                        f"array, not {type(x).__name__}"
                        f"{' of dtype ' + str(x.dtype) if hasattr(x, 'dtype') else ''}")


_DASK = ("jacobian/hessian: {what} is a Dask array; Dask arrays are differentiated by grad, "
         "value_and_grad and vjp (first order), not by jacobian, hessian, jvp or nested "
         "derivatives: compute a NumPy array first (x.compute())")


def _checked_output(out, f):
    if type(out) is Box or isinstance(out, (float, np.floating)) or \
            isinstance(out, np.ndarray) and out.dtype.kind == "f":
        return out
    if is_dask_array(out):
        raise TypeError(_DASK.format(what=f"the output of {name_of(f)}"))
    raise TypeError(f"jacobian: {name_of(f)} must return a float array or scalar, not "
                    f"{type(out).__name__}")
