"""Higher order: jvp, nested grad, Hessian-vector products, hessian, jacobian — through
operators, NumPy rules and kernels — against autograd, closed forms and central
differences; perturbation confusion; composition with jit; errors."""
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbcast as db
from dualbcast.core import forward

from profiles import examples

RNG = np.random.default_rng(7)


@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


@db.fast_broadcast
def add_kernel(x, y):
    return x + y


@db.fast_broadcast
def mul_kernel(x, y):
    return x * y


@db.fast_broadcast
def pair(r, a):
    if r > 0.5:
        return a * r * r * math.sin(r)
    return a * math.cos(r) - r ** 3


# ------------------------------------------------------------------ perturbation confusion

def _d(f):
    """The derivative of a scalar function, two ways: grad, and jvp with unit tangent."""
    return [db.grad(f), lambda x: db.jvp(f, (x,), (1.0,))[1]]


@pytest.mark.parametrize("outer", [0, 1])
@pytest.mark.parametrize("inner", [0, 1])
@pytest.mark.parametrize("plus", [lambda x, y: x + y, add_kernel], ids=["operator", "kernel"])
def test_forwarddiff_83(outer, inner, plus):
    """d/dx [x * d/dy (x + y)] at y = 1 is 1 (ForwardDiff.jl #83)."""
    def inner_derivative(x):
        return _d(lambda y: plus(x, y))[inner](1.0)
    for x in (0.0, 2.5):
        assert _d(lambda x: x * inner_derivative(x))[outer](x) == 1.0


@pytest.mark.parametrize("outer", [0, 1])
@pytest.mark.parametrize("inner", [0, 1])
@pytest.mark.parametrize("times", [lambda x, y: x * y, mul_kernel], ids=["operator", "kernel"])
def test_reversediff_45(outer, inner, times):
    """d/dx [x * d/dy (x * y)] at x = 4 is 8 (ReverseDiff.jl #45)."""
    def inner_derivative(x):
        return _d(lambda y: times(x, y))[inner](2.0)
    assert _d(lambda x: x * inner_derivative(x))[outer](4.0) == 8.0


def test_perturbation_confusion_on_arrays():
    x = np.array([4.0, -1.0])
    got = db.grad(lambda x: np.sum(x * db.grad(lambda y: np.sum(x * y))(np.ones(2))))(x)
    np.testing.assert_array_equal(got, 2 * x)
    got = db.jvp(lambda x: x * db.jvp(lambda y: mul_kernel(x, y), (np.ones(2),),
                                      (np.ones(2),))[1], (x,), (np.ones(2),))[1]
    np.testing.assert_array_equal(got, 2 * x)


# ------------------------------------------------------------------ nested grad, any order

def test_nested_grad_to_fourth_order():
    f = lambda x: x ** 5 - 2.0 * x ** 3       # noqa: E731
    d = f
    want = [lambda x: 5 * x ** 4 - 6 * x ** 2, lambda x: 20 * x ** 3 - 12 * x,
            lambda x: 60 * x ** 2 - 12, lambda x: 120 * x]
    for order in range(4):
        d = db.grad(d)
        for x in (-1.5, 0.0, 0.7):
            assert d(x) == pytest.approx(want[order](x), rel=1e-13, abs=1e-13)


def test_mixed_nesting_orders():
    f = lambda x: np.sin(x) * x                 # noqa: E731
    x = 0.9
    third = -3 * math.sin(x) - x * math.cos(x)
    by_jvp = lambda g: lambda x: db.jvp(g, (x,), (1.0,))[1]    # noqa: E731
    for d in (db.grad(db.grad(db.grad(f))), by_jvp(db.grad(db.grad(f))),
              db.grad(by_jvp(db.grad(f))), by_jvp(by_jvp(by_jvp(f)))):
        assert d(x) == pytest.approx(third, rel=1e-13)


# ------------------------------------------------------------------ programs vs autograd

def eam(x, np, kernel=True):
    p = rho.sum(x) if kernel and np is not anp else np.sum(np.exp(-3.0 * (x + 1.0)))
    return p ** 2 + p ** 3 + 0.25 * p ** 4


