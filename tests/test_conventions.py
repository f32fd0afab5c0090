"""The derivative conventions (README, "Derivative conventions") hold alike in kernels
and in the NumPy rules, at every function's singular points and at inf, nan and huge
values (issue 14: "every function at its singular points in a kernel and through the
NumPy rules, asserting the same convention").

For each differentiable function of the README's list (and each operator) the value
and the derivative are computed every way there is: a kernel's four modes (map, sum,
value_and_partials, sum_and_partials) and the NumPy rule (``db.value_and_grad`` over the
``np.*`` equivalent, on a scalar and on an array).  All must agree with NumPy's own
value and with each other, and at the table's points with the table.

"Agree": both nan, the same infinity, both zero (the sign of a zero derivative is no
part of the convention), or, where finite, within a few ulps (kernels compute ``exp``
& co with dualbcast.vmath, which is not bit-equal to NumPy's).

Every function lives in one kernel dispatching on a constant argument, so each mode
compiles once (the suite compiles from an empty cache).
"""
import math
import warnings
from fractions import Fraction

import numba
import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

import dualbcast as db
from ulp import agree

INF, NAN = math.inf, math.nan
# Singular points of the functions below (0, +-1), infinities, nan, huge and tiny values.
POINTS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 0.1, 3.0, -2.5, INF, -INF, NAN,
          1e300, -1e300, 1e-300, 5e-324]
PAIR_POINTS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 0.1, 3.0, INF, -INF, NAN, 1e300, -1e300]

# Unary functions: name -> the NumPy equivalent.  Their order is the order of the
# branches of the kernel `unary` below.  (math.erf and erfc have no NumPy equivalent.)
UNARY = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "log2": np.log2,
    "log10": np.log10, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "fabs": np.fabs, "abs": abs, "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "neg": lambda x: -x,
    "x**0": lambda x: x ** 0, "x**1": lambda x: x ** 1, "x**2": lambda x: x ** 2,
    "x**3": lambda x: x ** 3, "x**-1": lambda x: x ** -1, "x**-2": lambda x: x ** -2,
}
UNARY_INDEX = {name: float(i) for i, name in enumerate(UNARY)}


@db.fast_broadcast
def unary(x, i):
    if i == 0:
        return math.exp(x)
    if i == 1:
        return math.expm1(x)
    if i == 2:
        return math.log(x)
    if i == 3:
        return math.log1p(x)
    if i == 4:
        return math.log2(x)
    if i == 5:
        return math.log10(x)
    if i == 6:
        return math.sqrt(x)
    if i == 7:
        return math.sin(x)
    if i == 8:
        return math.cos(x)
    if i == 9:
        return math.tan(x)
    if i == 10:
        return math.asin(x)
    if i == 11:
        return math.acos(x)
    if i == 12:
        return math.atan(x)
    if i == 13:
        return math.sinh(x)
    if i == 14:
        return math.cosh(x)
    if i == 15:
        return math.tanh(x)
    if i == 16:
        return math.asinh(x)
    if i == 17:
        return math.acosh(x)
    if i == 18:
        return math.atanh(x)
    if i == 19:
        return math.fabs(x)
    if i == 20:
        return abs(x)
    if i == 21:
        return math.floor(x)
    if i == 22:
        return math.ceil(x)
    if i == 23:
        return math.trunc(x)
    if i == 24:
        return -x
    if i == 25:
        return x ** 0
    if i == 26:
        return x ** 1
    if i == 27:
        return x ** 2
    if i == 28:
        return x ** 3
    if i == 29:
        return x ** -1
    return x ** -2


# Binary functions and operators: name -> the NumPy equivalent (operators on traced
# values go through the box's operator path, np.* through __array_ufunc__).
BINARY = {
    "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
    "/": lambda x, y: x / y, "**": lambda x, y: x ** y, "//": lambda x, y: x // y,
    "%": lambda x, y: x % y, "pow": np.power, "atan2": np.arctan2, "hypot": np.hypot,
    "copysign": np.copysign, "max": np.maximum, "min": np.minimum,
    "add": np.add, "multiply": np.multiply, "divide": np.divide, "remainder": np.remainder,
}
BINARY_INDEX = {name: float(i) for i, name in enumerate(BINARY)}


