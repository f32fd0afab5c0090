"""Gradient rules for NumPy operations, against autograd (and central differences),
over broadcasting shapes, float32 and float64, plus the exact conventions."""
import tracemalloc

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import dualbcast as db
from dualbcast.testing import check_grads

RNG = np.random.default_rng(1)

# (name, low, high): inputs drawn inside the domain, away from kinks.
UNARY = [("negative", -2, 2), ("exp", -2, 2), ("exp2", -2, 2), ("expm1", -2, 2),
         ("log", 0.2, 3), ("log2", 0.2, 3), ("log10", 0.2, 3), ("log1p", -0.5, 2),
         ("sqrt", 0.2, 3), ("cbrt", 0.2, 3), ("square", -2, 2), ("reciprocal", 0.5, 2),
         ("sin", -3, 3), ("cos", -3, 3), ("tan", -1.2, 1.2), ("arcsin", -0.9, 0.9),
         ("arccos", -0.9, 0.9), ("arctan", -3, 3), ("sinh", -2, 2), ("cosh", -2, 2),
         ("tanh", -2, 2), ("arcsinh", -3, 3), ("arccosh", 1.2, 3), ("arctanh", -0.9, 0.9),
         ("absolute", 0.1, 2), ("fabs", -2, -0.1), ("deg2rad", -2, 2), ("rad2deg", -2, 2),
         ("positive", -1, 1)]
BINARY = [("add", (-2, 2), (-2, 2)), ("subtract", (-2, 2), (-2, 2)),
          ("multiply", (-2, 2), (-2, 2)), ("true_divide", (-2, 2), (0.5, 2)),
          ("power", (0.2, 2), (-2, 2)), ("arctan2", (-2, 2), (0.2, 2)),
          ("hypot", (-2, 2), (0.5, 2)), ("maximum", (-2, 2), (-2, 2)),
          ("minimum", (-2, 2), (-2, 2)), ("logaddexp", (-2, 2), (-2, 2)),
          ("logaddexp2", (-2, 2), (-2, 2)), ("remainder", (0.1, 3), (0.7, 0.9)),
          ("fmod", (0.1, 3), (0.7, 0.9)), ("fmax", (-2, 2), (-2, 2)),
          ("fmin", (-2, 2), (-2, 2))]
# Oracles for what autograd lacks (fmod equals mod on the positive test range).
AUTOGRAD_MISSING = {"remainder": anp.mod, "fmod": anp.mod, "positive": lambda x: x * 1.0,
                    "cbrt": lambda x: x ** (1.0 / 3.0)}


def autograd_fn(name):
    return AUTOGRAD_MISSING.get(name) or getattr(anp, name)


