"""The hand-written dual rules compiled as overloads: ``**`` and ``max``/``min``.

These are not in the table because each is more exact written out: ``x ** n`` with an
integer ``n`` must use the integer power (exact for negative ``x``) and never go through
``log``, and ``max``/``min`` share the derivative at a tie.  (The operators ``+ - * /``,
negation, comparisons, truth and ``x ** n`` of a literal integer ``n`` are lowered in
place: :mod:`.builtins`.)
"""
import math
import operator

from numba import types

from . import builtins  # noqa: F401  (first: its x ** <literal int> is typed before _pow)
from . import partials as P
from .dualtype import DualType, make_dual, value_of
from .rules import mixed_case, overload


def _operator(*ops):
    """Register one overload generator for an operator and its in-place twin."""
    def register(generator):
        for op in ops:
            overload(op)(generator)
        return generator
    return register


@_operator(operator.pow, operator.ipow)
def _pow(x, y):
    if isinstance(x, DualType) and isinstance(y, types.Integer):
        # Integer power: exact for negative x, and n*x**(n-1) is never 0*inf at 0.
        # Negative n: the value 1 / x**|n| (Numba's x ** -n of a float raises at x = 0,
        # NumPy's and this one give inf); on a nested dual (second order) this rule one
        # level down, whose tangent is the first derivative.  1.0 / (x ** |n|) there
        # would differentiate x ** |n| first: 0 at x = 0 (and where it underflows), met
        # by 1 / 0 = inf, which the NaN-safe product makes 0, not -inf.
        # The derivative n * x**(n-1) as n * (x**n / x), one division: its own derivative
        # (the second) is then inf at 0 as NumPy's, JAX's and 1.0 / x's, never 0 * inf,
        # and passes through no x ** (|n| + 1), which under- or overflows first.
        nested = isinstance(x.dtype, DualType)

        def impl(x, y):
            if y >= 0:
                value = x.val ** y
                d = 0.0 if y == 0 else y * x.val ** (y - 1)
            else:
                value = x.val ** y if nested else 1.0 / x.val ** (-y)
                d = y * (value / x.val)
            return make_dual(value, P.scale(x.parts, d))
        return impl
    if mixed_case(x, y) is not None:
        return lambda x, y: math.pow(x, y)   # the table's rule
    return None


def _half_each(x, y):
    """At a tie of max/min, half of the derivative goes to each side (JAX, autograd)."""
    raise NotImplementedError


@overload(_half_each)
def _half_each_rule(x, y):
    # Nested duals: the values tie too, and their inner partials (the tangent) are
    # halved alike: the second derivatives are those of the first-order convention's
    # (d max(x, y) along (tx, ty) at a tie: (tx + ty) / 2, at every order).
    case = mixed_case(x, y)
    nested = isinstance(getattr(x if case != "nd" else y, "dtype", None), DualType)
    if case == "dd":
        if nested:
            return lambda x, y: make_dual(_half_each(x.val, y.val),
                                          P.lincomb(x.parts, 0.5, y.parts, 0.5))
        return lambda x, y: make_dual(x.val, P.lincomb(x.parts, 0.5, y.parts, 0.5))
    if case == "dn":
        if nested:
            return lambda x, y: make_dual(_half_each(x.val, y), P.scale(x.parts, 0.5))
        return lambda x, y: make_dual(x.val, P.scale(x.parts, 0.5))
    if case == "nd":
        if nested:
            return lambda x, y: make_dual(_half_each(x, y.val), P.scale(y.parts, 0.5))
        return lambda x, y: make_dual(y.val, P.scale(y.parts, 0.5))
    return None


@overload(max)
def _max(x, y):
    # Python's max(x, y) keeps x unless y > x: so does the dual, on the values.
    if mixed_case(x, y) is not None:
        def impl(x, y):
            xv, yv = value_of(x), value_of(y)
            if xv == yv:
                return _half_each(x, y)
            if yv > xv:
                return y
            return x
        return impl
    return None


@overload(min)
def _min(x, y):
    if mixed_case(x, y) is not None:
        def impl(x, y):
            xv, yv = value_of(x), value_of(y)
            if xv == yv:
                return _half_each(x, y)
            if yv < xv:
                return y
            return x
        return impl
    return None
