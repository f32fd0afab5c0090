"""dualbcast kernels as JAX functions (the optional ``[jax]`` extra), up to second order.

For JAX programs that call a scalar function elementwise which JAX expresses badly
(loops, early returns, costly branches), or a kernel already written for dualbcast:
wrapped here, the kernel runs as one compiled loop on the host under ``jax.jit``,
``grad``, ``vmap``, ``jvp``, ``jacfwd``/``jacrev`` and ``hessian``, each derivative
from one loop of the kernel.  ``op = dualbcast.jax.wrap(kernel)``; ``op(*args)`` maps,
``op.sum(*args)`` sums, the arguments JAX arrays, NumPy arrays or Python numbers,
broadcasting as the kernel does.  For example, with ``softplus`` a
``@dualbcast.fast_broadcast`` kernel of ``(x, beta)``::

    op = dualbcast.jax.wrap(softplus)
    loss = jax.jit(lambda x: op.sum(x, 2.0))
    g = jax.grad(loss)(x)                       # one loop: sum_and_partials
    h = jax.hessian(loss)(x)                    # the kernel's second-order loop

One idea: the kernel runs on the host through ``jax.pure_callback``, and derivatives
are ``jax.custom_jvp`` rules at three levels.  Each level is a callback for numbers; the
rule of each combines the next level's numbers with the tangents by jnp operations
linear in the tangents, which JAX can transpose (reverse mode):

- level 0, values: the map or the sum;
- level 1, values and first partials from one loop (``value_and_partials`` /
  ``sum_and_partials``) for exactly the arguments whose tangents are not symbolic
  zeros; the tangent is ``sum_i P_i * t_i`` (the sum's: ``sum_i vdot(G_i, t_i)``);
- level 2, second partials ``H_ij = d2k/(dx_i dx_j)`` at the broadcast shape, one
  second-order loop per moving argument j (and, for the sum, one ``sum_and_partials``
  for the gradients); the partials' tangents are ``sum_j H_ij * t_j`` (the sum's
  gradients': reduced to argument i's shape);
- level 2's rule raises: a third derivative is an error, never a wrong number.

Dtypes follow the kernel (float promotion, ints to float64, float16 to float32, Python
numbers weak) within JAX's canonical dtypes (float32 when x64 is off: the callback
casts).  Under ``vmap`` the callbacks get leading batch axes (``expand_dims``): a map
pads the arguments so that the kernel broadcasts the batch in its one loop; a sum
loops over the batch elements (a sum over the batch axis would be wrong).
"""
import functools

import numpy as np

try:
    import jax
    import jax.numpy as jnp
    from jax.custom_derivatives import SymbolicZero
except ImportError as err:          # dualbcast itself never imports JAX
    raise ImportError('dualbcast.jax needs JAX: pip install "dualbcast[jax]"') from err

from .kernel import FastBroadcast

__all__ = ["wrap", "Op"]

_typeof = getattr(jax, "typeof", None) or jax.core.get_aval     # (jax < 0.6)


