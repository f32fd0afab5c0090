"""Second derivatives of every dual rule (issue 27, items 1 and 5 and the audit they ask
for): against closed forms near 0, near the edges of each domain and at huge and tiny
arguments, in every kernel mode; at singular points against the NumPy rules' second
order (design.md section 4 holds at second order too); regressions for ``x ** -n`` at 0
and where ``x ** n`` underflows, ``asin``/``acos``/``atanh`` near 0, ``hypot`` far from
the origin, ``round()``, and ``tanh'`` and ``expm1'`` (which cancelled at first order
already, in the kernels' table and the NumPy rules alike).

Oracles: closed forms, exact where they are rational (``fractions.Fraction``, rounded
once), else from Python's ``math``, NumPy and SciPy with the parts that would cancel
(``1 - x^2``, ``x^2 - 1``) exact: each within a few ulps of the true value.

Compiling dominates the run time: every rule is one branch of one kernel, compiled once
per mode; the singular points and the regressions share a second, smaller kernel
compiled in every mode.
"""
import functools
import math
import operator
import warnings
from fractions import Fraction

import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbcast as db
from profiles import examples
from selector_kernels import selector
from ulp import agree

F = Fraction
LN2, LN3, LN10 = math.log(2.0), math.log(3.0), math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _exact(q):
    """A Fraction rounded once to float64 (+-inf past the largest float)."""
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def _power(x, p):
    """x ** p by the C library's pow (within an ulp; inf and 0 where it over- and
    underflows, where Python's float ** raises)."""
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(x), np.float64(p)))


# --------------------------------------------------------------------------- closed forms

def _asin2(x):
    w = _exact(1 - F(x) ** 2)                   # (1 - x^2 exact: no cancellation near 1)
    return x / w / math.sqrt(w)


def _acosh2(x):
    # -x / (x^2 - 1)^1.5; past 1e150 x^2 - 1 is x^2 to far below an ulp
    w = _exact(F(x) ** 2 - 1) if x < 1e150 else x * x
    if math.isinf(w):
        return -(1.0 / x) / x
    return -(x / w) / math.sqrt(w)


def _erf2(x):
    # -2x * (2/sqrt(pi)) exp(-x^2), with x^2 split exactly into hi + lo
    x2 = F(x) ** 2
    hi = float(x2)
    lo = float(x2 - F(hi))
    return -2.0 * x * TWO_OVER_SQRT_PI * math.exp(-hi) * (1.0 - lo)


def _hypot_xx(x, c):
    r = math.hypot(x, c)
    return (c / r) * (c / r) / r


def _atan2_yy(y, x):
    # d^2/dy^2 atan2(y, x) = -2xy / r^4 (and d^2/dx^2 is its negative)
    r = math.hypot(x, y)
    return -2.0 * (x / r) * (y / r) / r / r


def _log_base_x_xx(c, x):
    # d^2/dx^2 log(c) / log(x) = log(c) (2 + log x) / (x^2 log^3 x); it cancels near
    # x = e^-2, where it is 0: the scale is |log c| (2 + |log x|) / (x^2 |log x|^3).
    L = math.log(x)
    inv_x2 = _exact(1 / F(x) ** 2)
    return (math.log(c) * (2.0 + L) * inv_x2 / L ** 3,
            abs(math.log(c)) * (2.0 + abs(L)) * inv_x2 / abs(L) ** 3)


def _integer_power(n):
    return lambda x: _exact(n * (n - 1) * F(x) ** (n - 2))


def _real_power(c):
    return lambda x: c * (c - 1) * _power(x, c - 2)


# ------------------------------------------------------------------------------ domains

def _magnitudes(lo, hi):
    """10 ** e for e uniform in [lo, hi]."""
    return st.floats(lo, hi).map(lambda e: 10.0 ** e)


def _signed(strategy):
    return st.tuples(strategy, st.booleans()).map(lambda p: -p[0] if p[1] else p[0])


def _both_signs(points):
    return [s * x for x in points for s in (1.0, -1.0)]


class Domain:
    """Where a rule is checked: a hypothesis strategy, and fixed points every run meets
    (the audit's: near 0 down to 1e-300, the last floats below 1, huge arguments)."""

    def __init__(self, *parts):
        self.strategy = st.one_of(*[strategy for strategy, _ in parts])
        self.fixed = [x for _, points in parts for x in points]


TINY_POINTS = [1e-300, 1e-200, 1e-100, 1e-30, 1e-17, 1e-12, 1e-9, 1e-5]
HUGE_POINTS = [1e10, 1e50, 1e100, 1e200, 1e300]
EDGE_POINTS = [1.0 - 2.0 ** -k for k in (1, 10, 30, 52, 53)]
TINY = (_magnitudes(-300, -1), TINY_POINTS)
SIGNED_TINY = (_signed(TINY[0]), _both_signs(TINY_POINTS))
HUGE = (_magnitudes(0.5, 300), HUGE_POINTS)
SIGNED_HUGE = (_signed(HUGE[0]), _both_signs(HUGE_POINTS))
EDGES = (_signed(st.integers(1, 53).map(lambda k: 1.0 - 2.0 ** -k)), _both_signs(EDGE_POINTS))