@pytest.mark.parametrize("name,low,high", UNARY)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unary_ufunc_against_autograd(name, low, high, dtype):
    x = RNG.uniform(low, high, (3, 4)).astype(dtype)
    weights = RNG.standard_normal((3, 4))
    f = getattr(np, name)
    g = db.grad(lambda x: np.sum(f(x) * weights))(x)
    assert g.dtype == dtype
    want = autograd.grad(lambda x: anp.sum(autograd_fn(name)(x) * weights))(x.astype(float))
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,xr,yr", BINARY)
def test_binary_ufunc_against_autograd_with_broadcasting(name, xr, yr):
    x = RNG.uniform(*xr, (3, 1))
    y = RNG.uniform(*yr, (4,))
    f = getattr(np, name)
    g = db.grad(lambda x, y: np.sum(f(x, y) ** 2), argnums=(0, 1))(x, y)
    want = autograd.grad(lambda x, y: anp.sum(autograd_fn(name)(x, y) ** 2), (0, 1))(x, y)
    assert g[0].shape == (3, 1) and g[1].shape == (4,)
    np.testing.assert_allclose(g[0], want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g[1], want[1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,xr,yr", BINARY)
def test_binary_ufunc_with_one_constant_side(name, xr, yr):
    x, y = RNG.uniform(*xr, 5), RNG.uniform(*yr, 5)
    f = getattr(np, name)
    check_grads(lambda x: np.sum(f(x, y)), x)
    check_grads(lambda y: np.sum(f(x, y)), y)


@given(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3),
       st.sampled_from([np.float64, np.float32]))
def test_broadcasting_expressions_against_autograd(shapes, dtype):
    a, b, c = (RNG.uniform(0.5, 1.5, s).astype(dtype) for s in shapes.input_shapes)

    def f(a, b, c, np=np):
        return np.sum(np.exp(a) * b / c + np.maximum(a, b) - c ** 2)
    g = db.grad(f, argnums=(0, 1, 2))(a, b, c)
    want = autograd.grad(lambda *args: f(*args, np=anp), (0, 1, 2))(
        *(v.astype(np.float64) for v in (a, b, c)))
    for got, expected, arg in zip(g, want, (a, b, c)):
        assert np.shape(got) == np.shape(arg) and np.result_type(got) == dtype
        np.testing.assert_allclose(got, expected, rtol=1e-4 if dtype == np.float32 else 1e-12,
                                   atol=1e-5)


# --- conventions (README, "Derivative conventions") ---------------------------------------

@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # log(0), as NumPy
def test_conventions_exactly():
    assert db.grad(lambda x: np.sqrt(x))(0.0) == np.inf
    assert db.grad(lambda x: np.log(x))(0.0) == np.inf
    assert db.grad(lambda x: np.abs(x))(0.0) == 0.0
    assert db.grad(lambda x: x ** 2)(0.0) == 0.0
    assert db.grad(lambda x: x ** 1)(0.0) == 1.0
    assert db.grad(lambda x: x ** 0)(0.0) == 0.0
    assert db.grad(lambda y: 0.0 ** y, argnums=0)(2.0) == 0.0
    assert db.grad(lambda x, y: np.maximum(x, y), argnums=(0, 1))(1.0, 1.0) == (0.5, 0.5)
    assert db.grad(lambda x, y: np.minimum(x, y), argnums=(0, 1))(1.0, 1.0) == (0.5, 0.5)
    np.testing.assert_array_equal(db.grad(lambda x: np.max(x))(np.array([1.0, 3.0, 3.0])),
                                  [0.0, 0.5, 0.5])
    assert db.grad(lambda x, y: np.hypot(x, y), argnums=(0, 1))(0.0, 0.0) == (0.0, 0.0)


def test_zero_cotangent_meeting_an_infinite_derivative_gives_zero():
    # sqrt(0) is masked out by where: its zero cotangent must not become 0 * inf = nan.
    g = db.grad(lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)))(np.array([0.0, 4.0]))
    np.testing.assert_array_equal(g, [0.0, 0.25])


def test_nan_and_inf_propagate():
    g = db.grad(lambda x: np.sum(x * 2.0))(np.array([np.nan, np.inf]))
    np.testing.assert_array_equal(g, [2.0, 2.0])
    g = db.grad(lambda x: np.sum(np.exp(x)))(np.array([np.nan, np.inf, -np.inf]))
    np.testing.assert_array_equal(g, [np.nan, np.inf, 0.0])


def test_piecewise_constant_ufuncs_give_zero_gradient_and_plain_values():
    def f(x):
        parts = [np.floor(x), np.ceil(x), np.trunc(x), np.rint(x), np.sign(x), x // 0.3]
        assert all(type(p) is np.ndarray for p in parts)
        return np.sum(x * 1.0 + sum(parts))
    np.testing.assert_array_equal(db.grad(f)(np.array([0.4, 1.7])), [1.0, 1.0])


# --- reductions ---------------------------------------------------------------------------

AXES = [None, 0, 1, -1, (0, 2), (0, 1, 2)]


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "max", "min", "var", "std"])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_with_axis_and_keepdims(name, axis, keepdims):
    x = RNG.uniform(0.5, 1.5, (2, 3, 4))
    weights = RNG.standard_normal(np.shape(getattr(np, name)(x, axis=axis, keepdims=keepdims)))
    g = db.grad(lambda x: np.sum(getattr(np, name)(x, axis=axis, keepdims=keepdims) * weights))(x)
    want = autograd.grad(lambda x: anp.sum(
        getattr(anp, name)(x, axis=axis, keepdims=keepdims) * weights))(x)
    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12)


