"""dualbcast.vmath.trig: sin and cos against x87 long double (sinl, cosl) over the whole
float64 range, the hard cases of the argument reduction (arguments closest to multiples
of pi/2), exact special values, float32, and that a loop over them vectorises with no
calls.

Every function is evaluated the way it is used: inside an njit loop over an array.
"""
import math
import re

import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st
from numba.core.errors import TypingError

from dualbcast.vmath import common, trig
from asm import loop_asm
from ulp import assert_same_signs, max_ulp, random_bits, ulp_errors

L = np.longdouble
REFERENCE = {"sin": np.sin, "cos": np.cos}
# Max ulp error asserted: a little above the maxima measured on 4e6 inputs a range
# (module docstring: 0.787).  float32: the float64 result rounded once more.
BOUND64 = 0.8
BOUND32 = 0.501


@numba.njit(error_model="numpy")
def apply(f, x, out):
    for i in range(x.size):
        out[i] = f(x[i])


def run(name, x):
    out = np.empty_like(x)
    apply(getattr(trig, name), x, out)
    return out


def reference(name, x):
    with np.errstate(all="ignore"):
        return REFERENCE[name](x.astype(L))


def around(values, steps=2):
    """Each value and its neighbours up to `steps` floats away."""
    out, up, down = [values], values, values
    for _ in range(steps):
        up, down = np.nextafter(up, np.inf), np.nextafter(down, -np.inf)
        out += [up, down]
    return np.concatenate(out)


# --- arguments close to multiples of pi/2 ---------------------------------------------
# pi from Machin's formula in integers (independent of the module's table code).

PREC = 1200