def _between(a, b, *points):
    return st.floats(a, b), list(points)


ANYWHERE = Domain(SIGNED_TINY, SIGNED_HUGE, (st.floats(-10, 10).filter(bool), [0.3, -2.5]))
POSITIVE = Domain(TINY, HUGE, _between(0.01, 100, 0.3, 2.5))
UNIT = Domain(SIGNED_TINY, EDGES, _between(-0.999, 0.999, 0.3, -0.7))


class Rule:
    """A kernel expression of ``x``, the closed form of its second derivative (a float,
    or ``(value, scale)`` where terms cancel: the error is measured against the scale),
    where it is checked, and the relative tolerance."""

    def __init__(self, expression, second, domain, rtol=1e-14, scale=None):
        self.expression, self.second, self.domain = expression, second, domain
        self.rtol, self.scale = rtol, scale

    def expected(self, x):
        value = self.second(x)
        if isinstance(value, tuple):
            return value
        return value, abs(value) * (self.scale(x) if self.scale else 1.0)


def _tiny_or_huge_to(exponent):
    """Near 0, or huge up to 10 ** exponent."""
    huge = [x for x in _both_signs(HUGE_POINTS) if abs(x) < 10.0 ** exponent]
    return Domain(SIGNED_TINY, (_signed(_magnitudes(0.5, exponent)), huge))


