"""dualbcast.vmath.explog: accuracy against x87 long double, exact special values against
NumPy (C99), float32, and that a loop over each function vectorises with no calls at all.

The functions are evaluated the way they are used: inside an njit loop over an array.
"""
import re

import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st
from numba.core.errors import TypingError

from dualbcast.vmath import common, explog
from asm import loop_asm
from ulp import assert_same_signs, max_ulp, random_bits, ulp_errors

# Overflow to inf is an expected outcome here (references, casts, nextafter at the top).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

L = np.longdouble
TINY = 2.2250738585072014e-308  # smallest normal float64
BIG = 1.7976931348623157e308    # largest float64
UNARY = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh}

# Max ulp errors asserted: a little above the maxima measured on ~2e7 inputs each (module
# docstring).  exp and pow round subnormal results twice: up to 0.84 ulp there.
BOUND64 = {"exp": 0.84, "expm1": 0.85, "log": 0.67, "log1p": 0.67, "tanh": 0.72, "pow": 0.56}
BOUND64_SUBNORMAL = 0.85
BOUND32 = 0.501  # float32: the float64 result rounded once more


@numba.njit(error_model="numpy")
def apply1(f, x, out):
    for i in range(x.size):
        out[i] = f(x[i])


@numba.njit(error_model="numpy")
def apply2(f, x, y, out):
    for i in range(x.size):
        out[i] = f(x[i], y[i])


def run(name, *args):
    out = np.empty_like(args[0])
    (apply2 if len(args) == 2 else apply1)(getattr(explog, name), *args, out)
    return out


def reference(name, *args):
    with np.errstate(all="ignore"):
        if name == "pow":
            return np.power(args[0].astype(L), args[1].astype(L))
        return UNARY[name](args[0].astype(L))


def assert_ulp64(name, got, exact, *inputs):
    errors = ulp_errors(got, exact)
    bound = np.where(np.abs(exact) < TINY, BOUND64_SUBNORMAL, BOUND64[name])
    i = np.argmax(errors - bound)
    assert errors[i] <= bound[i], f"{name}{tuple(a[i] for a in inputs)}: {errors[i]:.3f} ulp"


def around(*values, steps=3):
    """The values and their neighbours up to `steps` floats away on either side."""
    out = [np.array(values, np.float64)]
    for direction in (-np.inf, np.inf):
        v = out[0]
        for _ in range(steps):
            with np.errstate(over="ignore"):  # the neighbour of the largest float is inf
                v = np.nextafter(v, direction)
            out.append(v)
    return np.concatenate(out)


SUBNORMALS = np.array([5e-324, 1e-320, 1e-310, 2.2250738585072009e-308])
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, 0.5, 5e-324, -5e-324,
                    TINY, BIG, -BIG])
LN2_2 = 0.34657359027997264  # ln2 / 2: exp's reduction switches k here
INTERESTING = {  # thresholds: overflow, subnormal results, underflow to 0, branches
    "exp": around(709.782712893384, -708.3964185322641, -745.1332191019411, -740.0,
                  LN2_2, -LN2_2, 1e-300, 2**-53),
    "expm1": around(709.782712893384, -36.7368005696771, LN2_2, -LN2_2, 1e-10, -1e-10,
                    2**-53, -(2**-54)),
    "log": around(1.0, 0.7071067811865476, 1.4142135623730951, 2.0, 0.5, BIG, TINY, 5e-324),
    "log1p": around(-1.0, -0.5, 0.0, 1e-10, -1e-10, 2**-30, -(2**-30), 2**-53, 1.0, 1e300,
                    BIG, 5e-324),
    "tanh": around(0.0, 1e-300, 2**-28, LN2_2 / 2, 0.5493061443340549, 1.0, 19.06, 20.0),
}
DENSE = {"exp": (-746, 710), "expm1": (-40, 710), "log": (0, 10), "log1p": (-1, 3),
         "tanh": (-20, 20)}
PEAK = {"exp": (3.8, 3.9), "expm1": (0.33, 0.37), "log": (0.69, 0.72), "log1p": (0.3, 0.42),
        "tanh": (0.17, 0.18)}  # where the largest errors were found