@db.fast_broadcast
def binary(x, y, i):
    if i == 0:
        return x + y
    if i == 1:
        return x - y
    if i == 2:
        return x * y
    if i == 3:
        return x / y
    if i == 4:
        return x ** y
    if i == 5:
        return x // y
    if i == 6:
        return x % y
    if i == 7:
        return math.pow(x, y)
    if i == 8:
        return math.atan2(x, y)
    if i == 9:
        return math.hypot(x, y)
    if i == 10:
        return math.copysign(x, y)
    if i == 11:
        return max(x, y)
    if i == 12:
        return min(x, y)
    if i == 13:
        return x + y
    if i == 14:
        return x * y
    if i == 15:
        return x / y
    return x % y


def assert_agree(results, where):
    """``results``: {way: array}; every way agrees elementwise with the first."""
    (first, expected), *others = results.items()
    expected = np.asarray(expected, np.float64)
    for way, got in others:
        got = np.asarray(got, np.float64)
        bad = [k for k in range(expected.size) if not agree(expected.flat[k], got.flat[k])]
        assert not bad, (f"{where}: {way} disagrees with {first} at {where_at(bad[0])}: "
                         f"{got.flat[bad[0]]!r} vs {expected.flat[bad[0]]!r}")


where_at = None     # set by the tests: index -> the point, for messages


def _quiet():
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.simplefilter("ignore")
    return context


def unary_all_ways(name, xs):
    """Value and derivative of UNARY[name] at ``xs`` every way: {way: array}, twice."""
    fn, i = UNARY[name], UNARY_INDEX[name]
    xs = np.array(xs, np.float64)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        values = {"numpy": fn(xs), "kernel map": unary(xs, i),
                  "kernel sum": [unary.sum(np.array([x]), i) for x in xs]}
        v, (d,) = unary.value_and_partials(xs, i, wrt=(0,))
        values["kernel value_and_partials"] = v
        sp = [unary.sum_and_partials(np.array([x]), i, wrt=(0,)) for x in xs]
        values["kernel sum_and_partials"] = [s for s, _ in sp]
        derivatives = {"kernel value_and_partials": d,
                       "kernel sum_and_partials": [p[0][0] for _, p in sp]}
        scalar = [db.value_and_grad(fn)(np.float64(x)) for x in xs]
        # (NumPy's scalar and array loops differ at a few points, np.power(-inf, 0.5):
        # the rule on scalars is compared with NumPy on scalars.)
        scalar_values = {"numpy, scalar": [fn(np.float64(x)) for x in xs],
                         "numpy rule, scalar": [s for s, _ in scalar]}
        derivatives["numpy rule, scalar"] = [g for _, g in scalar]
        _, derivatives["numpy rule, array"] = db.value_and_grad(lambda v: np.sum(fn(v)))(xs)
    assert_agree(scalar_values, "scalar value")
    return values, derivatives


def binary_all_ways(name, xs, ys):
    """Value and d/dx, d/dy of BINARY[name] at the pairs ``xs, ys`` every way."""
    fn, i = BINARY[name], BINARY_INDEX[name]
    xs, ys = np.array(xs, np.float64), np.array(ys, np.float64)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        values = {"numpy": fn(xs, ys), "kernel map": binary(xs, ys, i),
                  "kernel sum": [binary.sum(np.array([x]), y, i) for x, y in zip(xs, ys)]}
        v, (dx, dy) = binary.value_and_partials(xs, ys, i, wrt=(0, 1))
        values["kernel value_and_partials"] = v
        sp = [binary.sum_and_partials(np.array([x]), np.array([y]), i, wrt=(0, 1))
              for x, y in zip(xs, ys)]
        values["kernel sum_and_partials"] = [s for s, _ in sp]
        ddx = {"kernel value_and_partials": dx, "kernel sum_and_partials": [p[0][0] for _, p in sp]}
        ddy = {"kernel value_and_partials": dy, "kernel sum_and_partials": [p[1][0] for _, p in sp]}
        scalar = [db.value_and_grad(fn, argnums=(0, 1))(np.float64(x), np.float64(y))
                  for x, y in zip(xs, ys)]
        scalar_values = {"numpy, scalar": [fn(np.float64(x), np.float64(y))
                                           for x, y in zip(xs, ys)],
                         "numpy rule, scalar": [s for s, _ in scalar]}
        ddx["numpy rule, scalar"] = [g[0] for _, g in scalar]
        ddy["numpy rule, scalar"] = [g[1] for _, g in scalar]
        _, (ddx["numpy rule, array"], ddy["numpy rule, array"]) = db.value_and_grad(
            lambda a, b: np.sum(fn(a, b)), argnums=(0, 1))(xs, ys)
    assert_agree(scalar_values, "scalar value")
    return values, ddx, ddy


