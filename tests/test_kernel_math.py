"""Every math function a kernel may call (issue 15): Python's ``math`` functions Numba
lacked (``cbrt``, ``fmod``, ``remainder``, ``log(x, base)``, n-ary ``hypot``) or had no
rule for (``exp2``, ``gamma``, ``lgamma``, ``degrees``, ``radians``, ``ldexp``), and
NumPy's scalar spellings (``np.exp``, ``np.maximum``, ``np.power`` ...), which
differentiate through the rule of the ``math`` function or operator they map to.

Values against Python's ``math``/NumPy on the same floats; partials against central
differences and closed forms; every kernel mode against the others."""
import math
import warnings

import numpy as np
import pytest
from scipy import special

import dualbcast as db
from dualbcast.vmath.missing import digamma, ieee_remainder

X = np.array([0.35, 0.7, 1.3, 2.2, 3.71])       # (no point where fmod & co jump)

# name: (kernel expression, Python/NumPy value function, closed-form derivative)
CASES = {
    "math.exp2": ("math.exp2(x)", lambda x: 2.0 ** x, lambda x: 2.0 ** x * math.log(2.0)),
    "math.cbrt": ("math.cbrt(x)", math.cbrt, lambda x: 1.0 / (3.0 * math.cbrt(x) ** 2)),
    "math.gamma": ("math.gamma(x)", math.gamma,
                   lambda x: math.gamma(x) * special.digamma(x)),
    "math.lgamma": ("math.lgamma(x)", math.lgamma, special.digamma),
    "math.log(x, 3)": ("math.log(x, 3.0)", lambda x: math.log(x, 3.0),
                       lambda x: 1.0 / (x * math.log(3.0))),
    "math.log(2, x)": ("math.log(2.0, x + 1.0)", lambda x: math.log(2.0, x + 1.0),
                       lambda x: -math.log(2.0) / ((x + 1.0) * math.log(x + 1.0) ** 2)),
    "math.degrees": ("math.degrees(x)", math.degrees, lambda x: 180.0 / math.pi),
    "math.radians": ("math.radians(x)", math.radians, lambda x: math.pi / 180.0),
    "math.fmod": ("math.fmod(x, 0.3)", lambda x: math.fmod(x, 0.3), lambda x: 1.0),
    "math.fmod wrt y": ("math.fmod(2.5, x)", lambda x: math.fmod(2.5, x),
                        lambda x: -((2.5 - math.fmod(2.5, x)) / x)),
    "math.remainder": ("math.remainder(x, 0.3)", lambda x: math.remainder(x, 0.3),
                       lambda x: 1.0),
    "math.remainder wrt y": ("math.remainder(2.5, x)", lambda x: math.remainder(2.5, x),
                             lambda x: -round((2.5 - math.remainder(2.5, x)) / x)),
    "math.ldexp": ("math.ldexp(x, 3)", lambda x: math.ldexp(x, 3), lambda x: 8.0),
    "math.hypot(x, 2, 3)": ("math.hypot(x, 2.0, 3.0)", lambda x: math.hypot(x, 2.0, 3.0),
                            lambda x: x / math.hypot(x, 2.0, 3.0)),
    "math.hypot(3, x, x)": ("math.hypot(3.0, x, x)", lambda x: math.hypot(3.0, x, x),
                            lambda x: 2 * x / math.hypot(3.0, x, x)),
    "np.exp": ("np.exp(x)", np.exp, np.exp),
    "np.exp2": ("np.exp2(x)", np.exp2, lambda x: np.exp2(x) * math.log(2.0)),
    "np.sqrt": ("np.sqrt(x)", np.sqrt, lambda x: 0.5 / math.sqrt(x)),
    "np.cbrt": ("np.cbrt(x)", np.cbrt, lambda x: 1.0 / (3.0 * np.cbrt(x) ** 2)),
    "np.sin": ("np.sin(x)", np.sin, np.cos),
    "np.tanh": ("np.tanh(x)", np.tanh, lambda x: 1.0 - np.tanh(x) ** 2),
    "np.log1p": ("np.log1p(x)", np.log1p, lambda x: 1.0 / (1.0 + x)),
    "np.arcsinh": ("np.arcsinh(x)", np.arcsinh, lambda x: 1.0 / math.hypot(x, 1.0)),
    "np.abs": ("np.abs(x - 1.3)", lambda x: abs(x - 1.3), lambda x: np.sign(x - 1.3)),
    "np.square": ("np.square(x)", np.square, lambda x: 2.0 * x),
    "np.reciprocal": ("np.reciprocal(x)", np.reciprocal, lambda x: -1.0 / (x * x)),
    "np.power(x, 2.5)": ("np.power(x, 2.5)", lambda x: np.power(x, 2.5),
                         lambda x: 2.5 * x ** 1.5),
    "np.power(x, 3)": ("np.power(x, 3)", lambda x: np.power(x, 3), lambda x: 3.0 * x * x),
    "np.power(2, x)": ("np.power(2.0, x)", lambda x: np.power(2.0, x),
                       lambda x: 2.0 ** x * math.log(2.0)),
    "np.maximum": ("np.maximum(x, 1.3)", lambda x: np.maximum(x, 1.3),
                   lambda x: 1.0 if x > 1.3 else 0.5 if x == 1.3 else 0.0),
    "np.minimum": ("np.minimum(x, 1.3)", lambda x: np.minimum(x, 1.3),
                   lambda x: 0.0 if x > 1.3 else 0.5 if x == 1.3 else 1.0),
    "np.arctan2": ("np.arctan2(x, 2.0)", lambda x: np.arctan2(x, 2.0),
                   lambda x: 2.0 / (x * x + 4.0)),
    "np.hypot": ("np.hypot(x, 2.0)", lambda x: np.hypot(x, 2.0),
                 lambda x: x / math.hypot(x, 2.0)),
    "np.fmod": ("np.fmod(2.5, x)", lambda x: np.fmod(2.5, x),
                lambda x: -((2.5 - math.fmod(2.5, x)) / x)),
    "np.remainder": ("np.remainder(2.5, x)", lambda x: np.remainder(2.5, x),
                     lambda x: -(2.5 // x)),
    "np.multiply/np.add": ("np.add(np.multiply(x, x), x)", lambda x: x * x + x,
                           lambda x: 2 * x + 1),
    "np.floor": ("np.floor(x) + x", lambda x: np.floor(x) + x, lambda x: 1.0),
}


def _kernel(expression):
    namespace = {"math": math, "np": np}
    exec(f"def k(x):\n    return {expression}\n", namespace)
    return db.fast_broadcast(namespace["k"]), namespace["k"]


@pytest.mark.parametrize("name, libm", [(name, False) for name in sorted(CASES)] +
                         [(name, True) for name in sorted(CASES) if name.startswith("math.")])
def test_values_and_partials_in_every_mode(name, libm):
    expression, value_of, derivative_of = CASES[name]
    kernel, python = _kernel(expression)
    if libm:
        kernel = db.fast_broadcast(libm=True)(python)
    value = np.array([float(value_of(x)) for x in X])
    derivative = np.array([float(derivative_of(x)) for x in X])
    # the Python function itself gives the same values (what the kernel compiles)
    np.testing.assert_allclose([python(float(x)) for x in X], value, rtol=1e-15)
    mapped = kernel(X)
    values, partials = kernel.value_and_partials(X)
    total, gradient = kernel.sum_and_partials(X)
    np.testing.assert_allclose(mapped, value, rtol=4e-15, atol=1e-15)   # (lgamma near 0)
    np.testing.assert_array_equal(values, mapped)
    np.testing.assert_allclose(partials, derivative, rtol=4e-14, atol=1e-14)
    np.testing.assert_array_equal(gradient, partials)
    assert total == pytest.approx(kernel.sum(X), rel=1e-15)
    assert total == pytest.approx(value.sum(), rel=1e-14)
    # and against central differences of the Python function
    h = 1e-6
    central = np.array([(python(float(x) + h) - python(float(x) - h)) / (2 * h) for x in X])
    np.testing.assert_allclose(partials, central, rtol=1e-6, atol=1e-8)
    # grad through the kernel: the same partials
    np.testing.assert_array_equal(db.grad(lambda x: kernel.sum(x))(X), gradient)


@pytest.mark.parametrize("libm", [True, False], ids=["libm", "vmath"])
def test_numpy_spellings_give_the_math_spellings_values(libm):
    # With libm=True both call the C library: the same bits.  Otherwise math.exp & co
    # are dualbcast.vmath's (within an ulp) and np.exp the C library's, as Numba's.
    pairs = [("np.exp(x)", "math.exp(x)"), ("np.sin(x) * np.cos(x)", "math.sin(x) * math.cos(x)"),
             ("np.sqrt(x)", "math.sqrt(x)"), ("np.arctan2(x, 0.5)", "math.atan2(x, 0.5)"),
             ("np.power(x, 3)", "x ** 3"), ("np.log(x)", "math.log(x)"),
             ("np.tanh(x) + np.log1p(x)", "math.tanh(x) + math.log1p(x)")]
    for numpy_spelling, math_spelling in pairs:
        a = db.fast_broadcast(libm=libm)(_kernel(numpy_spelling)[1])
        b = db.fast_broadcast(libm=libm)(_kernel(math_spelling)[1])
        for mode in ("value_and_partials", "sum_and_partials"):
            got, want = getattr(a, mode)(X), getattr(b, mode)(X)
            for g, w in zip(got, want):
                if libm and "**" not in math_spelling:
                    np.testing.assert_array_equal(g, w, err_msg=numpy_spelling)
                else:           # (x ** 3 multiplies; np.power calls pow)
                    np.testing.assert_allclose(g, w, rtol=1e-15, err_msg=numpy_spelling)


def test_np_maximum_propagates_nan_and_halves_ties_like_the_numpy_rule():
    kernel, _ = _kernel("np.maximum(x, 1.3) + np.minimum(x, 1.3)")
    x = np.array([np.nan, 1.3, 0.5, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values, partials = kernel.value_and_partials(x)
        rule = db.grad(lambda x: np.sum(np.maximum(x, 1.3) + np.minimum(x, 1.3)))(x)
    np.testing.assert_array_equal(values, np.maximum(x, 1.3) + np.minimum(x, 1.3))
    np.testing.assert_array_equal(partials[1:], rule[1:])          # 1 each side, halves
    assert np.isnan(values[0])


def test_digamma_against_scipy():
    x = np.concatenate([np.linspace(-4.5, -0.1, 37), np.linspace(0.01, 30.0, 200),
                        [1e-8, 1e3, 1e8, 0.5, 1.0, 2.0]])
    got = np.array([digamma(v) for v in x])
    np.testing.assert_allclose(got, special.digamma(x), rtol=1e-13, atol=1e-14)
    for pole in (0.0, -1.0, -3.0):
        assert math.isnan(digamma(pole))
    assert math.isnan(digamma(math.nan))


def test_remainder_is_pythons_exactly():
    rng = np.random.default_rng(3)
    xs = np.concatenate([rng.uniform(-100, 100, 300), [0.45, 0.15, -0.45, 5.0, 1e300, -0.0]])
    ys = np.concatenate([rng.uniform(-3, 3, 300), [0.3, 0.1, 0.3, 2.0, 0.7, 0.3]])
    for x, y in zip(xs, ys):
        assert np.float64(ieee_remainder(x, y)).tobytes() == \
            np.float64(math.remainder(x, y)).tobytes(), (x, y)
    for x, y in ((math.inf, 1.0), (1.0, 0.0), (math.nan, 1.0)):
        assert math.isnan(ieee_remainder(x, y))
    assert ieee_remainder(2.5, math.inf) == 2.5