RULES = [
    Rule("math.exp(x)", math.exp, Domain(SIGNED_TINY, _between(-700, 700, -700.0, 700.0))),
    # (down to where exp underflows: expm1' is exp(x), not y + 1, which cancelled below -1)
    Rule("math.expm1(x)", math.exp,
         Domain(SIGNED_TINY, _between(-740, 700, -1.0, -40.0, -700.0, 700.0))),
    Rule("math.log(x)", lambda x: _exact(-1 / F(x) ** 2), POSITIVE),
    Rule("math.log1p(x)", lambda x: _exact(-1 / (1 + F(x)) ** 2),
         Domain(SIGNED_TINY, HUGE, (_magnitudes(-15, -0.5).map(lambda t: t - 1.0),
                                    [2.0 ** -30 - 1.0, 1e-15 - 1.0]))),
    Rule("math.log2(x)", lambda x: _exact(-1 / F(x) ** 2) / LN2, POSITIVE),
    Rule("math.log10(x)", lambda x: _exact(-1 / F(x) ** 2) / LN10, POSITIVE),
    Rule("math.sqrt(x)", lambda x: -0.25 / x / math.sqrt(x), POSITIVE),
    Rule("math.sin(x)", lambda x: -math.sin(x), Domain(SIGNED_TINY, _between(-100, 100, 3.0))),
    Rule("math.cos(x)", lambda x: -math.cos(x), Domain(SIGNED_TINY, _between(-100, 100, 1.5))),
    Rule("math.tan(x)", lambda x: 2.0 * math.tan(x) * (1.0 + math.tan(x) ** 2),
         Domain(SIGNED_TINY, _between(-1.5, 1.5, 1.5))),
    Rule("math.asin(x)", _asin2, UNIT),
    Rule("math.acos(x)", lambda x: -_asin2(x), UNIT),
    Rule("np.arcsin(x)", _asin2, UNIT),
    Rule("np.arccos(x)", lambda x: -_asin2(x), UNIT),
    # (between 1e77 and 1e102 -2x / (1 + x^2)^2 passes through 1 / (1 + x^2)^2, which
    # underflows: 0 there, as the NumPy rule and JAX give)
    Rule("math.atan(x)", lambda x: _exact(-2 * F(x) / (1 + F(x) ** 2) ** 2),
         _tiny_or_huge_to(75)),
    Rule("math.sinh(x)", math.sinh, Domain(SIGNED_TINY, _between(-700, 700, 700.0))),
    Rule("math.cosh(x)", math.cosh, Domain(SIGNED_TINY, _between(-700, 700, -700.0))),
    # (both sides of |x| = 0.55, where tanh' changes formula, out to where sech^2 underflows)
    Rule("math.tanh(x)", lambda x: -2.0 * math.tanh(x) / math.cosh(x) / math.cosh(x),
         Domain(SIGNED_TINY, _between(-350, 350, 0.55, -0.5500001, 0.56, -5.0, 20.0, 300.0))),
    Rule("math.asinh(x)", lambda x: -(x / math.hypot(x, 1.0)) / math.hypot(x, 1.0)
         / math.hypot(x, 1.0),
         Domain(SIGNED_TINY, SIGNED_HUGE)),
    Rule("math.acosh(x)", _acosh2,
         Domain(HUGE, (st.integers(1, 52).map(lambda k: 1.0 + 2.0 ** -k),
                       [1.0 + 2.0 ** -k for k in (1, 30, 52)]))),
    Rule("math.atanh(x)", lambda x: _exact(2 * F(x) / (1 - F(x) ** 2) ** 2), UNIT),
    Rule("np.arctanh(x)", lambda x: _exact(2 * F(x) / (1 - F(x) ** 2) ** 2), UNIT),
    # (exp(-x*x) carries the rounding of x*x: x^2 ulps, at first order too)
    Rule("math.erf(x)", _erf2, Domain(SIGNED_TINY, _between(-6, 6, 5.9)),
         scale=lambda x: 1.0 + x * x),
    Rule("math.erfc(x)", lambda x: -_erf2(x), Domain(SIGNED_TINY, _between(-6, 6, -5.9)),
         scale=lambda x: 1.0 + x * x),
    Rule("math.exp2(x)", lambda x: _power(2.0, x) * LN2 * LN2,
         Domain(SIGNED_TINY, _between(-1000, 1000, 1000.0))),
    Rule("math.cbrt(x)", lambda x: functools.reduce(operator.truediv, [math.cbrt(x)] * 5,
                                                     -2.0 / 9.0),
         Domain(SIGNED_TINY, SIGNED_HUGE)),
    # (the oracle, SciPy's polygamma, is good to ~1e-15; dualbcast's digamma to ~1e-13)
    Rule("math.gamma(x)", lambda x: math.gamma(x) * (scipy.special.psi(x) ** 2
                                                      + scipy.special.polygamma(1, x)),
         Domain(_between(0.01, 170, 0.01, 0.5, 169.5)), rtol=1e-12),
    Rule("math.lgamma(x)", lambda x: float(scipy.special.polygamma(1, x)),
         Domain(_between(0.01, 1e4, 0.01, 0.5), (_magnitudes(4, 100), [1e100])), rtol=1e-12),
    *[Rule(f"x ** {n}", _integer_power(n), ANYWHERE) for n in (-3, -2, -1, 2, 3, 5)],
    Rule("np.power(x, -3)", _integer_power(-3), ANYWHERE),
    Rule("1.0 / x", _integer_power(-1), ANYWHERE),
    *[Rule(f"x ** {c}", _real_power(c), POSITIVE) for c in (-1.0, -0.5, 1.5, 2.5)],
    Rule("2.0 ** x", lambda x: _power(2.0, x) * LN2 * LN2,
         Domain(SIGNED_TINY, _between(-1000, 1000, -1000.0))),
    Rule("math.pow(0.5, x)", lambda x: _power(0.5, x) * LN2 * LN2,
         Domain(SIGNED_TINY, _between(-1000, 1000, 1000.0))),
    Rule("math.hypot(x, 2.0)", lambda x: _hypot_xx(x, 2.0), _tiny_or_huge_to(150)),
    Rule("np.hypot(x, 2.0)", lambda x: _hypot_xx(x, 2.0), _tiny_or_huge_to(150)),
    Rule("math.hypot(x, 1e-200)", lambda x: _hypot_xx(x, 1e-200),
         Domain((_signed(_magnitudes(-250, -150)), [1e-100, -1e-230]))),
    Rule("math.atan2(x, 2.0)", lambda x: _atan2_yy(x, 2.0), _tiny_or_huge_to(75)),
    Rule("math.atan2(2.0, x)", lambda x: -_atan2_yy(2.0, x), _tiny_or_huge_to(75)),
    Rule("math.log(x, 3.0)", lambda x: _exact(-1 / F(x) ** 2) / LN3, POSITIVE),
    Rule("math.log(3.0, x)", lambda x: _log_base_x_xx(3.0, x),
         Domain((_magnitudes(-100, 100).filter(lambda x: x != 1.0), [1e-100, 0.5, 1e100]))),
    # Piecewise linear or constant rules, times x where that makes a second derivative
    # that is not 0 (their derivatives are constant or piecewise constant, NaN-safe).
    *[Rule(expression, second, ANYWHERE) for expression, second in [
        ("abs(x) * x", lambda x: math.copysign(2.0, x)),
        ("math.fabs(x) * x", lambda x: math.copysign(2.0, x)),
        ("np.sign(x) * x * x", lambda x: math.copysign(2.0, x)),
        ("math.copysign(x, -1.0) * x", lambda x: -math.copysign(2.0, x)),
        ("math.fmod(x, 0.3) * x", lambda x: 2.0),
        ("math.remainder(x, 0.3) * x", lambda x: 2.0),
        ("(x % 0.3) * x", lambda x: 2.0),
        ("math.fmod(2.5, x)", lambda x: 0.0),
        ("math.remainder(2.5, x)", lambda x: 0.0),
        ("2.5 % x", lambda x: 0.0),
        ("(2.5 // x) * x", lambda x: 0.0),
        ("math.floor(x) * x", lambda x: 0.0),
        ("np.rint(x) * x", lambda x: 0.0),
        ("round(x) * x", lambda x: 0.0),
        ("round(x, 1) * x", lambda x: 0.0),
        ("math.ldexp(x, 3) * x", lambda x: 16.0),
        ("math.degrees(x) * x", lambda x: 2.0 * (180.0 / math.pi)),
        ("math.radians(x) * x", lambda x: 2.0 * (math.pi / 180.0)),
        ("np.square(x)", lambda x: 2.0),
        ("np.negative(x) * x", lambda x: -2.0),
        ("np.reciprocal(x)", _integer_power(-1)),
        ("math.isnan(x) + x * x", lambda x: 2.0),
    ]],
    # max/min: a tie halves the derivative, and its tangent: 1 at x = 1
    *[Rule(expression, second, Domain(SIGNED_TINY, SIGNED_HUGE, _between(-3, 3, 1.0)))
      for expression, second in [
          ("max(x, 1.0) * x", lambda x: 2.0 if x > 1 else 1.0 if x == 1 else 0.0),
          ("min(x, 1.0) * x", lambda x: 2.0 if x < 1 else 1.0 if x == 1 else 0.0),
          ("np.maximum(x, 1.0) * x", lambda x: 2.0 if x > 1 else 1.0 if x == 1 else 0.0),
          ("np.minimum(x, 1.0) * x", lambda x: 2.0 if x < 1 else 1.0 if x == 1 else 0.0)]],
]


