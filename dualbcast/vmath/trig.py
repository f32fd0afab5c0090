"""Branch-free sin and cos for Numba loops: LLVM vectorises ``out[i] = sin(x[i])`` with
no libm calls, accurate to < 1 ulp over the whole float64 range.

``sin(x)`` and ``cos(x)`` take a float64 or float32 scalar and return the same type
(float32: computed in float64, rounded once).  They are ``numba.njit`` dispatchers
inlined into their callers (``common.jit``), so a loop that calls them is straight
code that the loop vectoriser turns into AVX2 (4 doubles a step).  Numba's pip wheels
have no SVML, so ``math.sin`` in such a loop stays four scalar libm calls per step.

Method
------
1. Reduction, x = n pi/2 + y with |y| <= ~pi/4, by Payne-Hanek for every |x|, branch
   free.  Write x = m 2**E (m < 2**53 an integer).  Bits j <= E - 2 of
   2/pi = 0.b1 b2 b3 ... add multiples of 4 to x 2/pi, so only the 212 bits from
   j = max(E - 1, 1) on matter; a table holds them per exponent as four 53-bit doubles
   t0..t3 (971 rows, 31 KB, computed at import from an integer pi by Machin's formula;
   LLVM loads them lane by lane, no gathers).  x t0, x t1, x t2 are split exactly with
   FMA (h + l), the integer parts (mod 4) are taken out with rint (all exact), and the
   fraction is summed as a double-double, with error < 2**-152 + 2**-107 |fraction|.
   No float64 is closer than ~2**-61 to a multiple of pi/2 (the closest,
   6381956970095103 * 2**797, is in the tests), so y has at least ~90 correct bits.
   Rows for huge x are scaled by 2**512 (and x by 2**-512) to keep them normal.
2. y_hi + y_lo = fraction * pi/2 (double-double).  fdlibm's __kernel_sin and
   __kernel_cos on (y_hi, y_lo), both evaluated, the quadrant n mod 4 selects one and
   its sign.
3. Selects for the rest: |x| < 2**-27 gives x (sin) or 1 (cos), with -0.0 kept, and
   has its reduction fed 1.0 instead (subnormal intermediates cost microcode assists);
   inf and nan give nan.

Without FMA hardware (e.g. NUMBA_CPU_NAME=generic) the exact products use Dekker's
splitting and the polynomials plain multiply-adds: measured accuracy is the same.

Measured accuracy
-----------------
Max error in ulp against x87 long double sinl / cosl (``tests/ulp.py``): 4e6 random
arguments a range (log-uniform where the range is wide, both signs), plus the hard
cases: for every exponent, the mantissas whose multiples come closest to a multiple of
pi/2 (continued fractions of 2**(E+1)/pi; 61224 float64, 3180 float32):

    |x|                   float64 sin  float64 cos  float32 sin  float32 cos
    < 2**-27              0.083        0.125        0            0
    2**-27 .. pi/4        0.648        0.751        0.500        0.500
    pi/4 .. 10            0.780        0.754        0.500        0.500
    10 .. 1e5             0.768        0.787        0.500        0.500
    1e5 .. 2**53          0.765        0.772        0.500        0.500   (float32:
    2**53 .. max          0.768        0.776        -            -        1e5 .. max)
    random bit patterns   0.765        0.767        0.500        0.500
    hard cases            0.731        0.728        0.500        0.500

float32 "0.500" is <= 0.5 + 1e-7: the float64 result rounded once.  Special values are
exact: sin(+-0) = +-0, cos(+-0) = 1, sin(x) = x for tiny and subnormal x, inf and nan
give nan.

Measured speed
--------------
ns per element of ``for i in range(n): out[i] = f(x[i])``, n = 10**6, one core of an
AMD EPYC (Zen 3, AVX2 + FMA), min of 15 runs (a shared VM: +-10%).  libm is
``math.sin`` / ``math.cos`` in the same Numba loop (glibc; Numba has no SVML here):

    ========================  =====  ========  =====  ========
    x                         sin    libm sin  cos    libm cos
    ========================  =====  ========  =====  ========
    float64, |x| < 10         6.6    19.2      6.5    18.6
    float64, +-10**U(0, 300)  6.8    71        6.8    72
    float64, random bits      6.8    41        6.7    41
    float32, |x| < 10         7.4    10.1      7.3    9.9
    float32, 10**U(0, 38)     7.3    11.7      7.4    11.7
    float32, random bits      7.3    8.6       7.3    8.1
    ========================  =====  ========  =====  ========

The cost is the same for every argument (no branches); ~60% of it is the reduction.
float32 pays for the full float64 path (glibc's sinf is cheap): a float32-only
reduction (24-bit mantissas, |x| < 2**128) could be about half as costly.
"""
import math

