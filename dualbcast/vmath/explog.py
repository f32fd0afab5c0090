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
    checks); frexp/ldexp by integer arithmetic on the bits (``bits.float_bits``); int64 to
    double through the 1.5 * 2**52 trick (AVX2 has no vcvtqq2pd); every helper is
    ``forceinline`` (LLVM ``alwaysinline``: a call left in the loop would stop the
    vectoriser); polynomials in Estrin's scheme.  Exact products use ``llvm.fma`` when the
    target CPU has FMA and Dekker's splitting otherwise (same results, slower).

Methods (x = k ln2 + r with |r| <= ln2/2, r kept as a double-double; x = 2**e m with m in
[sqrt(1/2), sqrt(2)), s = (m - 1)/(m + 1) as a double-double):
    exp     e**r = 1 + r + r**2/2 + r**3 v(r) (v minimax, degree 9), the three leading terms
            summed exactly, one rounding; times 2**k in two steps (overflow to inf;
            gradual underflow, where the result is rounded twice).
    expm1   expm1(r) in double-double (r + r**2/2 + r**3/6 exact, + r**4 v(r)), then
            2**k ((1 - 2**-k) + expm1(r)) with 1 - 2**-k an exact double-double: no
            cancellation error for small x or small k.  x = -0 returns -0.
    tanh    E / (E + 2) with E = expm1(2|x|) as above, divided in double-double; the sign
            copied from x; |x| > 20 gives +-1.
    log     e ln2 + 2 atanh(s) = e ln2 + 2s + s z P(z), z = s**2 (P minimax, degree 7);
            e ln2 + 2s exact, one rounding.
    log1p   1 + x = u + v exactly (two-sum); log u (as log) + v / u; |x| < 2**-30:
            x - x**2/2.
    pow     exp(y log|x|) with log|x| to ~2**-70 (the atanh series summed in double-double,
            the degree 7 tail H minimax), y log|x| an exact product, exp of a
            double-double as in exp; then the sign (x < 0: y odd flips it, y not an
            integer gives NaN) and the C99 special cases as selects: pow(x, +-0) = 1 and
            pow(1, y) = 1 even for NaN, pow(+-0, y) and pow(+-inf, y) with the sign for odd
            integer y, pow(x, +-inf) by |x| vs 1 (pow(-1, +-inf) = 1), any other NaN -> NaN.
