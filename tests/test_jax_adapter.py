"""dualbcast.jax (issue 17, item 2): a kernel as a JAX function, checked against the
same function written in jax.numpy (the independent oracle) under jit, grad, jvp,
vmap, jacfwd/jacrev and hessian, with broadcasting, constants, ints and float32; a
third derivative and complex input raise clear errors.

Every kernel compiles a loop per mode, wrt and argument layout, from an empty cache:
the cases reuse a few layouts so that the module stays fast.
"""
import functools
import math

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="dualbcast.jax needs JAX (pip install 'dualbcast[jax]')")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

import dualbcast as db  # noqa: E402
import dualbcast.jax as djax  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def x64():
    """float64 for this module only (jax_enable_x64 set globally would leak into other
    modules' tests)."""
    with jax.enable_x64(True):
        yield


@db.fast_broadcast
def act(x, a):
    # A branch and math.log/sin/exp: an activation of x with a coefficient a.
    if x > 0.0:
        return a * math.log(1.0 + x * x) + math.sin(x)
    return math.exp(a * x) - 1.0


def act_jnp(x, a):
    return jnp.where(x > 0.0, a * jnp.log(1.0 + x * x) + jnp.sin(x), jnp.exp(a * x) - 1.0)


op = djax.wrap(act)


def op_sum_jnp(x, a):
    return jnp.sum(act_jnp(x, a))


# NumPy arrays (JAX arrays made at import would be float32: x64 is on in tests only).
RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 4))                    # both signs: both branches
A = RNG.uniform(0.5, 2.0, size=4)
COLUMN = X[:, :1]                              # (3, 1), broadcast against A's (4,)


