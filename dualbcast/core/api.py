"""``grad``, ``value_and_grad``, ``vjp`` and ``stop_gradient``: tracing a function on
boxed arguments, then running the tape backward.  Every call runs the function: the
answer is what running it gives, whatever state it reads."""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence, Union

import numpy as np

from ..foreign import is_dask_array
from .box import Box, as_kind, kind_of
from .pytree import describe, flatten, flatten_like, unflatten
from .forward import ForwardTape
from .tape import Traced, backward
from .trace import (ArgumentPositions, gradients, name_of, start_tracing,
                    stop_tracing, trace_arguments, trace_value, value_and_gradient)

Argnums = Union[int, Sequence[int]]


class GradientFunction(NamedTuple):
    """What made a ``grad``/``value_and_grad`` function (``dualbcast.jit`` reads it)."""
    f: Callable
    argnums: Argnums
    out: Any
    with_value: bool        # value_and_grad (True) or grad (False)


def grad(f: Callable, argnums: Argnums = 0, *, out: Any = None) -> Callable:
    """The gradient of a scalar function ``f`` with respect to the ``argnums``
    arguments, like ``jax.grad``.  Each gradient has its argument's structure (nested
    tuples, lists, dicts), shapes and dtypes; ``argnums`` a tuple gives a tuple.
    ``out``: see :func:`value_and_grad`.  ``dualbcast.jit`` of the result records and
    replays it.

    >>> import numpy as np, dualbcast as db
    >>> db.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    value_and_grad_f = value_and_grad(f, argnums, out=out)

    @functools.wraps(f)
    def grad_f(*args, **kwargs):
        return value_and_grad_f(*args, **kwargs)[1]
    return _marked(grad_f, GradientFunction(f, argnums, out, with_value=False))


def value_and_grad(f: Callable, argnums: Argnums = 0, *, out: Any = None) -> Callable:
    """``f(*args)`` and its gradient with respect to the ``argnums`` arguments, from
    one forward and one backward pass.  Arguments not in ``argnums`` (and keyword
    arguments) are passed through untouched and never traced.

    Every call runs ``f``: the value and the gradient are what running ``f`` gives,
    whatever it reads (globals, attributes, dicts, random generators).
    ``dualbcast.jit(value_and_grad(f))`` records ``f``'s operations and replays them
    instead, when ``f`` computes from its arguments alone.

    ``out``: arrays every call writes the gradient into and returns, instead of new
    ones: the gradient's structure with an array (its shape and dtype) or None
    (allocate as usual) for each leaf.  The same arrays are returned on every call, so
    a caller that keeps a gradient across calls (an optimiser's previous step) must
    copy it.  A gradient computed whole by a kernel's ``k.sum`` rule is written there
    directly: a repeated call allocates nothing of the gradient's size.  ``out`` is
    refused (``TypeError``) inside another transform (``grad``, ``jvp``, ``jacobian``,
    ``hessian``, a staging ``dualbcast.jit``): the gradient is traced there, and an
    array cannot hold it.

    >>> import numpy as np, dualbcast as db
    >>> db.value_and_grad(lambda x, a: a * np.sum(x), argnums=(0, 1))(np.ones(2), 3.0)
    (np.float64(6.0), (array([3., 3.]), 2.0))
    """
    positions_for = ArgumentPositions(argnums, f)      # argnums checked now
    single = positions_for.single

    @functools.wraps(f)
    def value_and_grad_f(*args, **kwargs):
        positions = positions_for(len(args))[0]
        return value_and_gradient(f, args, positions, out, single, trace_value(f, kwargs))
    return _marked(value_and_grad_f, GradientFunction(f, argnums, out, with_value=True))


def _marked(function: Callable, spec: GradientFunction) -> Callable:
    """``function``, carrying what made it (``dualbcast.jit`` reads it)."""
    setattr(function, "__dualbcast_gradient__", spec)
    return function


def vjp(f: Callable, *primals: Any) -> tuple[Any, Callable]:
    """``(f(*primals), pullback)``: ``pullback(cotangent)`` returns one cotangent per
    primal (a tuple), each with its primal's structure, shapes and dtypes.  ``f`` may
    return any nested structure of arrays; ``cotangent`` must have the same structure
    and shapes.  The pullback may be called many times, and differentiated (``grad``,
    ``jvp``, ``jacobian``) with respect to its cotangent and, inside a transform that
    traces them, the primals.

    >>> import numpy as np, dualbcast as db
    >>> y, pullback = db.vjp(np.sin, np.array([0.0, 1.0]))
    >>> pullback(np.array([1.0, 2.0]))[0].round(4)
    array([1.    , 1.0806])
    """
    tape = start_tracing(single_use=False)
    try:
        # The pullback may run later, after the caller has updated the primals in place
        # (an optimiser step): it must see them as they were.
        traced_args, inputs = trace_arguments(tape, primals, range(len(primals)),
                                              copy_arrays=True)
        out = f(*traced_args)
    finally:
        stop_tracing(tape)
    out_leaves, out_tree = flatten(out)
    # Outputs the pullback relies on are handed out read-only.
    out_values = [_read_only(leaf.value) if type(leaf) is Box else leaf for leaf in out_leaves]

    def pullback(cotangent):
        try:
            ct_leaves = flatten_like(cotangent, out_tree)
        except ValueError:
            raise ValueError(f"vjp pullback: the cotangent has structure "
                             f"{describe(flatten(cotangent)[1])} but {name_of(f)} returned "
                             f"{describe(out_tree)}") from None
        seeds = []
        for out_leaf, value, ct in zip(out_leaves, out_values, ct_leaves):
            if np.iscomplexobj(ct):
                raise TypeError("vjp pullback: complex cotangents are not supported")
            if np.shape(ct) != np.shape(value):
                raise ValueError(f"vjp pullback: a cotangent of shape {np.shape(ct)} for an "
                                 f"output of shape {np.shape(value)}")
            if type(out_leaf) is Box:
                seeds.append((out_leaf.slot, _seed(ct, value)))
        return gradients(backward(tape, seeds), inputs)
    return unflatten(out_tree, out_values), pullback


def _seed(ct, value):
    """The cotangent ``ct`` of the output ``value`` as a seed of the backward pass: of
    the output's dtype; a copy (the backward pass may add into a seed, and must not
    hand the caller's own array back as a gradient), but for a cotangent traced by an
    enclosing transform (the pullback differentiated with respect to it), kept traced:
    the backward pass then runs as operations that transform records."""
    dtype = value.dtype if hasattr(value, "dtype") else np.result_type(value)
    if isinstance(ct, Traced):
        return ct if ct.dtype == dtype else ct.astype(dtype)
    if is_dask_array(ct):
        return ct.astype(dtype)
    return np.array(ct, dtype=dtype)


def jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """``(f(*primals), tangent_out)``, the directional derivative of ``f`` at
    ``primals`` along ``tangents``, by forward mode (like ``jax.jvp``): one pass that
    carries each value's tangent beside it, through operators, NumPy functions and
    kernels (a kernel's tangent comes out of its dual-number loop with its value).
    ``primals`` and ``tangents`` are tuples with one entry per argument of ``f``, a
    tangent of its primal's structure, shapes and dtypes; ``f`` may return any nested
    structure of arrays and floats, and ``tangent_out`` has that structure.

    ``jvp(grad(f), (x,), (v,))[1]`` is the Hessian-vector product of ``f`` at ``x``
    along ``v`` (forward over reverse).  Every call runs ``f``.

    >>> import numpy as np, dualbcast as db
    >>> db.jvp(np.sin, (np.array([0.0, 1.0]),), (np.array([1.0, 2.0]),))[1].round(4)
    array([1.    , 1.0806])
    >>> x, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    >>> db.jvp(db.grad(lambda x: np.sum(x ** 3)), (x,), (v,))[1]     # Hessian times v
    array([6., 0.])
    """
    if type(primals) not in (tuple, list) or type(tangents) not in (tuple, list):
        raise TypeError(f"jvp: primals and tangents must be tuples (one entry per argument "
                        f"of {name_of(f)}), got {type(primals).__name__} and "
                        f"{type(tangents).__name__}")
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    tangent_leaves = []
    for position, (primal, tangent) in enumerate(zip(primals, tangents)):
        leaves, tree = flatten(primal)
        try:
            tangent_leaves.extend(zip(leaves, flatten_like(tangent, tree)))
        except ValueError:
            raise ValueError(f"jvp: the tangent of argument {position} has structure "
                             f"{describe(flatten(tangent)[1])}, its primal "
                             f"{describe(tree)}") from None
    for primal, tangent in tangent_leaves:
        _not_dask_in_jvp(primal)
        _not_dask_in_jvp(tangent)
    checked = [_checked_tangent(primal, tangent) for primal, tangent in tangent_leaves]
    tape = start_tracing(single_use=False, kind=ForwardTape)
    try:
        traced_args, inputs = trace_arguments(tape, tuple(primals), range(len(primals)))
        boxes = [box for leaf_boxes, _ in inputs for box in leaf_boxes]
        for box, tangent in zip(boxes, checked):
            tape.tangents[box.slot] = tangent
        out = f(*traced_args)
    finally:
        stop_tracing(tape)
    out_leaves, out_tree = flatten(out)
    values, out_tangents = [], []
    # Arrays the caller may already hold: the tangents it passed in (an output's tangent
    # is one of them for f(x) = x), and each one handed out (f(x) = (y, y)).
    seen = {id(tangent) for tangent in checked}
    for leaf in out_leaves:
        own = type(leaf) is Box and leaf.tape is tape
        value = leaf.value if own else leaf
        _not_dask_in_jvp(value)
        values.append(value)
        tangent = tape.tangents.get(leaf.slot) if own else None
        out_tangents.append(_tangent_like(value, tangent, seen))
    return unflatten(out_tree, values), unflatten(out_tree, out_tangents)


def _not_dask_in_jvp(value):
    if is_dask_array(value):
        raise TypeError("jvp: a Dask array among the primals, tangents or outputs; over Dask "
                        "arrays grad, value_and_grad and vjp differentiate lazily, jvp does "
                        "not: compute a NumPy array first (x.compute())")


def _checked_tangent(primal, tangent):
    """``tangent`` as the tangent of the leaf ``primal``: its shape, its float dtype."""
    shape = primal.shape if isinstance(primal, Traced) else np.shape(primal)
    tangent_shape = tangent.shape if isinstance(tangent, Traced) else np.shape(tangent)
    if tangent_shape != shape:
        raise ValueError(f"jvp: a tangent of shape {tangent_shape} for a primal of shape "
                         f"{shape}")
    if isinstance(tangent, Traced):
        return tangent
    if np.iscomplexobj(tangent):
        raise TypeError("jvp: complex tangents are not supported")
    dtype = primal.dtype if isinstance(primal, Traced) else np.result_type(primal)
    if dtype.kind != "f":
        dtype = np.dtype(np.float64)        # (an int primal is refused when it is traced)
    if kind_of(primal) == "float" and np.ndim(tangent) == 0:
        # (a Python float's tangent stays one, weak in NumPy's promotion as the float
        # is -- a traced one too: staged under db.jit, 1.0 - x32 stays float32)
        return float(tangent)
    # (no copy of an array of the right dtype: nothing writes into a tangent)
    return np.asarray(tangent, dtype=dtype) if shape else dtype.type(tangent)


def _tangent_like(value, tangent, seen):
    """The output tangent of a leaf ``value``: zeros where nothing flowed, at the
    value's shape and dtype, of its kind (:func:`.box.kind_of`); an array of its own,
    copied unless it owns its buffer and its id is not in ``seen`` (arrays the caller
    holds; it is added there)."""
    kind = kind_of(value)
    if isinstance(value, Traced):
        shape, dtype = value.shape, value.dtype
    else:
        shape = np.shape(value)
        dtype = np.result_type(value) if isinstance(value, (np.ndarray, np.generic)) \
            else np.dtype(np.float64)
    if tangent is None:
        if kind == "float":
            return 0.0
        return np.zeros(shape, dtype) if shape or kind == "array" else dtype.type(0)
    if isinstance(tangent, Traced):
        return as_kind(tangent, kind)
    if kind == "float":
        return float(tangent)
    if shape or kind == "array":
        if type(tangent) is np.ndarray and tangent.dtype == dtype and id(tangent) not in seen \
                and tangent.flags.owndata and tangent.flags.writeable:
            seen.add(id(tangent))
            return tangent
        return np.array(tangent, dtype=dtype)       # its own buffer, never a view
    return dtype.type(tangent)


def _read_only(value):
    if isinstance(value, np.ndarray):
        value = value.view()
        value.flags.writeable = False
    return value


def stop_gradient(x: Any) -> Any:
    """``x`` as a constant: its value (read-only for arrays), no gradient flows back.
    Works on nested structures; outside a traced function it returns ``x`` unchanged."""
    leaves, tree = flatten(x)
    return unflatten(tree, [_constant(leaf) for leaf in leaves])


def _constant(leaf):
    return leaf.tape.stop_gradient(leaf) if type(leaf) is Box else leaf
