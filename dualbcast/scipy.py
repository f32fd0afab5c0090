"""A function of an array as SciPy's optimisers want it.

For minimising a function written in NumPy (with kernels or without) with
``scipy.optimize.minimize`` and its gradient from dualbcast: ``objective(f)`` gives
SciPy the value and a gradient of their own on every call, and the Hessian-vector
products and Hessians that the Newton-type methods take.

``scipy.optimize.minimize(fun, x0, jac=True)`` calls ``fun(x, *args)`` for a value and a
gradient, and keeps gradients across calls: BFGS updates its inverse Hessian from the
difference of this gradient and the previous one.  A function that hands back the same
array every call -- ``db.value_and_grad(f, out=buf)`` does, by design: ``out=`` exists
so that a repeated call allocates nothing -- makes that difference zero, and BFGS walks
on with a wrong curvature (a 100-dimensional Rosenbrock function: it runs its 20000
iterations and stops at 128.5, where new arrays take 422 iterations to 1e-13).
``objective`` wraps ``f`` so that SciPy gets what it assumes: a Python float and a new
gradient array on every call, 1-d float64 as ``x`` is, and the Hessian-vector products
(``hessp=``) of the Newton-type methods::

    obj = dualbcast.scipy.objective(f, shape=x0.shape)
    res = scipy.optimize.minimize(obj, x0.ravel(), jac=True, hessp=obj.hessp,
                                  method="trust-ncg")
    x = res.x.reshape(x0.shape)

This module imports nothing of SciPy: it only shapes what SciPy is given.
"""
from __future__ import annotations

import math
import operator
from typing import Callable, Optional, Sequence

import numpy as np

from .core import grad, hessian, jvp, value_and_grad
from .core.trace import name_of
from .jit import jit as _jit

__all__ = ["Objective", "objective"]


def objective(f: Callable, shape: Optional[Sequence[int]] = None, *,
              jit: bool = False) -> "Objective":
    """Make a scalar function of an array an objective for ``scipy.optimize.minimize``.

    ``obj = objective(f, shape)`` is called as ``minimize(obj, x0.ravel(), jac=True,
    ...)`` calls it: ``obj(x, *args)`` returns ``(value, gradient)``,
    ``f(x.reshape(shape), *args)`` as a Python float and its gradient as a new 1-d
    float64 array, of its own on every call (SciPy keeps gradients across calls:
    never a buffer reused, never a read-only view).  ``obj.hessp(x, p, *args)`` is the
    Hessian-vector product (``hessp=``, for ``Newton-CG``, ``trust-ncg``,
    ``trust-krylov``, ``trust-constr``) from one pass of forward mode over the
    gradient (``db.jvp`` of ``db.grad``); ``obj.hess(x, *args)`` the whole Hessian,
    an ``(n, n)`` array (``hess=``: ``n`` backward passes, for small ``n``,
    ``trust-exact`` and ``dogleg``).  ``obj.fun`` and ``obj.jac`` give the value and
    the gradient alone (``NonlinearConstraint(obj.fun, lb, ub, jac=obj.jac)``,
    ``scipy.optimize.check_grad``).

    Parameters
    ----------
    f : callable
        ``f(x, *args)``: a real scalar from an array ``x`` (differentiated) and
        minimize's ``args=`` (passed after ``x``, not differentiated), written with
        NumPy and dualbcast kernels.
    shape : int or tuple of int, optional
        The shape ``f`` takes its array in (SciPy's ``x`` is 1-d).  None (the
        default) passes ``x`` as SciPy gives it.
    jit : bool, default False
        Keyword only.  Run the value, gradient and Hessian-vector product through
        :func:`dualbcast.jit` (see Notes).

    Returns
    -------
    Objective
        The objective: call it for ``(value, gradient)``; ``hessp``, ``hess``,
        ``fun`` and ``jac`` as above.

    Raises
    ------
    TypeError
        If ``f`` is not callable, or ``shape`` is not an int or a tuple of ints.
    ValueError
        If ``shape`` has a negative length.

    See Also
    --------
    Objective : The objective's methods, and what they raise.
    dualbcast.value_and_grad : The value and gradient of ``f``; with ``out=``, a
        buffer rewritten on every call, which SciPy must not get.

    Notes
    -----
    With ``jit=True`` each of the value, the gradient and the Hessian-vector product
    goes through :func:`dualbcast.jit`, which traces ``f`` once per signature (the
    shape and dtype of ``x``, the values of ``args``) and replays the recorded
    operations on later calls instead of running ``f``'s Python code.  Its contract is
    ``jax.jit``'s: ``f`` must compute from its arguments.  What a replay can check it
    checks on every call (branches on traced values, the globals ``f`` names,
    constant arrays' contents) and traces again; an attribute or container entry
    changed behind ``f``'s back is not seen (``help(dualbcast.jit)``).  Arrays in
    ``args`` are compared on every call, and a call whose ``args`` or constants hold
    over 256 KiB runs eagerly.  Values, gradients and Hessian-vector products are the
    eager ones, bit for bit, so a minimisation takes the same steps either way.
    ``hess`` runs eagerly (its rows are backward passes).

    Examples
    --------
    >>> import numpy as np, dualbcast.scipy
    >>> obj = dualbcast.scipy.objective(lambda x: np.sum(x ** 2), shape=(2, 2))
    >>> value, g = obj(np.arange(4.0))
    >>> value, g
    (14.0, array([0., 2., 4., 6.]))
    >>> obj.hessp(np.arange(4.0), np.array([1.0, 0.0, 0.0, 0.0]))
    array([2., 0., 0., 0.])

    Minimising, with ``args``:

    >>> import scipy.optimize
    >>> def distance(x, target):
    ...     return np.sum((x - target) ** 2) + np.sum(x ** 4)
    >>> obj = dualbcast.scipy.objective(distance, shape=(3,))
    >>> result = scipy.optimize.minimize(obj, np.zeros(3), args=(np.ones(3),), jac=True,
    ...                                  hessp=obj.hessp, method="trust-ncg")
    >>> bool(result.success), result.x.round(4)
    (True, array([0.5898, 0.5898, 0.5898]))
    """
    return Objective(f, shape, jit=jit)


