"""Turn the derivative table into Numba overloads.

One generator per table section; each produces the dual/dual, dual/number and
number/dual cases of a function, and every case applies the chain rule through the
NaN-safe helpers of :mod:`dualbcast.dual.partials`.
"""
import numba
import numpy as np
from numba.core import types

from . import partials as P
from ..vmath.common import OVERLOAD_OPTIONS
from ..vmath import (FLOAT_VALUED, IMPLEMENTATION_OF, ROUND, ROUND_NDIGITS_ERROR, STAND_INS,
                     with_vector_math)
from .dualtype import REAL, DualType, make_dual, value_of
from .table import (BINARY, NUMPY_BINARY, NUMPY_EXPRESSIONS, NUMPY_PIECEWISE_CONSTANT,
                    NUMPY_UNARY, PIECEWISE_CONSTANT_BINARY, PIECEWISE_CONSTANT_UNARY,
                    PREDICATES, ROUNDING, UNARY)

#: Rules divide by zero on purpose (d log at 0 is +inf): NumPy's error model.  Forced
#: inlining: a kernel loop is only vectorised when every call in it is inlined.  (The
#: vector math's stand-ins' options, one dict.)
JIT_OPTIONS = OVERLOAD_OPTIONS


def overload(fn):
    return numba.extending.overload(fn, jit_options=JIT_OPTIONS)


def jit_rule(formula):
    # Inlined into the rule as Numba IR, not compiled as a function of its own: a kernel's
    # first compile pays ~0.05 s for each function it compiles.
    return numba.njit(**JIT_OPTIONS, inline="always")(formula)


def is_dual(*tys):
    return any(isinstance(t, DualType) for t in tys)


def is_dual_or_real(*tys):
    return all(isinstance(t, (DualType,) + REAL) for t in tys)


def mixed_case(x, y):
    """Which two-argument overload applies: "dd" (dual, dual), "dn" (dual, number),
    "nd" (number, dual), or None when no dual is involved."""
    if not (is_dual(x, y) and is_dual_or_real(x, y)):
        return None
    if isinstance(x, DualType) and isinstance(y, DualType) and x.depth == y.depth:
        return "dd"
    # (of two nested duals, the shallower is a constant to the deeper)
    return "dn" if getattr(x, "depth", 0) > getattr(y, "depth", 0) else "nd"


def unary_rule(fn, derivative, value=None):
    """``fn``'s rule for a dual: ``value(x)`` (``fn`` itself by default) on the value,
    ``derivative(x, y)`` times the partials.  On a nested dual both are evaluated on
    the inner dual (``value`` through ``fn``'s own rule): the derivative formula is
    differentiated too, which gives the second derivative."""
    derivative = jit_rule(derivative)
    value = fn if value is None else value

    @overload(fn)
    def rule(x):
        if isinstance(x, DualType):
            f = fn if isinstance(x.dtype, DualType) else value

            def impl(x):
                y = f(x.val)
                return make_dual(y, P.scale(x.parts, derivative(x.val, y)))
            return impl
        return None


def binary_rule(fn, d_dx, d_dy):
    d_dx, d_dy = jit_rule(d_dx), jit_rule(d_dy)

    @overload(fn)
    def rule(x, y):
        case = mixed_case(x, y)
        if case == "dd":
            def impl(x, y):
                r = fn(x.val, y.val)
                return make_dual(r, P.lincomb(x.parts, d_dx(x.val, y.val, r),
                                              y.parts, d_dy(x.val, y.val, r)))
            return impl
        if case == "dn":
            def impl(x, y):
                r = fn(x.val, y)
                return make_dual(r, P.scale(x.parts, d_dx(x.val, y, r)))
            return impl
        if case == "nd":
            def impl(x, y):
                r = fn(x, y.val)
                return make_dual(r, P.scale(y.parts, d_dy(x, y.val, r)))
            return impl
        return None


def piecewise_constant_unary(fn, value_fn):
    @overload(fn)
    def rule(x):
        if isinstance(x, DualType):
            return lambda x: make_dual(value_fn(x.val), P.zeros(x.parts))
        return None


