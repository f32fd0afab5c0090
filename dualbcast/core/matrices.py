"""Whole derivative matrices -- ``jacobian``, ``jacfwd``, ``jacrev``, ``hessian`` --
each as one batched pass (:func:`.mapped.vmap`).

A row of a Jacobian is a pullback of one output's unit cotangent, a column a
directional derivative along one input's unit tangent.  ``jacrev`` traces ``f`` once
and runs its backward pass once over the batch of every unit cotangent; ``jacfwd``
runs ``f`` once carrying the batch of every unit tangent beside each value.  So
``jacobian`` takes rows unless there are more outputs than inputs, and ``hessian`` is
the forward Jacobian of the gradient (forward over reverse, as JAX's): ``f`` and its
backward pass run once, every value's tangent a batch of Hessian-vector products.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence, Union

import numpy as np

from ..foreign import is_dask_array
from .api import grad, jvp, vjp
from .tape import Traced
from .trace import ArgumentPositions, name_of, require_callable
from .mapped import vmap

Argnums = Union[int, Sequence[int]]


def jacobian(f: Callable, argnums: Argnums = 0, *, mode: str = "auto") -> Callable:
    """Return a function that computes the Jacobian of ``f``.

    Like ``jax.jacobian``: ``jacobian(f)(x)`` is the matrix of the derivatives of
    every element of ``f(x)`` with respect to every element of ``x``, an array of shape
    ``out.shape + x.shape``, computed in one batched pass.

    Parameters
    ----------
    f : callable
        The function to differentiate, written in plain NumPy (see
        :func:`dualbcast.grad`).  It must return a float array or a float scalar.
    argnums : int or tuple of int, optional
        The positional arguments to differentiate (default 0, the first; negative
        counts from the end), each a float scalar or a float array (not a nested
        structure).  A tuple gives a tuple of Jacobians.
    mode : {"auto", "reverse", "forward"}, optional
        "reverse" (:func:`jacrev`): one trace of ``f``, then one backward pass over the
        batch of all rows; "forward" (:func:`jacfwd`): one forward-mode run of ``f``
        over the batch of all columns; "auto" (the default) takes rows unless ``f`` has
        more outputs than inputs.

    Returns
    -------
    callable
        A function of ``f``'s arguments (keyword arguments are passed to ``f`` and
        not differentiated, as :func:`grad`'s) returning the Jacobian, an array of
        shape ``out.shape + x.shape`` (0-d for a scalar output of a scalar argument);
        a tuple of them, one per argument, when ``argnums`` is a tuple.  Its dtype is
        the argument's when it is computed by rows, the output's when by columns, as
        in JAX (they differ only when ``f`` changes precision, float32 in and float64
        out).

    Raises
    ------
    TypeError
        At once, if ``argnums`` is not an int or a tuple of ints.  When called: if a
        differentiated argument is not a float scalar or a float array (an integer
        array, a list, a dict); if ``f`` returns anything but a float array or a float
        scalar (a tuple, an integer array); if ``f`` builds a plain array from traced
        values (``np.array([x, y])``: use ``np.stack``).
    ValueError
        At once, if ``mode`` is not one of the three, or if ``argnums`` is empty or
        repeats an argument.  When called, if ``argnums`` names an argument the call
        does not have.
    NotImplementedError
        If ``f`` applies a NumPy function that has no rule to a traced value (the
        message names it).

    See Also
    --------
    jacfwd, jacrev, hessian
    dualbcast.vjp : One row (a vector-Jacobian product) at a time.
    dualbcast.jvp : One column (a Jacobian-vector product) at a time.

    Notes
    -----
    A row of a Jacobian is a pullback of one output's unit cotangent, a column a
    directional derivative along one input's unit tangent; both modes compute every
    row (or column) at once, as one batch (:func:`dualbcast.vmap`).

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.jacobian(lambda x: x[:2] * x[1:])(np.array([1.0, 2.0, 3.0]))
    array([[2., 1., 0.],
           [0., 3., 2.]])
    >>> jx, jy = db.jacobian(lambda x, y: x * y, argnums=(0, 1))(np.array([1.0, 2.0]),
    ...                                                          np.array([3.0, 4.0]))
    >>> jy
    array([[1., 0.],
           [0., 2.]])
    >>> db.jacobian(lambda x: x ** 2)(np.arange(3))
    Traceback (most recent call last):
        ...
    TypeError: jacobian/hessian: argument 0 must be a float scalar or a float array,
    not ndarray of dtype int64
    """
    require_callable(f, "jacobian")
    if mode not in ("auto", "forward", "reverse"):
        raise ValueError(f"jacobian: mode must be 'auto', 'forward' or 'reverse', not "
                         f"{mode!r}")
    positions_for = _positions(argnums, f)
    single = positions_for.single

    @functools.wraps(f, updated=())   # (not f's attributes: db.jit reads what made a function)
    def jacobian_f(*args, **kwargs):
        inputs, of_inputs = _restricted(f, args, kwargs, positions_for, _checked_output)
        if mode == "forward":
            blocks = _by_columns(of_inputs, inputs)
        else:
            out, pullback = vjp(of_inputs, *inputs)
            if mode == "auto" and _size(out) > sum(map(_size, inputs)):
                blocks = _by_columns(of_inputs, inputs)
            else:
                blocks = _by_rows(out, pullback, inputs)
        return blocks[0] if single else tuple(blocks)
    return jacobian_f


def jacfwd(f: Callable, argnums: Argnums = 0) -> Callable:
    """Return a function that computes the Jacobian of ``f`` by forward mode.

    Like ``jax.jacfwd``: ``f`` runs once, each value carrying its tangents along every
    input element at once (a batch of unit tangents, :func:`dualbcast.vmap` of
    :func:`dualbcast.jvp`); best when ``f`` has more outputs than inputs.  It is
    ``jacobian(f, argnums, mode="forward")``.

    Parameters
    ----------
    f : callable
        The function to differentiate; it must return a float array or a float
        scalar.
    argnums : int or tuple of int, optional
        The positional arguments to differentiate (default 0), each a float scalar or
        a float array.  A tuple gives a tuple of Jacobians.

    Returns
    -------
    callable
        A function of ``f``'s arguments returning the Jacobian, of shape
        ``out.shape + x.shape``, as :func:`jacobian`'s (keyword arguments too).

    Raises
    ------
    TypeError
        If ``argnums`` is not an int or a tuple of ints, a differentiated argument is
        not a float scalar or a float array, or ``f`` returns anything but a float
        array or scalar (see :func:`jacobian`).
    ValueError
        If ``argnums`` is empty, repeats an argument, or names one the call does not
        have.

    See Also
    --------
    jacobian, jacrev, dualbcast.jvp

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.jacfwd(lambda x: np.sin(x) * x[0])(np.array([1.0, 2.0]))
    array([[ 1.38177329,  0.        ],
           [ 0.90929743, -0.41614684]])
    """
    require_callable(f, "jacfwd")
    return jacobian(f, argnums, mode="forward")


def jacrev(f: Callable, argnums: Argnums = 0) -> Callable:
    """Return a function that computes the Jacobian of ``f`` by reverse mode.

    Like ``jax.jacrev``: ``f`` is traced once, and its backward pass runs once over the
    batch of every output's unit cotangent (:func:`dualbcast.vmap` of a
    :func:`dualbcast.vjp` pullback); best when ``f`` has fewer outputs than inputs.  It
    is ``jacobian(f, argnums, mode="reverse")``.

    Parameters
    ----------
    f : callable
        The function to differentiate; it must return a float array or a float
        scalar.
    argnums : int or tuple of int, optional
        The positional arguments to differentiate (default 0), each a float scalar or
        a float array.  A tuple gives a tuple of Jacobians.

    Returns
    -------
    callable
        A function of ``f``'s arguments returning the Jacobian, of shape
        ``out.shape + x.shape``, as :func:`jacobian`'s (keyword arguments too).

    Raises
    ------
    TypeError
        If ``argnums`` is not an int or a tuple of ints, a differentiated argument is
        not a float scalar or a float array, or ``f`` returns anything but a float
        array or scalar (see :func:`jacobian`).
    ValueError
        If ``argnums`` is empty, repeats an argument, or names one the call does not
        have.

    See Also
    --------
    jacobian, jacfwd, dualbcast.vjp

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.jacrev(lambda x: np.sum(x ** 2) * x[:1])(np.array([1.0, 2.0]))
    array([[7., 4.]])
    """
    require_callable(f, "jacrev")
    return jacobian(f, argnums, mode="reverse")


def hessian(f: Callable, argnums: Argnums = 0) -> Callable:
    """Return a function that computes the Hessian of the scalar function ``f``.

    Like ``jax.hessian``: ``hessian(f)(x)`` is the matrix of the second derivatives
    of ``f(x)`` with respect to ``x``, an array of shape ``x.shape + x.shape``.

    Parameters
    ----------
    f : callable
        The function to differentiate, written in plain NumPy (see
        :func:`dualbcast.grad`).  It must return a real scalar.
    argnums : int or tuple of int, optional
        The positional arguments to differentiate (default 0, the first; negative
        counts from the end), each a float scalar or a float array (not a nested
        structure).

    Returns
    -------
    callable
        A function of ``f``'s arguments (keyword arguments are passed to ``f`` and
        not differentiated, as :func:`grad`'s) returning the Hessian: an array of
        shape ``x.shape + x.shape`` (0-d for a scalar argument); for a tuple
        ``argnums``, a tuple of tuples of blocks, block ``[i][j]`` of shape
        ``x_i.shape + x_j.shape``.

    Raises
    ------
    TypeError
        At once, if ``argnums`` is not an int or a tuple of ints.  When called: if a
        differentiated argument is not a float scalar or a float array; if ``f`` does
        not return a real scalar (the message is :func:`dualbcast.grad`'s).
    ValueError
        At once, if ``argnums`` is empty or repeats an argument.  When called, if it
        names an argument the call does not have.
    NotImplementedError
        If ``f`` applies a NumPy function that has no rule to a traced value (the
        message names it).

    See Also
    --------
    jacobian, dualbcast.grad
    dualbcast.jvp : ``jvp(grad(f), (x,), (v,))[1]`` is one Hessian-vector product.

    Notes
    -----
    Forward over reverse, in one pass: the gradient of ``f`` runs once in forward mode
    with every unit tangent at once (a batch), so each value carries a batch of
    Hessian-vector products; a kernel's come from its second-order loop.

    Examples
    --------
    >>> import numpy as np, dualbcast as db
    >>> db.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    >>> db.hessian(lambda x: x ** 3)(2.0)
    array(12.)

    With two arguments, the blocks of each pair:

    >>> h = db.hessian(lambda x, y: np.sum(x ** 2 * y), argnums=(0, 1))
    >>> (hxx, hxy), (hyx, hyy) = h(np.array([1.0, 2.0]), 3.0)
    >>> hxx, hxy, hyy
    (array([[6., 0.],
           [0., 6.]]), array([2., 4.]), array(0.))
    """
    require_callable(f, "hessian")
    positions_for = _positions(argnums, f)
    single = positions_for.single
    gradient = grad(f, argnums)

    @functools.wraps(f, updated=())   # (not f's attributes: db.jit reads what made a function)
    def hessian_f(*args, **kwargs):
        inputs, gradient_of_inputs = _restricted(
            lambda *full, **kw: gradient(*full, **kw) if single
            else _flat_concatenation(gradient(*full, **kw)),
            args, kwargs, positions_for)
        blocks = _by_columns(gradient_of_inputs, inputs)
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


def _restricted(f, args, kwargs, positions_for, check=None):
    """The differentiated arguments of a call of ``f`` (``positions_for``: its
    :class:`.trace.ArgumentPositions`) and ``f`` as a function of them alone (the other
    arguments, and the keyword arguments, as given)."""
    chosen = positions_for(len(args))[0]
    for i in chosen:
        _check_input(args[i], i)

    def of_inputs(*xs):
        full = list(args)
        for i, x in zip(chosen, xs):
            full[i] = x
        out = f(*full, **kwargs)
        return out if check is None else check(out, f)
    return [args[i] for i in chosen], of_inputs


def _flat_concatenation(gradients):
    return np.concatenate([np.reshape(g, -1) for g in gradients])


def _by_rows(out, pullback, inputs):
    """The Jacobian blocks (one per input) from one pullback over the batch of every
    output element's unit cotangent (``out, pullback``: a vjp of the function)."""
    out_shape = _shape(out)
    count = _size(out)
    basis = np.eye(count, dtype=_float(out)).reshape((count,) + out_shape)
    rows = vmap(pullback)(basis)
    return [np.reshape(block, out_shape + _shape(x)) for block, x in zip(rows, inputs)]


def _by_columns(f, inputs):
    """The Jacobian blocks from one forward-mode run of ``f`` over the batch of every
    input element's unit tangent (every input's at once)."""
    sizes = [_size(x) for x in inputs]
    total = sum(sizes)
    tangents, start = [], 0
    for x, size in zip(inputs, sizes):
        basis = np.zeros((total, size), _float(x))
        basis[start:start + size] = np.eye(size, dtype=_float(x))
        tangents.append(basis.reshape((total,) + _shape(x)))
        start += size

    def column(*ts):
        out, tangent = jvp(f, tuple(inputs), ts)
        return tangent
    columns = vmap(column, axis_size=total)(*tangents)   # (total,) + the output's shape
    columns = np.moveaxis(columns, 0, -1)
    out_shape = _shape(columns)[:-1]
    blocks, start = [], 0
    for x, size in zip(inputs, sizes):
        blocks.append(np.reshape(columns[..., start:start + size], out_shape + _shape(x)))
        start += size
    return blocks


def _shape(x):
    return x.shape if isinstance(x, Traced) else np.shape(x)


def _float(x):
    dtype = x.dtype if isinstance(x, Traced) else np.result_type(x)
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
    if not isinstance(x, Traced) and not (isinstance(x, (float, np.floating)) or
                                          isinstance(x, np.ndarray) and x.dtype.kind == "f"):
        raise TypeError(f"jacobian/hessian: argument {i} must be a float scalar or a float "
                        f"array, not {type(x).__name__}"
                        f"{' of dtype ' + str(x.dtype) if hasattr(x, 'dtype') else ''}")


_DASK = ("jacobian/hessian: {what} is a Dask array; Dask arrays are differentiated by grad, "
         "value_and_grad and vjp (first order), not by jacobian, hessian, jvp or nested "
         "derivatives: compute a NumPy array first (x.compute())")


def _checked_output(out, f):
    if isinstance(out, Traced) or isinstance(out, (float, np.floating)) or \
            isinstance(out, np.ndarray) and out.dtype.kind == "f":
        return out
    if is_dask_array(out):
        raise TypeError(_DASK.format(what=f"the output of {name_of(f)}"))
    raise TypeError(f"jacobian: {name_of(f)} must return a float array or scalar, not "
                    f"{type(out).__name__}")