@pytest.mark.parametrize("name", UNARY)
def test_float64_accuracy(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    n = 200_000
    x = np.concatenate([
        random_bits(rng, n),                                     # the whole float64 range
        rng.uniform(*DENSE[name], n),                            # the main interval
        rng.uniform(*PEAK[name], n),                             # where the error peaks
        rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-30, 0, n),  # near 0, both signs
        rng.uniform(-1, 1, 1000) * TINY,                         # subnormal inputs
        INTERESTING[name], SUBNORMALS, -SUBNORMALS, SPECIAL,
    ])
    assert_ulp64(name, run(name, x), reference(name, x), x)


@pytest.mark.parametrize("name", UNARY)
def test_special_values_exact(name):
    """Where NumPy's result is special (nan, inf, 0, +-1) or x itself, ours is identical."""
    x = np.concatenate([SPECIAL, SUBNORMALS, -SUBNORMALS, [1e300, -1e300, 710, -746, 30, -30]])
    with np.errstate(all="ignore"):
        expected = UNARY[name](x)
    got = run(name, x)
    exact = (~np.isfinite(expected) | (expected == 0) | (np.abs(expected) == 1)
             | (expected == x))
    assert exact.sum() >= 15
    np.testing.assert_array_equal(got[exact], expected[exact])
    assert_same_signs(got[exact], expected[exact])


def test_named_special_values():
    assert explog.exp(-740.0) == np.exp(-740.0) > 0        # gradual underflow, not 0
    assert np.signbit(explog.expm1(-0.0)) and np.signbit(explog.log1p(-0.0))
    assert np.signbit(explog.tanh(-0.0)) and explog.tanh(-np.inf) == -1.0
    assert explog.log(0.0) == -np.inf and np.isnan(explog.log(-1e-300))
    assert explog.log1p(-1.0) == -np.inf and np.isnan(explog.log1p(-1.0000000000000002))
    assert explog.expm1(-np.inf) == -1.0 and explog.exp(-np.inf) == 0.0
    assert np.isnan(explog.exp(np.nan)) and np.isnan(explog.tanh(np.nan))


# --- pow ------------------------------------------------------------------------------

POW_X = [0.0, -0.0, 1.0, -1.0, 0.25, -0.25, 4.0, -4.0, 2.0**-1074, -(2.0**-1074),
         2.0**-1000, 2.0**1000, -(2.0**1000), np.inf, -np.inf, np.nan]
POW_Y = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 3.0, -3.0,
         2.0**52 + 1, -(2.0**52 + 1), 2.0**53, -(2.0**53), 1e300, -1e300, 4e-20,
         np.inf, -np.inf, np.nan]


def test_pow_special_grid_exact():
    """Every pair of special values, compared exactly (values, NaNs, signed zeros) with C99
    pow via np.power; the finite non-special pairs all have exactly representable results."""
    x, y = (a.ravel() for a in np.meshgrid(POW_X, POW_Y))
    with np.errstate(all="ignore"):
        expected = np.power(x, y)
    got = run("pow", x, y)
    np.testing.assert_array_equal(got, expected)
    assert_same_signs(got, expected)


def test_pow_accuracy():
    rng = np.random.default_rng(7)
    n = 150_000
    x = np.concatenate([
        np.abs(random_bits(rng, n)),                    # any x, any y
        np.exp(rng.uniform(-20, 20, n)),                # moderate results
        1 + rng.uniform(-1e-3, 1e-3, n),                # x near 1, |y log x| up to ~700
        np.exp(rng.uniform(-700, 700, n)),              # results over the full range
        -rng.uniform(0.1, 10, n),                       # negative x, integer y
        np.exp(rng.uniform(-745, -700, n)),             # subnormal x
    ])
    y = np.concatenate([
        random_bits(rng, n),
        rng.uniform(-30, 30, n),
        rng.uniform(-7e5, 7e5, n),
        rng.uniform(-1, 1, n),                          # scaled below
        rng.integers(-300, 300, n).astype(np.float64),
        rng.uniform(0.5, 1.5, n),
    ])
    full = slice(3 * n, 4 * n)
    y[full] *= 745 / np.abs(np.log(x[full]))           # |y log x| up to 745: inf, 0, subnormal
    assert_ulp64("pow", run("pow", x, y), reference("pow", x, y), x, y)