every_rule = db.fast_broadcast(selector("every_rule", [r.expression for r in RULES]))
# libm=True: exp & co from the C library, and their own rules (not the stand-ins')
LIBM_RULES = [r for r in RULES if r.expression.split("(")[0] in (
    "math.exp", "math.expm1", "math.log", "math.log1p", "math.tanh", "math.sin", "math.cos",
    "math.pow")]
libm_rules = db.fast_broadcast(libm=True)(selector("libm_rules",
                                                    [r.expression for r in LIBM_RULES]))


def _quiet():
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.simplefilter("ignore")
    return context


def _second_derivatives(kernel, x, w):
    """d^2/dx^2 of ``kernel(x, w)`` elementwise, every way that runs the two
    second-order loops (map and sum, tangents as arrays): {way: array}."""
    ones = np.ones_like(x)
    context = _quiet()
    try:
        return {
            "map, value_and_partials": kernel.value_and_partials(
                x, w, wrt=0, tangents={0: ones})[3],
            "sum, sum_and_partials": kernel.sum_and_partials(x, w, wrt=0, tangents={0: ones})[3],
            "map, jvp(grad)": db.jvp(db.grad(lambda t: np.sum(kernel(t, w))), (x,), (ones,))[1],
            "sum, jvp(grad)": db.jvp(db.grad(lambda t: kernel.sum(t, w)), (x,), (ones,))[1],
        }
    finally:
        context.__exit__(None, None, None)


def _close(got, value, scale, rtol):
    """``got`` is ``value`` within ``rtol`` of ``scale`` (or 1e-305: below that the
    results are at the underflow threshold), or is the same infinity."""
    got = float(got)
    if math.isinf(value) or math.isnan(value):
        return got == value or (math.isnan(got) and math.isnan(value))
    return abs(got - value) <= rtol * scale + 1e-305


def _check_rules(rules, kernel, points):
    x = np.array(points, dtype=np.float64)
    w = np.arange(len(rules), dtype=np.float64)
    for way, got in _second_derivatives(kernel, x, w).items():
        for rule, xi, gi in zip(rules, x, got):
            value, scale = rule.expected(float(xi))
            assert _close(gi, value, scale, rule.rtol), (
                f"{rule.expression} at x = {float(xi)!r} ({way}): {float(gi)!r}, "
                f"closed form {value!r}")


def _with_fixed_examples(rules):
    """``@example``s walking every rule's fixed points (hypothesis runs them every time)."""
    def decorate(test):
        from hypothesis import example
        n = max(len(r.domain.fixed) for r in rules)
        for k in range(n):
            test = example(tuple(r.domain.fixed[k % len(r.domain.fixed)] for r in rules))(test)
        return test
    return decorate


@settings(max_examples=examples(40), deadline=None)
@given(st.tuples(*[r.domain.strategy for r in RULES]))
@_with_fixed_examples(RULES)
def test_every_rule_second_derivative_against_its_closed_form(points):
    # one point for every rule in one call of each mode
    _check_rules(RULES, every_rule, points)