def test_reduction_methods_match_functions():
    x = RNG.uniform(0.5, 1.5, (3, 4))

    def f(x):
        return (np.sum(x.mean(0, keepdims=True) @ x.sum(axis=0)) + x.prod() + x.max(axis=1).sum()
                + x.min(0).sum() + x.var() + x.std(axis=0).sum() + x.cumsum(axis=1).sum())

    def f_np(x):
        return (np.sum(np.mean(x, 0, keepdims=True) @ np.sum(x, axis=0)) + np.prod(x)
                + np.max(x, axis=1).sum() + np.min(x, 0).sum() + np.var(x)
                + np.std(x, axis=0).sum() + np.cumsum(x, axis=1).sum())
    np.testing.assert_allclose(db.grad(f)(x), db.grad(f_np)(x), rtol=1e-12)
    check_grads(f, x)


def test_prod_with_zeros():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]])
    g = db.grad(lambda x: np.sum(np.prod(x, axis=1)))(x)
    np.testing.assert_array_equal(g, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0], [6.0, 3.0, 2.0]])


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_cumsum(axis):
    x = RNG.standard_normal((3, 4))
    w = RNG.standard_normal(np.cumsum(x, axis=axis).shape)
    g = db.grad(lambda x: np.sum(np.cumsum(x, axis=axis) * w))(x)
    want = autograd.grad(lambda x: anp.sum(anp.cumsum(x, axis=axis) * w))(x)
    np.testing.assert_allclose(g, want, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # NumPy's mean of an empty axis
def test_reduction_of_zero_d_and_empty():
    assert db.grad(lambda x: np.sum(x) * 2.0)(np.array(3.0)) == 2.0
    g = db.grad(lambda x: np.sum(x) + np.mean(x, axis=0).sum())(np.ones((0, 3)))
    assert g.shape == (0, 3)


# --- shapes, indexing, joining, selection -------------------------------------------------

INDICES = [0, -1, (1, 2), slice(None, None, -1), (slice(1, None), slice(None, None, -2)),
           np.array([0, 2, 2, 0]), [1, 1, 1], (np.array([0, 2]), np.array([1, 3])),
           np.array([True, False, True]), (slice(None), None, 1), (Ellipsis, 2), (), None,
           (np.array([[0], [2]]), np.array([1, 3, 3]))]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_indexing_against_autograd(index):
    x = RNG.standard_normal((3, 4))
    w = RNG.standard_normal(np.shape(x[index]))
    g = db.grad(lambda x: np.sum(x[index] * w))(x)
    want = autograd.grad(lambda x: anp.sum(x[index] * w))(x)
    np.testing.assert_allclose(g, want, rtol=1e-14)


def test_many_element_reads_accumulate_into_one_buffer():
    n = 200_000
    x = RNG.standard_normal(n)

    def f(x):
        return x[0] * x[1] + x[2] + x[1] * 3.0 + np.sum(x[10:20]) + x[-1]
    db.grad(f)(x)                                   # warm up
    tracemalloc.start()
    g = db.grad(f)(x)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1.5 * x.nbytes                    # the gradient itself, not one per read
    expected = np.zeros(n)
    np.add.at(expected, [0, 1, 2, 1, -1], [x[1], x[0], 1.0, 3.0, 1.0])
    expected[10:20] += 1.0
    np.testing.assert_array_equal(g, expected)


def test_shape_functions_against_autograd():
    x = RNG.standard_normal((2, 3, 4))

    def f(x, np=np):
        parts = [np.reshape(x, (6, 4)), np.ravel(x), np.transpose(x, (2, 0, 1)), x.T,
                 np.swapaxes(x, 0, 2), np.moveaxis(x, 0, -1), np.expand_dims(x, 1),
                 np.squeeze(x[:1]), x.reshape((-1, 2)), x.transpose((1, 0, 2)), x.flatten(),
                 np.broadcast_to(x[:, :1], (2, 3, 4)), np.atleast_2d(x[0, 0])]
        return sum(np.sum(p * np.arange(np.size(p)).reshape(np.shape(p))) for p in parts)
    g = db.grad(f)(x)
    np.testing.assert_allclose(g, autograd.grad(lambda x: f(x, np=anp))(x), rtol=1e-12)
    # NumPy's varargs spellings of the methods.
    np.testing.assert_array_equal(
        db.grad(lambda x: np.sum(x.reshape(-1, 2) * x.transpose(1, 0, 2).reshape(12, 2)))(x),
        db.grad(lambda x: np.sum(x.reshape((-1, 2)) * x.transpose((1, 0, 2)).reshape((12, 2))))(x))


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_concatenate_and_stack(axis):
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    c = np.ones((2, 3))                             # a constant among traced arrays

    def f(a, b, np=np):
        joined = np.concatenate([a, c, np.sin(b)], axis=axis)
        stacked = np.stack([a, b, c], axis=0 if axis is None else axis)
        return np.sum(joined ** 2) + np.sum(stacked * np.arange(stacked.size).reshape(
            stacked.shape))
    check_grads(f, a, b)
    if axis is not None:                # autograd has no concatenate(axis=None)
        g = db.grad(f, argnums=(0, 1))(a, b)
        want = autograd.grad(lambda a, b: f(a, b, np=anp), (0, 1))(a, b)
        for got, expected in zip(g, want):
            np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_vstack_hstack():
    a, b = RNG.standard_normal(3), RNG.standard_normal((2, 3))

    def f(a, b, np=np):
        return np.sum(np.vstack([a, b]) ** 2) + np.sum(np.hstack([a, b[0]]) ** 3)
    g = db.grad(f, argnums=(0, 1))(a, b)
    want = autograd.grad(lambda a, b: f(a, b, np=anp), (0, 1))(a, b)
    for got, expected in zip(g, want):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_where_and_clip_with_traced_bounds():
    x, low = RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-0.5, 0.0, (4,))

    def f(x, low, np=np, clip=np.clip):
        return np.sum(np.where(x > 0, x, low * 2.0) ** 2) + np.sum(clip(x, low, 0.5) ** 2)

    def clip_autograd(x, low, high):    # autograd's clip has no gradient for the bounds
        return anp.minimum(anp.maximum(x, low), high)
    g = db.grad(f, argnums=(0, 1))(x, low)
    want = autograd.grad(lambda x, low: f(x, low, np=anp, clip=clip_autograd), (0, 1))(x, low)
    for got, expected in zip(g, want):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.sum(db.grad(lambda x: np.sum(np.clip(x, 0.0, 1.0)))(np.array([1.0]))) == 0.5


MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                 ((5, 2, 3), (3, 4)), ((5, 2, 3), (1, 3, 4)), ((3,), (5, 3, 4))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_against_autograd(sa, sb):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    w = RNG.standard_normal(np.shape(a @ b))
    g = db.grad(lambda a, b: np.sum((a @ b) * w), argnums=(0, 1))(a, b)
    want = autograd.grad(lambda a, b: anp.sum(anp.matmul(a, b) * w), (0, 1))(a, b)
    for got, expected in zip(g, want):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    if len(sa) <= 2 and len(sb) <= 2:
        g_dot = db.grad(lambda a, b: np.sum(np.dot(a, b) * w), argnums=(0, 1))(a, b)
        for got, expected in zip(g_dot, want):
            np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("columns", [10, 2])
def test_a_tall_design_matrix_s_product_in_blocks_against_autograd(columns):
    # X.T @ g for X of 70000 x 10 is added up in blocks of rows (a faster BLAS call);
    # 2 columns: one call.  First and second order, eager and jitted alike.
    from dualbcast.rules.linalg import _tall, tall_transposed_product
    X, y = RNG.standard_normal((70_000, columns)), RNG.standard_normal(70_000)
    w, v = 0.1 * RNG.standard_normal(columns), RNG.standard_normal(columns)

    def loss(w, X, y, np=np):
        r = X @ w - y
        return np.sum(np.log1p(r * r))

    assert _tall(X, y[:, None]) == (columns == 10)
    column = RNG.standard_normal((70_000, 1))
    np.testing.assert_allclose(tall_transposed_product(X, column), X.T @ column, rtol=1e-12)
    gradient = db.grad(loss)(w, X, y)
    want = autograd.grad(lambda w: loss(w, X, y, anp))(w)
    np.testing.assert_allclose(gradient, want, rtol=1e-12)
    hvp = lambda w, v, X, y: db.jvp(db.grad(lambda w: loss(w, X, y)), (w,), (v,))[1]
    want_hvp = autograd.grad(lambda w: anp.dot(autograd.grad(
        lambda w: loss(w, X, y, anp))(w), v))(w)
    np.testing.assert_allclose(hvp(w, v, X, y), want_hvp, rtol=1e-11)
    np.testing.assert_allclose(db.hessian(lambda w: loss(w, X, y))(w) @ v, want_hvp,
                               rtol=1e-11)
    jitted_gradient, jitted_hvp = db.jit(db.grad(loss)), db.jit(hvp)
    for _ in range(3):
        assert np.array_equal(jitted_gradient(w, X, y), gradient)
        assert np.array_equal(jitted_hvp(w, v, X, y), hvp(w, v, X, y))