def close(got, want, rtol=1e-12, atol=1e-12):
    """Same structure, shapes and dtypes, values within tolerance."""
    got_leaves, got_tree = jax.tree.flatten(got)
    want_leaves, want_tree = jax.tree.flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        assert jnp.shape(g) == jnp.shape(w) and jnp.result_type(g) == jnp.result_type(w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def test_module_runs_in_float64():
    assert jnp.asarray(1.0).dtype == jnp.float64


@pytest.mark.parametrize("args", [(X, 0.7), (COLUMN, A), (1.5, 0.7), (-0.5, A)],
                         ids=["array-scalar", "3x1-by-4", "scalars", "scalar-array"])
def test_values_and_sums(args):
    values, total = jax.jit(act_jnp)(*args), jax.jit(op_sum_jnp)(*args)
    close(op(*args), values)
    close(op.sum(*args), total)
    close(jax.jit(op)(*args), values)
    close(jax.jit(op.sum)(*args), total)


@pytest.mark.parametrize("args", [(X, 0.7), (COLUMN, A)], ids=["array-scalar", "3x1-by-4"])
def test_gradients_of_sums(args):
    want = jax.jit(jax.value_and_grad(op_sum_jnp, argnums=(0, 1)))(*args)
    close(jax.value_and_grad(op.sum, argnums=(0, 1))(*args), want)            # (eager)
    close(jax.jit(jax.value_and_grad(lambda x, a: jnp.sum(op(x, a)), argnums=(0, 1)))(*args),
          want)
    # A cotangent other than ones: the map's JVP is transposed.
    cos_sum = lambda f: jax.jit(jax.grad(lambda x, a: jnp.sum(jnp.cos(f(x, a))), (0, 1)))
    close(cos_sum(op)(*args), cos_sum(act_jnp)(*args))


def test_gradient_dtypes_and_shapes_follow_the_arguments():
    gx, ga = jax.grad(op.sum, argnums=(0, 1))(COLUMN, A)
    assert gx.shape == (3, 1) and ga.shape == (4,)
    ga = jax.grad(op.sum, argnums=1)(X, 0.7)             # a Python float: weak, as in JAX
    assert ga.shape == () and ga.dtype == jnp.float64


def test_jvp():
    tangents = (jnp.ones_like(COLUMN) * 0.3, jnp.linspace(-1.0, 1.0, 4))
    jvp = lambda f: jax.jit(lambda primals, tangents: jax.jvp(f, primals, tangents))
    close(jax.jvp(op, (COLUMN, A), tangents), jvp(act_jnp)((COLUMN, A), tangents))  # (eager)
    close(jvp(op.sum)((COLUMN, A), tangents), jvp(op_sum_jnp)((COLUMN, A), tangents))
    along_x = lambda f: jvp(lambda x: f(x, 0.7))((X,), (X,))
    close(along_x(op), along_x(act_jnp))


BATCHED = [((0, None), (X, 0.7)), ((None, 0), (X[0], A[:, None] * np.ones(4))),
           ((1, 0), (X, A)), ((0, 0), (X, A[:3]))]


@pytest.mark.parametrize("in_axes, args", BATCHED, ids=["x", "a-only", "x-columns-a", "both"])
def test_vmap(in_axes, args):
    grad = lambda f: jax.grad(f, argnums=(0, 1))
    for ours, theirs in [(op, act_jnp), (op.sum, op_sum_jnp), (grad(op.sum), grad(op_sum_jnp)),
                         (jax.hessian(op.sum, argnums=(0, 1)),
                          jax.hessian(op_sum_jnp, argnums=(0, 1)))]:
        close(jax.jit(jax.vmap(ours, in_axes))(*args), jax.jit(jax.vmap(theirs, in_axes))(*args))


def test_vmap_of_the_hessian_of_a_map():
    # (the map's second-order callback under vmap: the batch broadcast by the kernel)
    hessian = lambda f: jax.jit(jax.vmap(jax.hessian(lambda x, a: jnp.sum(f(x, a)), (0, 1))))
    close(hessian(op)(X, A[:3]), hessian(act_jnp)(X, A[:3]))


def test_nested_vmap_sums_per_element():
    nested = lambda f: jax.jit(jax.vmap(jax.vmap(f, (None, 0)), (0, None)))
    ours = nested(op.sum)(X, A[:, None] * np.ones(4))
    assert ours.shape == (3, 4)
    close(ours, nested(op_sum_jnp)(X, A[:, None] * np.ones(4)))


def test_vmap_of_a_gradient_with_respect_to_an_unbatched_argument():
    # a is not batched but its per-example gradient is: no sum over the batch axis.
    ours = jax.vmap(jax.grad(op.sum, argnums=1), (0, None))(X, A)                # (eager)
    assert ours.shape == (3, 4)
    close(ours, jax.jit(jax.vmap(jax.grad(op_sum_jnp, argnums=1), (0, None)))(X, A))


def test_second_order():
    argnums = (0, 1)
    want = jax.jit(jax.hessian(op_sum_jnp, argnums))(COLUMN, A)
    close(jax.hessian(op.sum, argnums)(COLUMN, A), want)               # (eager)
    close(jax.jit(jax.hessian(lambda x, a: jnp.sum(op(x, a)), argnums))(COLUMN, A), want)
    close(jax.jit(jax.jacrev(jax.jacrev(op.sum, argnums), argnums))(COLUMN, A), want)
    close(jax.jit(jax.jacfwd(jax.jacrev(op, argnums), argnums))(COLUMN, A),
          jax.jit(jax.jacfwd(jax.jacrev(act_jnp, argnums), argnums))(COLUMN, A))


def test_hessian_vector_product():
    hvp = lambda f: jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,)))
    close(hvp(lambda x: op.sum(x, 0.7))(X, X), hvp(lambda x: op_sum_jnp(x, 0.7))(X, X))


def test_grad_of_grad_at_a_scalar():
    for ours, theirs in [(op, act_jnp), (op.sum, op_sum_jnp)]:
        for inner, outer in [(0, 0), (1, 0)]:
            grad2 = lambda f: jax.jit(jax.grad(jax.grad(f, inner), outer))
            for x in (-0.8, 0.3, 2.0):
                close(grad2(ours)(x, 0.7), grad2(theirs)(x, 0.7))


@settings(max_examples=10)
@given(st.lists(st.floats(-3.0, 3.0), min_size=4, max_size=4), st.floats(0.1, 2.0))
def test_gradient_and_hessian_vector_product_at_random_points(values, a):
    x, v = np.asarray(values), np.linspace(-1.0, 1.0, 4)
    close(_hvp(op.sum)(x, a, v), _hvp(op_sum_jnp)(x, a, v), rtol=1e-10)


def _hvp(f, cache={}):
    # (jitted once per function: hypothesis calls it with new values only)
    if f not in cache:
        cache[f] = jax.jit(lambda x, a, v: jax.jvp(jax.grad(lambda x: f(x, a)), (x,), (v,)))
    return cache[f]