def poly9(c, x, np):
    return np.sum(c[0] + c[1] * x + c[2] * x ** 2 + c[3] * x ** 3 + c[9] * x ** 9)


def graph(x, np):
    memo = {}

    def node(k):
        if k not in memo:
            memo[k] = np.sin(x[k]) if k < 2 else node(k - 1) * node(k - 2) + np.tanh(node(k - 1))
        return memo[k]
    return node(len(x) - 1)


def branchy(x, np):
    total = 0.0
    for xi in x:
        total = total + (np.cosh(xi) ** -1 if xi > 0 else np.tanh(xi) * xi)
    return total


def pair_energy(x, a, np):
    if np is anp:
        r = x
        value = anp.where(r > 0.5, a * r * r * anp.sin(r), a * anp.cos(r) - r ** 3)
        return anp.sum(value * x)
    return np.sum(pair(x, a) * x)


def pair_sum(x, a, np):
    if np is anp:
        return anp.sum(anp.where(x > 0.5, a * x * x * anp.sin(x), a * anp.cos(x) - x ** 3))
    return pair.sum(x, a)


PROGRAMS = {
    "eam_kernel": (lambda x: eam(x, np), lambda x: eam(x, anp), 6),
    "eam_numpy": (lambda x: eam(x, np, kernel=False), lambda x: eam(x, anp), 6),
    "poly9_one_live": (lambda c: poly9(c, np.linspace(-1, 1, 7), np),
                       lambda c: poly9(c, np.linspace(-1, 1, 7), anp), 10),
    "graph_memo": (lambda x: graph(x, np), lambda x: graph(x, anp), 6),
    "branchy": (lambda x: branchy(x, np), lambda x: branchy(x, anp), 5),
    "pair_map": (lambda x: pair_energy(x, 1.5, np), lambda x: pair_energy(x, 1.5, anp), 6),
    "pair_sum": (lambda x: pair_sum(x, 1.5, np), lambda x: pair_sum(x, 1.5, anp), 6),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_jvp_hvp_hessian_match_autograd(name):
    f, oracle, n = PROGRAMS[name]
    x = RNG.uniform(-0.4, 1.2, n)
    v = RNG.standard_normal(n)
    hessian = autograd.hessian(oracle)(x)
    value, tangent = db.jvp(f, (x,), (v,))
    assert value == pytest.approx(oracle(x), rel=1e-13)
    assert tangent == pytest.approx(autograd.grad(oracle)(x) @ v, rel=1e-11, abs=1e-13)
    np.testing.assert_allclose(db.jvp(db.grad(f), (x,), (v,))[1], hessian @ v,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(db.grad(lambda x: db.grad(f)(x) @ v)(x), hessian @ v,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(db.hessian(f)(x), hessian, rtol=1e-10, atol=1e-12)


def test_kernel_hvp_with_broadcasting_and_several_arguments():
    x = RNG.uniform(-0.4, 1.2, (3, 1))
    y = RNG.uniform(-0.4, 1.2, 4)
    a = 1.3

    def f(x, y, a):
        return np.sum(pair(x * y, a) * y) + pair.sum(x + y, a * a)

    def fa(x, y, a):
        return pair_energy_xy(x, y, a) + pair_sum(x + y, a * a, anp)

    def pair_energy_xy(x, y, a):
        r = x * y
        return anp.sum(anp.where(r > 0.5, a * r * r * anp.sin(r), a * anp.cos(r) - r ** 3) * y)

    tangents = (RNG.standard_normal((3, 1)), RNG.standard_normal(4), 0.7)
    _, got = db.jvp(db.grad(f, argnums=(0, 1, 2)), (x, y, a), tangents)
    want = _oracle_hvp(fa, (x, y, a), tangents)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def _oracle_hvp(f, args, tangents):
    """The Hessian-vector product of ``f`` at ``args`` along ``tangents``, by autograd
    (reverse over reverse on the flattened arguments)."""
    from autograd.misc import flatten
    flat, unflatten = flatten(args)
    flat_v, _ = flatten(tangents)
    hv = autograd.grad(lambda z: autograd.grad(lambda w: f(*unflatten(w)))(z) @ flat_v)(flat)
    return unflatten(hv)


def test_third_order_through_a_kernel_is_refused():
    f = lambda x: rho.sum(x)                    # noqa: E731
    x = np.array([0.1, 0.2])
    with pytest.raises(NotImplementedError, match="third order"):
        db.grad(lambda x: np.sum(db.grad(lambda x: np.sum(db.grad(f)(x)))(x)))(x)


# ------------------------------------------------------------------ hessian, jacobian

def test_jacobian_forward_and_reverse_agree_with_autograd():
    def f(x, a):
        return np.concatenate([np.sin(x) * a, np.cumsum(x) ** 2, x[:1] * x[1:2]])

    def fa(x, a):
        return anp.concatenate([anp.sin(x) * a, anp.cumsum(x) ** 2, x[:1] * x[1:2]])

    x, a = RNG.standard_normal(4), 1.7
    for mode in ("auto", "forward", "reverse"):
        jx, ja = db.jacobian(f, argnums=(0, 1), mode=mode)(x, a)
        np.testing.assert_allclose(jx, autograd.jacobian(fa, 0)(x, a), rtol=1e-13)
        np.testing.assert_allclose(ja, autograd.jacobian(fa, 1)(x, a), rtol=1e-13)
    matrix = RNG.standard_normal((2, 3))
    np.testing.assert_allclose(db.jacobian(lambda m: np.tanh(m) * m)(matrix),
                               autograd.jacobian(lambda m: anp.tanh(m) * m)(matrix), rtol=1e-13)


def test_hessian_blocks_for_several_arguments():
    def f(x, y):
        return np.sum(np.sin(x) * y[0] + x ** 3) * y[1]

    def fa(x, y):
        return anp.sum(anp.sin(x) * y[0] + x ** 3) * y[1]

    x, y = RNG.standard_normal(3), RNG.standard_normal(2)
    blocks = db.hessian(f, argnums=(0, 1))(x, y)
    for i in range(2):
        for j in range(2):
            want = autograd.jacobian(autograd.grad(fa, i), j)(x, y)
            np.testing.assert_allclose(blocks[i][j], want, rtol=1e-12, atol=1e-14)


def test_hessian_of_a_jitted_gradient_and_jvp_of_one():
    def f(x):
        return np.sum(np.exp(-x) * x ** 2) + rho.sum(x)

    def fa(x):
        return anp.sum(anp.exp(-x) * x ** 2) + anp.sum(anp.exp(-3.0 * (x + 1.0)))

    jitted = db.jit(db.grad(f))
    x, v = RNG.standard_normal(4), RNG.standard_normal(4)
    want = autograd.hessian(fa)(x)
    for _ in range(2):
        jitted(x)                                       # recorded and replayed as usual
        np.testing.assert_allclose(db.jvp(jitted, (x,), (v,))[1], want @ v, rtol=1e-12)
        np.testing.assert_allclose(db.jacobian(jitted)(x), want, rtol=1e-12)


def test_matrices_compose_with_grad_and_each_other():
    def f(x):
        return np.sum(np.sin(x) * x ** 3)

    def fa(x):
        return anp.sum(anp.sin(x) * x ** 3)

    x = np.array([0.3, 0.9, 1.4])
    np.testing.assert_allclose(db.jacobian(db.grad(f))(x), autograd.hessian(fa)(x), rtol=1e-13)
    np.testing.assert_allclose(db.grad(lambda x: np.sum(db.hessian(f)(x)))(x),
                               autograd.grad(lambda x: anp.sum(autograd.hessian(fa)(x)))(x),
                               rtol=1e-12)
    np.testing.assert_allclose(
        db.jacobian(db.jacobian(lambda x: np.sin(x) * x[0]))(x),
        autograd.jacobian(autograd.jacobian(lambda x: anp.sin(x) * x[0]))(x), rtol=1e-13)


@pytest.mark.parametrize("mode", ["auto", "forward", "reverse"])
def test_jacobian_of_an_empty_input_has_the_output_shape_in_front(mode):
    """``out.shape + x.shape`` when x is empty too (forward mode took the output's shape
    from the columns it ran, none for an empty input, and auto mode takes columns when
    there are more outputs than inputs: (0,) and (0, 4) came back)."""
    assert db.jacobian(lambda t: np.sum(t) * np.ones(2), mode=mode)(np.zeros(0)).shape == (2, 0)
    jac = db.jacobian(lambda t: np.sum(t) * np.ones((2, 3)), mode=mode)(np.zeros((0, 4)))
    assert jac.shape == (2, 3, 0, 4) and jac.dtype == np.float64
    js, jt = db.jacobian(lambda s, t: np.sin(s) * np.ones(2) + np.sum(t), (0, 1),
                         mode=mode)(0.5, np.zeros((0, 3)))
    np.testing.assert_array_equal(js, np.cos(0.5) * np.ones(2))
    assert jt.shape == (2, 0, 3)
    # under an enclosing transform too
    assert db.jvp(lambda a: db.jacobian(lambda t: np.sum(t) * a, mode=mode)(np.zeros(0)),
                  (np.ones(2),), (np.ones(2),))[1].shape == (2, 0)


@pytest.mark.parametrize("transform", [
    db.grad, db.value_and_grad, db.hessian, db.jacobian,
    lambda f, argnums: db.jacobian(f, argnums, mode="forward"),
    lambda f, argnums: db.jacobian(f, argnums, mode="reverse")])
def test_every_transform_refuses_an_argument_named_twice(transform):
    """``argnums=(0, -2)`` of a two-argument function names argument 0 twice: jacobian
    returned a zero block beside the real one; it is refused as grad refuses it."""
    f = lambda a, b: a * b                          # noqa: E731
    with pytest.raises(ValueError, match=r"\(called with 2 positional arguments\): "
                                         r"argnums=\(0, -2\) repeats an argument"):
        transform(f, argnums=(0, -2))(1.0, 2.0)
    with pytest.raises(ValueError, match=r"argnums=\(1, 1\) repeats an argument"):
        transform(f, argnums=(1, 1))
    with pytest.raises(ValueError, match=r"argnums=\(0, 2\) is out of range for 2 arguments"):
        transform(f, argnums=(0, 2))(1.0, 2.0)


def test_a_pullback_is_differentiable_in_its_cotangent_and_its_primal():
    """The issue's example (the pullback converted a traced cotangent with np.array:
    "would detach"), by grad, jvp, jacobian and hessian, through a kernel too; closed
    forms: pullback(x, t) = f'(x) t."""
    def pull(x, t):
        return db.vjp(lambda s: s * s, x)[1](t)[0]
    assert db.grad(pull, 1)(2.0, 1.0) == 4.0
    assert db.grad(pull, (0, 1))(2.0, 3.0) == (6.0, 4.0)
    assert db.jvp(lambda t: pull(2.0, t), (1.0,), (1.0,)) == (4.0, 4.0)
    x = np.array([2.0, 3.0])
    for mode in ("forward", "reverse"):
        np.testing.assert_array_equal(db.jacobian(lambda t: pull(x, t), mode=mode)(np.ones(2)),
                                      np.diag([4.0, 6.0]))
    h = db.hessian(lambda x, t: np.sum(pull(x, t)), (0, 1))(x, np.ones(2))
    np.testing.assert_array_equal(np.block([list(row) for row in h]),
                                  [[0, 0, 2, 0], [0, 0, 0, 2], [2, 0, 0, 0], [0, 2, 0, 0]])
    # a kernel: the cotangent's derivative is first order, the primal's second
    x, t = np.array([0.1, 0.4]), np.array([1.5, -0.5])
    d1, d2 = -3.0 * np.exp(-3.0 * (x + 1.0)), 9.0 * np.exp(-3.0 * (x + 1.0))
    gx, gt = db.grad(lambda x, t: np.sum(db.vjp(rho, x)[1](t)[0]), (0, 1))(x, t)
    np.testing.assert_allclose(gx, d2 * t, rtol=1e-14)
    np.testing.assert_allclose(gt, d1, rtol=1e-14)
    np.testing.assert_allclose(db.jvp(lambda t: db.vjp(rho.sum, x)[1](t)[0], (2.0,), (1.0,))[1],
                               d1, rtol=1e-14)


# ------------------------------------------------------------------ property tests

@settings(max_examples=examples(25), deadline=None)
@given(shape=st.sampled_from([(), (1,), (4,), (2, 3)]), seed=st.integers(0, 2 ** 16))
def test_hvp_is_the_derivative_of_the_gradient(shape, seed):
    """The Hessian-vector product against central differences of the gradient."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.3, 1.1, shape)
    v = rng.standard_normal(shape)

    def f(x):
        return np.sum(pair(x, 0.8) * np.tanh(x)) + rho.sum(x) ** 2

    hvp = db.jvp(db.grad(f), (x,), (v,))[1]
    h = 1e-6
    central = (db.grad(f)(x + h * v) - db.grad(f)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hvp, central, rtol=1e-5, atol=1e-6)
    assert np.shape(hvp) == np.shape(x)


# ------------------------------------------------------------------ errors

def test_jvp_errors_name_the_problem():
    with pytest.raises(TypeError, match="tuples"):
        db.jvp(np.sin, np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="2 primals but 1 tangents"):
        db.jvp(np.add, (1.0, 2.0), (1.0,))
    with pytest.raises(ValueError, match=r"shape \(3,\) for a primal of shape \(2,\)"):
        db.jvp(np.sin, (np.ones(2),), (np.ones(3),))
    with pytest.raises(ValueError, match="structure"):
        db.jvp(lambda t: t[0], ((1.0, 2.0),), (1.0,))
    with pytest.raises(TypeError, match="float"):
        db.jacobian(np.sin)(np.arange(3))


def test_jacobian_and_hessian_of_a_dask_array_say_they_take_none():
    """Not "must be a float array, not Array of dtype float64": the Dask array's
    dtype is right, its kind is not supported there."""
    da = pytest.importorskip("dask.array")
    x = da.ones(3, chunks=2)
    for transform in (db.hessian, db.jacobian):
        with pytest.raises(TypeError, match="argument 0 is a Dask array; Dask arrays are "
                                            "differentiated by grad, value_and_grad and vjp"):
            transform(lambda x: np.sum(x ** 2))(x)


def test_declared_rules_do_not_transpose(monkeypatch):
    """Forward mode through the common rules uses their jvps, not the slow
    transposition of their vjps."""
    def refuse(*args):
        raise AssertionError("transposed")
    monkeypatch.setattr(forward, "transposed", refuse)
    x, v = RNG.standard_normal(5), RNG.standard_normal(5)
    db.jvp(lambda x: eam(x, np) + np.sum(pair(x, 2.0) * np.sin(x)), (x,), (v,))
    db.jvp(db.grad(lambda x: eam(x, np) + pair.sum(x, 2.0)), (x,), (v,))


def test_a_jvp_leaves_no_reference_cycle():
    # A forward-mode tape and its records once referred to each other: every jvp's
    # values waited for the garbage collector (the next call's temporaries on fresh
    # pages meanwhile).
    import gc
    x, v = np.linspace(0.1, 1.0, 50), np.ones(50)
    hvp = lambda x, v: db.jvp(db.grad(lambda x: np.sum(np.sin(x) * x[::-1])), (x,), (v,))
    hvp(x, v)
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            db.jvp(lambda x: np.sum(np.exp(x)), (x,), (v,))
            hvp(x, v)
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("transform", ["jacobian", "jacfwd", "jacrev"])
def test_jacobians_pass_keyword_arguments_through(transform):
    # As grad does: keyword arguments reach f and are not differentiated.
    def f(x, scale=1.0, power=2):
        return scale * x ** power
    x = np.array([1.0, 2.0, 3.0])
    J = getattr(db, transform)(f)(x, scale=2.0, power=3)
    np.testing.assert_allclose(J, np.diag(2.0 * 3 * x ** 2), rtol=1e-14)


def test_hessian_passes_keyword_arguments_through():
    def f(x, y, scale=1.0):
        return scale * np.sum(x ** 3) * y
    x = np.array([1.0, 2.0])
    H = db.hessian(f)(x, 5.0, scale=2.0)
    np.testing.assert_allclose(H, np.diag(2.0 * 6.0 * x * 5.0), rtol=1e-14)
    blocks = db.hessian(f, argnums=(0, 1))(x, 5.0, scale=2.0)
    np.testing.assert_allclose(blocks[0][1], 2.0 * 3.0 * x ** 2, rtol=1e-14)
    assert blocks[1][1] == 0.0