def piecewise_constant_binary(fn, value_fn):
    @overload(fn)
    def rule(x, y):
        case = mixed_case(x, y)
        if case in ("dd", "dn"):
            return lambda x, y: make_dual(value_fn(x.val, value_of(y)), P.zeros(x.parts))
        if case == "nd":
            return lambda x, y: make_dual(value_fn(x, y.val), P.zeros(y.parts))
        return None


def rounding(fn):
    """``round(x)`` (a float: ``np.rint``) and ``round(x, ndigits)``, derivative 0."""
    @overload(fn)
    def rule(x, ndigits=None):
        if not isinstance(x, DualType):
            return None
        if ndigits is None or isinstance(ndigits, (types.NoneType, types.Omitted)):
            return lambda x, ndigits=None: make_dual(np.rint(x.val), P.zeros(x.parts))
        if isinstance(ndigits, types.Integer):
            # (a nested dual's value: this rule of the builtin, one level down)
            return lambda x, ndigits=None: make_dual(round(x.val, ndigits), P.zeros(x.parts))
        raise ROUND_NDIGITS_ERROR


def predicate(fn):
    @overload(fn)
    def rule(x):
        if isinstance(x, DualType):
            return lambda x: fn(x.val)
        return None


def numpy_spelling(np_fn, fn, arity):
    """``np_fn`` on duals: the rule of ``fn``, the ``math`` function (or operator or
    expression) it maps to, with its value computed by ``np_fn`` itself — as Numba's
    ``np_fn`` of a float computes it: every kernel mode gives the same value."""
    if fn in UNARY:
        unary_rule(np_fn, UNARY[fn])
    elif fn in BINARY:
        binary_rule(np_fn, *BINARY[fn])
    elif fn in PIECEWISE_CONSTANT_UNARY:
        piecewise_constant_unary(np_fn, np_fn)
    elif fn in PIECEWISE_CONSTANT_BINARY:
        piecewise_constant_binary(np_fn, np_fn)
    else:                       # an operator, or an expression of operators and max/min
        if fn in NUMPY_EXPRESSIONS:
            fn = jit_rule(fn)
        if arity == 1:
            @overload(np_fn)
            def unary(x):
                if isinstance(x, DualType):
                    return lambda x: fn(x)
                return None
        else:
            @overload(np_fn)
            def binary(x, y):
                if mixed_case(x, y) is not None:
                    return lambda x, y: fn(x, y)
                return None


def register_all():
    for fn, derivative in UNARY.items():
        unary_rule(fn, derivative)
    for fn, (d_dx, d_dy) in BINARY.items():
        binary_rule(fn, d_dx, d_dy)
    # The vectorisable stand-ins kernels call instead of math.exp & co: the same table
    # line, its formula also using the stand-ins (d sin = vectorised cos).
    for fn, stand_in in STAND_INS.items():
        if fn in UNARY:
            unary_rule(stand_in, with_vector_math(UNARY[fn]), IMPLEMENTATION_OF[stand_in])
        else:
            binary_rule(stand_in, *map(with_vector_math, BINARY[fn]))
    for fn, value_fn in PIECEWISE_CONSTANT_UNARY.items():
        piecewise_constant_unary(fn, value_fn)
        piecewise_constant_unary(FLOAT_VALUED[fn], value_fn)    # (what kernels call)
    for fn, value_fn in PIECEWISE_CONSTANT_BINARY.items():
        piecewise_constant_binary(fn, value_fn)
    for fn in NUMPY_PIECEWISE_CONSTANT:
        piecewise_constant_unary(fn, fn)
    for fn in ROUNDING:
        rounding(fn)
    rounding(ROUND)                                             # (what kernels call)
    for fn in PREDICATES:
        predicate(fn)
    for np_fn, fn in NUMPY_UNARY.items():
        numpy_spelling(np_fn, fn, 1)
    for np_fn, fn in NUMPY_BINARY.items():
        numpy_spelling(np_fn, fn, 2)


register_all()