def _pairs(name):
    pairs = [(x, y) for x in PAIR_POINTS for y in PAIR_POINTS]
    if name in ("max", "min"):
        # Python's max(x, y) keeps x unless y > x (so max(nan, 1) is nan, max(1, nan)
        # is 1): a kernel is Python code, np.maximum propagates every nan.
        pairs = [(x, y) for x, y in pairs if not (math.isnan(x) or math.isnan(y))]
    return pairs


def _points(name):
    if name in ("x**-1", "x**-2"):
        # A kernel's x ** -n on a float raises where x ** n is 0 (Numba's integer
        # power; its error says to write 1.0 / x ** n); on a dual it is inf, as NumPy.
        return [x for x in POINTS if abs(x) > 1e-100]
    return POINTS


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_kernel_modes_and_numpy_rule_agree(name):
    global where_at
    points = _points(name)
    where_at = lambda k: f"x={points[k]!r}"
    values, derivatives = unary_all_ways(name, points)
    assert_agree(values, f"{name} value")
    assert_agree(derivatives, f"{name} derivative")


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_kernel_modes_and_numpy_rule_agree(name):
    global where_at
    pairs = _pairs(name)
    where_at = lambda k: f"(x, y)={pairs[k]!r}"
    xs, ys = zip(*pairs)
    values, ddx, ddy = binary_all_ways(name, xs, ys)
    assert_agree(values, f"{name} value")
    assert_agree(ddx, f"{name} d/dx")
    assert_agree(ddy, f"{name} d/dy")


# Where a derivative formula changes form (to keep its digits, and its own derivative's:
# tests/test_rules_second_order.py), on both sides of the switch and far out: the kernels'
# table and the NumPy rules switch alike.
SWITCHES = {
    "tanh": [0.55, -0.55, 0.5499999999999999, 0.5500000000000002, 1.0, -5.0, 19.0, 20.0,
             21.0, -300.0, 400.0],
    "expm1": [-1.0, -5.0, -40.0, -700.0, -745.0, -1e-300],
    "asin": [0.5, -0.5, 0.49999999999999994, 0.5000000000000001, 1.0 - 2.0 ** -27,
             -1.0 + 2.0 ** -52],
    "acos": [0.5, -0.49999999999999994, 1.0 - 2.0 ** -30],
    "atanh": [0.5, -0.5, 0.49999999999999994, 1e-17, 1.0 - 2.0 ** -30],
}
HYPOT_SWITCHES = [(1.0, 1.0), (1.0, 1.0 - 2.0 ** -52), (1.0 - 2.0 ** -52, 1.0), (1e10, 2.0),
                  (-2.0, 1e10), (1e300, -1e-300), (5e-324, 0.0), (INF, 1e308)]


@pytest.mark.parametrize("name", list(SWITCHES))
def test_unary_agree_where_the_formula_switches(name):
    global where_at
    points = SWITCHES[name]
    where_at = lambda k: f"x={points[k]!r}"
    values, derivatives = unary_all_ways(name, points)
    assert_agree(derivatives, f"{name} derivative")


def test_hypot_agrees_where_the_formula_switches():
    global where_at
    where_at = lambda k: f"(x, y)={HYPOT_SWITCHES[k]!r}"
    xs, ys = zip(*HYPOT_SWITCHES)
    _, ddx, ddy = binary_all_ways("hypot", xs, ys)
    assert_agree(ddx, "hypot d/dx")
    assert_agree(ddy, "hypot d/dy")