@given(st.floats(), st.floats())
def test_pow_any_pair(x, y):
    x, y = np.array([x]), np.array([y])
    got = np.array([explog.pow(x[0], y[0])])
    assert_ulp64("pow", got, reference("pow", x, y), x, y)
    with np.errstate(all="ignore"):
        assert_same_signs(got, np.power(x, y))


# --- float32 --------------------------------------------------------------------------

@pytest.mark.parametrize("name", [*UNARY, "pow"])
def test_float32(name):
    rng = np.random.default_rng(3)
    n = 100_000
    f32 = np.float32
    if name == "pow":
        x = np.concatenate([np.abs(random_bits(rng, n, f32)), rng.uniform(0, 5, n).astype(f32),
                            f32([0, -0.0, -2, np.inf])])
        y = np.concatenate([random_bits(rng, n, f32), rng.uniform(-60, 60, n).astype(f32),
                            f32([-1, 3, 3, -np.inf])])
        args = (x, y)
    else:
        args = (np.concatenate([random_bits(rng, n, f32),
                                rng.uniform(*DENSE[name], n).astype(f32),
                                SPECIAL.astype(f32), SUBNORMALS.astype(f32)]),)
    got = run(name, *args)
    assert got.dtype == f32
    assert max_ulp(got, reference(name, *args)) <= BOUND32


def test_dtypes():
    for name in UNARY:
        f = getattr(explog, name)
        f(np.float32(0.5))
        [sig] = [s for s in f.nopython_signatures if s.args == (numba.float32,)]
        assert sig.return_type == numba.float32
        with pytest.raises(TypingError):
            f(1)
    explog.pow(np.float32(2), np.float32(0.5))
    [sig] = [s for s in explog.pow.nopython_signatures if s.args == (numba.float32,) * 2]
    assert sig.return_type == numba.float32


def test_two_prod_without_fma():
    """The Dekker product used where the CPU has no FMA is exact too."""
    rng = np.random.default_rng(5)
    for a, b in rng.uniform(-1, 1, (200, 2)) * 10.0 ** rng.integers(-100, 100, (200, 2)):
        assert common.two_prod_dekker(a, b) == common.two_prod_fma(a, b)


# --- vectorisation --------------------------------------------------------------------

AVX2 = "+avx2" in numba.core.codegen.get_host_cpu_features().split(",")
SCALARISED = re.compile(
    r"\b(vpextr[qd]|vpinsr[qd]|vmovq|vcvtsi2s[sd]q?|vcvtt?s[sd]2si|vpshufd)\b")
LIBM = re.compile(r"\b(exp|expf|expm1|expm1f|log|logf|log1p|log1pf|tanh|tanhf|pow|powf)\b")


@pytest.mark.skipif(not AVX2, reason="the vector widths asserted are AVX2's")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", [*UNARY, "pow"])
def test_loop_vectorises_without_calls(name, dtype):
    x = np.full(8, 0.5, dtype)
    args = (x, x) if name == "pow" else (x,)
    run(name, *args)
    loop = apply2 if name == "pow" else apply1
    sig = tuple(numba.typeof(a) for a in (getattr(explog, name), *args, x))
    asm = loop_asm(loop, sig)
    assert not re.search(r"^\s*call", asm, re.M), "a call in the loop"
    assert not LIBM.search(asm)
    # The vector loop body (the block with the most ymm instructions) has no scalarised
    # int64 work: no lane extracts/inserts, scalar int<->float conversions, vpsraq
    # emulation.
    body = max(re.split(r"^\.LBB\S*:", asm, flags=re.M), key=lambda b: b.count("%ymm"))
    assert not SCALARISED.search(body), SCALARISED.search(body).group()
    llvm = loop.inspect_llvm(sig)
    # Vectorised in double precision (float32 is computed in float64): 4 lanes, or 8
    # when LLVM pairs two AVX2 registers for a float32 loop (LLVM 20 does).
    assert re.search(r"<[48] x double>", llvm)
    if dtype == np.float32:
        assert "<4 x float>" in llvm or "<8 x float>" in llvm
    assert not re.search(r"call[^\n]*@(llvm\.)?(exp|log|pow|tanh|expm1|log1p)\b", llvm)
