"""The derivative table: one line per function, like DiffRules.jl feeds ForwardDiff.

Unary entries give ``f'`` in terms of the argument ``x`` and the already computed
value ``y = f(x)`` (reusing ``y`` saves a second ``exp``/``tan``/``tanh``).  Binary
entries give ``(df/dx, df/dy)`` in terms of ``x``, ``y`` and ``r = f(x, y)``.

Everything here is plain Python and numbers (helpers are ``register_jitable``);
:mod:`dualbcast.dual.rules` turns each line into Numba overloads for every mix of dual
and plain arguments, for the ``math`` functions and for their vectorisable stand-ins
(:mod:`dualbcast.vmath`).  Where a formula has a singular point, the convention it
implements (design.md section 4) is stated.
"""
import math
import operator

import numpy as np
from numba.extending import register_jitable

from ..vmath.missing import digamma

LN2 = math.log(2.0)
LN10 = math.log(10.0)
DEGREES_PER_RADIAN = 180.0 / math.pi
RADIANS_PER_DEGREE = math.pi / 180.0
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@register_jitable
def _sign0(x):
    # d|x|/dx with 0 at x == 0 (PyTorch's choice; JAX uses 1).  NaN stays NaN.
    return np.sign(x)


def _pow_dx(x, y, r):
    # y * x**(y - 1), but the exponent-0 case is 0 everywhere (never 0 * inf at x = 0).
    # That 0 is written y / x where it can be (x nonzero, not nan): its derivative in y,
    # the mixed second derivative x**-1, is kept (a constant 0 made the Hessian of x ** y
    # at y = 0 lose it on one side: [[0, 0], [1/x, ...]], where JAX gives 1/x on both).
    if y == 0:
        return y / x if x != 0 and x == x else 0.0
    return y * math.pow(x, y - 1.0)


def _pow_dy(x, y, r):
    # log(x) * x**y; at x == 0 the limit along x**y is 0 (JAX's convention), not nan.
    return 0.0 if x == 0 else math.log(x) * r


@register_jitable
def _one_minus_square(x):
    # 1 - x^2, accurate as a value and as a derivative (evaluated on a nested dual, the
    # second derivative).  Near +-1 as (1 - x)(1 + x): 1 - x is exact there, while 1 - x*x
    # loses what x*x rounded away.  Elsewhere as 1 - x*x: the derivative of (1 - x)(1 + x),
    # (1 - x) - (1 + x), cancels near 0 (asin'' lost 3e-5 of itself at 1e-12, all of it
    # below 1e-17), that of 1 - x*x is -2x exactly.
    if -0.5 < x < 0.5:
        return 1.0 - x * x
    return (1.0 - x) * (1.0 + x)


@register_jitable
def _tanh_d(x, y, e):
    # 1 - tanh(x)^2.  Past |x| = 0.55 as 4e / (1 + e)^2 with e = exp(-2|x|) (given: the
    # rule's own expression computes it, with the kernel's vectorisable exp): 1 - y*y
    # cancels as y -> 1 (tanh'(5) ~2000 ulps off, tanh'(20) = 0 for 1.7e-17), this is a
    # product, and so is its derivative, 4e'(1 - e) / (1 + e)^3.  Near 0 as 1 - y*y:
    # there the derivative of 4e / (1 + e)^2 cancels (-2 tanh sech^2 -> 0), that of
    # 1 - y*y is -2 y y'.
    if -0.55 < x < 0.55:
        return 1.0 - y * y
    return 4.0 * e / ((1.0 + e) * (1.0 + e))


@register_jitable
def _atan2_d(u, v):
    # u / (u^2 + v^2) without squaring (no overflow or underflow of u*u).
    h = math.hypot(u, v)
    return (u / h) / h