@given(st.sampled_from(list(UNARY)), st.floats(allow_nan=True, allow_infinity=True))
def test_unary_agree_anywhere(name, x):
    global where_at
    # (and where x ** n overflows, Numba's 1 / x ** n is 0 where NumPy's pow gives a
    # subnormal number: a kernel's negative integer powers are Numba's, in every mode)
    assume(1e-100 < abs(x) < 1e100 or name not in ("x**-1", "x**-2"))
    where_at = lambda k: f"x={x!r}"
    values, derivatives = unary_all_ways(name, [x])
    assert_agree(values, f"{name} value")
    assert_agree(derivatives, f"{name} derivative")


@given(st.sampled_from(list(BINARY)), st.floats(), st.floats())
def test_binary_agree_anywhere(name, x, y):
    global where_at
    # (Python's max/min keep x on a nan, np.maximum propagates it: see _pairs)
    assume(name not in ("max", "min") or not (math.isnan(x) or math.isnan(y)))
    where_at = lambda k: f"(x, y)={(x, y)!r}"
    values, ddx, ddy = binary_all_ways(name, [x], [y])
    assert_agree(values, f"{name} value")
    assert_agree(ddx, f"{name} d/dx")
    assert_agree(ddy, f"{name} d/dy")


# ------------------------------------------------------------ the table's conventions
def _unary_at(name, x):
    values, derivatives = unary_all_ways(name, [x])
    assert_agree(values, name)
    assert_agree(derivatives, name)
    return float(values["kernel map"][0]), float(derivatives["kernel value_and_partials"][0])


def _binary_at(name, x, y):
    values, ddx, ddy = binary_all_ways(name, [x], [y])
    for results in (values, ddx, ddy):
        assert_agree(results, name)
    return (float(values["kernel map"][0]), float(ddx["kernel value_and_partials"][0]),
            float(ddy["kernel value_and_partials"][0]))


def _same(a, b):
    return agree(a, b, ulps=0)


@pytest.mark.parametrize("name, x, value, derivative", [
    ("sqrt", 0.0, 0.0, INF),                   # sqrt, log at 0: +inf
    ("log", 0.0, -INF, INF),
    ("log", -1.0, NAN, -1.0),                  # log of a negative number: value nan
    ("x**2", 0.0, 0.0, 0.0),                   # x ** n at 0: n * 0 ** (n - 1), never 0/0
    ("x**3", 0.0, 0.0, 0.0),
    ("x**1", 0.0, 0.0, 1.0),
    ("x**0", 0.0, 1.0, 0.0),
    ("x**3", -2.0, -8.0, 12.0),                # integer powers never go through log
    ("abs", 0.0, 0.0, 0.0),                    # abs, fabs at 0: 0
    ("fabs", 0.0, 0.0, 0.0),
    ("floor", INF, INF, 0.0),                  # floor & co: 0, and the value stays a float
    ("floor", NAN, NAN, 0.0),
    ("floor", 1e300, 1e300, 0.0),
    ("ceil", -INF, -INF, 0.0),
    ("trunc", -2.5, -2.0, 0.0),
])
def test_unary_conventions(name, x, value, derivative):
    got_value, got_derivative = _unary_at(name, x)
    assert _same(got_value, value) and _same(got_derivative, derivative), \
        (name, x, got_value, got_derivative)


@pytest.mark.parametrize("name, x, y, value, dx, dy", [
    ("max", 1.0, 1.0, 1.0, 0.5, 0.5),          # max/min at a tie: half to each side
    ("min", 2.0, 2.0, 2.0, 0.5, 0.5),
    ("**", 0.0, 2.5, 0.0, 0.0, 0.0),           # x ** y w.r.t. y at x == 0: 0
    ("pow", 0.0, 0.5, 0.0, INF, 0.0),
    ("hypot", 0.0, 0.0, 0.0, 0.0, 0.0),        # hypot at the origin: 0
    ("//", 7.0, 2.0, 3.0, 0.0, 0.0),           # floor division: 0
    ("%", 7.0, 2.0, 1.0, 1.0, -3.0),           # x % y: 1, and -q w.r.t. y
    ("%", -7.0, 2.0, 1.0, 1.0, 4.0),
    ("%", 0.5, 0.1, 0.5 % 0.1, 1.0, -4.0),     # 0.5 / 0.1 rounds to 5, the quotient was 4
    ("remainder", 0.7, 0.1, 0.7 % 0.1, 1.0, -6.0),
])
def test_binary_conventions(name, x, y, value, dx, dy):
    got = _binary_at(name, x, y)
    assert all(map(_same, got, (value, dx, dy))), (name, x, y, got)