class Objective:
    """A function of an array as ``scipy.optimize.minimize`` calls it; see :func:`objective`.

    Call it for ``(value, gradient)``; :meth:`hessp`, :meth:`hess`, :meth:`fun` and
    :meth:`jac` give the Hessian-vector product, the Hessian, the value and the
    gradient alone.  Each takes SciPy's 1-d ``x`` (any real dtype: converted to
    float64), reshaped to :attr:`shape`, then minimize's ``args``, and returns a
    Python float or a new float64 array of its own.

    Parameters
    ----------
    f : callable
        ``f(x, *args)``, a real scalar.
    shape : int or tuple of int, optional
        The shape ``f`` takes ``x`` in; None: as SciPy gives it.
    jit : bool, default False
        Keyword only.  Run through :func:`dualbcast.jit`.

    Attributes
    ----------
    f : callable
        The function.
    shape : tuple of int or None
        The shape ``f`` takes its array in.
    jit : bool
        Whether the calls go through :func:`dualbcast.jit`.

    Raises
    ------
    TypeError
        If ``f`` is not callable, or ``shape`` is not an int or a tuple of ints.
        When called: if ``x`` or ``p`` is complex, or ``f`` returns anything but a
        real scalar (from its forward pass, before any backward pass).
    ValueError
        If ``shape`` has a negative length.  When called: if ``x`` or ``p`` has
        another size than ``shape``'s (before ``f`` runs).

    Examples
    --------
    >>> import numpy as np, dualbcast.scipy
    >>> obj = dualbcast.scipy.Objective(lambda x: np.sum(x ** 3), shape=(2,))
    >>> obj.fun(np.array([1.0, 2.0])), obj.jac(np.array([1.0, 2.0]))
    (9.0, array([ 3., 12.]))
    >>> obj.hess(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    >>> obj(np.ones(3))
    Traceback (most recent call last):
        ...
    ValueError: objective of <lambda>: x has 3 elements (shape (3,)), but <lambda> takes
    shape (2,) (2 elements)
    """

    def __init__(self, f: Callable, shape: Optional[Sequence[int]] = None, *,
                 jit: bool = False):
        if not callable(f):
            raise TypeError(f"objective takes a function, not {f!r}")
        self.f = f
        self.shape = None if shape is None else _checked_shape(shape)
        self.jit = bool(jit)
        gradient = grad(f)

        def hvp(x, p, *args):
            return jvp(lambda y: gradient(y, *args), (x,), (p,))[1]
        hvp.__name__ = hvp.__qualname__ = f"hvp_of_{name_of(f)}"
        staged = _jit if self.jit else (lambda g: g)
        self._value = staged(f)
        self._value_and_grad = staged(value_and_grad(f))
        self._grad = staged(gradient)
        self._hvp = staged(hvp)
        self._hessian = hessian(f)      # (its rows are backward passes: eager either way)

    def __call__(self, x, *args) -> tuple[float, np.ndarray]:
        """``(f(x), gradient)``: a Python float and a new 1-d float64 array.

        Parameters
        ----------
        x : array_like
            The point, of ``shape``'s size.
        *args
            Passed to ``f`` after ``x``, not differentiated.

        Returns
        -------
        value : float
        gradient : numpy.ndarray
            1-d, float64, of its own.
        """
        value, g = self._value_and_grad(self._array(x, "x"), *args)
        return _float(value, self.f), _fresh_flat(g)

    def fun(self, x, *args) -> float:
        """``f(x)`` alone, a Python float (no gradient computed)."""
        return _float(self._value(self._array(x, "x"), *args), self.f)

    def jac(self, x, *args) -> np.ndarray:
        """The gradient alone, a new 1-d float64 array."""
        return _fresh_flat(self._grad(self._array(x, "x"), *args))

    def hessp(self, x, p, *args) -> np.ndarray:
        """The Hessian of ``f`` at ``x`` times ``p``, a new 1-d float64 array.

        One forward-mode pass over the gradient (``db.jvp`` of ``db.grad``).
        ``p`` has ``x``'s size.
        """
        x = self._array(x, "x")
        p = self._array(p, "p", x.shape)
        return _fresh_flat(self._hvp(x, p, *args))

    def hess(self, x, *args) -> np.ndarray:
        """The Hessian of ``f`` at ``x``, a new ``(n, n)`` float64 array.

        ``n`` is ``x``'s size; the rows are ``n`` backward passes (eager, also with
        ``jit=True``): for small ``n``.
        """
        x = self._array(x, "x")
        return _fresh_flat(self._hessian(x, *args)).reshape(x.size, x.size)

    def _array(self, a, name, shape=None):
        """``a`` as a float64 array of the shape ``f`` takes (no copy when it is one
        already); ``ValueError`` if its size is not that shape's."""
        a = np.asarray(a)
        if a.dtype != np.float64:
            if a.dtype.kind == "c":
                raise TypeError(f"objective: {name} is complex ({a.dtype}); SciPy's "
                                f"minimize works on real float64 arrays")
            a = a.astype(np.float64)
        shape = self.shape if shape is None else shape
        if shape is None:
            return a
        if a.size != math.prod(shape):
            raise ValueError(f"objective of {name_of(self.f)}: {name} has {a.size} "
                             f"elements (shape {a.shape}), but {name_of(self.f)} takes "
                             f"shape {shape} ({math.prod(shape)} elements)")
        return a.reshape(shape)

    def __repr__(self):
        return (f"dualbcast.scipy.objective({name_of(self.f)}, shape={self.shape}, "
                f"jit={self.jit})")