@settings(max_examples=examples(15), deadline=None)
@given(st.tuples(*[r.domain.strategy for r in LIBM_RULES]))
@_with_fixed_examples(LIBM_RULES)
def test_libm_rules_second_derivative_against_their_closed_forms(points):
    _check_rules(LIBM_RULES, libm_rules, points)


# --------------------------------------------------------------------------- two arguments

def _valued(value):
    return value, abs(value)


def _pow_hessian(x, y):
    # x ** y: y(y-1) x^(y-2); x^(y-1) (1 + y log x), whose terms cancel: the scale is
    # x^(y-1) (1 + |y log x|); x^y log(x)^2.  The exponents y - 1 and y - 2 are rounded
    # (the rule's twice): x^e is then good to |log x| ulps of e, the scales say so.
    L = math.log(x)
    xy1 = _power(x, y - 1.0)
    xx = y * (y - 1.0) * _power(x, y - 2.0)
    return ((xx, abs(xx) * (1.0 + abs(L))),
            (xy1 * (1.0 + y * L), abs(xy1) * (1.0 + abs(y * L)) * (1.0 + abs(L))),
            _valued(_power(x, y) * L * L))


def _hypot_hessian(x, y):
    r = math.hypot(x, y)
    return (_valued((y / r) * (y / r) / r), _valued(-(x / r) * (y / r) / r),
            _valued((x / r) * (x / r) / r))


def _atan2_hessian(a, b):
    # atan2(a, b) in (a, b): -2ab / r^4; (a^2 - b^2) / r^4, which cancels near |a| = |b|
    # (the scale is 1 / r^2); 2ab / r^4
    r = math.hypot(a, b)
    c = 2.0 * (a / r) * (b / r) / r / r
    return (-c, abs(c)), ((a / r - b / r) * (a / r + b / r) / r / r, 1.0 / r / r), (c, abs(c))


def _log_base_hessian(x, b):
    # log(x) / log(b): -1 / (x^2 log b); -1 / (x b log(b)^2); log x (log b + 2) / (b^2 log(b)^3)
    Lx, Lb = math.log(x), math.log(b)
    xx = -1.0 / x / x / Lb
    xb = -1.0 / x / b / Lb / Lb
    bb = Lx * (Lb + 2.0) / b / b / Lb ** 3
    return _valued(xx), _valued(xb), (bb, abs(Lx) * (abs(Lb) + 2.0) / b / b / abs(Lb) ** 3)


def _quotient_hessian(x, y):
    X, Y = F(x), F(y)
    return (0.0, 0.0), _valued(_exact(-1 / Y ** 2)), _valued(_exact(2 * X / Y ** 3))


SIGNED_MID = _signed(_magnitudes(-100, 100))
BINARY = [
    # (expression of x, y; Hessian (xx, xy, yy) as (value, scale) pairs; points)
    ("x ** y", _pow_hessian, st.tuples(_magnitudes(-30, 30), st.floats(-4, 4))),
    ("math.pow(x, y)", _pow_hessian, st.tuples(_magnitudes(-30, 30), st.floats(-4, 4))),
    ("math.hypot(x, y)", _hypot_hessian, st.tuples(_signed(_magnitudes(-150, 150)),
                                                   _signed(_magnitudes(-150, 150)))),
    ("math.atan2(x, y)", _atan2_hessian, st.tuples(SIGNED_MID, SIGNED_MID)),
    ("math.log(x, y)", _log_base_hessian,
     st.tuples(_magnitudes(-100, 100), _signed(st.floats(0.01, 100)).map(lambda e: 10.0 ** e))),
    ("x / y", _quotient_hessian, st.tuples(SIGNED_MID, SIGNED_MID)),
    ("x * y", lambda x, y: ((0.0, 0.0), (1.0, 1.0), (0.0, 0.0)),
     st.tuples(SIGNED_MID, SIGNED_MID)),
]


binary = db.fast_broadcast(selector("binary", [e for e, _, _ in BINARY], ("x", "y")))


@settings(max_examples=examples(30), deadline=None)
@given(st.tuples(*[points for _, _, points in BINARY]))
def test_binary_rules_hessians_against_closed_forms(points):
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    w = np.arange(len(BINARY), dtype=np.float64)
    ones, zeros = np.ones_like(x), np.zeros_like(x)
    context = _quiet()
    try:
        # (d/dx, d/dy) along x, then along y: the Hessian's columns (map mode: the sum
        # loops run the same rules, test_every_rule_... checks them)
        (hxx, hyx), (hxy, hyy) = [
            binary.value_and_partials(x, y, w, wrt=(0, 1), tangents={0: tx, 1: ty})[3]
            for tx, ty in ((ones, zeros), (zeros, ones))]
    finally:
        context.__exit__(None, None, None)
    for k, (expression, hessian, _) in enumerate(BINARY):
        xx, xy, yy = hessian(float(x[k]), float(y[k]))
        for name, got, (value, scale) in (("xx", hxx, xx), ("yx", hyx, xy), ("xy", hxy, xy),
                                          ("yy", hyy, yy)):
            assert _close(got[k], value, scale, 1e-14), (
                f"{expression} at {(float(x[k]), float(y[k]))} d2/d{name}: "
                f"{float(got[k])!r}, closed form {value!r}")