@pytest.mark.parametrize("x, y", [(0.5, 0.1), (0.7, 0.1), (1.0, 0.1), (-0.5, 0.1), (5.0, -3.0),
                                  (0.3, 0.1), (2.0, 0.2)])
def test_remainder_derivative_is_minus_the_quotient_of_the_remainder(x, y):
    # Near (x, y), x % y == x - q y with q the integer for which that holds exactly at
    # (x, y) (fmod is exact): d/dy is -q.  The oracle: the derivative's -q satisfies
    # x - q y == x % y in exact rational arithmetic, and one one-sided difference (the
    # side where the remainder does not wrap: at 0.5 % 0.1 it is 0.0999..., a hair below
    # 0.1) gives -q.  floor(x / y) is 5 at (0.5, 0.1), where q is 4.
    _, dx, dy = _binary_at("%", x, y)
    q = -dy
    assert dx == 1.0 and q == int(q)
    assert Fraction(x) - int(q) * Fraction(y) == Fraction(x % y)
    h = 1e-9 * abs(y)
    one_sided = [(x % (y + h) - x % y) / h, (x % y - x % (y - h)) / h]
    assert any(d == pytest.approx(-q, rel=1e-5) for d in one_sided), one_sided


@pytest.mark.parametrize("kernel_source, numpy_function", [
    ("w * math.sqrt(r)", lambda w, r: w * np.sqrt(r)),
    ("math.sqrt(r) * w", lambda w, r: np.sqrt(r) * w),
    ("w * math.log(r)", lambda w, r: w * np.log(r)),
    ("math.sqrt(r) / (1.0 + w)", lambda w, r: np.sqrt(r) / (1.0 + w)),
    ("w * math.sqrt(r) * math.exp(-r)", lambda w, r: w * np.sqrt(r) * np.exp(-r)),
    ("math.cos(math.sqrt(r)) + w", lambda w, r: np.cos(np.sqrt(r)) + w),
    # A zero partial on the inner path, an infinite derivative outside: reverse mode
    # meets inf * 0 (the cotangent inf, the local partial 0) and gives 0 as well.
    ("math.sqrt(r * r) + w", lambda w, r: np.sqrt(r * r) + w),
    ("math.sqrt(r * r * w)", lambda w, r: np.sqrt(r * r * w)),
    ("math.sqrt(r ** 2 + w * w)", lambda w, r: np.sqrt(r ** 2 + w * w)),
    ("math.log(w * r + 1.0) + math.sqrt(w * r)", lambda w, r: np.log(w * r + 1.0)
     + np.sqrt(w * r)),
])
def test_zero_partial_meeting_infinite_derivative(kernel_source, numpy_function):
    # "A zero partial meeting an infinite local derivative gives 0, not nan": at r = 0,
    # w = 0 the NumPy rules give 0 w.r.t. r (their zero cotangent reaches sqrt); the
    # kernel's product rule multiplies sqrt's infinite partial by w = 0: 0 too.
    namespace = {"math": math}
    exec(f"def k(w, r):\n    return {kernel_source}\n", namespace)
    kernel = db.fast_broadcast(namespace["k"])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value, partials = kernel.value_and_partials(0.0, 0.0, wrt=(0, 1))
        _, sum_partials = kernel.sum_and_partials(np.zeros(3), np.zeros(3), wrt=(0, 1))
        rule_value, rule_partials = db.value_and_grad(numpy_function, argnums=(0, 1))(0.0, 0.0)
        _, array_partials = db.value_and_grad(lambda w, r: np.sum(numpy_function(w, r)),
                                              argnums=(0, 1))(np.zeros(3), np.zeros(3))
        jitted = db.jit(db.value_and_grad(numpy_function, argnums=(0, 1)))
        replays = [jitted(0.0, 0.0)[1] for _ in range(4)]
    assert _same(value, rule_value)
    for got, expected in zip(array_partials, rule_partials):
        assert all(_same(g, expected) for g in got)
    for replayed in replays:
        assert all(_same(g, e) for g, e in zip(replayed, rule_partials))
    for got, expected in zip(partials, rule_partials):
        assert _same(got, expected), (kernel_source, partials, rule_partials)
    for got, expected in zip(sum_partials, rule_partials):
        assert all(_same(g, expected) for g in got)


