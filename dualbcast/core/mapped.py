"""``vmap``: a function written for one example, run over a batch in one pass."""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from .batching import Batched, BatchTrace
from .pytree import describe, flatten, unflatten
from .stack import enter_trace, exit_trace
from .trace import name_of, require_callable


def vmap(f: Callable, in_axes: Any = 0, out_axes: Any = 0, *,
         axis_size: int | None = None) -> Callable:
    """Return ``f`` mapped over an axis of its arguments, computed in one pass.

    Like ``jax.vmap``: ``vmap(f)(xs)`` is ``np.stack([f(x) for x in xs])``, but each
    NumPy operation and kernel call runs once over the whole batch (a kernel's loop
    broadcast over it).

    Parameters
    ----------
    f : callable
        A function written for one example, in plain NumPy (see
        :func:`dualbcast.grad`).  It may return any nested structure of arrays and
        floats.
    in_axes : int, None or tuple, optional
        For each positional argument, the axis to map over (an int, negative counting
        from the end) or None (the same value for every example).  An int or None
        applies to all arguments (default 0: every argument's leading axis); a tuple
        (or list) has one entry per positional argument, each an int, None, or a
        tuple, list or dict of them matching the argument's structure (a prefix: an
        entry applies to everything below it).  Keyword arguments are mapped over
        their leading axis, as in JAX.
    out_axes : int, None or tuple, optional
        Where the batch axis goes in each output, given the same way (default 0).
        None is for an output that is the same for every example.
    axis_size : int, optional
        The batch size: needed when no argument is mapped, checked against the
        mapped axes otherwise.

    Returns
    -------
    callable
        A function called as ``f`` is, with the mapped arguments carrying the batch
        axis, returning ``f``'s outputs stacked along ``out_axes``.

    Raises
    ------
    TypeError
        At once, if an entry of ``in_axes`` or ``out_axes`` is not an int or None (or a
        tuple, list or dict of them), or ``axis_size`` is not a non-negative int.  When
        called: if ``f`` branches on a batched value (``if x > 0``, ``bool(x)``: use
        ``np.where``).
    ValueError
        When called: if a tuple ``in_axes`` has another length than the call's
        positional arguments, or an entry does not match its argument's structure;
        if an axis is out of range, or a scalar is mapped; if the mapped axes have
        different sizes (or differ from ``axis_size``); if nothing is mapped and
        ``axis_size`` is not given; if ``out_axes`` is None for an output that differs
        between examples.
    NotImplementedError
        If ``f`` applies an operation that has no batching rule to a batched value (the
        message names it).

    See Also
    --------
    jacobian : Built on ``vmap``: every row or column of a Jacobian in one batch.
    dualbcast.grad

    Notes
    -----
    ``vmap`` composes with :func:`~dualbcast.grad`, :func:`~dualbcast.jvp`,
    :func:`~dualbcast.hessian`, :func:`~dualbcast.jit` and itself both ways:
    ``vmap(grad(loss), in_axes=(None, 0, 0))(w, X, y)`` gives the gradient of each
    example's loss, and ``grad`` of a function that calls a ``vmap``-ed one
    differentiates through the batch.

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.vmap(lambda x, w: np.sum(x * w), in_axes=(0, None))(np.ones((3, 2)),
    ...                                                      np.array([1.0, 2.0]))
    array([3., 3., 3.])
    >>> db.vmap(db.grad(lambda w, x: np.sum(w * x) ** 2), in_axes=(None, 0))(
    ...     np.array([1.0, 1.0]), np.array([[1.0, 0.0], [1.0, 1.0]]))
    array([[2., 0.],
           [4., 4.]])

    ``out_axes`` places the batch axis; None marks an output shared by every example:

    >>> db.vmap(lambda x, w: (x * w, w * 2), in_axes=(0, None), out_axes=(1, None))(
    ...     np.ones((3, 2)), np.array([1.0, 2.0]))
    (array([[1., 1., 1.],
           [2., 2., 2.]]), array([2., 4.]))

    A branch on a batched value cannot take one side for the whole batch:

    >>> db.vmap(lambda x: x if x > 0 else -x)(np.array([1.0, -1.0]))
    Traceback (most recent call last):
        ...
    TypeError: bool() (an if or while on the value, and/or/not) of a value batched by
    vmap: it holds one value per example, and the function is written for one; use
    np.where for a choice per example, or compute it outside vmap
    """
    require_callable(f, "vmap")
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