# --------------------------------------------------------------------------- every mode

# Singular points (design.md section 4 at second order: the kernel and the NumPy rule
# agree: the same infinity, nan or zero, finite within 4 ulps) and the audit's
# regressions.  Each function: its kernel expression, its NumPy twin (the rules
# differentiate it), and the points.
SINGULAR = [
    ("math.sqrt(x)", np.sqrt, [0.0, -0.0, 5e-324]),
    ("math.log(x)", np.log, [0.0, -0.0, -1.0]),
    ("math.log2(x)", np.log2, [0.0]),
    ("math.log10(x)", np.log10, [0.0]),
    ("math.log1p(x)", np.log1p, [-1.0]),
    ("math.cbrt(x)", np.cbrt, [0.0, -0.0]),
    ("math.exp(x)", np.exp, [math.inf, -math.inf, 800.0]),
    ("math.asin(x)", np.arcsin, [1.0, -1.0, 0.0, -0.0, 1e-12, 1e-17, 1e-300, 1.0 - 2.0 ** -27]),
    ("math.acos(x)", np.arccos, [1.0, -1.0, 0.0, 1e-12, -1e-17, -1.0 + 2.0 ** -30]),
    ("math.atanh(x)", np.arctanh, [1.0, -1.0, 0.0, -0.0, 1e-17, -1e-12, 1.0 - 2.0 ** -30]),
    ("math.acosh(x)", np.arccosh, [1.0]),
    ("math.atan(x)", np.arctan, [0.0, math.inf]),
    ("math.tanh(x)", np.tanh, [0.0, math.inf, -math.inf, 0.55, -0.56, 5.0, -20.0, 300.0]),
    ("math.expm1(x)", np.expm1, [0.0, -0.0, math.inf, -math.inf, -1.0, -40.0, -700.0]),
    ("abs(x)", np.abs, [0.0, -0.0]),
    ("x ** -1", lambda t: t ** -1, [0.0, -0.0, 1e-200, -1e-200, 1e-100]),
    ("x ** -2", lambda t: t ** -2, [0.0, -0.0, 1e-200, -1e-200]),
    ("x ** -3", lambda t: t ** -3, [0.0, -0.0, 1e-200, -1e-200, 1e-100]),
    ("1.0 / x", lambda t: 1.0 / t, [0.0, -0.0, 1e-200]),
    ("x ** 0", lambda t: t ** 0, [0.0]),
    ("x ** 1", lambda t: t ** 1, [0.0]),
    ("x ** 2", lambda t: t ** 2, [0.0, -0.0]),
    ("x ** 3", lambda t: t ** 3, [0.0, -0.0]),
    ("x ** -1.0", lambda t: t ** -1.0, [0.0, -0.0]),
    ("x ** 0.5", lambda t: t ** 0.5, [0.0]),
    ("x ** 1.5", lambda t: t ** 1.5, [0.0]),
    ("math.hypot(x, 0.0)", lambda t: np.hypot(t, 0.0), [0.0]),
    ("math.hypot(x, 2.0)", lambda t: np.hypot(t, 2.0), [math.inf, -1e3, 1e10, 1e100]),
    ("x * math.sqrt(x)", lambda t: t * np.sqrt(t), [0.0]),
    ("math.sqrt(x * x)", lambda t: np.sqrt(t * t), [0.0]),
]
singular = db.fast_broadcast(selector("singular", [e for e, _, _ in SINGULAR]))
SINGULAR_X = np.array([x for _, _, points in SINGULAR for x in points])
SINGULAR_W = np.array([float(k) for k, (_, _, points) in enumerate(SINGULAR) for _ in points])


def _numpy_rule_second_derivatives(x):
    """d^2/dx^2 of each function's NumPy twin at its points, by the NumPy rules."""
    out = []
    with np.errstate(all="ignore"):
        for expression, twin, points in SINGULAR:
            t = np.array(points)
            out.extend(db.jvp(db.grad(lambda s: np.sum(twin(s))), (t,), (np.ones_like(t),))[1])
    return np.array(out)


