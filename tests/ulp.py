"""Measure the error of float results in units in the last place (ulp).

The reference is computed in x87 extended precision (``np.longdouble``: 64-bit
mantissa, 11 bits more than float64), so its own error is ~1/2000 ulp of a float64.
"""
import math

import numpy as np


def ulp_errors(got, exact):
    """Per element |got - exact| / ulp, where ulp is the spacing of ``got``'s dtype at
    the correctly rounded ``exact``.  Matching NaNs and matching infinities count 0;
    a NaN or an infinity against anything else counts inf."""
    got = np.asarray(got)
    dtype = got.dtype
    exact = np.asarray(exact, np.longdouble)
    rounded = exact.astype(dtype)
    with np.errstate(all="ignore"):
        ulp = np.spacing(np.abs(rounded)).astype(np.longdouble)
        # Results that round to inf: measure against the largest finite float's ulp.
        ulp = np.where(np.isinf(rounded), np.spacing(np.finfo(dtype).max), ulp)
        err = np.abs(got.astype(np.longdouble) - exact) / ulp
    both_nan = np.isnan(got) & np.isnan(exact)
    same_inf = np.isinf(got) & (got.astype(np.longdouble) == exact)
    special = np.isnan(got) | np.isnan(exact) | np.isinf(got) | np.isinf(exact)
    # An overflow to inf where the exact value rounds to inf is exact.
    overflow_ok = np.isinf(got) & np.isinf(rounded) & (np.sign(got) == np.sign(rounded))
    err = np.where(special, np.inf, err)
    return np.where(both_nan | same_inf | overflow_ok, 0.0, err).astype(np.float64)


def max_ulp(got, exact):
    errors = ulp_errors(got, exact)
    return float(errors.max()) if errors.size else 0.0


def assert_same_signs(got, expected):
    """Signs agree, signed zeros included (a NaN's sign bit means nothing)."""
    number = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(expected[number]))


def random_bits(rng, n, dtype=np.float64):
    """Floats with uniformly random bit patterns: every exponent, both signs, NaNs."""
    itype = np.int64 if dtype == np.float64 else np.int32
    info = np.iinfo(itype)
    return rng.integers(info.min, info.max, n, dtype=itype).view(dtype)


def agree(a, b, ulps=4):
    """Both nan, the same infinity, both zero, or finite within ``ulps`` ulps."""
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b) or a == 0 or b == 0:
        return a == b
    return abs(a - b) <= ulps * np.spacing(max(abs(a), abs(b)))
