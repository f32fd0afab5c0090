"""``math`` functions Numba does not compile for floats, and ``digamma``.

Numba has no ``math.cbrt``, ``math.fmod``, ``math.remainder``, two-argument
``math.log(x, base)`` or n-ary ``math.hypot`` (three or more arguments): kernels and
``numba.njit`` code calling them failed to compile.  These overloads give each its
float value — as Python's ``math`` computes it, exactly where an exact algorithm is at
hand, else to within an ulp or two, as the tests measure — and the dual rules
(:mod:`dualbcast.dual.table`) differentiate them like any other.

``digamma`` (the derivative of ``lgamma``, and ``gamma``'s over ``gamma``) is not in
``math``: it is here for those rules.
"""
import math

import numpy as np
from numba import types
from numba.extending import overload, register_jitable

from .common import OVERLOAD_OPTIONS as _JIT_OPTIONS


def _float(*tys):
    return all(isinstance(t, (types.Float, types.Integer, types.Boolean)) for t in tys)


@overload(math.cbrt, jit_options=_JIT_OPTIONS)
def _cbrt(x):
    if _float(x):
        return lambda x: np.cbrt(np.float64(x))     # the C library's cbrt, as Python's
    return None


@overload(math.fmod, jit_options=_JIT_OPTIONS)
def _fmod(x, y):
    if _float(x, y):
        return lambda x, y: np.fmod(np.float64(x), np.float64(y))  # C's fmod: exact
    return None


@register_jitable
def ieee_remainder(x, y):
    """``math.remainder``: ``x - n * y`` for the integer ``n`` nearest ``x / y`` (ties
    to even), exact like C's ``remainder``: from ``fmod``, which is exact."""
    if x != x or y != y or math.isinf(x) or y == 0.0:
        return math.nan
    if math.isinf(y):
        return x
    ay = abs(y)
    r = np.fmod(x, ay)                      # exact, |r| < |y|, sign of x
    # r or r - sign(r) * |y|: whichever is nearer 0; at a tie, the even quotient.
    other = r - math.copysign(ay, r)
    if abs(other) < abs(r):
        return other
    if abs(other) == abs(r):
        # (x - r) / |y| is the quotient truncated; even keeps r, odd takes other
        quotient = (x - r) / ay
        if np.fmod(quotient, 2.0) != 0.0:
            return other
    return r


@overload(math.remainder, jit_options=_JIT_OPTIONS)
def _remainder(x, y):
    if _float(x, y):
        return lambda x, y: ieee_remainder(np.float64(x), np.float64(y))
    return None


@overload(math.log, jit_options=_JIT_OPTIONS)
def _log_base(x, base):
    if _float(x, base):
        return lambda x, base: math.log(x) / math.log(base)     # as Python's math.log
    return None


@overload(math.hypot, jit_options=_JIT_OPTIONS)
def _hypot_n(*args):
    # Numba has the two-argument hypot; three or more are folded pairwise through it
    # (no overflow or underflow of the squares; within an ulp of Python's).  Dual
    # numbers too: each step is the two-argument rule's.
    if len(args) == 1 and isinstance(args[0], types.BaseTuple):
        args = args[0].types
    if len(args) < 3:
        return None
    body = "args[0]"
    for i in range(1, len(args)):
        body = f"math.hypot({body}, args[{i}])"
    namespace = {"math": math}
    exec(f"def impl(*args):\n    return {body}\n", namespace)
    return namespace["impl"]


@register_jitable
def digamma(x):
    """The digamma function ψ(x) = d lgamma(x)/dx (poles at 0, -1, -2, ...: nan)."""
    if x != x or x == -math.inf:
        return math.nan
    if x <= 0.0 and math.floor(x) == x:
        return math.nan
    result = 0.0
    if x < 0.0:
        # reflection: ψ(1 - x) - ψ(x) = π cot(πx)
        result = -math.pi / math.tan(math.pi * x)
        x = 1.0 - x
    while x < 10.0:
        result -= 1.0 / x
        x += 1.0
    # the asymptotic series, sum of B_2k / (2k x^2k), at x >= 10: the first term left
    # out (3617 / 8160 x^-16) is below 1e-16
    inv = 1.0 / x
    inv2 = inv * inv
    series = inv2 * (1.0 / 12 - inv2 * (1.0 / 120 - inv2 * (1.0 / 252 - inv2 * (
        1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760 - inv2 / 12.0))))))
    return result + math.log(x) - 0.5 * inv - series