def test_every_kernel_mode_agrees_with_the_numpy_rules_at_singular_points():
    x, w = SINGULAR_X, SINGULAR_W
    expected = _numpy_rule_second_derivatives(x)
    ways = _second_derivatives(singular, x, w)
    context = _quiet()
    try:
        # grad(grad): the first-order loops, then the second-order ones for their vjps
        ways["map, grad(grad)"] = db.grad(
            lambda t: np.sum(db.grad(lambda s: np.sum(singular(s, w)))(t)))(x)
        ways["sum, grad(grad)"] = db.grad(
            lambda t: np.sum(db.grad(lambda s: singular.sum(s, w))(t)))(x)
        ways["sum, hessian"] = np.diag(db.hessian(lambda t: singular.sum(t, w))(x))
        ways["map, hessian"] = np.diag(db.hessian(lambda t: np.sum(singular(t, w)))(x))
    finally:
        context.__exit__(None, None, None)
    labels = [f"{e} at x = {p!r}" for e, _, points in SINGULAR for p in points]
    for way, got in ways.items():
        bad = [k for k in range(x.size) if not agree(got[k], expected[k])]
        assert not bad, "; ".join(f"{labels[k]} ({way}): {got[k]!r}, NumPy rule {expected[k]!r}"
                                  for k in bad)


@pytest.mark.parametrize("n, x, expected", [
    (-1, 0.0, math.inf), (-1, -0.0, -math.inf), (-1, 1e-200, math.inf),
    (-1, -1e-200, -math.inf), (-1, 1e-100, 2e300),
    (-3, 0.0, math.inf), (-3, -0.0, -math.inf), (-3, 1e-200, math.inf),
    (-3, -1e-200, -math.inf), (-2, 0.0, math.inf), (-2, -1e-200, math.inf),
    (-3, 1e50, 1.2e-249),
])
def test_negative_integer_power_second_derivative_at_zero_and_where_the_power_underflows(
        n, x, expected):
    # Issue 27, item 1: d^2/dx^2 x ** -n was 0 at x = 0 and where x ** n underflows: the
    # rule differentiated 1 / x ** n through x ** n, whose 0 derivative met 1 / 0 = inf
    # in a NaN-safe product.  n(n+1) / x^(n+2): inf of the sign of x^(n+2), as the NumPy
    # rule, JAX, PyTorch and 1.0 / x give.  Scalars, as the report.
    kernel = power_kernel
    with np.errstate(all="ignore"):
        by_grad_grad = db.grad(db.grad(lambda t: kernel.sum(t, float(n))))(x)
        by_jvp_grad = db.jvp(db.grad(lambda t: kernel.sum(t, float(n))), (x,), (1.0,))[1]
        first = db.grad(lambda t: kernel.sum(t, float(n)))(x)
    assert by_grad_grad == pytest.approx(expected, rel=1e-15, abs=0)
    assert by_jvp_grad == pytest.approx(expected, rel=1e-15, abs=0)
    assert first == pytest.approx(n * _power(x, n - 1.0), rel=1e-15, abs=0)
    # the value's own tangent (a nested dual's inner partial): the first derivative
    _, total_tangent, _, _ = kernel.sum_and_partials(np.array([x]), float(n), wrt=0,
                                                     tangents={0: 1.0})
    assert total_tangent == pytest.approx(n * _power(x, n - 1.0), rel=1e-15, abs=0)


@db.fast_broadcast
def power_kernel(x, n):
    if n == -1.0:
        return x ** -1
    if n == -2.0:
        return x ** -2
    return x ** -3


# ------------------------------------------------------------------------------ round()

@db.fast_broadcast
def rounding(x, w):
    if w == 0.0:
        return round(x)
    if w == 1.0:
        return round(x, 2)
    if w == 2.0:
        return round(x) * x                 # d: round(x); d2: 0
    return round(x, -1) * x * x             # d: 2 x round(x, -1); d2: 2 round(x, -1)


ROUND_POINTS = np.array([2.5, 3.5, -2.5, 0.49999999999999994, 1.2345, -0.125, 1e300,
                         4503599627370497.0, math.inf, -math.inf, math.nan])


def test_round_is_a_float_in_every_kernel_mode():
    # Numba's round(x) of a float is an int: -2**63 for inf, nan and 1e300 in map and sum
    # mode; a kernel's round(x) is the float NumPy's rint gives (Python's round of a
    # finite float, half to even), as floor, ceil and trunc.
    x = ROUND_POINTS
    expected = np.rint(x)
    finite = np.isfinite(x)
    assert [float(round(v)) for v in x[finite]] == expected[finite].tolist()
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(rounding(x, 0.0), expected)
        for xi, e in zip(x, expected):
            assert agree(rounding(xi, 0.0), e) and agree(rounding.sum(np.array([xi]), 0.0), e)
        value, partial = rounding.value_and_partials(x, 0.0, wrt=0)
    np.testing.assert_array_equal(value, expected)
    np.testing.assert_array_equal(partial, 0.0)
    libm = db.fast_broadcast(libm=True)(lambda x: round(x))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(libm(x), expected)