def test_a_jitted_hvp_through_a_matmul_is_the_eager_one_bit_for_bit():
    # (the eager record kept a C-ordered copy of X.T, the jitted one the view: BLAS
    # added the products otherwise; constants are now copied in their own order)
    X, w, v = RNG.standard_normal((1000, 2)), RNG.standard_normal(2), RNG.standard_normal(2)
    hvp = lambda w, v, X: db.jvp(db.grad(lambda w: np.sum((X @ w) ** 2)), (w,), (v,))[1]
    assert np.array_equal(db.jit(hvp)(w, v, X), hvp(w, v, X))


def test_dot_with_a_scalar_and_outer():
    check_grads(lambda a, b: np.sum(np.outer(a, b) ** 2), RNG.standard_normal((2, 2)),
                RNG.standard_normal((3, 1)))      # outer ravels its inputs
    a, b = RNG.standard_normal(2), RNG.standard_normal(3)
    g = db.grad(lambda a, b: np.sum(np.dot(a, 2.0)) + np.sum(np.outer(a, b) ** 2),
                argnums=(0, 1))(a, b)
    want = autograd.grad(lambda a, b: anp.sum(anp.dot(a, 2.0)) + anp.sum(anp.outer(a, b) ** 2),
                         (0, 1))(a, b)
    for got, expected in zip(g, want):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_astype_float_is_differentiated_and_int_is_a_constant():
    x = np.array([1.5, 2.5])

    def f(x):
        n = x.astype(np.int64)
        assert type(n) is np.ndarray
        return np.sum(x.astype(np.float32) ** 2 * n)
    g = db.grad(f)(x)
    np.testing.assert_allclose(g, 2 * x * np.array([1, 2]), rtol=1e-6)
    assert g.dtype == np.float64


def test_float32_stays_float32_through_mixed_programs():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    g = db.grad(lambda x: np.sum(np.tanh(x @ x.T) * 2.0) + x[0, 1] + np.max(x))(x)
    assert g.dtype == np.float32
    check_grads(lambda x: np.sum(np.tanh(x @ x.T) * 2.0) + x[0, 1] + np.max(x), x)


# --- regressions from the adversarial review ----------------------------------------------

def test_transpose_with_negative_axes():
    x = RNG.standard_normal((2, 3, 4))
    w = RNG.standard_normal((2, 4, 3))
    g = db.grad(lambda x: np.sum(np.transpose(x, (0, -1, -2)) * w))(x)
    np.testing.assert_array_equal(g, np.transpose(w, (0, 2, 1)))
    g = db.grad(lambda x: np.sum(x.transpose(-3, 2, 1) * w))(x)
    np.testing.assert_array_equal(g, np.transpose(w, (0, 2, 1)))


@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
def test_ravel_and_reshape_orders_on_a_fortran_ordered_value(order):
    x = RNG.standard_normal((2, 3))
    w = np.arange(6.0)

    def f(x, np=np):
        return np.sum(np.ravel(x.T, order=order) * w)
    np.testing.assert_array_equal(db.grad(f)(x), autograd.grad(lambda x: anp.sum(
        np.ravel(x.T, order=order).__class__ and anp.ravel(x.T, order=order) * w))(x)
        if order in "CF" else db.grad(f)(x))
    if order != "K":
        g = db.grad(lambda x: np.sum(np.reshape(x.T, 6, order=order) * w))(x)
        np.testing.assert_array_equal(g.T.reshape(6, order=order if order != "A" else "F"), w)
    check_grads(f, x)