@register_jitable
def _hypot_d(x, y, r):
    # d hypot(x, y) / dx = x / r.  At the origin the subgradient 0 is chosen instead of
    # 0/0.  Where |x| > |y| as sign(x) / sqrt(1 + (y/x)^2), the same number whose own
    # derivative (the second, y^2 / r^3) is a product: that of x / r, 1/r - x^2/r^3,
    # cancels as y/x -> 0 (hypot(x, 2)'' lost 4e-11 of itself at x = 1e3, all of it at
    # 1e10).  x = +-inf keeps x / r: nan, as NumPy's rule, JAX and PyTorch give.
    if r == 0:
        return 0.0
    if abs(y) < abs(x) < math.inf:
        t = y / x
        return math.copysign(1.0, x) / math.sqrt(1.0 + t * t)
    return x / r


UNARY = {
    math.exp: lambda x, y: y,
    # exp(x), not y + 1: that cancels below x ~ -1 (expm1'(-40) was 0 for 4.2e-18)
    math.expm1: lambda x, y: math.exp(x),
    math.log: lambda x, y: 1.0 / x,                       # +inf at 0; value nan below 0
    math.log1p: lambda x, y: 1.0 / (1.0 + x),
    math.log2: lambda x, y: 1.0 / (x * LN2),
    math.log10: lambda x, y: 1.0 / (x * LN10),
    math.sqrt: lambda x, y: 0.5 / y,                      # +inf at 0
    math.sin: lambda x, y: math.cos(x),
    math.cos: lambda x, y: -math.sin(x),
    math.tan: lambda x, y: 1.0 + y * y,
    math.asin: lambda x, y: 1.0 / math.sqrt(_one_minus_square(x)),
    math.acos: lambda x, y: -1.0 / math.sqrt(_one_minus_square(x)),
    math.atan: lambda x, y: 1.0 / (1.0 + x * x),
    math.sinh: lambda x, y: math.cosh(x),
    math.cosh: lambda x, y: math.sinh(x),
    math.tanh: lambda x, y: _tanh_d(x, y, math.exp(-2.0 * abs(x))),
    math.asinh: lambda x, y: 1.0 / math.hypot(x, 1.0),    # hypot: no overflow of x*x
    math.acosh: lambda x, y: 1.0 / (math.sqrt(x - 1.0) * math.sqrt(x + 1.0)),  # no overflow
    math.atanh: lambda x, y: 1.0 / _one_minus_square(x),
    math.erf: lambda x, y: TWO_OVER_SQRT_PI * math.exp(-x * x),
    math.erfc: lambda x, y: -TWO_OVER_SQRT_PI * math.exp(-x * x),
    math.fabs: lambda x, y: _sign0(x),                    # 0 at 0
    abs: lambda x, y: _sign0(x),                          # 0 at 0
    math.exp2: lambda x, y: y * LN2,
    math.cbrt: lambda x, y: 1.0 / (3.0 * y * y),          # +inf at 0, as sqrt
    math.gamma: lambda x, y: y * digamma(x),              # nan at the poles
    math.lgamma: lambda x, y: digamma(x),
    math.degrees: lambda x, y: DEGREES_PER_RADIAN,
    math.radians: lambda x, y: RADIANS_PER_DEGREE,
}

