"""The compiled NaN-safe products of the backward pass (dualbcast.kernel.products)."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import dualbcast as db
from dualbcast.kernel.products import CHUNK, nan_safe_dot, nan_safe_multiply, scaled_sum
from dualbcast.rules.common import nan_safe, nan_safe_sum

SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e308, 5e-324])
FLOATS = st.one_of(SPECIAL, st.floats(-1e6, 1e6))


def reference(g, local):
    # 0 where a zero factor makes a nan (0 * inf either way round, 0 * nan)
    with np.errstate(all="ignore"):
        product = g * local
    return np.where(((g == 0) | (local == 0)) & np.isnan(product), 0.0, product)


@st.composite
def pairs(draw, max_size=300):
    n = draw(st.integers(0, max_size))
    g = draw(hnp.arrays(np.float64, n, elements=FLOATS))
    local = draw(hnp.arrays(np.float64, n, elements=FLOATS))
    return g, local


@settings(max_examples=150, deadline=None)
@given(pairs())
def test_multiply_is_the_nan_safe_product_bit_for_bit(pair):
    g, local = pair
    np.testing.assert_array_equal(nan_safe_multiply(g, local), reference(g, local))
    # into a buffer, and into the partials themselves (the backward pass does that)
    out = np.empty_like(g)
    assert nan_safe_multiply(g, local, out) is out
    np.testing.assert_array_equal(out, reference(g, local))
    expected = reference(g, local)
    assert nan_safe_multiply(g, local, local) is local
    np.testing.assert_array_equal(local, expected)


@settings(max_examples=150, deadline=None)
@given(pairs())
def test_dot_is_the_sum_of_the_nan_safe_products(pair):
    g, local = pair
    products = reference(g, local)
    got = nan_safe_dot(g, local)
    assert type(got) is float
    finite = products[np.isfinite(products)]
    with np.errstate(over="ignore"):
        # the finite products' partial sums overflow in some order: inf - inf may be met
        overflows = not np.isfinite(np.add.accumulate(np.abs(finite))).all()
    infinities = set(np.sign(products[np.isinf(products)]))
    if np.isnan(products).any() or len(infinities) == 2:
        assert math.isnan(got)
    elif infinities:
        assert got == infinities.pop() * math.inf or overflows and math.isnan(got)
    elif overflows:
        assert not math.isfinite(got) or math.isclose(got, _exact_sum(finite), rel_tol=1e-12)
    else:
        assert math.isclose(got, _exact_sum(finite), rel_tol=1e-12,
                            abs_tol=1e-12 * np.abs(products).sum())


def _exact_sum(values):
    exact = sum(map(Fraction, values.tolist()), Fraction(0))
    return float(exact) if abs(exact) < Fraction(np.finfo(np.float64).max) else math.inf


def test_a_zero_cotangent_meets_an_infinite_partial_as_zero():
    g = np.array([0.0, 1.0, 0.0, 2.0])
    local = np.array([np.inf, 3.0, np.nan, -np.inf])
    np.testing.assert_array_equal(nan_safe_multiply(g, local), [0.0, 3.0, 0.0, -np.inf])
    assert nan_safe_dot(g, local) == -np.inf
    assert nan_safe_dot(g[:3], local[:3]) == 3.0


@pytest.mark.parametrize("n", [CHUNK - 1, CHUNK, 3 * CHUNK + 7, 40_000])
def test_threads_change_no_bit(n, monkeypatch):
    rng = np.random.default_rng(n)
    g, local = rng.standard_normal(n), rng.standard_normal(n) * 1e3
    g[::97] = 0.0
    local[::97] = np.inf         # only where g is 0: the sum stays finite
    monkeypatch.setattr(db.config, "parallel_threshold", 1)
    monkeypatch.setattr(db.config, "threads", 1)
    one = nan_safe_dot(g, local), nan_safe_multiply(g, local)
    monkeypatch.setattr(db.config, "threads", 2)
    two = nan_safe_dot(g, local), nan_safe_multiply(g, local)
    monkeypatch.setattr(db.config, "threads", 3)
    three = nan_safe_dot(g, local), nan_safe_multiply(g, local)
    assert one[0] == two[0] == three[0]
    np.testing.assert_array_equal(one[1], two[1])
    np.testing.assert_array_equal(one[1], three[1])
    np.testing.assert_array_equal(one[1], reference(g, local))


def test_anything_else_is_left_to_numpy():
    a = np.ones(4)
    assert nan_safe_multiply(a, np.ones(4, np.float32)) is None
    assert nan_safe_multiply(a, np.ones(3)) is None
    assert nan_safe_multiply(np.ones(8)[::2], a) is None           # not contiguous
    assert nan_safe_multiply(a, a, out=np.ones(4, np.float32)) is None
    read_only = np.ones(4)
    read_only.flags.writeable = False
    assert nan_safe_multiply(a, a, out=read_only) is None
    assert nan_safe_dot(a, 2.0) is None
    assert nan_safe_dot(np.ones((2, 2)), np.ones(4)) is None
    # 2-d arrays of one shape are taken whole
    np.testing.assert_array_equal(nan_safe_multiply(np.ones((2, 3)), np.full((2, 3), 2.0)),
                                  np.full((2, 3), 2.0))
    assert nan_safe_dot(np.ones((2, 3)), np.full((2, 3), 2.0)) == 12.0


@settings(max_examples=60, deadline=None)
@given(g=hnp.arrays(np.float64, 5, elements=FLOATS),
       local=st.one_of(FLOATS, st.just(3), hnp.arrays(np.float64, 5, elements=FLOATS),
                       hnp.arrays(np.float32, 5, elements=st.sampled_from([0.0, np.inf, 2.0])),
                       hnp.arrays(np.float64, (1,), elements=FLOATS)))
def test_the_rules_product_agrees_with_the_reference_on_every_path(g, local):
    with np.errstate(all="ignore"):
        expected = reference(g, np.asarray(local) if type(local) is not int else local)
        got = nan_safe(g, local)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.result_type(g, local)


def test_kernel_map_scalar_coefficient_gradient_is_nan_safe():
    # d/da sum(where(mask, k(x, a), 0)): the masked elements' partials are infinite
    # (sqrt at 0), their cotangents 0, so they contribute nothing.
    @db.fast_broadcast
    def root(x, a):
        return math.sqrt(x * a)

    x = np.array([0.0, 1.0, 4.0])
    mask = x > 0

    def f(x, a):
        return np.sum(np.where(mask, root(x, a), 0.0))

    g_a = db.grad(f, argnums=1)(x, 1.0)
    assert g_a == pytest.approx(0.5 * (1.0 + 2.0))
    g_x = db.grad(f)(x, 1.0)
    np.testing.assert_allclose(g_x, [0.0, 0.5, 0.25])


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@settings(max_examples=100, deadline=None)
@given(pairs(), st.floats(-1e6, 1e6).filter(bool), st.floats(-1e6, 1e6).filter(bool))
def test_scaled_sum_is_numpy_bit_for_bit(pair, a, b):
    x, y = pair
    with np.errstate(all="ignore"):
        assert _bits(scaled_sum(a, x, b, y)) == _bits(a * x + b * y)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_scaled_sum_threads_change_no_bit(threads, monkeypatch):
    rng = np.random.default_rng(threads)
    x, y = rng.standard_normal(50_001), rng.standard_normal(50_001) * 1e3
    monkeypatch.setattr(db.config, "parallel_threshold", 1)
    monkeypatch.setattr(db.config, "threads", threads)
    assert _bits(scaled_sum(0.3, x, -7.0, y)) == _bits(0.3 * x + -7.0 * y)


def test_scaled_sum_leaves_the_rest_to_numpy():
    x = np.ones(3)
    for args in [(0.0, x, 1.0, x), (np.inf, x, 1.0, x), (1.0, x, np.nan, x),
                 (1.0, x.astype(np.float32), 1.0, x), (1.0, x, 1.0, np.ones(4)),
                 (1.0, np.ones(6)[::2], 1.0, x), (np.float32(1.0), x, 1.0, x)]:
        assert scaled_sum(*args) is None


@settings(max_examples=100, deadline=None)
@given(pairs(max_size=40), FLOATS, FLOATS)
def test_nan_safe_sum_is_two_nan_safe_products(pair, a, b):
    """The tangent of a NaN-safe product: one pass or two, the same bits."""
    x, y = pair
    with np.errstate(all="ignore"):
        assert _bits(nan_safe_sum(a, x, b, y)) == _bits(nan_safe(a, x) + nan_safe(b, y))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(3, 5), local=hnp.arrays(np.float64, 1500, elements=FLOATS),
       special=hnp.arrays(np.float64, 6, elements=SPECIAL))
def test_a_stack_times_one_partial_is_the_nan_safe_product_bit_for_bit(rows, local,
                                                                        special):
    # (vmap's batched products: a stack of cotangents times one local partial, in one
    # compiled pass where the stack has CHUNK elements or more)
    g = np.resize(np.concatenate([special, local[::-1]]), (rows, local.size))
    for big, small in [(g, local), (local, g)]:
        got = nan_safe_multiply(big, small)
        assert got is not None and got.shape == g.shape
        np.testing.assert_array_equal(got, reference(big, small))
    assert nan_safe_multiply(g[:, ::2], local[::2]) is None            # not contiguous
    assert nan_safe_multiply(g[:1, :100], local[:100]) is None         # small: NumPy's