def wrap(kernel: FastBroadcast) -> "Op":
    """Make a kernel a JAX function, differentiable up to second order.

    ``op(*args)`` is the kernel's map and ``op.sum(*args)`` its fused sum, under any
    composition of ``jax.jit``, ``grad``, ``vmap``, ``jvp``, ``jacfwd``, ``jacrev`` and
    ``hessian``.  The kernel runs on the host through ``jax.pure_callback``; a
    derivative is one loop giving the value and the partials for exactly the
    arguments being differentiated, and second derivatives come from the kernel's
    second-order loop.  Under ``vmap`` a sum stays one sum per batch element.

    The arguments, one per parameter of the kernel (positionally or by name), are
    JAX arrays, NumPy arrays or Python numbers of a real dtype (integer and bool
    arguments are never differentiated), broadcasting as the kernel does.  Dtypes
    follow the kernel's rules within JAX's canonical dtypes (float32 when
    ``jax_enable_x64`` is off).

    Parameters
    ----------
    kernel : FastBroadcast
        A kernel made by ``@dualbcast.fast_broadcast``.

    Returns
    -------
    Op
        The JAX function, with ``op(*args)`` and ``op.sum(*args)``.

    Raises
    ------
    TypeError
        If ``kernel`` is not a ``@fast_broadcast`` kernel.  When the function is
        called (or traced): if the arguments do not fit the kernel's parameters or
        are not real (a complex array).
    ValueError
        When the function is called (or traced), if the arguments' shapes do not
        broadcast together.
    NotImplementedError
        When a third derivative is taken.

    Examples
    --------
    >>> import math, jax, jax.numpy as jnp, dualbcast as db, dualbcast.jax
    >>> @db.fast_broadcast
    ... def smooth_leaky(x, alpha):
    ...     if x > 0.0:
    ...         return x
    ...     return alpha * x + (1.0 - alpha) * math.expm1(x)
    >>> act = dualbcast.jax.wrap(smooth_leaky)
    >>> x = jnp.array([-1.0, 0.0, 2.0])
    >>> loss = jax.jit(lambda x: act.sum(x, 0.1))
    >>> g = jax.grad(loss)(x)                   # one loop: sum_and_partials
    >>> bool(jnp.allclose(g, jnp.where(x > 0, 1.0, 0.1 + 0.9 * jnp.exp(x))))
    True
    >>> jax.vmap(act.sum, in_axes=(0, None))(jnp.ones((3, 2)), 0.1).shape
    (3,)
    """
    if not isinstance(kernel, FastBroadcast):
        raise TypeError(f"dualbcast.jax.wrap takes a @dualbcast.fast_broadcast kernel, "
                        f"not {type(kernel).__name__}")
    return Op(kernel)