@pytest.mark.parametrize("index", [((0, 0),), ((0, 0, 2), slice(None)), ([0, 0], 1)], ids=repr)
def test_repeated_positions_in_tuple_and_list_indices_add_up(index):
    x = RNG.standard_normal((3, 2))
    g = db.grad(lambda x: np.sum(x[index]))(x)
    want = np.zeros_like(x)
    np.add.at(want, index, 1.0)
    np.testing.assert_array_equal(g, want)


def test_a_constant_written_after_use_does_not_change_the_gradient():
    def f(x):
        buffer = np.array([1.0, 2.0, 3.0])
        index = np.array([0, 1])
        y = x * buffer
        z = x[index]
        buffer[:] = 10.0
        index[:] = 2
        return np.sum(y) + np.sum(z) + np.sum(x * buffer)
    np.testing.assert_array_equal(db.grad(f)(np.ones(3)), [12.0, 13.0, 13.0])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # 1 / 0, as NumPy
def test_kernel_and_division_rules_are_nan_safe():
    @db.fast_broadcast
    def root(x):
        return x ** 0.5
    x = np.array([0.0, 4.0])
    for f in (lambda x: np.sum(np.where(x > 0, root(x), 0.0)),
              lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)),
              lambda x: np.sum(np.where(x > 0, 1.0 / x, 0.0)) * -4.0,
              lambda x: np.sum(np.where(x > 0, np.reciprocal(x), 0.0)) * -4.0):
        np.testing.assert_array_equal(db.grad(f)(x), [0.0, 0.25])
    np.testing.assert_array_equal(db.grad(lambda x: 0.0 * root.sum(x))(x), [0.0, 0.0])
    np.testing.assert_array_equal(db.grad(lambda x: np.sum((x * np.array([1.0, np.inf]))[1:]))(
        np.array([1.0, 1.0])), [0.0, np.inf])


def test_integer_and_complex_result_dtypes():
    x = np.array([1.5, 2.5])
    for f in (lambda x: np.sum(x, dtype=int) * 1.0, lambda x: np.sum(np.cumsum(x, dtype=int)),
              lambda x: np.sum(np.concatenate([x, x], dtype=int, casting="unsafe")) * 1.0):
        np.testing.assert_array_equal(db.grad(lambda x: f(x) + np.sum(x))(x), [1.0, 1.0])
    with pytest.raises(NotImplementedError, match="complex"):
        db.grad(lambda x: np.sum(x.astype(complex)).real)(x)
    g = db.grad(lambda x: np.sum(np.stack([x, x], dtype=np.float32)))(x)
    np.testing.assert_array_equal(g, [2.0, 2.0])


@pytest.mark.parametrize("shape,axis", [((0,), None), ((2, 0), 1), ((0, 3), 1)])
def test_prod_over_empty_axes(shape, axis):
    g = db.grad(lambda x: np.sum(np.prod(x, axis=axis)))(np.ones(shape))
    np.testing.assert_array_equal(g, np.zeros(shape))


def test_where_with_one_branch_is_a_value_error_like_numpy():
    with pytest.raises(ValueError, match="both or neither"):
        db.grad(lambda x: np.sum(np.where(x > 0, x)))(np.ones(2))


# ----------------------------------------------------------------- issue 14 regressions
@pytest.mark.parametrize("f, name", [
    (lambda v: np.sum(np.abs(v * (1 + 1j))), "numpy.multiply"),
    (lambda v: np.sum(np.abs(np.exp(1j * v))), "numpy.multiply"),
    (lambda v: np.sum(np.abs(np.dot(v, np.full(3, 1j)))), "dot"),
    (lambda v: abs(v[0] * 1j), "numpy.multiply"),                  # a scalar
])
def test_an_operation_making_a_traced_value_complex_raises(f, name):
    # The real rules on a complex value gave [0, 0, 0] for d sum|v (1 + i)| (exact:
    # sqrt(2) sign(v)), and a nonzero gradient of |exp(i v)| = 1, with a ComplexWarning.
    v = np.array([1.0, -2.0, 3.0])
    with pytest.raises(TypeError, match=f"{name} made a traced value complex"):
        db.grad(f)(v)