def _checked_shape(shape):
    try:
        shape = (operator.index(shape),)
    except TypeError:
        try:
            shape = tuple(operator.index(n) for n in shape)
        except TypeError:
            raise TypeError(f"objective: shape must be a tuple of ints, not "
                            f"{shape!r}") from None
    if any(n < 0 for n in shape):
        raise ValueError(f"objective: shape {shape} has a negative length")
    return shape


def _float(value, f):
    """The value as a Python float (``f`` returned a real scalar: the gradient
    function checked; ``fun`` checks here)."""
    if np.ndim(value) != 0 or np.iscomplexobj(value) or not isinstance(
            value, (int, float, np.number, np.ndarray, np.bool_)):
        what = (f"an array of shape {np.shape(value)}" if np.ndim(value) else
                f"a {type(value).__name__}")
        raise TypeError(f"objective: {name_of(f)} must return a real scalar; it "
                        f"returned {what}")
    return float(value)


def _fresh_flat(g):
    """A gradient (or Hessian-vector product) as SciPy keeps it: 1-d float64, writeable,
    in memory of its own.  Without ``out=``, dualbcast hands each call's gradient out
    in a new array (the 1-d view of it costs nothing); anything else is copied."""
    if not (type(g) is np.ndarray and g.dtype == np.float64 and g.flags.owndata
            and g.flags.writeable and g.flags.c_contiguous):
        g = np.array(g, dtype=np.float64)
    return g.reshape(-1)