@pytest.mark.parametrize("libm", [False, True])
def test_floor_ceil_trunc_stay_floats_in_every_mode(libm):
    # Numba's math.floor returns an int64: inf, nan and 1e300 became -2**63 in map and
    # sum mode while the dual modes gave the float (issue 14, 4).
    kernel = db.fast_broadcast(libm=libm)(lambda x: math.floor(x) + math.ceil(x) + math.trunc(x))
    xs = np.array([INF, -INF, NAN, 1e300, -2.5, 2.5])
    expected = np.floor(xs) + np.ceil(xs) + np.trunc(xs)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(kernel(xs), expected)
        for x, e in zip(xs, expected):
            assert _same(kernel(x), e) and _same(kernel.sum(np.array([x])), e)
            assert _same(kernel.sum_and_partials(np.array([x]), wrt=0)[0], e)
        value, partials = kernel.value_and_partials(xs, wrt=0)
    np.testing.assert_array_equal(value, expected)
    np.testing.assert_array_equal(partials, 0.0)


_SCALED = {"exp": (math.exp, np.exp), "expm1": (math.expm1, np.expm1), "sin": (math.sin, np.sin),
           "cos": (math.cos, np.cos), "tan": (math.tan, np.tan), "tanh": (math.tanh, np.tanh),
           "sinh": (math.sinh, np.sinh), "cosh": (math.cosh, np.cosh),
           "atan": (math.atan, np.arctan), "asinh": (math.asinh, np.arcsinh),
           "fabs": (math.fabs, np.fabs), "sqrt": (math.sqrt, np.sqrt), "log": (math.log, np.log),
           "square": (numba.njit(lambda v: v * v), np.square), "abs": (abs, np.absolute)}


@pytest.mark.parametrize("name", sorted(_SCALED))
def test_a_scaled_function_at_every_special_point_kernel_and_numpy_rule(name):
    # grad of sum(w * f(r)) over every pair of special values: a zero w meeting f's
    # infinite derivative, an infinite w meeting a zero one...  The NumPy rules of exp,
    # cos, tanh & co once multiplied without the NaN-safe convention (nan, kernels 0).
    kernel_f, numpy_f = _SCALED[name]
    namespace = {"f": kernel_f}
    exec("def k(r, w):\n    return w * f(r)\n", namespace)
    kernel = db.fast_broadcast(namespace["k"])
    special = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e300, -1e300, 800.0]
    r = np.repeat(special, len(special))
    w = np.tile(special, len(special))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_kernel = db.grad(lambda r, w: kernel.sum(r, w), argnums=(0, 1))(r, w)
        by_rule = db.grad(lambda r, w: np.sum(w * numpy_f(r)), argnums=(0, 1))(r, w)
    for got, expected in zip(by_kernel, by_rule):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_allclose(got, expected, rtol=4e-16, atol=0)


@db.fast_broadcast
def _root_or_sine(x, a):
    if x > a:
        return math.sqrt(x - a)
    return a * math.sin(x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_infinite_cotangent_meeting_a_zero_partial_gives_zero(dtype):
    # d sqrt(x)/dx at x = inf is 0, and d(v**2)/dv there is inf: the path contributes
    # 0 (NaN-safe), in float32 too (whose product was once written into the partials'
    # buffer before the zero factors were looked for: nan).
    x = np.array([0.0, 4.0, np.inf], dtype)
    with np.errstate(all="ignore"):
        _, gradient = db.value_and_grad(lambda x: np.sum(_root_or_sine(x, 0.0) ** 2))(x)
    assert gradient.dtype == dtype
    np.testing.assert_array_equal(gradient, np.array([0.0, 1.0, 0.0], dtype))