def test_a_python_float_power_making_a_complex_raises():
    # A Python float argument stays one: (-2.0) ** 0.5 is complex in Python.
    with pytest.raises(TypeError, match="numpy.power made a traced value complex"):
        db.grad(lambda x: abs(x ** 0.5))(-2.0)


def test_real_programs_with_complex_constants_around_are_untouched():
    # Complex values that never meet a traced one are no business of the rules.
    v = np.array([1.0, -2.0, 3.0])
    f = lambda v: np.sum(v * np.abs(np.exp(1j * np.arange(3.0))))
    np.testing.assert_allclose(db.grad(f)(v), np.ones(3))


@pytest.mark.parametrize("shape, ddof, axis", [((3,), 3, None), ((3,), 4, None), ((3,), 10, None),
                                               ((0,), 1, None), ((0,), 0, None),
                                               ((2, 3), 3, 1), ((2, 3), 2, 0), ((2, 3), 7, None)])
@pytest.mark.parametrize("func", [np.var, np.std])
def test_var_std_with_ddof_at_least_n_give_numpys_value(func, shape, ddof, axis):
    # NumPy divides by max(n - ddof, 0): inf (nan for an empty array); the rule divided
    # by n - ddof: -4.67 for ddof = n + 1, -0.0 for an empty array with ddof = 1.
    x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape) ** 2
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        expected = func(x, axis=axis, ddof=ddof)
        value, grad = db.value_and_grad(lambda a: np.sum(func(a, axis=axis, ddof=ddof)))(x)
    np.testing.assert_array_equal(value, np.sum(expected))
    assert grad.shape == x.shape
    if func is np.var:
        # d/dx of sum((x - mean)^2) / 0: not finite wherever there is an element.
        assert not np.isfinite(grad).any()
    else:
        # std = sqrt(inf): sqrt's derivative at inf is 0, and a zero cotangent meeting
        # var's infinite derivative gives 0 (the NaN-safe convention).
        np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("attribute", ["real", "imag", "choose", "compress", "argpartition",
                                       "resize"])
def test_ndarray_attributes_without_a_rule_say_so(attribute):
    def f(x):
        getattr(x, attribute)
        return np.sum(x)
    with pytest.raises(NotImplementedError, match=rf"no gradient rule for the ndarray "
                                                  rf"attribute \.{attribute}\b"):
        db.grad(f)(np.ones(3))


def test_methods_match_their_functions():
    # x.take(i) is np.take(x, i) and so on: the methods whose functions have rules work
    # (the README says methods work).  Their functions' rules are held to autograd
    # elsewhere; here each method gives its function's gradient bit for bit, and central
    # differences agree.
    x = RNG.uniform(0.5, 1.5, (3, 3))
    weights = RNG.standard_normal(64)

    def combine(parts):
        flat = np.concatenate([np.ravel(p) for p in parts])
        return np.sum(flat * weights[:flat.shape[0]])

    def f(x):
        return combine((x.take([0, 4, 4]), x.repeat(2, axis=1), x.diagonal(), x.trace() ** 2,
                        x.cumprod(axis=0), x.round(), x.conj()[:1]))

    def f_functions(x):
        return combine((np.take(x, [0, 4, 4]), np.repeat(x, 2, axis=1), np.diagonal(x),
                        np.trace(x) ** 2, np.cumprod(x, axis=0), np.round(x),
                        np.conjugate(x)[:1]))
    np.testing.assert_array_equal(db.grad(f)(x), db.grad(f_functions)(x))
    check_grads(f, x)
    # searchsorted gives indices: a constant.
    np.testing.assert_array_equal(db.grad(lambda x: np.sum(x * x.ravel().searchsorted(1.0)))(x),
                                  np.searchsorted(x.ravel(), 1.0))


@pytest.mark.parametrize("method, instead", [("sort", "np.sort"), ("partition", "np.sort"),
                                             ("fill", "np.full_like"), ("put", "np.where")])