import numpy as np

from .bits import float_bits
from .common import (f64 as _f64, fast_two_sum as _fast_two_sum,
                     in_precision_of as _in_precision_of, jit as _jit, mla as _mla,
                     two_prod as _two_prod, two_sum as _two_sum)

__all__ = ["sin", "cos"]


# --- the bits of 2/pi and the Payne-Hanek table ---------------------------------------

def _arctan_inverse(k, precision):
    """atan(1/k) * 2**precision by its Taylor series in integers (error: a few units)."""
    power = (1 << precision) // k
    total, n, sign = 0, 1, 1
    while power:
        total += sign * (power // n)
        power //= k * k
        n += 2
        sign = -sign
    return total


def _pi_fixed(precision):
    """pi * 2**precision, within a few units (Machin: pi = 16 atan(1/5) - 4 atan(1/239))."""
    return 16 * _arctan_inverse(5, precision) - 4 * _arctan_inverse(239, precision)


_CHUNK = 53                  # bits of 2/pi in one table double
_ROW = 4                     # doubles per row: 212 bits
_FIRST_BE = 1077             # biased exponents <= this share row 0 (window from bit 1)
_SCALE_BE = 1676             # rows from here on are scaled by 2**512, and x by 2**-512
_SCALE = 512
_NBITS = (2047 - 1076) + _ROW * _CHUNK + 8            # bits of 2/pi the table needs
# floor(2/pi * 2**_NBITS), from pi with 64 guard bits.
_TWO_OVER_PI = ((1 << (2 * (_NBITS + 64) + 1)) // _pi_fixed(_NBITS + 64)) >> 64


def _table_row(be):
    """Row for biased exponent be, x = m 2**E (E = be - 1075): bits j = s .. s + 211 of
    2/pi, s = max(E - 1, 1), as four doubles holding 53 consecutive bits each.  Bits
    j < s add multiples of 4 to x 2/pi; those after the row add < 2**53 2**(E-s-211)
    <= 2**-157."""
    s = max(be - 1076, 1)
    scale = _SCALE if be >= _SCALE_BE else 0
    row = []
    for k in range(_ROW):
        last = s + (k + 1) * _CHUNK - 1
        bits = (_TWO_OVER_PI >> (_NBITS - last)) & ((1 << _CHUNK) - 1)   # bits s+53k..last
        row.append(math.ldexp(bits, scale - last))                       # exact
    return row


_TABLE = np.array([_table_row(be) for be in range(_FIRST_BE, 2048)])   # be 2047: inf, nan

# pi/2 = _PIO2_HI + _PIO2_LO to ~2**-110 (hi: float64(pi/2)).
_PI_256 = _pi_fixed(256)
_PIO2_HI = _PI_256 / (1 << 257)
_PIO2_LO = (_PI_256 - int(_PIO2_HI * 2.0**257)) / (1 << 257)
del _PI_256

# fdlibm's kernel polynomials on [-pi/4, pi/4].  fdlibm: Copyright (C) 1993 by Sun
# Microsystems, Inc.  Permission to use, copy, modify, and distribute this software is
# freely granted, provided that this notice is preserved.
_S1 = -1.66666666666666324348e-01
_S2 = 8.33333333332248946124e-03
_S3 = -1.98412698298579493134e-04
_S4 = 2.75573137070700676789e-06
_S5 = -2.50507602534068634195e-08
_S6 = 1.58969099521155010221e-10
_C1 = 4.16666666666666019037e-02
_C2 = -1.38888888888741095749e-03
_C3 = 2.48015872894767294178e-05
_C4 = -2.75573143513906633035e-07
_C5 = 2.08757232129817482790e-09
_C6 = -1.13596475577881948265e-11

_TINY = 2.0**-27             # below: sin(x) rounds to x, cos(x) to 1
_DOWN = 2.0**-_SCALE
_MAX = 1.7976931348623157e308


# --- float64 core ---------------------------------------------------------------------

@_jit
def _reduce(x):
    """(y_hi, y_lo, n): x = n pi/2 + y_hi + y_lo, |y_hi| <= ~pi/4, n an integer-valued
    float equal to the quadrant mod 4; for finite |x| >= 2**-27 (smaller x are replaced
    by 1: subnormal intermediates would take microcode assists)."""
    be = (float_bits(x) >> 52) & 0x7FF
    row = max(be - _FIRST_BE, 0)
    xs = x * (_DOWN if be >= _SCALE_BE else 1.0)            # exact
    xs = xs if abs(x) >= _TINY else 1.0
    # x 2/pi = x t0 + x t1 + x t2 + x t3 (mod 4); the first three split exactly:
    # |h0| < 2**55, |l0| <= 2, |h1| < 4, |l1| <= 2**-52, |h2| < 2**-51, |l2|, |p3| < 2**-103.
    h0, l0 = _two_prod(xs, _TABLE[row, 0])
    h1, l1 = _two_prod(xs, _TABLE[row, 1])
    h2, l2 = _two_prod(xs, _TABLE[row, 2])
    p3 = xs * _TABLE[row, 3]
    # Integer parts out, all exactly.
    n0 = np.rint(h0)
    a, ea = _fast_two_sum(h0 - n0, l0)             # h0 - n0 is 0 or >= ulp(h0) >= 2|l0|
    n1 = np.rint(h1)
    a, eb = _two_sum(a, h1 - n1)                    # |a| < 3, |ea|, |eb| <= 2**-52
    n2 = np.rint(a)
    a = a - n2                                      # Sterbenz: exact, |a| <= 1/2
    n = (n0 - 4.0 * np.floor(n0 * 0.25)) + n1 + n2  # n0 mod 4 first (exact)
    # The fraction a + ea + eb + l1 + h2 + l2 + p3 as a double-double hi + lo.
    b, e1 = _two_sum(h2, l1)
    b, e2 = _two_sum(b, ea)
    b, e3 = _two_sum(b, eb)
    hi, e4 = _two_sum(a, b)
    hi, lo = _fast_two_sum(hi, ((l2 + p3) + (e1 + e2 + e3)) + e4)
    # times pi/2
    yh, yl = _two_prod(hi, _PIO2_HI)
    yl = yl + _mla(hi, _PIO2_LO, lo * _PIO2_HI)
    yh, yl = _fast_two_sum(yh, yl)
    return yh, yl, n


@_jit
def _kernels(y, yy):
    """(sin(y + yy), cos(y + yy)) for |y| <= ~pi/4, |yy| <= ulp(y)/2: fdlibm's
    __kernel_sin and __kernel_cos."""
    z = y * y
    w = z * z
    v = z * y
    r = _mla(z * w, _mla(z, _S6, _S5), _mla(z, _mla(z, _S4, _S3), _S2))
    s = y - _mla(-v, _S1, _mla(z, _mla(-v, r, 0.5 * yy), -yy))
    r = _mla(w * w, _mla(z, _mla(z, _C6, _C5), _C4), z * _mla(z, _mla(z, _C3, _C2), _C1))
    hz = 0.5 * z
    w = 1.0 - hz
    c = w + (((1.0 - w) - hz) + _mla(z, r, -y * yy))
    return s, c


@_jit
def _sin_or_cos(x, quarter_turns, tiny_result):
    """sin(x + quarter_turns pi/2) for quarter_turns 0 (sin) or 1 (cos); for
    |x| < 2**-27 (where sin(x) rounds to x and cos(x) to 1) ``tiny_result``."""
    yh, yl, n = _reduce(x)
    s, c = _kernels(yh, yl)
    q = n + quarter_turns
    q = q - 4.0 * np.floor(q * 0.25)                         # quadrant: 0, 1, 2, 3
    res = c if (q == 1.0) | (q == 3.0) else s
    res = -res if q >= 2.0 else res
    ax = abs(x)
    res = res if ax >= _TINY else tiny_result
    return res if ax <= _MAX else x - x                      # inf, nan -> nan


@_jit
def _sin64(x):
    return _sin_or_cos(x, 0.0, x)                            # x: keeps -0.0


@_jit
def _cos64(x):
    return _sin_or_cos(x, 1.0, 1.0)


# --- entry points: float64 -> float64, float32 -> float32 -----------------------------

@_jit
def sin(x):
    """sin(x) for a float64 or float32 x (float32: computed in float64, rounded once)."""
    return _in_precision_of(x, _sin64(_f64(x)))


@_jit
def cos(x):
    """cos(x) for a float64 or float32 x (float32: computed in float64, rounded once)."""
    return _in_precision_of(x, _cos64(_f64(x)))