def test_only_arguments_that_move_get_partials(monkeypatch):
    asked = []
    real = act.sum_and_partials

    def spy(*args, wrt, **kwargs):
        asked.append(wrt)
        return real(*args, wrt=wrt, **kwargs)
    monkeypatch.setattr(act, "sum_and_partials", spy)
    jax.grad(op.sum)(COLUMN, A)
    jax.grad(op.sum, argnums=1)(COLUMN, A)
    assert asked == [(0,), (1,)]


@db.fast_broadcast
def scaled(x, n, c):
    # n: an int argument (promoted for values, never differentiated); c a constant.
    return n * x * x * c


def test_constants_and_int_arguments():
    n = jnp.arange(4)
    c = np.linspace(1.0, 2.0, 4)                       # a NumPy array: a constant
    want = lambda x: jnp.sum(n * x * x * c)
    close(op(X, 2), act_jnp(X, 2))                     # a Python int: weak, float64
    assert scaled(X, n, c).dtype == jnp.float64 == djax.wrap(scaled)(X, n, c).dtype
    ours = djax.wrap(scaled)
    close(ours(X, n, c), n * X * X * c)
    close(jax.jit(jax.grad(lambda x: ours.sum(x, n, c)))(X), jax.jit(jax.grad(want))(X))
    close(jax.jit(jax.hessian(lambda x: ours.sum(x, n, c)))(X[0]),
          jax.jit(jax.hessian(want))(X[0]))
    batched_n = jnp.arange(12).reshape(3, 4)
    close(jax.jit(jax.vmap(jax.grad(lambda x, n: ours.sum(x, n, c))))(X, batched_n),
          jax.jit(jax.vmap(jax.grad(lambda x, n: jnp.sum(n * x * x * c))))(X, batched_n))


def test_float32():
    x32 = X.astype(jnp.float32)
    assert op(x32, 0.7).dtype == jnp.float32                 # a Python float is weak
    assert op(x32, jnp.float32(0.7)).dtype == jnp.float32
    assert op(x32, A).dtype == jnp.float64                   # promotion, as in the kernel
    close(op(x32, 0.7), jax.jit(act_jnp)(x32, 0.7), rtol=1e-5, atol=1e-6)
    close(jax.jit(jax.value_and_grad(op.sum))(x32, 0.7),
          jax.jit(jax.value_and_grad(op_sum_jnp))(x32, 0.7), rtol=1e-5, atol=1e-5)


def test_canonical_dtypes_without_x64():
    with jax.enable_x64(False):
        x = np.linspace(-1.0, 1.0, 4)                       # float64: JAX makes it float32
        assert op(x, 0.7).dtype == jnp.float32
        assert op(np.arange(4), 2).dtype == jnp.float32     # ints: float64 in the kernel
        value, grad = jax.value_and_grad(op.sum)(jnp.asarray(x), 0.7)
        assert value.dtype == grad.dtype == jnp.float32
        close(grad, jax.jit(jax.grad(op_sum_jnp))(jnp.asarray(x), 0.7), rtol=1e-5, atol=1e-6)


def test_a_third_derivative_raises():
    third = [lambda: jax.jacfwd(jax.hessian(op.sum))(X[0], 0.7),
             lambda: jax.grad(jax.grad(jax.grad(op)))(0.3, 0.7),
             lambda: jax.jit(jax.jacrev(jax.hessian(op)))(0.3, 0.7)]
    for call in third:
        with pytest.raises(NotImplementedError, match="up to second order"):
            call()


def test_clear_errors():
    with pytest.raises(TypeError, match="argument 0 has unsupported dtype complex128 .complex."):
        op(X + 1j, 0.7)
    with pytest.raises(TypeError, match="complex"):
        jax.grad(lambda a: op.sum(np.ones(3, complex), a))(0.7)
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        op(X)
    with pytest.raises(TypeError, match="too many positional arguments"):
        jax.jit(op.sum)(X, 0.7, 1.0)
    with pytest.raises(ValueError, match=r"could not be broadcast together with shapes "
                                         r"\(3, 4\) \(3,\)"):
        jax.jit(op)(X, A[:3])
    with pytest.raises(TypeError, match="fast_broadcast kernel"):
        djax.wrap(act_jnp)


# Derivatives with respect to every input (issue 27): primals, tangents, cotangents,
# at first and second order, against jax.numpy; broadcasting layouts.