class Op:
    """A kernel as a JAX function, made by :func:`wrap`.

    ``op(*args)`` is the kernel's map and ``op.sum(*args)`` its sum; see :func:`wrap`
    for the arguments, the transformations and the errors.

    Attributes
    ----------
    kernel : FastBroadcast
        The kernel.

    Examples
    --------
    >>> import math, jax.numpy as jnp, dualbcast as db, dualbcast.jax
    >>> @db.fast_broadcast
    ... def cube(x):
    ...     return x * x * x
    >>> op = dualbcast.jax.wrap(cube)
    >>> op.kernel is cube
    True
    >>> op(jnp.arange(3.0)).tolist(), float(op.sum(jnp.arange(3.0)))
    ([0.0, 1.0, 8.0], 9.0)
    """

    def __init__(self, kernel):
        self.kernel = kernel
        self.__name__ = kernel.__name__
        self._levels = {}           # (kind, active[, moving]) -> a level's custom_jvp
        self._map, self._sum = self._level0("map"), self._level0("sum")

    def __repr__(self):
        return f"<dualbcast.jax op {self.__name__}>"

    def __call__(self, *args, **kwargs):
        """The kernel elementwise, at the arguments' broadcast shape (a JAX array)."""
        return self._map(*self._arguments(args, kwargs))

    def sum(self, *args, **kwargs):
        """``sum(op(*args))`` from one loop, never materialising the map (a 0-d JAX array).

        Differentiated, the sum and its gradient come from one loop."""
        return self._sum(*self._arguments(args, kwargs))

    def _arguments(self, args, kwargs):
        # Bound as the kernel binds them (its defaults, its error for a wrong count),
        # as JAX arrays (a Python number stays weak), checked before any work.
        args = tuple(a if isinstance(a, jax.Array) else jnp.asarray(a)
                     for a in self.kernel._bind(args, kwargs))
        _Spec(self.kernel, args)
        return args

    # Level 0: values.  Level 1: values and first partials.  Level 2: second partials.
    def _level0(self, kind):
        @jax.custom_jvp
        def values(*args):
            spec = _Spec(self.kernel, args)
            host = self.kernel if kind == "map" else self.kernel.sum
            return _callback(host, kind, spec, spec.value(kind), args)

        @functools.partial(values.defjvp, symbolic_zeros=True)
        def rule(primals, tangents):
            spec = _Spec(self.kernel, primals)
            active = spec.moving(tangents)
            if not active:
                return values(*primals), jnp.zeros(spec.value(kind).shape, spec.dtype)
            value, partials = self._level1(kind, active)(*primals)
            tangent = sum(_apply(kind, p, tangents[i]) for p, i in zip(partials, active))
            return value, tangent.astype(spec.dtype)
        return values

    def _level1(self, kind, active):
        if (kind, active) in self._levels:
            return self._levels[kind, active]

        @jax.custom_jvp
        def first(*args):
            spec = _Spec(self.kernel, args)
            if kind == "map":
                host = functools.partial(self.kernel.value_and_partials, wrt=active)
            else:
                host = functools.partial(self.kernel.sum_and_partials, wrt=active)
            out = (spec.value(kind), tuple(spec.partial(kind, i) for i in active))
            return _callback(host, kind, spec, out, args)

        @functools.partial(first.defjvp, symbolic_zeros=True)
        def rule(primals, tangents):
            spec = _Spec(self.kernel, primals)
            moving = spec.moving(tangents)
            if not moving:
                out = first(*primals)
                return out, jax.tree.map(jnp.zeros_like, out)
            second = self._level2(kind, active, moving)
            value, partials, moving_partials, hessian = second(*primals)
            moved = [tangents[j] for j in moving]
            value_tangent = sum(_apply(kind, p, t) for p, t in zip(moving_partials, moved))
            # d(partial_i) = sum_j H_ij t_j at the broadcast shape (a sum's: reduced to i's)
            partial_tangents = tuple(
                spec.fit(kind, i, sum(h * t for h, t in zip(row, moved)))
                for i, row in zip(active, hessian))
            return (value, partials), (value_tangent.astype(spec.dtype), partial_tangents)
        self._levels[kind, active] = first
        return first

    def _level2(self, kind, active, moving):
        if (kind, active, moving) in self._levels:
            return self._levels[kind, active, moving]
        kernel = self.kernel

        @jax.custom_jvp
        def second(*args):
            spec = _Spec(self.kernel, args)

            def host(*arrays):
                # One second-order loop per moving j (tangent 1 for j): the value, the
                # partial P_j (the value's tangent), the partials, and H_ij for every i.
                loops = [kernel.value_and_partials(*arrays, wrt=active, tangents={j: 1.0})
                         for j in moving]
                hessian = tuple(tuple(loop[3][k] for loop in loops) for k in range(len(active)))
                if kind == "map":
                    return loops[0][0], loops[0][2], tuple(loop[1] for loop in loops), hessian
                both = tuple(sorted(set(active) | set(moving)))
                total, grads = kernel.sum_and_partials(*arrays, wrt=both)
                pick = lambda positions: tuple(grads[both.index(i)] for i in positions)
                return total, pick(active), pick(moving), hessian
            out = (spec.value(kind), tuple(spec.partial(kind, i) for i in active),
                   tuple(spec.partial(kind, j) for j in moving),
                   tuple(tuple(spec.broadcast for _ in moving) for _ in active))
            return _callback(host, kind, spec, out, args)

        @second.defjvp
        def third(primals, tangents):
            raise NotImplementedError(
                f"dualbcast.jax: {self.__name__} is differentiable up to second order (the "
                f"kernel's second-order loop); a third derivative is not available")
        self._levels[kind, active, moving] = second
        return second


def _apply(kind, partial, tangent):
    """A partial (map: at the broadcast shape) or gradient (sum: at the argument's
    shape) applied to a tangent: linear in it, so JAX can transpose it."""
    return partial * tangent if kind == "map" else jnp.sum(partial * tangent)