def test_in_place_methods_name_the_function_to_use(method, instead):
    with pytest.raises(TypeError, match=rf"x\.{method}\(\.\.\.\) writes into a traced "
                                        rf"array in place.*{instead}"):
        db.grad(lambda x: getattr(x, method)(0) or np.sum(x))(np.ones(3))


def test_attributes_that_ndarrays_lack_stay_attribute_errors():
    def f(x):
        assert not hasattr(x, "real")           # (a NoGradientRule is an AttributeError)
        assert getattr(x, "_private", None) is None
        x.no_such_attribute
    with pytest.raises(AttributeError, match="no attribute 'no_such_attribute'") as info:
        db.grad(f)(np.ones(3))
    assert not isinstance(info.value, NotImplementedError)


def test_scipy_functions_without_rules_are_named_as_users_call_them():
    special = pytest.importorskip("scipy.special")
    # A SciPy ufunc says its module is numpy's: name it scipy.special.gammaln.
    with pytest.raises(NotImplementedError,
                       match=r"no gradient rule for scipy\.special\.gammaln \(called"):
        db.grad(lambda x: np.sum(special.gammaln(x)))(np.ones(3))
    # logsumexp converts its argument with NumPy: the error names it, not only asarray.
    with pytest.raises(TypeError, match=r"inside scipy\.special\S*\.logsumexp, which "
                                        r"converts its arguments to NumPy arrays"):
        db.grad(lambda x: special.logsumexp(x))(np.ones(3))
    # The user's own np.asarray names no library.
    with pytest.raises(TypeError, match=r"of a traced value would detach") as info:
        db.grad(lambda x: np.sum(np.asarray(x)))(np.ones(3))
    assert "inside" not in str(info.value)


def test_writing_a_traced_value_into_a_numpy_array_says_what_to_do():
    # NumPy asks the box for float(); it replaces that error by "setting an array
    # element with a sequence" (a box has __getitem__), keeping ours as its cause.
    def element(x):
        buf = np.zeros(3)
        buf[0] = x[0]
        return np.sum(buf)

    def block(x):
        buf = np.zeros(3)
        buf[:2] = x[:2]
        return np.sum(buf)
    with pytest.raises(ValueError) as info:
        db.grad(element)(np.ones(3))
    cause = info.value.__cause__
    assert isinstance(cause, TypeError)
    assert "buf[i] = x" in str(cause) and "np.stack" in str(cause)
    with pytest.raises(TypeError, match=r"buf\[\.\.\.\] = x.*np\.stack"):
        db.grad(block)(np.ones(3))


def test_fmod_derivative_uses_the_quotient_of_the_remainder():
    # fmod(0.5, 0.1) = 0.0999...: the quotient was 4 (trunc(0.5 / 0.1) is 5).
    gx, gy = db.grad(lambda x, y: np.fmod(x, y), argnums=(0, 1))(np.float64(0.5), np.float64(0.1))
    assert (gx, gy) == (1.0, -4.0)
    gx, gy = db.grad(lambda x, y: np.sum(np.fmod(x, y)), argnums=(0, 1))(
        np.array([0.5, -0.5, 7.0]), np.array([0.1, 0.1, -2.0]))
    np.testing.assert_array_equal(gy, [-4.0, 4.0, 3.0])


@pytest.mark.parametrize("reduce", [np.prod, np.max, np.min])
def test_reductions_multiply_their_cotangent_nan_safely(reduce):
    # An infinite cotangent meeting a zero local derivative (a loser of max, or the
    # product of the others being 0) gives 0, as kernels do, not nan; a zero one
    # meeting an infinite product of the others gives 0 too.
    x = np.array([0.0, 2.0, 3.0])
    at = reduce(x)
    with np.errstate(all="ignore"):
        grad = db.grad(lambda x: np.sqrt(reduce(x) - at))(x)    # an infinite cotangent
    winner = {np.prod: 0, np.max: 2, np.min: 0}[reduce]
    assert grad[winner] == np.inf
    np.testing.assert_array_equal(np.delete(grad, winner), [0.0, 0.0])
    big = np.array([1e300, 1e300, 0.0])
    with np.errstate(all="ignore"):
        grad = db.grad(lambda x: 0.0 * reduce(x))(big)
    np.testing.assert_array_equal(grad, np.zeros(3))