BINARY = {
    math.pow: (_pow_dx, _pow_dy),
    math.atan2: (lambda y, x, r: _atan2_d(x, y), lambda y, x, r: -_atan2_d(y, x)),
    math.hypot: (lambda x, y, r: _hypot_d(x, y, r), lambda x, y, r: _hypot_d(y, x, r)),
    math.copysign: (lambda x, y, r: _sign0(x) * math.copysign(1.0, y), lambda x, y, r: 0.0),
    # d/dy (x % y) = -q, q the quotient the remainder r was computed with: x // y
    # (Python's, NumPy's and Numba's floordiv come from one divmod).  Not floor(x / y):
    # 0.5 / 0.1 rounds to 5.0, but 0.5 % 0.1 = 0.0999... says the quotient was 4.
    operator.mod: (lambda x, y, r: 1.0, lambda x, y, r: -(x // y)),
    # fmod and remainder likewise: minus their own quotient, (x - r) / y, an integer
    # up to the rounding rint removes (as NumPy's fmod rule).
    math.fmod: (lambda x, y, r: 1.0, lambda x, y, r: -np.rint((x - r) / y)),
    math.remainder: (lambda x, y, r: 1.0, lambda x, y, r: -np.rint((x - r) / y)),
    # log(x, base) = log(x) / log(base)
    math.log: (lambda x, b, r: 1.0 / (x * math.log(b)), lambda x, b, r: -r / (b * math.log(b))),
    # ldexp(x, n) = x * 2**n: n is an integer, never differentiated
    math.ldexp: (lambda x, n, r: math.ldexp(1.0, n), lambda x, n, r: 0.0),
}


def _np_maximum(x, y):
    # np.maximum propagates a nan (Python's max keeps x); else max's rule, ties halved.
    if x != x or y != y:
        return x + y
    return max(x, y)


def _np_minimum(x, y):
    if x != x or y != y:
        return x + y
    return min(x, y)


def _square(x):
    return x * x


def _reciprocal(x):
    return 1.0 / x


#: NumPy's scalar functions, as a kernel may spell them: each differentiates as the
#: function (or expression) it maps to, which has the rule.
NUMPY_UNARY = {
    np.exp: math.exp, np.exp2: math.exp2, np.expm1: math.expm1, np.log: math.log,
    np.log2: math.log2, np.log10: math.log10, np.log1p: math.log1p, np.sqrt: math.sqrt,
    np.cbrt: math.cbrt, np.sin: math.sin, np.cos: math.cos, np.tan: math.tan,
    np.arcsin: math.asin, np.arccos: math.acos, np.arctan: math.atan, np.sinh: math.sinh,
    np.cosh: math.cosh, np.tanh: math.tanh, np.arcsinh: math.asinh, np.arccosh: math.acosh,
    np.arctanh: math.atanh, np.fabs: math.fabs, np.absolute: abs, np.deg2rad: math.radians,
    np.radians: math.radians, np.rad2deg: math.degrees, np.degrees: math.degrees,
    np.floor: math.floor, np.ceil: math.ceil, np.trunc: math.trunc, np.square: _square,
    np.negative: operator.neg, np.positive: operator.pos, np.reciprocal: _reciprocal,
}
NUMPY_BINARY = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
    np.true_divide: operator.truediv, np.power: math.pow, np.float_power: math.pow,
    np.arctan2: math.atan2, np.hypot: math.hypot, np.copysign: math.copysign,
    np.fmod: math.fmod, np.remainder: operator.mod, np.floor_divide: operator.floordiv,
    np.maximum: _np_maximum, np.minimum: _np_minimum,
}
#: Python functions among those: compiled inline into the rule.
NUMPY_EXPRESSIONS = (_np_maximum, _np_minimum, _square, _reciprocal)

#: Piecewise-constant functions: derivative 0.  The value stays a float (NumPy's
#: ``floor``), so ``floor(inf)`` is ``inf`` rather than an undefined integer (kernels
#: call ``dualbcast.vmath``'s float-valued stand-ins for plain floats too).
PIECEWISE_CONSTANT_UNARY = {math.floor: np.floor, math.ceil: np.ceil, math.trunc: np.trunc}
PIECEWISE_CONSTANT_BINARY = {operator.floordiv: operator.floordiv}
#: ``round(x)`` and ``round(x, ndigits)``: derivative 0 too.  ``round(x)`` is valued as
#: ``np.rint`` (Python's round half to even, kept a float as ``floor``); ``round(x,
#: ndigits)`` as Numba's round of the float (what the kernel computes without duals).
ROUNDING = (round,)
#: NumPy's own piecewise-constant functions (which the formulas above call: a nested
#: dual differentiates the formulas too, second order).
NUMPY_PIECEWISE_CONSTANT = (np.sign, np.rint)

#: Predicates look at the value only.
PREDICATES = (math.isnan, math.isinf, math.isfinite)
