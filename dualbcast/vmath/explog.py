"""Branch-free exp, expm1, log, log1p, tanh and pow for Numba loops.

``exp, expm1, log, log1p, tanh, pow`` are ``numba.njit`` functions, callable from njit
code and from Python, for float64 and float32 arguments (float32 in, float32 out: computed
in float64 and rounded once; ``pow`` returns float32 only when both arguments are).  Ints
are refused (a TypingError): callers convert.  In a loop such as
``for i in range(n): out[i] = exp(x[i])`` LLVM's loop vectoriser turns the whole body into
AVX2 code with no calls at all.  That is the point: Numba's pip wheels have no SVML, so
``math.exp`` in such a loop becomes ``llvm.exp.v4f64``, which codegen scalarises into four
libm calls.

How the code stays vectorisable
    No branches but ``a if c else b`` on values already computed (LLVM turns them into
    selects); no libm calls, loops or exceptions (``error_model="numpy"``: no division
    checks); frexp/ldexp by integer arithmetic on the bits (``bits.float_bits``), with
    logical shifts only (AVX2 has no vpsraq); int64 to double through the 1.5 * 2**52 trick
    (AVX2 has no vcvtqq2pd: a conversion would be scalarised); clamps as one vmaxpd and one
    vminpd (``_clamp``); every helper is inlined (``common.jit``: a call left in the loop
    would stop the vectoriser); polynomials in Estrin's scheme.  Exact products
    use ``llvm.fma`` when the target CPU has FMA, Dekker's splitting otherwise (exact too,
    slower; the errors below are measured with FMA).

Speed: a loop over these is bound by the out-of-order window (long dependency chains of
~40-70 vector operations per element), so every operation and every cycle of latency on the
chain costs; the methods below spend them only where the error needs it.

Methods (x = k ln2 + r, |r| <= ln2/2; x = 2**e (1 + f), 1 + f in [sqrt(1/2), sqrt(2))):
    exp     k = rint(x / ln2) by the shift trick, r = x - k ln2 in two FMAs (ln2 as two
            doubles, the first product exact); e**r = 1 + r + r**2 q(r) (q minimax, degree
            9, Estrin), 1 + r split exactly into hi + lo, lo folded into the polynomial,
            hi + rest rounded once; times 2**k as two exponent-bit factors (overflow to inf;
            gradual underflow, where the result is rounded twice).  Plain doubles
            otherwise: the rounding of r costs up to ~0.2 ulp, the cheapest to lose.
    expm1   as exp, with e**r - 2**-k = (1 - 2**-k) + r + r**2/2 + r**3 v(r): the first
            three terms summed exactly (1 - 2**-k by two-sum, r**2/2 by FMA), r's rounding
            compensated, then times 2**k: no cancellation error for small x or k = +-1.
            x = -0 returns -0.
    tanh    E / (E + 2) with E = expm1(2|x|) kept as a double-double, E + 2 by two-sum,
            one division for 1/(E + 2) and an FMA residual correcting the quotient; the sign
            copied from x; |x| > 20 gives +-1.
    log     fdlibm's: s = f / (2 + f) (one division: s only enters a term under 7% of the
            result) and log(1 + f) = f - f**2/2 + s (f**2/2 + R(s**2)), R minimax;
            e ln2_hi + f - f**2/2 summed exactly (two-sums, FMA for f**2/2), the rest
            rounded once.
    log1p   1 + x = u + v exactly (two-sum); log u (as log) + v / u; |x| < 2**-30:
            x - x**2/2.
    pow     exp(y log|x|) with log|x| to ~2**-70 (s = (m - 1)/(m + 1) corrected to a
            double-double, the atanh series summed in double-double, the degree 7 tail H
            minimax), y log|x| an exact product, exp of a double-double (e**r = 1 + r +
            r**2/2 + r**3 v(r) in double-double); then the sign (x < 0: y odd flips it, y
            not an integer gives NaN) and the C99 special cases as selects: pow(x, +-0) = 1
            and pow(1, y) = 1 even for NaN, pow(+-0, y) and pow(+-inf, y) with the sign for
            odd integer y, pow(x, +-inf) by |x| vs 1 (pow(-1, +-inf) = 1), any other NaN ->
            NaN.
Special values follow C99 as NumPy does: NaN -> NaN (a NaN's sign bit may differ from
NumPy's), +-inf, signed zeros (expm1/log1p/tanh(-0) = -0), log(0) = -inf, log(x < 0) =
NaN, log1p(-1) = -inf, subnormal inputs and results.  Floating-point exception flags and
errno are not set.

Measured accuracy: max error in ulp against x87 long double (``tests/ulp.py``), over ~1-2e7
inputs per function and precision: random bit patterns (every exponent, both signs), dense
samples of the main interval and of the intervals where the error peaks, values near 0,
and thresholds and special values (the tests assert slightly larger bounds)::

    function  float64                             float32 (the float64 result rounded)
    exp       0.827; 0.84 for subnormal results   0.500
    expm1     0.830                               0.500
    log       0.659                               0.500
    log1p     0.660                               0.500
    tanh      0.706                               0.500
    pow       0.535; 0.75 for subnormal results   0.500

Measured speed: ns per element of a 10**6-element ``out[i] = f(x[i])`` Numba loop, ours
vs ``math.f`` (libm, called per element; expf etc. for float32) in the same loop; one core
of an AMD EPYC (Zen 3, AVX2 + FMA, 2.45 GHz nominal, ~3.2 GHz measured), best of many runs
on a noisy VM (run-to-run differences up to ~10%)::

    function  inputs                            float64: ours  libm   float32: ours  libm
    exp       U(-5, 5)                                   1.2    4.9            1.4    2.7
    exp       U(-700, 700)                               1.2    9.5            1.3   11.6
    expm1     U(-5, 5)                                   2.3   12.8            2.7   17.0
    log       e**U(-700, 700)                            1.9    4.6            2.1    8.5
    log1p     U(-0.9, 10)                                2.2   12.4            2.6   12.7
    tanh      U(-5, 5)                                   3.4   17.4            3.5   23.1
    pow       x = e**U(-5, 5), y = U(-50, 50)            9.7   14.0           11.4   17.1

The fused loop ``e = exp(-3 (x[i] + 1)); total += e; g[i] = -3 e`` (reassociated sum),
x = U(0, 3), ``numba.njit(fastmath={"reassoc"})``: 1.4 ns per element (``math.exp``:
6.3).
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .bits import bits_float, float_bits
from .common import (HAS_FMA as _HAS_FMA, div as _div, f64 as _f64,
                     fast_two_sum as _fast_two_sum, in_precision_of as _in_precision_of,
                     in_precision_of_both as _in_precision_of_both, jit as _jit, mla as _mla,
                     two_prod as _two_prod, two_sum as _two_sum)

__all__ = ["exp", "expm1", "log", "log1p", "tanh", "pow"]


_INF = np.inf
_NAN = np.nan
_TINY = 2.2250738585072014e-308      # smallest normal float64, 2**-1022
_SHIFT = 6755399441055744.0          # 1.5 * 2**52: (x + _SHIFT) - _SHIFT rounds x to integer
_SHIFT_BITS = 0x4338000000000000     # its bits; x + _SHIFT holds that integer in its low bits
_TWO52 = 4503599627370496.0
_SIGN = -0x7FFFFFFFFFFFFFFF - 1      # the sign bit as an int64
_INV_LN2 = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # 32 significant bits: k * _LN2_HI exact for |k| < 2**21
_LN2_LO = 1.90821492927058770002e-10  # ln 2 - _LN2_HI
_ONE_BITS = 0x3FF0000000000000       # bits of 1.0
_EXP_MASK = -0x10000000000000         # 0xFFF0000000000000: sign and exponent bits
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2), the lower end of log's m
_MANT_MASK = 0x000FFFFFFFFFFFFF
_LOG_U = (2048 << 52) - _SQRT_HALF_BITS  # 2**63 - ...: an int64
_LOG_U_TINY = _LOG_U - (64 << 52)
_THIRD_HI, _THIRD_LO = 0.3333333333333333, 1.850371707708594e-17
_FIFTH_HI, _FIFTH_LO = 0.2, -1.1102230246251566e-17

_EXP_V = (0.16666666666666669, 0.041666666666666664, 0.008333333333329796,
          0.0013888888888886363, 0.00019841269864364933, 2.4801587318080937e-05,
          2.7557266442353424e-06, 2.7557281528710364e-07, 2.5101335854788522e-08,
          2.0911915299044694e-09)
# (e**r - 1 - r - r**2/2) / r**3 on [-ln2/2, ln2/2], minimax degree 9 (expm1)
_EXPM1_V = (0.16666666666666674, 0.041666666666666664, 0.008333333333322361,
            0.00138888888888845, 0.0001984126988616172, 2.4801587325718352e-05,
            2.7557242785609606e-06, 2.755727191924164e-07, 2.51098922426734e-08,
            2.0915695535286395e-09)
_LOG_H = (0.14285714285714285, 0.1111111111111148, 0.09090909090647106, 0.0769230776320522,
          0.06666657258257504, 0.05883029381949927, 0.05236334295140812,
          0.053097569132606826)
# fdlibm's log: R(z) = z (Lg1 + z Lg2 + ... + z**6 Lg7), error < 2**-58.45.
_LOG_R = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
          2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
          1.479819860511658591e-01)



# exp's reduction x - k ln2 = r1 - k _EXP_LN2_LO with r1 exact: with an FMA, r1 =
# fma(-k, ln2, x) for the double nearest ln2; without, x - k * _LN2_HI (32 bits).
_EXP_LN2_HI = 0.6931471805599453 if _HAS_FMA else _LN2_HI
_EXP_LN2_LO = 2.3190468138462996e-17 if _HAS_FMA else _LN2_LO
# (e**r - 1 - r) / r**2 on [-ln2/2, ln2/2], minimax degree 9 (exp), relative error 2**-56.9
_EXP_Q = (0.500000000000001, 0.16666666666666669, 0.04166666666652399, 0.008333333333326844,
          0.001388888894726202, 0.00019841269875848277, 2.4801487910440537e-05,
          2.7557252261781115e-06, 2.763245052662177e-07, 2.5106860987802246e-08)


@intrinsic
def _clamp(typingctx, x, lo, hi):
    """min(max(x, lo), hi) keeping a NaN x: ``x < lo ? lo : x`` and ``x > hi ? hi : x``
    as selects, which x86 does in one vmaxpd and one vminpd (``a if c else b`` in Python
    source compiles to a compare and a blend besides)."""
    if not (x == lo == hi == types.float64):
        return None

    def codegen(context, builder, signature, args):
        x, lo, hi = args
        x = builder.select(builder.fcmp_ordered("<", x, lo), lo, x)
        return builder.select(builder.fcmp_ordered(">", x, hi), hi, x)
    return types.float64(x, lo, hi), codegen


@intrinsic
def _lshr52(typingctx, i):
    """i >> 52 as a logical shift (vpsrlq; AVX2 has no arithmetic vpsraq)."""
    if i != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.lshr(args[0], ir.Constant(ir.IntType(64), 52))
    return types.int64(i), codegen


@_jit
def _pow2(k):
    """2.0**k for an int64 k in [-1022, 1023]."""
    return bits_float((k + 1023) << 52)


# Polynomials in Estrin's scheme (shorter dependency chains than Horner's, for the
# out-of-order core to overlap); c holds the coefficients from the constant term up.

@_jit
def _poly8(x, c):
    x2 = x * x
    a = _mla(_mla(c[3], x, c[2]), x2, _mla(c[1], x, c[0]))
    b = _mla(_mla(c[7], x, c[6]), x2, _mla(c[5], x, c[4]))
    return _mla(b, x2 * x2, a)


@_jit
def _poly10(x, c):
    x2 = x * x
    x4 = x2 * x2
    a = _mla(_mla(c[3], x, c[2]), x2, _mla(c[1], x, c[0]))
    b = _mla(_mla(c[7], x, c[6]), x2, _mla(c[5], x, c[4]))
    return _mla(_mla(c[9], x, c[8]), x4 * x4, _mla(b, x4, a))


# --- exp ------------------------------------------------------------------------------

@_jit
def _exp_dd(xh, xl):
    """exp(xh + xl) for |xh| <= 1100, |xl| <= ulp(xh)."""
    t = _mla(xh, _INV_LN2, _SHIFT)
    kd = t - _SHIFT
    k = float_bits(t) - _SHIFT_BITS
    a = xh - kd * _LN2_HI             # exact
    b = kd * _LN2_LO - xl
    rh = a - b                        # xh + xl - k ln2 = rh + rl, |rh| < 0.35
    rl = (a - rh) - b
    r2h, r2l = _two_prod(rh, rh)
    v = _poly10(rh, _EXP_V)           # (e**r - 1 - r - r**2/2) / r**3, minimax
    rest = _mla(rh * r2h, v, _mla(0.5, r2l, _mla(rl, rh, rl)))
    hi = 1.0 + rh                     # e**r = 1 + r + r**2/2 + rest, summed exactly but
    lo = (1.0 - hi) + rh              # for the small rest, rounded once at the end
    hi, lo2 = _fast_two_sum(hi, 0.5 * r2h)
    y = hi + (lo2 + (lo + rest))
    k1 = k >> 1                       # two scalings: 2**k alone may not be a normal double
    return y * _pow2(k1) * _pow2(k - k1)


@_jit
def _scale2(k_bits):
    """(2**(k//2), 2**(k - k//2)) for the bits of _SHIFT + k, |k| <= 2044: two normal
    doubles whose product is 2**k (which alone may not be one)."""
    k1 = (k_bits << 51) & _EXP_MASK          # (k >> 1) << 52 (the low bit of k dropped)
    return bits_float(k1 + _ONE_BITS), bits_float(((k_bits << 52) - k1) + _ONE_BITS)


@_jit
def _exp64(x):
    x = _clamp(x, -1100.0, 1100.0)      # keeps NaN; exp(+-1100) overflows / underflows
    t = _mla(x, _INV_LN2, _SHIFT)
    kd = t - _SHIFT                     # k = round(x / ln2)
    r = _mla(-kd, _EXP_LN2_LO, _mla(-kd, _EXP_LN2_HI, x))   # x - k ln2, |r| <= 0.35
    hi = 1.0 + r                        # 1 + r = hi + lo exactly
    lo = (1.0 - hi) + r
    # e**r = 1 + r + r**2 q(r), q minimax of degree 9 in Estrin's scheme, with lo folded
    # into its constant term; the sum hi + (lo + r**2 q) rounded once.
    c = _EXP_Q
    r2 = r * r
    r4 = r2 * r2
    p01 = _mla(c[1], r, c[0])
    p23 = _mla(c[3], r, c[2])
    p45 = _mla(c[5], r, c[4])
    p67 = _mla(c[7], r, c[6])
    p89 = _mla(c[9], r, c[8])
    e0 = _mla(r2, p01, lo)
    e1 = _mla(r2, p45, p23)
    e2 = _mla(r2, p89, p67)
    y = hi + _mla(r4, _mla(r4, e2, e1), e0)
    s1, s2 = _scale2(float_bits(t))
    return y * s2 * s1


# --- expm1 and tanh -------------------------------------------------------------------

@_jit
def _expm1_parts(x):
    """(yh, yl, t) with expm1(x) = (yh + yl) 2**k, yh + yl = 2**-k e**x - 1 + (rounding
    below 2**-60 |yh|), and t the bits of _SHIFT + k, for x in [-1100, 1100]:
    e**r - 2**-k = (1 - 2**-k) + r + r**2 q(r), the first two terms summed exactly."""
    t = _mla(x, _INV_LN2, _SHIFT)
    kd = t - _SHIFT
    r1 = _mla(-kd, _EXP_LN2_HI, x)     # exact
    m = kd * _EXP_LN2_LO
    r = r1 - m                          # x - k ln2 = r1 - m, |r| <= 0.35
    ti = float_bits(t)
    k1 = (ti << 51) & _EXP_MASK         # 2**-k in two factors (k up to 1100)
    th, tl = _two_sum(1.0, -(bits_float(_ONE_BITS - k1)
                             * bits_float(_ONE_BITS - ((ti << 52) - k1))))
    hi = th + r                         # |th| >= 1/2 > |r| or th = 0: exact sum hi + lo
    lo = (((th - hi) + r1) - m) + tl
    r2 = r * r
    h2 = 0.5 * r2                       # r**2/2 = h2 + l2 exactly
    l2 = _mla(0.5 * r, r, -h2)
    s = hi + h2                         # hi + h2 exactly (|hi| >= h2)
    lo = ((hi - s) + h2) + (lo + l2)
    hi = s
    # + r**3 v(r), v minimax of degree 9 in Estrin's scheme, lo folded into the sum (its
    # error counts up to 3.4 times: e**r - 2**-k may be 0.29 e**r for k = 1)
    c = _EXPM1_V
    r4 = r2 * r2
    e0 = _mla(r2, _mla(c[3], r, c[2]), _mla(c[1], r, c[0]))
    e1 = _mla(r2, _mla(c[7], r, c[6]), _mla(c[5], r, c[4]))
    s = _mla(r2 * r, _mla(r4, _mla(r4, _mla(c[9], r, c[8]), e1), e0), lo)
    yh = hi + s
    return yh, (hi - yh) + s, ti


@_jit
def _expm1_64(x):
    yh, yl, ti = _expm1_parts(_clamp(x, -40.0, 1100.0))   # expm1(-40) rounds to -1
    s1, s2 = _scale2(ti)
    r = yh * s2 * s1
    return x if x == 0.0 else r       # expm1(-0) = -0


@_jit
def _tanh64(x):
    a = _clamp(abs(x), 0.0, 20.0)     # tanh(20) rounds to 1; keeps NaN
    yh, yl, ti = _expm1_parts(2.0 * a)
    p = bits_float((ti << 52) + _ONE_BITS)   # 2**k, k in [0, 58]
    eh = yh * p                       # expm1(2a) = eh + el, exactly scaled
    el = yl * p
    dh, dl = _two_sum(2.0, eh)
    dl = dl + el
    inv = _div(1.0, dh)               # tanh a = E / (E + 2), divided in double-double:
    th = eh * inv                     # th, then the exact residual (eh - th dh) ...
    tl = ((_mla(-th, dh, eh) + el) - th * dl) * inv
    r = th + tl
    return bits_float(float_bits(r) | (float_bits(x) & _SIGN))


# --- log ------------------------------------------------------------------------------

@_jit
def _log_bits(x):
    """u for _log_fast: its top 12 bits e + 2048, in [974, 3072], its low 52 bits those of
    (x's bits - those of sqrt(1/2)), where x = 2**e (1 + f), 1 + f in [sqrt(1/2), sqrt(2));
    for subnormal x, from x 2**64 (e - 64)."""
    u_tiny = float_bits(x * 18446744073709551616.0) + _LOG_U_TINY
    u = float_bits(x) + _LOG_U
    return u_tiny if x < _TINY else u


@_jit
def _log_reduce(x):
    """(e, sh, sl) for finite x > 0 = 2**e m, m in [sqrt(1/2), sqrt(2)): e as a float and
    s = (m - 1)/(m + 1) = sh + sl, |s| < 0.1716; log x = e ln2 + 2 atanh(s)."""
    u = _log_bits(x)
    ed = bits_float(_lshr52(u) | _SHIFT_BITS) - (_SHIFT + 2048.0)
    m = bits_float((u & _MANT_MASK) + _SQRT_HALF_BITS)
    f = m - 1.0                                      # exact
    dh, dl = _fast_two_sum(1.0, m)                   # m + 1
    inv = _div(1.0, dh)
    sh = f * inv
    ph, pl = _two_prod(sh, dh)
    sl = (((f - ph) - pl) - sh * dl) * inv           # (f - sh (m + 1)) / (m + 1)
    return ed, sh, sl


@_jit
def _log_parts(x):
    """log(x) as a double-double (h, l) for finite x > 0, relative error ~2**-70 (for pow):
    2 atanh(s) = 2s (1 + G), G = z/3 + z**2/5 + z**3 H(z), z = s**2, H a minimax
    polynomial, the rest in double-double arithmetic."""
    ed, sh, sl = _log_reduce(x)
    zh, zl = _two_prod(sh, sh)
    zl = _mla(2.0 * sh, sl, zl)
    hz = _poly8(zh, _LOG_H)
    wh, wl = _fast_two_sum(_FIFTH_HI, zh * hz)       # w = 1/5 + z H
    wl = wl + _FIFTH_LO
    ph, pl = _two_prod(zh, wh)                       # u = 1/3 + z w
    pl = pl + (zh * wl + zl * wh)
    uh, ul = _fast_two_sum(_THIRD_HI, ph)
    ul = ul + (pl + _THIRD_LO)
    gh, gl = _two_prod(zh, uh)                       # G = z u
    gl = gl + (zh * ul + zl * uh)
    ph, pl = _two_prod(sh, gh)                       # s G
    pl = pl + (sh * gl + sl * gh)
    lh, ll = _fast_two_sum(sh, ph)                   # s + s G
    ll = ll + (pl + sl)
    h, l = _fast_two_sum(ed * _LN2_HI, 2.0 * lh)     # exact: ed * _LN2_HI is 0 or larger
    return h, l + (2.0 * ll + ed * _LN2_LO)


@_jit
def _log_fast(u):
    """log(x) as an unnormalised double-double (h, l) for finite x > 0 given as
    u = _log_bits(x) (fdlibm's method): s = f / (2 + f) and
    log(1 + f) = f - f**2/2 + s (f**2/2 + R(z)), z = s**2, R minimax; e ln2_hi + f - f**2/2
    summed exactly, the rest (under 7% of it) rounded once.  s needs only ~2**-50 accuracy:
    one division, no correction."""
    ed = bits_float(_lshr52(u) | _SHIFT_BITS) - (_SHIFT + 2048.0)   # float(e); AVX2 has
    m = bits_float((u & _MANT_MASK) + _SQRT_HALF_BITS)
    f = m - 1.0                                      # exact
    s = _div(f, m + 1.0)                             # m + 1 = 2 + f
    hfsq = 0.5 * f * f
    z = s * s
    w = z * z
    c = _LOG_R
    p = _mla(w * w, _mla(w, c[6], _mla(c[5], z, c[4])),
             _mla(w, _mla(c[3], z, c[2]), _mla(c[1], z, c[0])))
    a = ed * _LN2_HI                                 # exact (32-bit _LN2_HI)
    h = a + f                                        # exact sum h + l (|a| >= |f| or a = 0)
    l = f - (h - a)
    hf = 0.5 * f
    hfl = _mla(hf, f, -hfsq)                         # f**2/2 = hfsq + hfl exactly
    h2 = h - hfsq                                    # h - hfsq = h2 + l2 exactly
    l2 = (h - h2) - hfsq
    return h2, _mla(s * z, p, _mla(s, hfsq, ed * _LN2_LO) + ((l + l2) - hfl))


@_jit
def _log64(x):
    h, l = _log_fast(_log_bits(x))
    r = h + l
    r = _INF if x == _INF else r
    r = -_INF if x == 0.0 else r
    return _NAN if (x < 0.0) | (x != x) else r


@_jit
def _log1p64(x):
    uh, ul = _two_sum(1.0, x)          # 1 + x exactly; log(uh + ul) = log(uh) + ul/uh
    h, l = _log_fast(float_bits(uh) + _LOG_U)   # uh >= 2**-53: normal
    r = h + (l + _div(ul, uh))
    r = _INF if x == _INF else r
    r = -_INF if x == -1.0 else r
    r = _NAN if (x < -1.0) | (x != x) else r
    # |x| < 2**-30: x - x**2/2, rounded once (ul/uh above could add 1/4 ulp); keeps -0.
    return _mla(-0.5 * x, x, x) if abs(x) < 9.313225746154785e-10 else r


# --- pow ------------------------------------------------------------------------------

@_jit
def _pow64(x, y):
    ax = abs(x)
    lh, ll = _log_parts(ax)
    zh, zl = _two_prod(lh, y)          # y log|x| in double-double
    zl = _mla(ll, y, zl)
    out = (zh > 1100.0) | (zh < -1100.0)
    zh = 1100.0 if zh > 1100.0 else zh
    zh = -1100.0 if zh < -1100.0 else zh
    zl = 0.0 if out else zl
    r = _exp_dd(zh, zl)
    # sign for x < 0: y must be an integer; odd y flips it.
    ay = abs(y)
    yint = (ay >= _TWO52) | (((ay + _TWO52) - _TWO52) == ay)
    hy = 0.5 * ay
    yodd = yint & (ay < 2.0 * _TWO52) & (((hy + _TWO52) - _TWO52) != hy)
    neg = x < 0.0
    r = -r if neg & yodd else r
    r = _NAN if neg & (not yint) else r
    # C99 special cases, last one wins.
    zero = ax == 0.0
    mag = _INF if (y < 0.0) == zero else 0.0                     # x = +-0 or +-inf
    mag = -mag if yodd & (float_bits(x) < 0) else mag
    r = mag if zero | (ax == _INF) else r
    mag = _INF if (ax < 1.0) == (y < 0.0) else 0.0               # y = +-inf
    mag = 1.0 if ax == 1.0 else mag
    r = mag if ay == _INF else r
    r = x + y if (x != x) | (y != y) else r
    return 1.0 if (y == 0.0) | (x == 1.0) else r


# --- float32 / float64 entry points ---------------------------------------------------

@_jit
def exp(x):
    """e**x."""
    return _in_precision_of(x, _exp64(_f64(x)))


@_jit
def expm1(x):
    """e**x - 1, accurate for small x."""
    return _in_precision_of(x, _expm1_64(_f64(x)))


@_jit
def log(x):
    """Natural logarithm."""
    return _in_precision_of(x, _log64(_f64(x)))


@_jit
def log1p(x):
    """log(1 + x), accurate for small x."""
    return _in_precision_of(x, _log1p64(_f64(x)))


@_jit
def tanh(x):
    """Hyperbolic tangent."""
    return _in_precision_of(x, _tanh64(_f64(x)))


@_jit
def pow(x, y):
    """x**y with C99 pow's special cases."""
    return _in_precision_of_both(x, y, _pow64(_f64(x), _f64(y)))