def _arctan_inverse(k):
    term, total, n = (1 << PREC) // k, 0, 0
    while term:
        total += (-1) ** n * (term // (2 * n + 1))
        term //= k * k
        n += 1
    return total


PI = 16 * _arctan_inverse(5) - 4 * _arctan_inverse(239)       # pi * 2**PREC


def nearest_to_multiples(ks):
    """The float64 nearest k pi/2 for each integer k (int / int rounds correctly)."""
    return np.array([(k * PI) / (1 << (PREC + 1)) for k in ks])


def hard_mantissas(e, bits=53):
    """`bits`-bit integers m for which m 2**e comes closest to a multiple of pi/2: the
    denominators of the continued-fraction convergents of 2**(e+1)/pi, each multiplied
    into [2**(bits-1), 2**bits).  These are the hardest arguments for the reduction."""
    num, den = PI, (1 << (e + 1 + PREC)) % PI          # 1 / frac(2**(e+1) / pi)
    out, q_prev, q = [], 0, 1
    while den:
        a = num // den
        q_prev, q = q, a * q + q_prev
        if q >= 1 << bits:
            break
        if q > 1:
            out.append(q * -(-(1 << (bits - 1)) // q))
        num, den = den, num - a * den
    return out


def hard_cases(exponents, bits=53, dtype=np.float64):
    x = np.array([math.ldexp(m, e) for e in exponents for m in hard_mantissas(e, bits)], dtype)
    return np.concatenate([x, -x])


WORST = math.ldexp(6381956970095103, 797)     # the float64 closest to a multiple of pi/2


def test_hard_case_generator():
    assert 6381956970095103 in hard_mantissas(797)
    # x 2/pi is within 2**-61 of an integer
    distance = (6381956970095103 << 798) * (1 << PREC) % PI
    assert min(distance, PI - distance) < PI >> 61


# --- float64 --------------------------------------------------------------------------

SUBNORMALS = np.array([5e-324, 1e-320, 1e-310, 2.225073858507201e-308])
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0**-27, 2.0**-26,
                    0.7853981633974483, 1.5707963267948966, 3.141592653589793, 1e22, 1e300,
                    1.7976931348623157e308, -1.7976931348623157e308, 2.2250738585072014e-308])


@pytest.mark.parametrize("name", REFERENCE)
def test_float64_accuracy(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    n = 200_000
    x = np.concatenate([
        rng.uniform(-10, 10, n),
        rng.uniform(-1e5, 1e5, n),
        random_bits(rng, n),                                     # every exponent: huge x
        rng.uniform(-1, 1, n // 4) * 10.0 ** rng.uniform(-30, 0, n // 4),   # near 0
        rng.uniform(-1, 1, 1000) * 2.2250738585072014e-308,     # subnormal x
        SUBNORMALS, -SUBNORMALS, SPECIAL,
    ])
    errors = ulp_errors(run(name, x), reference(name, x))
    assert errors.max() <= BOUND64, (x[np.argmax(errors)], errors.max())


@pytest.mark.parametrize("name", REFERENCE)
def test_near_multiples_of_half_pi(name):
    """Where sin or cos is nearly 0 its value is the reduction's remainder, so every bit of
    x mod pi/2 counts."""
    rng = np.random.default_rng(11)
    ks = [*range(1, 3000), *(int(k) << int(s) for k, s in          # k pi/2 up to 1e300
                             zip(rng.integers(1, 2**62, 3000), rng.integers(0, 935, 3000)))]
    x = np.concatenate([
        around(nearest_to_multiples(ks)),
        hard_cases(range(-60, 972)),                             # from |x| ~ 1 to the top
        [WORST, -WORST],
    ])
    errors = ulp_errors(run(name, x), reference(name, x))
    assert errors.max() <= BOUND64, (x[np.argmax(errors)], errors.max())


@pytest.mark.parametrize("name", REFERENCE)
def test_special_values_exact(name):
    """Zeros, tiny and subnormal x (sin x = x, cos x = 1), infinities and NaN, exactly as
    NumPy (C99) gives them, signed zeros included."""
    x = np.concatenate([[0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 2.0**-27 * (1 - 2.0**-53),
                         -(2.0**-30), 1e-300, 2.2250738585072014e-308], SUBNORMALS, -SUBNORMALS])
    with np.errstate(all="ignore"):
        expected = REFERENCE[name](x)
    got = run(name, x)
    np.testing.assert_array_equal(got, expected)
    assert_same_signs(got, expected)


def test_named_special_values():
    assert np.signbit(trig.sin(-0.0)) and not np.signbit(trig.sin(0.0))
    assert trig.cos(-0.0) == 1.0 and trig.cos(5e-324) == 1.0
    assert trig.sin(-5e-324) == -5e-324
    assert all(np.isnan(f(v)) for f in (trig.sin, trig.cos) for v in (np.inf, -np.inf, np.nan))
    assert trig.sin(WORST) == np.float64(np.sin(L(WORST)))         # 1.0
    assert trig.cos(WORST) == np.float64(np.cos(L(WORST)))         # -4.687165924254628e-19


@given(st.lists(st.floats(), min_size=1, max_size=20))
def test_any_float64(values):
    x = np.array(values)
    for name in REFERENCE:
        got, expected = run(name, x), reference(name, x)
        assert max_ulp(got, expected) <= BOUND64
        assert_same_signs(got[got == 0], expected[got == 0])


# --- float32 --------------------------------------------------------------------------

SPECIAL32 = np.float32([0.0, np.inf, np.nan, 1e-45, 1e-40, 1.1754944e-38, 2.0**-27, 0.7853982,
                        1.5707964, 3.1415927, 1e30, 3.4028235e38])


@pytest.mark.parametrize("name", REFERENCE)
def test_float32(name):
    rng = np.random.default_rng(3)
    n = 100_000
    x = np.concatenate([
        random_bits(rng, n, np.float32),
        rng.uniform(-10, 10, n).astype(np.float32),
        rng.uniform(-1e5, 1e5, n).astype(np.float32),
        hard_cases(range(-30, 104), bits=24, dtype=np.float32),
        SPECIAL32, -SPECIAL32,
    ])
    got = run(name, x)
    assert got.dtype == np.float32
    assert max_ulp(got, reference(name, x)) <= BOUND32
    zero = got == 0
    assert_same_signs(got[zero], reference(name, x[zero]).astype(np.float32))


def test_dtypes():
    for f in (trig.sin, trig.cos):
        f(np.float32(0.5))
        [sig] = [s for s in f.nopython_signatures if s.args == (numba.float32,)]
        assert sig.return_type == numba.float32
        with pytest.raises(TypingError, match="float32 or float64"):
            f(1)


def test_two_prod_without_fma():
    """The Dekker product used where the CPU has no FMA is exact for the operands the
    reduction multiplies: |x| (scaled) up to 2**653 times the table's doubles."""
    rng = np.random.default_rng(5)
    xs = rng.uniform(1, 2, 500) * 2.0 ** rng.integers(-27, 654, 500)
    ts = trig._TABLE.ravel()[rng.integers(0, trig._TABLE.size, 500)]
    for a, b in zip(xs, ts):
        assert common.two_prod_dekker(a, b) == common.two_prod_fma(a, b)


# --- vectorisation --------------------------------------------------------------------

LIBM_ASM = re.compile(r"\b(sin|cos|sinf|cosf|sincos)\b")
LIBM_LLVM = re.compile(r"call[^\n]*@(llvm\.)?(sin|cos)f?\b")


@numba.njit(error_model="numpy")
def libm_loop(x, out):
    for i in range(x.size):
        out[i] = math.sin(x[i])


def assert_vectorised_without_calls(asm, llvm, dtype):
    assert not re.search(r"^\s*call", asm, re.M), "a call in the loop"
    assert not LIBM_ASM.search(asm), "a libm symbol in the loop"
    assert not LIBM_LLVM.search(llvm)
    assert re.search(r"<(4|8) x double>", llvm)        # (AVX2 or AVX-512 lanes)
    if dtype == np.float32:
        assert "<4 x float>" in llvm or "<8 x float>" in llvm


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", REFERENCE)
def test_loop_vectorises_without_calls(name, dtype):
    x = np.full(8, 0.5, dtype)
    run(name, x)
    sig = (numba.typeof(getattr(trig, name)), numba.typeof(x), numba.typeof(x))
    assert_vectorised_without_calls(loop_asm(apply, sig), apply.inspect_llvm(sig), dtype)


def test_vectorisation_check_catches_libm():
    """The check above fails on the loop it is there to rule out: math.sin."""
    x = np.full(8, 0.5)
    libm_loop(x, np.empty_like(x))
    sig = libm_loop.signatures[0]
    with pytest.raises(AssertionError):
        assert_vectorised_without_calls(loop_asm(libm_loop, sig), libm_loop.inspect_llvm(sig),
                                        np.float64)
