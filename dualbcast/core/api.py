"""``grad``, ``value_and_grad``, ``vjp``, ``jvp`` and ``stop_gradient``: tracing a
function on boxed arguments, then running the tape backward (or, for ``jvp``, carrying
tangents forward).  Every call runs the function: the answer is what running it gives,
whatever state it reads."""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence, Union

import numpy as np

from ..foreign import is_dask_array
from .box import Box, as_kind, kind_of
from .pytree import describe, flatten, flatten_like, unflatten
from .forward import ForwardTape
from .tape import Traced, backward
from .trace import (ArgumentPositions, gradients, name_of, require_callable, start_tracing,
                    stop_tracing, trace_arguments, trace_value, value_and_gradient)

Argnums = Union[int, Sequence[int]]


class GradientFunction(NamedTuple):
    """What made a ``grad``/``value_and_grad`` function (``dualbcast.jit`` reads it)."""
    f: Callable
    argnums: Argnums
    out: Any
    with_value: bool        # value_and_grad (True) or grad (False)


def grad(f: Callable, argnums: Argnums = 0, *, out: Any = None) -> Callable:
    """Return a function that computes the gradient of the scalar function ``f``.

    Like ``jax.grad``: ``grad(f)(*args)`` is the gradient of ``f(*args)`` with
    respect to the arguments named by ``argnums``, from one forward pass, which runs ``f``
    on traced arguments, and one backward pass.  Every call runs ``f``: the gradient is
    what running ``f`` gives, whatever it reads (globals, attributes, dicts, random
    generators).

    Parameters
    ----------
    f : callable
        The function to differentiate, written in plain NumPy: operators, ``np.*``
        functions, array methods, indexing, Python control flow, and kernels made by
        :func:`dualbcast.fast_broadcast`.  It must return a real scalar (a float, a
        NumPy scalar or a 0-d array).
    argnums : int or tuple of int, optional
        The positional arguments to differentiate (default 0, the first; negative
        counts from the end).  Each must be a float scalar, a float array, or a nested
        tuple, list or dict of them.  A tuple gives a tuple of gradients.
    out : array_like or tuple, optional
        Arrays every call writes the gradient into and returns, instead of new ones;
        see :func:`value_and_grad`.

    Returns
    -------
    callable
        A function called as ``f`` is, returning the gradient: for each differentiated
        argument, an object of the argument's structure, shapes and dtypes (a float
        for a float, a float32 array for a float32 array); a tuple of them when
        ``argnums`` is a tuple.  Arguments not in ``argnums``, and keyword arguments, are
        passed to ``f`` untouched and never traced.  ``dualbcast.jit`` of it records
        the program and replays it.

    Raises
    ------
    TypeError
        At once, if ``argnums`` is not an int or a tuple of ints.  When called: if a
        differentiated argument holds an integer, bool, complex or other non-float
        value; if ``f`` returns anything but a real scalar (for an array the message
        says: sum it, or use :func:`vjp`); if ``f`` writes into a traced array
        (``x[i] = v``, ``x += v``) or turns a traced value into a plain one
        (``float(x)``, ``np.asarray(x)``; :func:`stop_gradient` is the way to mean a
        constant); if ``out`` is given inside another transform.
    ValueError
        At once, if ``argnums`` repeats an argument; when called, if it names an
        argument the call does not have, or if ``out`` does not fit the gradient.
    NotImplementedError
        If ``f`` applies a NumPy function that has no gradient rule to a traced value
        (the message names it).

    See Also
    --------
    value_and_grad : The value and the gradient from one call.
    vjp : The pullback of a function with any output.
    jvp : Forward mode; ``jvp(grad(f), ...)`` gives Hessian-vector products.
    hessian : The matrix of second derivatives.
    jit : Record the gradient's program once and replay it.

    Notes
    -----
    Where a function is not differentiable, the gradient follows these conventions:

    - ``np.sqrt`` and ``np.log`` at 0: ``+inf`` (as JAX and PyTorch);
    - ``abs`` and ``np.abs`` at 0: 0 (as PyTorch);
    - ``np.maximum``, ``np.minimum``, ``np.max``, ``np.min`` (and ``max``/``min``
      inside a kernel) at a tie: half to each side (as JAX).  Python's own
      ``max``/``min`` on traced values pick one side, as Python does;
    - ``x ** n`` for an integer ``n >= 1`` at 0: ``n * 0 ** (n - 1)``, never 0/0;
    - a zero cotangent meeting an infinite local derivative gives 0, not nan.

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])

    A gradient has its argument's structure; ``argnums`` picks the arguments:

    >>> def loss(params, x):
    ...     return np.sum((params["w"] * x + params["b"]) ** 2)
    >>> db.grad(loss)({"w": 2.0, "b": 1.0}, np.array([1.0, 2.0]))
    {'w': 26.0, 'b': 16.0}
    >>> db.grad(lambda x, y: x * y, argnums=(0, 1))(2.0, 3.0)
    (3.0, 2.0)

    The function must return a scalar:

    >>> db.grad(lambda x: x ** 2)(np.array([1.0, 2.0]))
    Traceback (most recent call last):
        ...
    TypeError: grad requires <lambda> to return a scalar; it returned an array of
    shape (2,) (sum it, or use vjp)
    """
    require_callable(f, "grad")
    value_and_grad_f = value_and_grad(f, argnums, out=out)

    @functools.wraps(f)
    def grad_f(*args, **kwargs):
        return value_and_grad_f(*args, **kwargs)[1]
    return _marked(grad_f, GradientFunction(f, argnums, out, with_value=False))