def test_round_differentiates_as_a_piecewise_constant_function_in_every_mode():
    # round() compiled in value mode only: every derivative mode failed to compile
    # (issue 27).  Derivative 0, as floor; round(x, ndigits) likewise, its value the
    # kernel's own (Numba's round of the float: 2.675 -> 2.68 where Python's correctly
    # rounded decimal gives 2.67, as NumPy's np.round).
    x = np.array([0.3, 1.2345, 2.5, -7.25, 16.0])
    ones = np.ones_like(x)
    r0 = np.rint(x)
    r2 = np.array([round(v, 2) for v in x])          # (no decimal ties among these x)
    r_1 = np.rint(x / 10) * 10
    for w, value, first, second in ((0.0, r0, 0.0, 0.0), (1.0, r2, 0.0, 0.0),
                                    (2.0, r0 * x, r0, 0.0),
                                    (3.0, r_1 * x * x, 2 * x * r_1, 2 * r_1)):
        np.testing.assert_array_equal(rounding(x, w), value)
        v, d = rounding.value_and_partials(x, w, wrt=0)
        np.testing.assert_array_equal(v, value)
        np.testing.assert_array_equal(d, first)
        v, t, d, dt = rounding.value_and_partials(x, w, wrt=0, tangents={0: ones})
        np.testing.assert_array_equal(d, first)
        np.testing.assert_array_equal(dt, second)
        np.testing.assert_array_equal(db.grad(lambda s: rounding.sum(s, w))(x), first)
        np.testing.assert_array_equal(db.jvp(db.grad(lambda s: rounding.sum(s, w)), (x,),
                                             (ones,))[1], second)
        np.testing.assert_array_equal(
            db.grad(lambda s: np.sum(db.grad(lambda u: np.sum(rounding(u, w)))(s)))(x), second)
        np.testing.assert_array_equal(np.diag(db.hessian(lambda s: rounding.sum(s, w))(x)),
                                      second)
    # Python's round(x, 2) where the decimal is not a tie in binary
    assert [rounding(v, 1.0) for v in (1.2345, -0.125, 1e300, 0.5)] == \
        [round(v, 2) for v in (1.2345, -0.125, 1e300, 0.5)]


def test_round_in_an_njit_helper_and_a_round_of_the_users_own():
    import numba
    helper = numba.njit(lambda v: round(v) * v)         # (the builtin, on a dual)
    through_helper = db.fast_broadcast(lambda x: helper(x))
    assert through_helper.value_and_partials(2.6, wrt=0) == (3.0 * 2.6, 3.0)
    namespace = {"round": numba.njit(lambda v: v * v)}   # a module's own round is kept
    exec("def own(x):\n    return round(x)\n", namespace)
    own = db.fast_broadcast(namespace["own"])
    assert own.value_and_partials(3.0, wrt=0) == (9.0, 6.0)


def test_round_with_a_float_ndigits_says_so():
    # Python's round(x, 2.0) raises too; a kernel's arguments are floats.
    kernel = db.fast_broadcast(lambda x, n: round(x, n))
    for call in (lambda: kernel(1.25, 1), lambda: kernel.value_and_partials(1.25, 1, wrt=0)):
        with pytest.raises(db.KernelCompileError) as info:
            call()
        chained = []
        err = info.value
        while err is not None:
            chained.append(str(err))
            err = err.__cause__
        assert "needs an integer ndigits" in "\n".join(chained)
    fixed = db.fast_broadcast(lambda x, n: round(x, int(n)) * x)
    assert fixed.value_and_partials(1.26, 1, wrt=0) == (1.3 * 1.26, 1.3)


# ------------------------------------------------------------------ tanh' and expm1'

@pytest.mark.parametrize("libm", [False, True])
def test_tanh_and_expm1_first_derivatives_do_not_cancel(libm):
    # tanh' = 1 - y*y cancelled past |x| ~ 1 (~2000 ulps off at 5, 0 at 20 for 1.7e-17),
    # expm1' = y + 1 below x ~ -1 (0 at -40 for 4.2e-18), in the kernels' table and the
    # NumPy rules alike (tests/test_rules_second_order.py checks those).  Now 4e/(1 + e)^2
    # with e = exp(-2|x|) past |x| = 0.55, and exp(x): with the vectorisable exp and libm's.
    k = db.fast_broadcast(libm=libm)(lambda x, w: math.tanh(x) if w == 0.0 else math.expm1(x))
    x = np.array([0.3, 0.56, 5.0, 20.0, -30.0, 300.0, -1.0, -10.0, -40.0, -700.0])
    w = np.array([0.0] * 6 + [1.0] * 4)
    _, d = k.value_and_partials(x, w, wrt=0)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    exact = [float(mp.sech(v) ** 2) for v in x[:6]] + [float(mp.exp(v)) for v in x[6:]]
    d_sum = [k.sum_and_partials(x[i:i + 1], w[i:i + 1], wrt=0)[1][0] for i in range(x.size)]
    np.testing.assert_allclose(d, exact, rtol=1e-15, atol=0)
    np.testing.assert_allclose(d_sum, exact, rtol=1e-15, atol=0)
