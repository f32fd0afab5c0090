"""The dual layer, through kernels: every rule of the table against autograd (an
independent implementation) and central differences, float32 against float64, and
the singular-point conventions of design.md section 4, exactly."""
import math
import types

import autograd.numpy as anp
import autograd.scipy.special as asp
import numba
import numpy as np
import pytest
from autograd import elementwise_grad

import dualbcast as db
from conftest import central_difference

# name -> (math function, autograd twin, points inside the domain)
GENERIC = np.array([-2.3, -0.7, -0.1, 0.2, 0.9, 2.6])
POSITIVE = np.array([0.05, 0.4, 1.0, 2.5, 7.0, 12.0])
UNIT = np.array([-0.95, -0.5, 0.0, 0.3, 0.6, 0.9])
UNARY = {
    "exp": (math.exp, anp.exp, GENERIC),
    "expm1": (math.expm1, anp.expm1, GENERIC),
    "log": (math.log, anp.log, POSITIVE),
    "log1p": (math.log1p, anp.log1p, POSITIVE - 0.5),
    "log2": (math.log2, anp.log2, POSITIVE),
    "log10": (math.log10, anp.log10, POSITIVE),
    "sqrt": (math.sqrt, anp.sqrt, POSITIVE),
    "sin": (math.sin, anp.sin, GENERIC),
    "cos": (math.cos, anp.cos, GENERIC),
    "tan": (math.tan, anp.tan, UNIT),
    "asin": (math.asin, anp.arcsin, UNIT),
    "acos": (math.acos, anp.arccos, UNIT),
    "atan": (math.atan, anp.arctan, GENERIC),
    "sinh": (math.sinh, anp.sinh, GENERIC),
    "cosh": (math.cosh, anp.cosh, GENERIC),
    "tanh": (math.tanh, anp.tanh, GENERIC),
    "asinh": (math.asinh, anp.arcsinh, GENERIC),
    "acosh": (math.acosh, anp.arccosh, POSITIVE + 1.0),
    "atanh": (math.atanh, anp.arctanh, UNIT),
    "erf": (math.erf, asp.erf, GENERIC),
    "erfc": (math.erfc, asp.erfc, GENERIC),
    "fabs": (math.fabs, anp.abs, GENERIC),
    "abs": (abs, anp.abs, GENERIC),
}
BINARY = {
    "pow": (math.pow, anp.power, POSITIVE, GENERIC),
    "atan2": (math.atan2, anp.arctan2, GENERIC, POSITIVE[::-1] - 1.0),
    "hypot": (math.hypot, anp.hypot, GENERIC, POSITIVE),
    "copysign": (math.copysign, None, GENERIC, GENERIC[::-1]),
    "mod": (lambda x, y: x % y, anp.mod, GENERIC * 3, POSITIVE + 0.013),  # off the jumps
    "add": (lambda x, y: x + y, anp.add, GENERIC, POSITIVE),
    "sub": (lambda x, y: x - y, anp.subtract, GENERIC, POSITIVE),
    "mul": (lambda x, y: x * y, anp.multiply, GENERIC, POSITIVE),
    "truediv": (lambda x, y: x / y, anp.divide, GENERIC, POSITIVE),
    "pow_operator": (lambda x, y: x ** y, anp.power, POSITIVE, GENERIC),
}


def _kernel1(fn):
    return db.fast_broadcast(lambda x: fn(x))


def _kernel2(fn):
    if isinstance(fn, types.FunctionType):   # an operator written as a lambda: the kernel itself
        return db.fast_broadcast(fn)
    return db.fast_broadcast(lambda x, y: fn(x, y))


KERNELS1 = {name: _kernel1(fn) for name, (fn, _, _) in UNARY.items()}
KERNELS2 = {name: _kernel2(fn) for name, (fn, *_) in BINARY.items()}


