"""Checking gradients: ``check_grads`` compares the reverse-mode VJP of a function with
central differences, for users' own functions and for our tests."""
import numpy as np

from .core import vjp
from .core.pytree import flatten, unflatten

_DEFAULTS = {  # dtype: (step, rtol): step ~ cbrt(machine epsilon), the central-difference optimum
    np.dtype(np.float64): (1e-6, 1e-5),
    np.dtype(np.float32): (3e-3, 3e-2),
    np.dtype(np.float16): (1e-1, 2e-1),
}


def check_grads(f, *args, argnums=None, directions=3, eps=None, rtol=None, atol=None, seed=0):
    """Assert that ``vjp(f)`` agrees with central differences of ``f``.

    For ``directions`` random directions ``v`` (in the differentiated arguments) and
    random cotangents ``u`` (in ``f``'s output), compares ``<pullback(u), v>`` with the
    central difference ``(<u, f(x + eps v)> - <u, f(x - eps v)>) / (2 eps)``, and checks
    that each gradient has its argument's structure, shape and dtype.  ``argnums``
    (default: every argument) selects the differentiated arguments; ``eps``, ``rtol``
    and ``atol`` default by dtype.  Raises ``AssertionError`` with the two numbers.

    >>> import numpy as np
    >>> check_grads(lambda x, y: np.sum(np.sin(x) * y), np.ones(3), 2.0)
    """
    positions = range(len(args)) if argnums is None else (
        (argnums,) if np.ndim(argnums) == 0 else tuple(argnums))
    positions = [p % len(args) for p in positions]

    def f_of_differentiated(*differentiated):
        full = list(args)
        for p, value in zip(positions, differentiated):
            full[p] = value
        return f(*full)

    primals = [args[p] for p in positions]
    out, pullback = vjp(f_of_differentiated, *primals)
    leaves, trees = zip(*(flatten(p) for p in primals)) if primals else ((), ())
    # The least precise differentiated leaf sets the step and the tolerance (a Python
    # float is a float64).
    settings = [_DEFAULTS.get(np.dtype(getattr(leaf, "dtype", np.float64)),
                              _DEFAULTS[np.dtype(np.float64)])
                for group in leaves for leaf in group]
    step, default_rtol = max(settings, default=_DEFAULTS[np.dtype(np.float64)])
    eps = step if eps is None else eps
    rtol = default_rtol if rtol is None else rtol
    rng = np.random.default_rng(seed)
    out_leaves, out_tree = flatten(out)

    for _ in range(directions):
        directions_v = [[_random_like(leaf, rng) for leaf in group] for group in leaves]
        u_leaves = [_random_like(leaf, rng) for leaf in out_leaves]
        cotangents = pullback(unflatten(out_tree, u_leaves))
        lhs = 0.0
        for p, ct, tree, group, v_group in zip(positions, cotangents, trees, leaves,
                                              directions_v):
            ct_leaves, ct_tree = flatten(ct)
            assert ct_tree == tree, f"argument {p}: the gradient's structure differs"
            for leaf, ct_leaf, v in zip(group, ct_leaves, v_group):
                assert np.shape(ct_leaf) == np.shape(leaf), (
                    f"argument {p}: gradient shape {np.shape(ct_leaf)} != {np.shape(leaf)}")
                assert np.result_type(ct_leaf) == np.result_type(leaf), (
                    f"argument {p}: gradient dtype {np.result_type(ct_leaf)} != "
                    f"{np.result_type(leaf)}")
                lhs += float(np.sum(np.asarray(ct_leaf, np.float64) * v))

        def shifted(sign):
            moved = [unflatten(tree, [_shift(leaf, v, sign * eps) for leaf, v in
                                      zip(group, v_group)])
                     for tree, group, v_group in zip(trees, leaves, directions_v)]
            value = f_of_differentiated(*moved)
            return sum(float(np.sum(np.asarray(o, np.float64) * u))
                       for o, u in zip(flatten(value)[0], u_leaves))
        rhs = (shifted(1.0) - shifted(-1.0)) / (2.0 * eps)
        scale = max(abs(lhs), abs(rhs), 1.0)
        tolerance = (rtol * scale) if atol is None else (atol + rtol * max(abs(lhs), abs(rhs)))
        assert abs(lhs - rhs) <= tolerance, (
            f"gradient check failed: <vjp(u), v> = {lhs!r} but central differences give "
            f"{rhs!r} (|difference| {abs(lhs - rhs):.3g} > tolerance {tolerance:.3g})")


def _random_like(leaf, rng):
    return rng.standard_normal(np.shape(leaf))


def _shift(leaf, v, amount):
    dtype = np.result_type(leaf)
    moved = np.asarray(leaf, np.float64) + amount * v
    if type(leaf) is float:
        return float(moved)
    moved = moved.astype(dtype)
    return moved if isinstance(leaf, np.ndarray) else moved[()]