class _Spec:
    """What a call's outputs look like, from the arguments' shapes and dtypes alone
    (at trace time): the broadcast shape, the result dtype (the kernel's rule, made
    canonical for JAX), and the dtype each argument has as the kernel sees it."""

    def __init__(self, kernel, args):
        avals = [_typeof(a) for a in args]
        # The kernel's own rule and errors (dtypes, broadcasting), from stand-ins: no
        # memory of the arrays' size, a weak (Python) number as a Python number.
        self.weak = tuple(a.weak_type and not a.shape for a in avals)
        stand_ins = [np.zeros((), a.dtype).item() if weak else
                     np.broadcast_to(np.zeros((), a.dtype), a.shape)
                     for a, weak in zip(avals, self.weak)]
        self.dtype = jax.dtypes.canonicalize_dtype(kernel._result_dtype(*stand_ins))
        self.shape = np.broadcast_shapes(*(a.shape for a in avals))
        self.shapes = tuple(a.shape for a in avals)
        # (the callback casts a weak number to the result dtype, as the kernel would)
        self.dtypes = tuple(self.dtype if weak else a.dtype for a, weak in zip(avals, self.weak))
        self.floats = tuple(jnp.issubdtype(a.dtype, jnp.floating) for a in avals)
        self.broadcast = jax.ShapeDtypeStruct(self.shape, self.dtype)

    def moving(self, tangents):
        """The float arguments whose tangents are not symbolic zeros (ints never are
        differentiated)."""
        return tuple(i for i, t in enumerate(tangents)
                     if self.floats[i] and not isinstance(t, SymbolicZero))

    def value(self, kind):
        return self.broadcast if kind == "map" else jax.ShapeDtypeStruct((), self.dtype)

    def partial(self, kind, i):
        """A map's partial is at the broadcast shape; a sum's gradient at the argument's."""
        return self.broadcast if kind == "map" else jax.ShapeDtypeStruct(self.shapes[i],
                                                                         self.dtypes[i])

    def fit(self, kind, i, tangent):
        """A tangent at the broadcast shape as the tangent of partial i: for a sum,
        summed over the axes along which argument i is broadcast."""
        if kind == "map":
            return tangent.astype(self.dtype)
        shape, lead = self.shapes[i], tangent.ndim - len(self.shapes[i])
        axes = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(shape)
                                          if n == 1 and tangent.shape[lead + d] != 1)
        return jnp.sum(tangent, axis=axes).reshape(shape).astype(self.dtypes[i])


def _callback(host, kind, spec, out, args):
    """``host(*numpy arguments)`` through ``jax.pure_callback``, its results cast to
    ``out``'s dtypes.  Under vmap the arguments arrive with the same number of leading
    batch axes (size 1 where not batched)."""
    def run(*arrays):
        arrays = [np.asarray(a, spec.dtype) if weak else np.asarray(a)
                  for a, weak in zip(arrays, spec.weak)]
        lead = arrays[0].ndim - len(spec.shapes[0]) if arrays else 0
        batch = np.broadcast_shapes(*(a.shape[:lead] for a in arrays))
        if lead and kind == "map":
            # The batch axes first, then ones: the kernel broadcasts the batch itself.
            arrays = [a.reshape(a.shape[:lead] + (1,) * (len(spec.shape) - len(s)) + s)
                      for a, s in zip(arrays, spec.shapes)]
        if not lead or kind == "map":
            return jax.tree.map(lambda r, o: np.asarray(r, o.dtype), host(*arrays), out)
        # A sum per batch element: each argument indexed at it (at 0 where not batched).
        rows = [host(*(a[tuple(min(k, n - 1) for k, n in zip(index, a.shape[:lead]))]
                       for a in arrays)) for index in np.ndindex(batch)]
        return jax.tree.map(
            lambda o, *leaves: np.asarray(np.reshape(leaves, batch + o.shape) if leaves
                                          else np.zeros(batch + o.shape), o.dtype),
            out, *rows)
    return jax.pure_callback(run, out, *args, vmap_method="expand_dims")
