"""The hand-written dual rules: operators, comparisons, ``max``/``min``, truth.

These are not in the table because each is cheaper or more exact written out:
``+``/``-`` need no multiplication at all, ``*`` and ``/`` share one product or
quotient between the value and both partials, and ``x ** n`` with an integer ``n``
must use the integer power (exact for negative ``x``) and never go through ``log``.
"""
import math
import operator

from numba import types

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


@_operator(operator.add, operator.iadd)
def _add(x, y):
    case = mixed_case(x, y)
    if case == "dd":
        return lambda x, y: make_dual(x.val + y.val, P.add(x.parts, y.parts))
    if case == "dn":
        return lambda x, y: make_dual(x.val + y, x.parts)
    if case == "nd":
        return lambda x, y: make_dual(x + y.val, y.parts)
    return None


@_operator(operator.sub, operator.isub)
def _sub(x, y):
    case = mixed_case(x, y)
    if case == "dd":
        return lambda x, y: make_dual(x.val - y.val, P.sub(x.parts, y.parts))
    if case == "dn":
        return lambda x, y: make_dual(x.val - y, x.parts)
    if case == "nd":
        return lambda x, y: make_dual(x - y.val, P.neg(y.parts))
    return None


@_operator(operator.mul, operator.imul)
def _mul(x, y):
    case = mixed_case(x, y)
    if case == "dd":   # product rule: x' y + y' x
        return lambda x, y: make_dual(x.val * y.val, P.lincomb(x.parts, y.val, y.parts, x.val))
    if case == "dn":
        return lambda x, y: make_dual(x.val * y, P.scale(x.parts, y))
    if case == "nd":
        return lambda x, y: make_dual(x * y.val, P.scale(y.parts, x))
    return None


@_operator(operator.truediv, operator.itruediv)
def _truediv(x, y):
    case = mixed_case(x, y)
    if case == "dd":   # (x/y)' = x'/y - y' (x/y)/y: reuses the quotient
        def impl(x, y):
            q = x.val / y.val
            return make_dual(q, P.lincomb(x.parts, 1.0 / y.val, y.parts, -q / y.val))
        return impl
    if case == "dn":
        return lambda x, y: make_dual(x.val / y, P.scale(x.parts, 1.0 / y))
    if case == "nd":
        def impl(x, y):
            q = x / y.val
            return make_dual(q, P.scale(y.parts, -q / y.val))
        return impl
    return None


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


@overload(operator.neg)
def _neg(x):
    if isinstance(x, DualType):
        return lambda x: make_dual(-x.val, P.neg(x.parts))
    return None


@overload(operator.pos)
def _pos(x):
    if isinstance(x, DualType):
        return lambda x: x
    return None


def _comparison(op):
    @overload(op)
    def compare(x, y):
        if mixed_case(x, y) is not None:
            return lambda x, y: op(value_of(x), value_of(y))
        return None


for _op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
    _comparison(_op)


@overload(bool)
def _truth(x):
    # ``if d:`` and ``while d:`` look at the value, like every comparison.
    if isinstance(x, DualType):
        return lambda x: x.val != 0
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