Special values follow C99 as NumPy does: NaN -> NaN (a NaN's sign bit may differ from
NumPy's), +-inf, signed zeros (expm1/log1p/tanh(-0) = -0), log(0) = -inf, log(x < 0) =
NaN, log1p(-1) = -inf, subnormal inputs and results.  Floating-point exception flags and
errno are not set.

Measured accuracy: max error in ulp against x87 long double (``tests/ulp.py``), over ~2e7
inputs per function and precision: random bit patterns (every exponent, both signs), dense
samples of the main interval, values near 0, and thresholds and special values (the tests
assert slightly larger bounds)::

    function  float64                             float32 (the float64 result rounded)
    exp       0.534; 0.75 for subnormal results   0.500
    expm1     0.510                               0.500
    log       0.543                               0.500
    log1p     0.541                               0.500
    tanh      0.508                               0.500
    pow       0.535; 0.75 for subnormal results   0.500

Measured speed: ns per element of a 10**6-element ``out[i] = f(x[i])`` Numba loop, ours
vs ``math.f`` (libm, called per element; expf etc. for float32) in the same loop; one core
of an x86-64 Zen 3 at 2.45 GHz (AVX2 + FMA), best of 25 runs::

    function  inputs                            float64: ours  libm   float32: ours  libm
    exp       U(-5, 5)                                   1.9    4.9            2.4    2.6
    exp       U(-700, 700)                               1.9    9.6            2.4   14.4
    expm1     U(-5, 5)                                   3.8   12.8            4.4   13.9
    log       e**U(-700, 700)                            2.2    4.3            2.8    7.6
    log1p     U(-0.9, 10)                                3.0   12.6            3.4   12.6
    tanh      U(-5, 5)                                   5.1   17.5            5.8   18.6
    pow       x = e**U(-5, 5), y = U(-50, 50)            9.7   14.0           11.6   15.7
"""
import numpy as np
from numba import njit, types
from numba.core import codegen as _codegen, config as _config
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

from .bits import bits_float, float_bits

__all__ = ["exp", "expm1", "log", "log1p", "tanh", "pow"]

# numpy error model: float division never raises (no branches); forceinline: LLVM inlines
# every call (alwaysinline), so a loop calling these sees straight-line code to vectorise.
_jit = njit(error_model="numpy", forceinline=True)

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
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2), the lower end of log's m
_THIRD_HI, _THIRD_LO = 0.3333333333333333, 1.850371707708594e-17
_FIFTH_HI, _FIFTH_LO = 0.2, -1.1102230246251566e-17
_SIXTH_HI, _SIXTH_LO = 0.16666666666666666, 9.25185853854297e-18

_EXP_V = (0.16666666666666669, 0.041666666666666664, 0.008333333333329796,
          0.0013888888888886363, 0.00019841269864364933, 2.4801587318080937e-05,
          2.7557266442353424e-06, 2.7557281528710364e-07, 2.5101335854788522e-08,
          2.0911915299044694e-09)
_EXPM1_V = (0.041666666666666664, 0.008333333333333333, 0.0013888888888885724,
            0.00019841269841267732, 2.4801587321119614e-05, 2.7557319237005467e-06,
            2.755727702983205e-07, 2.5052080259835136e-08, 2.0913954834682796e-09,
            1.608383984091234e-10)
_LOG_H = (0.14285714285714285, 0.1111111111111148, 0.09090909090647106, 0.0769230776320522,
          0.06666657258257504, 0.05883029381949927, 0.05236334295140812,
          0.053097569132606826)
_LOG_P = (0.6666666666666666, 0.4000000000000089, 0.2857142857079543, 0.2222222239356661,
          0.18181795442371984, 0.1538625044794019, 0.13268485680654427, 0.13089629160674623)


# --- error-free transformations -------------------------------------------------------

def _target_has_fma():
    features = _config.CPU_FEATURES
    if features is None:
        features = _codegen.get_host_cpu_features()
    return "+fma" in features.split(",")


_HAS_FMA = _target_has_fma()


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with one rounding (llvm.fma: one instruction on FMA hardware)."""
    if not (a == b == c == types.float64):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return types.float64(a, b, c), codegen


@_jit
def _mul_add(a, b, c):
    return a * b + c


# Polynomials: fused where the hardware fuses (faster; the accuracy does not need it).
_mla = _fma if _HAS_FMA else _mul_add


@_jit
def _two_prod_fma(a, b):
    """(p, e) with p = fl(a * b) and p + e = a * b exactly."""
    p = a * b
    return p, _fma(a, b, -p)


@_jit
def _two_prod_dekker(a, b):
    """_two_prod_fma without an FMA (Dekker/Veltkamp splitting; |a|, |b| < 2**995)."""
    p = a * b
    t = 134217729.0 * a
    ah = t - (t - a)
    al = a - ah
    t = 134217729.0 * b
    bh = t - (t - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


_two_prod = _two_prod_fma if _HAS_FMA else _two_prod_dekker


@_jit
def _two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@_jit
def _fast_two_sum(a, b):
    """_two_sum for exponent(a) >= exponent(b)."""
    s = a + b
    return s, b - (s - a)


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
def _exp_reduce(xh, xl):
    """xh + xl = k ln2 + (rh + rl), |rh + rl| <= 0.35, for |xh| <= 1100."""
    t = xh * _INV_LN2 + _SHIFT
    kd = t - _SHIFT
    k = float_bits(t) - _SHIFT_BITS
    rh = xh - kd * _LN2_HI   # exact: kd * _LN2_HI is, and it is within a factor 2 of xh
    rh, rl = _two_sum(rh, xl - kd * _LN2_LO)
    return rh, rl, k


@_jit
def _expm1_small(rh, rl):
    """expm1(rh + rl) as a normalised double-double for |rh + rl| <= 0.36, relative error
    ~2**-64: r + r**2/2 + r**3/6 in double-double, + r**4 v(r) (v minimax, degree 9)."""
    qh, ql = _two_prod(rh, rh)                 # r**2
    ql = _mla(2.0 * rh, rl, ql)
    ch, cl = _two_prod(qh, rh)                 # r**3
    cl = _mla(ql, rh, cl)
    dh, dl = _two_prod(ch, _SIXTH_HI)          # r**3 / 6
    dl = dl + (ch * _SIXTH_LO + cl * _SIXTH_HI)
    v = _poly10(rh, _EXPM1_V)
    sh, sl = _fast_two_sum(rh, 0.5 * qh)
    sh, t = _fast_two_sum(sh, dh)
    sl = ((sl + t) + ((rl + 0.5 * ql) + dl)) + qh * qh * v
    return _fast_two_sum(sh, sl)


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
def _exp64(x):
    x = 1100.0 if x > 1100.0 else x   # keeps NaN; exp(+-1100) overflows / underflows anyway
    x = -1100.0 if x < -1100.0 else x
    return _exp_dd(x, 0.0)


# --- expm1 and tanh -------------------------------------------------------------------

@_jit
def _expm1_parts(x):
    """expm1(x) = (h + l) * 2**k for x in [-60, 710]."""
    rh, rl, k = _exp_reduce(x, 0.0)
    eh, el = _expm1_small(rh, rl)
    # 2**k (1 + E) - 1 = 2**k (T + E) with T = 1 - 2**-k, a double-double exactly.
    kt = 100 if k > 100 else k
    th, tl = _two_sum(1.0, -_pow2(-kt))
    h, l = _two_sum(th, eh)
    h, l = _fast_two_sum(h, l + (tl + el))
    return h, l, k


@_jit
def _expm1_64(x):
    xc = 710.0 if x > 710.0 else x    # keeps NaN
    xc = -60.0 if xc < -60.0 else xc  # expm1(-60) rounds to -1
    h, l, k = _expm1_parts(xc)
    k1 = k >> 1
    r = (h + l) * _pow2(k1) * _pow2(k - k1)
    return x if x == 0.0 else r       # expm1(-0) = -0


@_jit
def _tanh64(x):
    a = abs(x)
    a = 20.0 if a > 20.0 else a       # tanh(20) rounds to 1; keeps NaN
    h, l, k = _expm1_parts(2.0 * a)
    p = _pow2(k)
    eh = h * p                        # expm1(2a) = eh + el, exactly scaled
    el = l * p
    dh, dl = _two_sum(2.0, eh)
    dl = dl + el
    th = eh / dh                      # tanh a = E / (E + 2), divided in double-double
    ph, pl = _two_prod(th, dh)
    tl = ((((eh - ph) - pl) + el) - th * dl) / dh
    r = th + tl
    return bits_float(float_bits(r) | (float_bits(x) & _SIGN))


# --- log ------------------------------------------------------------------------------

@_jit
def _log_reduce(x):
    """(e, sh, sl) for finite x > 0 = 2**e m, m in [sqrt(1/2), sqrt(2)): e as a float and
    s = (m - 1)/(m + 1) = sh + sl, |s| < 0.1716; log x = e ln2 + 2 atanh(s)."""
    tiny = x < _TINY
    x = x * 18446744073709551616.0 if tiny else x   # subnormals: scale by 2**64
    ix = float_bits(x)
    e = (ix - _SQRT_HALF_BITS) >> 52
    m = bits_float(ix - (e << 52))
    ed = bits_float(e + _SHIFT_BITS) - _SHIFT        # float(e); AVX2 has no cvtqq2pd
    ed = ed - 64.0 if tiny else ed
    f = m - 1.0                                      # exact
    dh, dl = _fast_two_sum(1.0, m)                   # m + 1
    inv = 1.0 / dh
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
def _log_fast(x):
    """log(x) as an unnormalised double-double (h, l) for finite x > 0, relative error
    ~2**-58: 2 atanh(s) = 2s + s z P(z), z = s**2, P minimax; e ln2 + 2s exact."""
    ed, sh, sl = _log_reduce(x)
    z = sh * sh
    p = _poly8(z, _LOG_P)  # 2 (atanh(s)/s - 1) / z, minimax
    h, l = _fast_two_sum(ed * _LN2_HI, 2.0 * sh)   # exact (ed * _LN2_HI is 0 or the larger)
    return h, l + (_mla(2.0, sl, sh * z * p) + ed * _LN2_LO)


@_jit
def _log64(x):
    h, l = _log_fast(x)
    r = h + l
    r = _INF if x == _INF else r
    r = -_INF if x == 0.0 else r
    return _NAN if (x < 0.0) | (x != x) else r


@_jit
def _log1p64(x):
    uh, ul = _two_sum(1.0, x)          # 1 + x exactly; log(uh + ul) = log(uh) + ul/uh
    h, l = _log_fast(uh)
    r = h + (l + ul / uh)
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

def _f64(x):
    """x as a float64 (typing stub)."""


@overload(_f64, inline="always")
def _ol_f64(x):
    if x in (types.float32, types.float64):
        return lambda x: np.float64(x)
    raise TypingError(f"dualbcast.vmath.explog takes float32 or float64 arguments, not {x}")


def _like(x, r):
    """The float64 result r in x's precision (typing stub)."""


@overload(_like, inline="always")
def _ol_like(x, r):
    if x == types.float32:
        return lambda x, r: np.float32(r)
    return lambda x, r: r


def _like2(x, y, r):
    """The float64 result r as float32 if x and y are float32 (typing stub)."""


@overload(_like2, inline="always")
def _ol_like2(x, y, r):
    if x == y == types.float32:
        return lambda x, y, r: np.float32(r)
    return lambda x, y, r: r


@_jit
def exp(x):
    """e**x."""
    return _like(x, _exp64(_f64(x)))


@_jit
def expm1(x):
    """e**x - 1, accurate for small x."""
    return _like(x, _expm1_64(_f64(x)))


@_jit
def log(x):
    """Natural logarithm."""
    return _like(x, _log64(_f64(x)))


@_jit
def log1p(x):
    """log(1 + x), accurate for small x."""
    return _like(x, _log1p64(_f64(x)))


@_jit
def tanh(x):
    """Hyperbolic tangent."""
    return _like(x, _tanh64(_f64(x)))


@_jit
def pow(x, y):
    """x**y with C99 pow's special cases."""
    return _like2(x, y, _pow64(_f64(x), _f64(y)))