def value_and_grad(f: Callable, argnums: Argnums = 0, *, out: Any = None) -> Callable:
    """Return a function that computes ``f(*args)`` and its gradient together.

    One forward pass, which runs ``f`` on traced arguments and gives the value, and one
    backward pass, which gives the gradient with respect to the arguments named by
    ``argnums``, as :func:`grad` computes it.  Every call runs ``f``: the value and the
    gradient are what running ``f`` gives, whatever it reads (globals, attributes,
    dicts, random generators).  ``dualbcast.jit(value_and_grad(f))`` records ``f``'s
    operations and replays them instead, when ``f`` computes from its arguments alone.

    Parameters
    ----------
    f : callable
        The function to differentiate, written in plain NumPy (see :func:`grad`).  It
        must return a real scalar (a float, a NumPy scalar or a 0-d array).
    argnums : int or tuple of int, optional
        The positional arguments to differentiate (default 0, the first; negative
        counts from the end).  Each must be a float scalar, a float array, or a nested
        tuple, list or dict of them.  A tuple gives a tuple of gradients.
    out : array_like or tuple, optional
        Arrays every call writes the gradient into and returns, instead of new ones:
        the gradient's structure with, for each leaf, a writeable NumPy array of the
        leaf's shape and dtype, or None (allocate as usual).  The same arrays are
        returned on every call, so a caller that keeps a gradient across calls (an
        optimiser's previous step) must copy it.  A gradient computed whole by a
        kernel's ``k.sum`` rule is written there directly: a repeated call allocates
        nothing of the gradient's size.  Only an array argument has an out array: give
        None for a float scalar (a Python or NumPy float) or a Dask array.

    Returns
    -------
    callable
        A function called as ``f`` is, returning ``(value, gradient)``: the value ``f``
        returned, and the gradient as :func:`grad` gives it (for each differentiated
        argument, its structure, shapes and dtypes; a tuple of them when ``argnums`` is
        a tuple).  Arguments not in ``argnums``, and keyword arguments, are passed to
        ``f`` untouched and never traced.

    Raises
    ------
    TypeError
        At once, if ``argnums`` is not an int or a tuple of ints.  When called: if a
        differentiated argument holds an integer, bool, complex or other non-float
        value; if ``f`` returns anything but a real scalar; if ``f`` writes into a traced
        array or turns a traced value into a plain one (see :func:`grad`); if ``out`` is
        given inside another transform (``grad``, ``jvp``, ``jacobian``, ``hessian``,
        a staging ``dualbcast.jit``): the gradient is traced there, and an array
        cannot hold it.
    ValueError
        At once, if ``argnums`` repeats an argument.  When called: if it names an
        argument the call does not have; if ``out`` does not have the gradient's
        structure, or one of its arrays has another shape or dtype than its argument,
        is read-only, or overlaps an argument.
    NotImplementedError
        If ``f`` applies a NumPy function that has no gradient rule to a traced value
        (the message names it).

    See Also
    --------
    grad : The gradient alone.
    vjp : The value and a pullback, for a function with any output.
    jit : Record the program once and replay it.

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.value_and_grad(lambda x, a: a * np.sum(x), argnums=(0, 1))(np.ones(2), 3.0)
    (np.float64(6.0), (array([3., 3.]), 2.0))

    With ``out``, every call writes the gradient into the same array:

    >>> g = np.zeros(2)
    >>> step = db.value_and_grad(lambda x: np.sum(x ** 2), out=g)
    >>> value, gradient = step(np.array([1.0, 2.0]))
    >>> value, gradient is g, g
    (np.float64(5.0), True, array([2., 4.]))
    >>> step(np.array([1.0, 2.0, 3.0]))
    Traceback (most recent call last):
        ...
    ValueError: value_and_grad: each out leaf must be a writeable array of its
    argument's shape and dtype ((3,), float64), or None; got a ndarray of shape (2,)
    and dtype float64
    """
    require_callable(f, "value_and_grad")
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
    """Run ``f`` at ``primals`` and return its output with a pullback (reverse mode).

    ``vjp(f, *primals)`` is ``(f(*primals), pullback)``, like ``jax.vjp``:
    ``pullback(cotangent)`` is the vector-Jacobian product, the cotangent of each
    primal, from one backward pass over the trace of ``f``.  ``f`` may return any nested
    structure of arrays and floats; for a scalar output, ``pullback(1.0)`` is the
    gradient.

    Parameters
    ----------
    f : callable
        The function to differentiate, written in plain NumPy (see :func:`grad`).
    *primals : float, array_like or nested tuple, list or dict of them
        The arguments of ``f``, every one differentiated: float scalars and float
        arrays, alone or in nested tuples, lists and dicts.

    Returns
    -------
    out : object
        What ``f`` returned; its arrays are read-only (the pullback relies on them).
    pullback : callable
        ``pullback(cotangent)``, where ``cotangent`` has the structure and shapes of
        ``out`` (converted to each output's dtype), returns a tuple with one cotangent
        per primal, each with its primal's structure, shapes and dtypes.  It may be
        called many times, and differentiated (:func:`grad`, :func:`jvp`,
        :func:`jacobian`) with respect to its cotangent and, inside a transform that
        traces them, the primals.

    Raises
    ------
    TypeError
        If a primal holds an integer, bool, complex or other non-float value; if ``f``
        writes into a traced array or turns a traced value into a plain one (see
        :func:`grad`).  The pullback raises it for a complex cotangent.
    ValueError
        Raised by the pullback for a cotangent whose structure or shapes differ from
        ``out``'s.
    NotImplementedError
        If ``f`` applies a NumPy function that has no gradient rule to a traced value
        (the message names it).

    See Also
    --------
    grad : The gradient of a scalar function.
    jvp : Forward mode: a directional derivative.
    jacrev : The whole Jacobian, by pullbacks of every unit cotangent at once.

    Notes
    -----
    ``vjp`` copies the primal arrays: the pullback sees them as they were at the call,
    even when the caller has since changed them in place (an optimiser step).

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> y, pullback = db.vjp(np.sin, np.array([0.0, 1.0]))
    >>> pullback(np.array([1.0, 2.0]))[0].round(4)
    array([1.    , 1.0806])

    Several primals give a tuple; structured outputs take cotangents of their
    structure:

    >>> out, pullback = db.vjp(lambda x, y: {"product": x * y, "sum": x + y}, 2.0, 3.0)
    >>> out
    {'product': 6.0, 'sum': 5.0}
    >>> pullback({"product": 1.0, "sum": 0.0})
    (3.0, 2.0)
    >>> pullback(1.0)
    Traceback (most recent call last):
        ...
    ValueError: vjp pullback: the cotangent has structure * but <lambda> returned
    {'product': *, 'sum': *}
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
    """Evaluate ``f`` at ``primals`` and its directional derivative along ``tangents``.

    Forward mode, like ``jax.jvp``: one pass that carries each value's tangent beside
    it, through operators, NumPy functions and kernels (a kernel's tangent comes out
    of its dual-number loop with its value).  Every call runs ``f``.

    Parameters
    ----------
    f : callable
        The function to differentiate, written in plain NumPy (see :func:`grad`).  It
        may return any nested structure of arrays and floats.
    primals : tuple or list
        The arguments of ``f``, one entry per positional argument: float scalars, float
        arrays, or nested tuples, lists and dicts of them.
    tangents : tuple or list
        One tangent per primal, of its primal's structure and shapes (converted to its
        primal's float dtype).

    Returns
    -------
    primals_out : object
        What ``f`` returned.
    tangents_out : object
        The derivative of ``f`` at ``primals`` along ``tangents``, of the structure,
        shapes and dtypes of ``primals_out`` (zeros for an output that does not depend on
        the primals).

    Raises
    ------
    TypeError
        If ``primals`` or ``tangents`` is not a tuple or a list; if a tangent is complex;
        if a primal holds an integer, bool, complex or other non-float value; if a
        primal, a tangent or an output is a Dask array (compute it first).
    ValueError
        If ``primals`` and ``tangents`` have different lengths, or a tangent's structure
        or shape differs from its primal's.
    NotImplementedError
        If ``f`` applies a NumPy function that has no rule to a traced value (the
        message names it).

    See Also
    --------
    vjp : Reverse mode.
    jacfwd : The whole Jacobian, by tangents along every input element at once.
    hessian : The matrix of second derivatives.

    Notes
    -----
    ``jvp(grad(f), (x,), (v,))[1]`` is the Hessian-vector product of ``f`` at ``x`` along
    ``v`` (forward over reverse: one forward-mode run of ``f`` and of its backward
    pass).

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.jvp(np.sin, (np.array([0.0, 1.0]),), (np.array([1.0, 2.0]),))[1].round(4)
    array([1.    , 1.0806])
    >>> x, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    >>> db.jvp(db.grad(lambda x: np.sum(x ** 3)), (x,), (v,))[1]     # Hessian times v
    array([6., 0.])
    >>> db.jvp(lambda x, y: (x * y, x + y), (2.0, 3.0), (1.0, 0.0))
    ((6.0, 5.0), (3.0, 1.0))

    ``primals`` and ``tangents`` are tuples, one entry per argument:

    >>> db.jvp(np.sin, np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    Traceback (most recent call last):
        ...
    TypeError: jvp: primals and tangents must be tuples (one entry per argument of
    sin), got ndarray and ndarray
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
    """Treat ``x`` as a constant: no derivative flows through it.

    Inside a function being differentiated, the result has ``x``'s value and no
    gradient or tangent flows back to ``x`` through it (like ``jax.lax.stop_gradient``).
    Outside any transform it returns ``x`` unchanged.

    Parameters
    ----------
    x : float, array_like or nested tuple, list or dict of them
        The value to hold constant.

    Returns
    -------
    object
        ``x``'s structure with each traced leaf replaced by its value, as a plain
        float, NumPy scalar or read-only array; leaves that are not traced are
        returned as they are.

    See Also
    --------
    grad, jvp, jit

    Notes
    -----
    Under :func:`dualbcast.jit`, a gradient function that calls ``stop_gradient``
    runs eagerly (it is not recorded).

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.grad(lambda x: x * x)(3.0)
    6.0
    >>> db.grad(lambda x: x * db.stop_gradient(x))(3.0)     # the second factor constant
    3.0
    >>> db.stop_gradient({"w": np.array([1.0, 2.0])})       # no trace: unchanged
    {'w': array([1., 2.])}
    """
    leaves, tree = flatten(x)
    return unflatten(tree, [_constant(leaf) for leaf in leaves])


def _constant(leaf):
    return leaf.tape.stop_gradient(leaf) if type(leaf) is Box else leaf