LAYOUTS = [((3, 4), None), ((3, 1), (4,))]          # (None: a Python number)


def _every_derivative(f, x, a, tx, ta, w, wx, wa):
    """Of f(x, a) (map or sum): a JVP differentiated in its primals and tangents; a
    pullback in its cotangent and primals; for the gradient g of <f, w>, a JVP (a
    Hessian-vector product) and a pullback differentiated in their tangents and
    cotangents; the JVP's transpose.  (Each tangent or cotangent enters linearly,
    so none of these needs a third derivative.)"""
    vdots = lambda us, vs: sum(jnp.vdot(u, v) for u, v in zip(us, vs))
    jvp = lambda f, primals, tangents: jax.jvp(f, primals, tangents)[1]
    along = jax.grad(lambda x, a, tx, ta: jnp.vdot(jvp(f, (x, a), (tx, ta)), w),
                     argnums=(0, 1, 2, 3))(x, a, tx, ta)
    pulled = jax.grad(lambda w, x, a: vdots(jax.vjp(f, x, a)[1](w), (tx, ta)),
                      argnums=(0, 1, 2))(w, x, a)
    g = jax.grad(lambda x, a: jnp.vdot(f(x, a), w), argnums=(0, 1))
    hvp = jax.grad(lambda tx, ta, wx, wa: vdots(jvp(g, (x, a), (tx, ta)), (wx, wa)),
                   argnums=(0, 1, 2, 3))(tx, ta, wx, wa)
    hvp_pulled = jax.grad(lambda wx, wa: vdots(jax.vjp(g, x, a)[1]((wx, wa)), (tx, ta)),
                          argnums=(0, 1))(wx, wa)
    transposed = jax.linear_transpose(lambda tx, ta: jvp(f, (x, a), (tx, ta)), tx, ta)(w)
    return along, pulled, hvp, hvp_pulled, transposed


def _jitted_every(f, cache={}):
    # (jitted once per function: hypothesis calls it with new values only)
    if f not in cache:
        cache[f] = jax.jit(functools.partial(_every_derivative, f))
    return cache[f]


@pytest.mark.parametrize("layout", LAYOUTS, ids=["array-scalar", "3x1-by-4"])
@pytest.mark.parametrize("kind", ["map", "sum"])
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_derivatives_in_every_input_match_jax_numpy(kind, layout, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=layout[0])
    a = 0.7 if layout[1] is None else rng.uniform(0.5, 2.0, size=layout[1])
    out_shape = np.broadcast_shapes(np.shape(x), np.shape(a)) if kind == "map" else ()
    tx, ta = rng.normal(size=np.shape(x)), rng.normal(size=np.shape(a))
    wx, wa = rng.normal(size=np.shape(x)), rng.normal(size=np.shape(a))
    w = rng.normal(size=out_shape)
    pair = (op, act_jnp) if kind == "map" else (op.sum, op_sum_jnp)
    ours, theirs = (_jitted_every(f)(x, a, tx, ta, w, wx, wa) for f in pair)
    close(ours, theirs, rtol=1e-10)


def test_hessian_vector_product_differentiated_in_its_vector():
    """The issue's torch report, in JAX: d/dv <jvp(grad f)(x; v), w> = H w, eager
    (each level's rule called directly) and jitted."""
    hvp = lambda f: lambda v: jnp.vdot(jax.jvp(jax.grad(lambda x: f(x, 0.7)), (X,), (v,))[1],
                                       np.cos(X))
    want = jax.jit(jax.grad(hvp(op_sum_jnp)))(X)
    close(jax.grad(hvp(op.sum))(X), want)
    close(jax.jit(jax.grad(hvp(op.sum)))(X), want)
    close(jax.jit(jax.hessian(hvp(op.sum)))(X), jax.jit(jax.hessian(hvp(op_sum_jnp)))(X))


def test_jacobians_of_jacobians_over_broadcast_arguments():
    # (test_second_order has jacrev(jacrev) of the sum and jacfwd(jacrev) of the map)
    for ours, theirs, outer, inner in [(op.sum, op_sum_jnp, jax.jacfwd, jax.jacrev),
                                       (op, act_jnp, jax.jacrev, jax.jacfwd)]:
        nested = lambda f: jax.jit(outer(inner(f, (0, 1)), (0, 1)))
        close(nested(ours)(COLUMN, A), nested(theirs)(COLUMN, A))
