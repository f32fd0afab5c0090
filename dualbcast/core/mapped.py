"""``vmap``: a function written for one example, run over a batch in one pass."""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from .batching import Batched, BatchTrace
from .pytree import describe, flatten, unflatten
from .stack import enter_trace, exit_trace
from .trace import name_of


def vmap(f: Callable, in_axes: Any = 0, out_axes: Any = 0, *,
         axis_size: int | None = None) -> Callable:
    """``f`` mapped over an axis of its arguments, like ``jax.vmap``: ``vmap(f)(xs)``
    is ``np.stack([f(x) for x in xs])``, computed in one pass over the batch.

    ``in_axes``: for each positional argument, the axis to map over (an int, negative
    counting from the end) or None (the same value for every example); an int or None
    for all arguments, or a tuple with one entry per argument, each entry an int, None
    or a tuple/list/dict of them matching the argument's structure (a prefix: an entry
    applies to everything below it).  Keyword arguments are mapped over their leading
    axis, as in JAX.  ``out_axes``: where the batch axis goes in each output, the same
    way (None: an output that is the same for every example, which raises if it is
    not).  ``axis_size``: the batch size, needed when no argument is mapped.

    Each NumPy operation and kernel call runs once over the whole batch (a kernel's
    loop broadcast over it).  It composes with ``grad``, ``jvp``, ``hessian``,
    ``jit`` and itself both ways: ``vmap(grad(loss), in_axes=(None, 0, 0))(w, X, y)``
    gives the gradient of each example's loss.  A branch on a batched value
    (``if x > 0``) raises (use ``np.where``), and so does an operation without a
    batching rule, naming it.

    >>> import numpy as np, dualbcast as db
    >>> db.vmap(lambda x, w: np.sum(x * w), in_axes=(0, None))(np.ones((3, 2)),
    ...                                                      np.array([1.0, 2.0]))
    array([3., 3., 3.])
    >>> db.vmap(db.grad(lambda w, x: np.sum(w * x) ** 2), in_axes=(None, 0))(
    ...     np.array([1.0, 1.0]), np.array([[1.0, 0.0], [1.0, 1.0]]))
    array([[2., 0.],
           [4., 4.]])
    """
    if type(in_axes) is list:
        in_axes = tuple(in_axes)        # (an entry per argument, as a tuple is)
    _check_spec(in_axes, "in_axes")
    _check_spec(out_axes, "out_axes")
    if axis_size is not None and (type(axis_size) is not int or axis_size < 0):
        raise TypeError(f"vmap: axis_size must be a non-negative int, not {axis_size!r}")

    @functools.wraps(f, updated=())   # (not f's attributes: db.jit reads what made a function)
    def vmapped(*args, **kwargs):
        if type(in_axes) is tuple and len(in_axes) != len(args):
            raise ValueError(f"vmap of {name_of(f)}: in_axes has {len(in_axes)} entries "
                             f"but the call has {len(args)} positional arguments")
        spec = in_axes if type(in_axes) is tuple else (in_axes,) * len(args)
        leaves, tree = flatten((args, kwargs))
        axes = _leaf_axes((spec, {key: 0 for key in kwargs}), (args, kwargs), "in_axes")
        size = _batch_size(f, leaves, axes, axis_size)
        trace = BatchTrace(size)
        enter_trace(trace)
        try:
            batched = [leaf if axis is None else
                       Batched(_moved(leaf, _normalised(axis, _ndim(leaf)), 0), trace)
                       for leaf, axis in zip(leaves, axes)]
            args, kwargs = unflatten(tree, batched)
            out = f(*args, **kwargs)
        finally:
            exit_trace(trace)
        out_leaves, out_tree = flatten(out)
        where = _leaf_axes(out_axes, out, "out_axes")
        return unflatten(out_tree, [_unbatched(f, leaf, axis, trace)
                                    for leaf, axis in zip(out_leaves, where)])
    return vmapped


def _check_spec(spec, name):
    if spec is None or type(spec) is int:
        return
    if isinstance(spec, (tuple, list)):
        for item in spec:
            _check_spec(item, name)
        return
    if isinstance(spec, dict):
        for item in spec.values():
            _check_spec(item, name)
        return
    raise TypeError(f"vmap: {name} entries must be ints or None (or tuples, lists and "
                    f"dicts of them), not {type(spec).__name__}")


def _leaf_axes(spec, value, name):
    """The axis (int or None) of each leaf of ``value`` in flattening order, from
    ``spec``, a prefix of its structure."""
    if spec is None or type(spec) is int:
        return [spec] * len(flatten(value)[0])
    if isinstance(spec, dict):
        if not isinstance(value, dict) or set(spec) != set(value):
            raise ValueError(f"vmap: {name} {spec!r} does not match the structure "
                             f"{describe(flatten(value)[1])}")
        return [axis for key in value for axis in _leaf_axes(spec[key], value[key], name)]
    if not isinstance(value, (tuple, list)) or isinstance(value, dict) \
            or len(value) != len(spec):
        raise ValueError(f"vmap: {name} {spec!r} does not match the structure "
                         f"{describe(flatten(value)[1])}")
    return [axis for item, child in zip(spec, value)
            for axis in _leaf_axes(item, child, name)]


def _ndim(x):
    shape = getattr(x, "shape", None)
    return np.ndim(x) if shape is None else len(shape)


def _normalised(axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"vmap: cannot map over axis {axis} of a value with {ndim} "
                         f"axes")
    return axis % ndim


def _moved(x, source, destination):
    return x if source == destination else np.moveaxis(x, source, destination)


def _batch_size(f, leaves, axes, axis_size):
    sizes = []
    for leaf, axis in zip(leaves, axes):
        if axis is None:
            continue
        ndim = _ndim(leaf)
        if ndim == 0:
            raise ValueError(f"vmap of {name_of(f)}: in_axes maps a scalar argument "
                             f"({type(leaf).__name__}) over axis {axis}; map arrays, or "
                             f"give None for it")
        shape = getattr(leaf, "shape", None) or np.shape(leaf)
        sizes.append(shape[_normalised(axis, ndim)])
    if not sizes:
        if axis_size is None:
            raise ValueError(f"vmap of {name_of(f)}: no argument is mapped (in_axes all "
                             f"None); give axis_size")
        return axis_size
    if len(set(sizes)) > 1 or axis_size is not None and axis_size != sizes[0]:
        raise ValueError(f"vmap of {name_of(f)}: the mapped axes have different sizes "
                         f"{sizes}" + (f" (axis_size={axis_size})" if axis_size is not None
                                       else ""))
    return sizes[0]


def _unbatched(f, leaf, axis, trace):
    """An output leaf with the batch axis at ``axis``."""
    if type(leaf) is Batched and leaf.trace is trace:
        if axis is None:
            raise ValueError(f"vmap of {name_of(f)}: out_axes is None for an output that "
                             f"differs between examples")
        value = leaf.value
        return _moved(value, 0, _normalised(axis, _ndim(value)))
    if axis is None:
        return leaf
    shape = getattr(leaf, "shape", None)
    shape = np.shape(leaf) if shape is None else tuple(shape)
    value = np.broadcast_to(leaf, (trace.size,) + shape)
    if type(value) is np.ndarray:
        value = value.copy()        # (an array of its own, as any output is)
    return _moved(value, 0, _normalised(axis, len(shape) + 1))