@pytest.mark.parametrize("name", UNARY)
def test_unary_rule_against_autograd_and_differences(name):
    fn, twin, x = UNARY[name]
    value, d = KERNELS1[name].value_and_partials(x, wrt=0)
    np.testing.assert_allclose(value, [fn(v) for v in x], rtol=1e-15)
    np.testing.assert_allclose(d, elementwise_grad(twin)(x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(d, central_difference(KERNELS1[name], [x], 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", BINARY)
def test_binary_rule_against_autograd_and_differences(name):
    fn, twin, x, y = BINARY[name]
    kernel = KERNELS2[name]
    value, (dx, dy) = kernel.value_and_partials(x, y, wrt=(0, 1))
    np.testing.assert_allclose(value, [fn(a, b) for a, b in zip(x, y)], rtol=1e-15)
    if twin is not None:
        np.testing.assert_allclose(dx, elementwise_grad(twin, 0)(x, y), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(dy, elementwise_grad(twin, 1)(x, y), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dx, central_difference(kernel, [x, y], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dy, central_difference(kernel, [x, y], 1), rtol=1e-6, atol=1e-8)
    # One side active at a time uses the dual/number overloads: the same partials.
    np.testing.assert_allclose(kernel.value_and_partials(x, y, wrt=0)[1], dx, rtol=1e-15)
    np.testing.assert_allclose(kernel.value_and_partials(x, y, wrt=1)[1], dy, rtol=1e-15)


def _assert_float32_close(v32, v64):
    assert v32.dtype == np.float32
    np.testing.assert_allclose(v32, v64, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", UNARY)
def test_unary_float32_agrees_with_float64(name):
    # The inputs are float32-representable so both runs see the same points.
    x = UNARY[name][2].astype(np.float32)
    v64, d64 = KERNELS1[name].value_and_partials(x.astype(np.float64), wrt=0)
    v32, d32 = KERNELS1[name].value_and_partials(x, wrt=0)
    _assert_float32_close(v32, v64)
    _assert_float32_close(d32, d64)


@pytest.mark.parametrize("name", BINARY)
def test_binary_float32_agrees_with_float64(name):
    x, y = (a.astype(np.float32) for a in BINARY[name][2:])
    v64, (dx64, dy64) = KERNELS2[name].value_and_partials(x.astype(float), y.astype(float),
                                                          wrt=(0, 1))
    v32, (dx32, dy32) = KERNELS2[name].value_and_partials(x, y, wrt=(0, 1))
    for a, b in ((v32, v64), (dx32, dx64), (dy32, dy64)):
        _assert_float32_close(a, b)


def _partials(kernel, *args, wrt=0):
    return kernel.value_and_partials(*args, wrt=wrt)


# --- design.md section 4, asserted exactly ------------------------------------------

def test_sqrt_derivative_at_zero_is_plus_inf():
    assert _partials(KERNELS1["sqrt"], 0.0) == (0.0, np.inf)


def test_log_derivative_at_zero_is_plus_inf_and_value_nan_below_zero():
    assert _partials(KERNELS1["log"], 0.0) == (-np.inf, np.inf)
    assert np.isnan(KERNELS1["log"](-1.0))


@pytest.mark.parametrize("n, slope", [(0, 0.0), (1, 1.0), (2, 0.0), (3, 0.0), (7, 0.0)])
def test_integer_power_at_zero_is_n_times_zero_to_n_minus_1(n, slope):
    kernel = db.fast_broadcast(lambda x: x ** n)
    value, d = _partials(kernel, 0.0)
    assert value == (1.0 if n == 0 else 0.0)
    assert d == slope and not np.isnan(d)


def test_float32_integer_power_keeps_its_precision_in_every_mode():
    # x ** n of a float32 dual is a float32 dual, as x ** n of a float32 is a float32: the
    # value in the partials mode is the value mode's, bit for bit.  (The power's rule for
    # a run-time n unifies its branches' values, 1.0 / x ** -n among them, to float64; a
    # literal n is written out for its sign, arithmetic in float32 throughout.)
    kernel = db.fast_broadcast(lambda x, a: (x ** 2) * a + (a ** 2) * x ** 1 - x ** -3)
    x = np.random.default_rng(0).uniform(0.5, 2.0, 64).astype(np.float32)
    a = np.float32(0.7)
    value, (dx,) = kernel.value_and_partials(x, a, wrt=(0,))
    assert value.dtype == dx.dtype == np.float32
    np.testing.assert_array_equal(value, kernel(x, a))
    x64 = x.astype(np.float64)
    expected = 2 * x64 * 0.7 + np.float32(0.7) ** 2 + 3 * x64 ** -4
    np.testing.assert_allclose(dx, expected, rtol=2e-6)


def test_integer_power_of_negative_base_never_goes_through_log():
    cube = db.fast_broadcast(lambda x: x ** 3)
    assert _partials(cube, -2.0) == (-8.0, 12.0)
    inverse_square = db.fast_broadcast(lambda x: x ** -2)
    assert _partials(inverse_square, -2.0) == (0.25, 0.25)


@pytest.mark.parametrize("n", [-1, -2, -3])
def test_negative_integer_power_at_zero_is_infinite_like_numpy(n):
    kernel = db.fast_broadcast(lambda x: x ** n)
    x = np.array([0.0, -0.0, 2.0])
    value, d = _partials(kernel, x)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(value, x ** float(n))
        np.testing.assert_array_equal(d, n * x ** float(n - 1))


def test_atan2_and_acosh_derivatives_do_not_overflow():
    for scale in (1e-200, 1e200):
        _, (dy, dx) = _partials(KERNELS2["atan2"], scale, scale, wrt=(0, 1))
        np.testing.assert_allclose([dy, dx], [0.5 / scale, -0.5 / scale], rtol=1e-15)
    _, (dy, dx) = _partials(KERNELS2["atan2"], np.float32(1e-24), np.float32(1e-24), wrt=(0, 1))
    np.testing.assert_allclose([dy, dx], [5e23, -5e23], rtol=1e-6)
    assert _partials(KERNELS1["acosh"], 1e200)[1] == pytest.approx(1e-200, rel=1e-15)


def test_float_power_with_constant_exponent_at_zero():
    square = db.fast_broadcast(lambda x: x ** 2.0)
    assert _partials(square, 0.0) == (0.0, 0.0)
    root = db.fast_broadcast(lambda x: x ** 0.5)
    assert _partials(root, 0.0) == (0.0, np.inf)


def test_power_derivative_in_exponent_at_zero_base_is_zero():
    # d/dy 0**y = 0 for y > 0 (JAX), not log(0) * 0 = nan.
    assert _partials(KERNELS2["pow_operator"], 0.0, 2.5, wrt=1) == (0.0, 0.0)
    assert _partials(KERNELS2["pow"], 0.0, 2.5, wrt=1) == (0.0, 0.0)


@pytest.mark.parametrize("name", ["abs", "fabs"])
def test_abs_derivative_at_zero_is_zero(name):
    assert _partials(KERNELS1[name], 0.0) == (0.0, 0.0)
    assert _partials(KERNELS1[name], -0.0) == (0.0, 0.0)


MAX = db.fast_broadcast(lambda x, y: max(x, y))
MIN = db.fast_broadcast(lambda x, y: min(x, y))
MAX_CONST = db.fast_broadcast(lambda x: max(x, 1.0) + min(2.0, x))


@pytest.mark.parametrize("kernel", [MAX, MIN])
def test_max_min_ties_split_half_to_each_side(kernel):
    value, (dx, dy) = _partials(kernel, 1.5, 1.5, wrt=(0, 1))
    assert (value, dx, dy) == (1.5, 0.5, 0.5)
    _, (dx, dy) = _partials(kernel, np.array([1.0, 2.0]), np.array([2.0, 1.0]), wrt=(0, 1))
    expected_x = [0.0, 1.0] if kernel is MAX else [1.0, 0.0]
    np.testing.assert_array_equal(dx, expected_x)
    np.testing.assert_array_equal(dy, 1.0 - np.array(expected_x))


def test_max_min_against_a_constant():
    x = np.array([0.5, 1.0, 1.5, 2.0, 2.5])
    value, d = _partials(MAX_CONST, x)
    np.testing.assert_array_equal(value, np.maximum(x, 1.0) + np.minimum(2.0, x))
    np.testing.assert_array_equal(d, [1.0, 1.5, 2.0, 1.5, 1.0])


def test_zero_partial_meeting_infinite_derivative_stays_zero():
    # sqrt'(0) = inf, but sqrt(x) does not depend on y: d/dy must be 1, not nan.
    kernel = db.fast_broadcast(lambda x, y: math.sqrt(x) + y)
    value, (dx, dy) = _partials(kernel, 0.0, 3.0, wrt=(0, 1))
    assert (value, dx, dy) == (3.0, np.inf, 1.0)
    constant_zero = db.fast_broadcast(lambda x: math.log(0.0 * x + 1.0) + math.sqrt(0.0 * x))
    assert _partials(constant_zero, 2.0) == (0.0, 0.0)


def test_fastmath_kernels_keep_nan_safe_products():
    # The operators' rules are lowered into the kernel's own code, which Numba's fastmath
    # pass flags: under nnan/nsz LLVM may fold a NaN-safe product into a plain one (this
    # machine's LLVM does not fold these, with or without the partials' shield,
    # dual.partials._shielded).  d(x*y + x/y)/dx at x = inf is y + 1/y, not nan (the
    # partial of x w.r.t. y, 0, times inf is 0).
    for fastmath in (False, True):
        product = db.fast_broadcast(fastmath=fastmath)(lambda x, y: x * y + x / y)
        x = np.full(16, np.inf)
        y = np.full(16, 2.0)
        _, (dx, dy) = product.value_and_partials(x, y, wrt=(0, 1))
        np.testing.assert_array_equal(dx, 2.5)
        assert np.isnan(dy).all() or np.isinf(dy).all()     # inf - inf/4: nan; fastmath: either
        zero_weight = db.fast_broadcast(fastmath=fastmath)(lambda w, r: w * r)
        _, (dw, dr) = zero_weight.value_and_partials(np.zeros(16), np.full(16, np.inf),
                                                     wrt=(0, 1))
        np.testing.assert_array_equal(dr, 0.0)
        np.testing.assert_array_equal(dw, np.inf)


def test_hypot_at_origin_has_zero_subgradient():
    _, (dx, dy) = _partials(KERNELS2["hypot"], 0.0, 0.0, wrt=(0, 1))
    assert (dx, dy) == (0.0, 0.0)


@pytest.mark.parametrize("fn, np_fn", [(math.floor, np.floor), (math.ceil, np.ceil),
                                       (math.trunc, np.trunc)])
def test_piecewise_constant_functions(fn, np_fn):
    kernel = _kernel1(fn)
    x = np.array([-1.5, -0.2, 0.0, 0.7, 3.0, np.inf, -np.inf])
    value, d = _partials(kernel, x)
    np.testing.assert_array_equal(value, np_fn(x))
    np.testing.assert_array_equal(d, 0.0)


def test_floordiv_has_zero_derivative_and_mod_the_documented_one():
    floordiv = db.fast_broadcast(lambda x, y: x // y)
    x, y = np.array([7.5, -7.5, 2.0]), np.array([2.0, 2.0, -0.75])
    value, (dx, dy) = _partials(floordiv, x, y, wrt=(0, 1))
    np.testing.assert_array_equal(value, x // y)
    np.testing.assert_array_equal(dx, 0.0)
    np.testing.assert_array_equal(dy, 0.0)
    value, (dx, dy) = _partials(KERNELS2["mod"], x, y, wrt=(0, 1))
    np.testing.assert_array_equal(value, np.mod(x, y))
    np.testing.assert_array_equal(dx, 1.0)
    np.testing.assert_array_equal(dy, -np.floor(x / y))


def test_predicates_look_at_the_value():
    @db.fast_broadcast
    def guarded(x):
        if math.isnan(x) or math.isinf(x):
            return 0.0
        if not math.isfinite(x):   # unreachable, but must type-check on a dual
            return -1.0
        return x * x

    value, d = _partials(guarded, np.array([np.nan, np.inf, 3.0]))
    np.testing.assert_array_equal(value, [0.0, 0.0, 9.0])
    np.testing.assert_array_equal(d, [0.0, 0.0, 6.0])


def test_constants_pi_and_e():
    kernel = db.fast_broadcast(lambda x: math.pi * x + math.e)
    assert _partials(kernel, 2.0) == (2.0 * math.pi + math.e, math.pi)


def test_comparisons_and_truth_act_on_the_value():
    @db.fast_broadcast
    def branches(x, y):
        flags = (x < y) + (x <= y) * 2 + (x > y) * 4 + (x >= y) * 8 + (x == y) * 16 + (x != y) * 32
        if x:                       # truth of a dual: its value is non-zero
            return flags + 0.0 * x
        return flags - x

    x, y = np.array([0.0, 1.0, 2.0]), np.array([0.0, 2.0, 1.0])
    value, d = _partials(branches, x, y)
    np.testing.assert_array_equal(value, [26.0, 35.0, 44.0])
    np.testing.assert_array_equal(d, [-1.0, 0.0, 0.0])


def test_mixed_int_float_dual_arithmetic():
    @db.fast_broadcast
    def mixed(x):
        return (2 * x + x * 3 - 1 + 1.5 - x / 2 + 2 / x + x // 1 + 7 % x + (x > 0)
                - (-x) + (+x) + 2 ** x + 1.5 ** x)

    x = np.array([0.6, 1.7, 3.2])
    ref = lambda x: (2 * x + x * 3 - 1 + 1.5 - x / 2 + 2 / x + x // 1 + 7 % x + (x > 0)
                     - (-x) + (+x) + 2 ** x + 1.5 ** x)
    value, d = _partials(mixed, x)
    np.testing.assert_allclose(value, ref(x), rtol=1e-15)
    np.testing.assert_allclose(d, central_difference(ref, [x], 0), rtol=1e-7)


def test_in_place_operators_on_duals():
    @db.fast_broadcast
    def accumulate(x, y):
        s = 1.0
        s += x
        s *= y
        s -= x
        s /= y
        s **= 2
        return s

    x, y = np.array([0.3, -1.2]), np.array([1.5, 2.5])
    ref = lambda x, y: ((((1.0 + x) * y) - x) / y) ** 2
    value, (dx, dy) = _partials(accumulate, x, y, wrt=(0, 1))
    np.testing.assert_allclose(value, ref(x, y), rtol=1e-15)
    np.testing.assert_allclose(dx, central_difference(ref, [x, y], 0), rtol=1e-7)
    np.testing.assert_allclose(dy, central_difference(ref, [x, y], 1), rtol=1e-7)


def test_dual_values_unify_with_numbers_across_branches_and_loops():
    @db.fast_broadcast
    def piecewise(x, n):
        if x < 0:
            return 0.0                     # a number on one path, a dual on the others
        elif x < 1:
            acc = 0.0
            for k in range(3):             # loop-carried number that becomes a dual
                acc += x ** (k + 1)
            return acc
        total = x
        while total < 10.0:                # while on the value
            total = total * 2.0
        return total + n

    x = np.array([-1.0, 0.5, 1.5, 4.0])
    value, d = _partials(piecewise, x, 1.0)
    np.testing.assert_allclose(value, [0.0, 0.875, 13.0, 17.0])
    np.testing.assert_allclose(d, [0.0, 1.0 + 2 * 0.5 + 3 * 0.25, 8.0, 4.0])


def test_dual_meets_float32_and_float64_duals():
    @db.fast_broadcast
    def widen(x, y):
        return x * y + x * 0.1          # float32 dual times a float64 literal widens

    x = np.array([1.0, 2.0], np.float32)
    y = np.array([3.0, 4.0], np.float32)
    value, (dx, dy) = _partials(widen, x, y, wrt=(0, 1))
    assert value.dtype == np.float32
    np.testing.assert_allclose(dx, y + 0.1, rtol=1e-6)
    np.testing.assert_allclose(dy, x, rtol=1e-6)


def test_njit_helpers_and_other_kernels_take_duals():
    @numba.njit
    def helper(x):
        return x * x + 1.0

    @db.fast_broadcast
    def inner(x, a):
        return math.exp(-a * x)

    @db.fast_broadcast
    def outer(x, a):
        return helper(inner(x, a)) + inner(a, x)

    ref = lambda x, a: np.exp(-a * x) ** 2 + 1.0 + np.exp(-a * x)
    x, a = np.array([0.1, 0.7, 1.3]), np.array([0.5, 1.0, 2.0])
    value, (dx, da) = _partials(outer, x, a, wrt=(0, 1))
    np.testing.assert_allclose(value, ref(x, a), rtol=1e-14)
    np.testing.assert_allclose(dx, central_difference(ref, [x, a], 0), rtol=1e-7)
    np.testing.assert_allclose(da, central_difference(ref, [x, a], 1), rtol=1e-7)
