"""Whole programs differentiated by dualbcast, each against autograd as the oracle:
the workloads of the seeds (EAM, the polynomial with one live coefficient, the
computation graph with a memo dict, a large constant touched once, branchy code and the
16-term fold) and the everyday ones (an MLP, logsumexp, indexing, reshapes, stacks)."""
import collections
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import dualbcast as db
from dualbcast.testing import check_grads

RNG = np.random.default_rng(0)


def assert_tree_close(got, want, rtol=1e-10, atol=1e-12):
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for k in want:
            assert_tree_close(got[k], want[k], rtol, atol)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_tree_close(g, w, rtol, atol)
    else:
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# --- EAM energy, three ways (zygote-performance-eam seed) ---------------------------------

@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


def embed(p):
    return p ** 2 + p ** 3 + 0.25 * p ** 4


EAM_WAYS = {
    "k.sum": lambda x: embed(rho.sum(x)),
    "np.sum(k)": lambda x: embed(np.sum(rho(x))),
    "k().sum()": lambda x: embed(rho(x).sum()),
}


def eam_autograd(x):
    return embed(anp.sum(anp.exp(-3.0 * (x + 1.0))))


@pytest.mark.parametrize("way", list(EAM_WAYS))
@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (0,)])
def test_eam_energy_three_ways(way, shape):
    x = RNG.uniform(-0.5, 1.0, shape)
    value, g = db.value_and_grad(EAM_WAYS[way])(x)
    np.testing.assert_allclose(value, eam_autograd(x), rtol=1e-12)
    assert_tree_close(g, autograd.grad(eam_autograd)(x))
    assert type(g) is np.ndarray and g.dtype == np.float64 and g.shape == shape


def test_eam_three_ways_agree_in_float32():
    x = RNG.uniform(-0.5, 1.0, 50).astype(np.float32)
    results = [db.value_and_grad(f)(x) for f in EAM_WAYS.values()]
    for value, g in results:
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, results[0][1], rtol=1e-5)
        np.testing.assert_allclose(value, results[0][0], rtol=1e-5)


# --- the polynomial with its coefficients in a dict (slow-backward-large-constant) -----

@db.fast_broadcast
def poly9(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
    return (c0 + c1 * x + c2 * x ** 2 + c3 * x ** 3 + c4 * x ** 4 + c5 * x ** 5
            + c6 * x ** 6 + c7 * x ** 7 + c8 * x ** 8 + c9 * x ** 9)


def test_poly9_one_coefficient_in_a_dict():
    x = RNG.uniform(-1.0, 1.0, 100)
    coeffs = {f"c{i}": 0.1 * (i + 1) for i in range(10)}

    def loss(c2, coeffs, x):
        return poly9.sum(x, *(c2 if k == "c2" else coeffs[k] for k in sorted(coeffs)))

    def loss_autograd(c2):
        return anp.sum(sum((c2 if i == 2 else coeffs[f"c{i}"]) * x ** i for i in range(10)))

    value, g = db.value_and_grad(loss)(coeffs["c2"], coeffs, x)
    assert type(g) is float
    np.testing.assert_allclose(g, autograd.grad(loss_autograd)(coeffs["c2"]), rtol=1e-12)
    np.testing.assert_allclose(value, loss_autograd(coeffs["c2"]), rtol=1e-12)


def test_poly9_whole_dict_differentiated():
    x = RNG.uniform(-1.0, 1.0, 20)
    coeffs = {f"c{i}": 0.1 * (i + 1) for i in range(10)}

    def loss(coeffs):
        return np.sum(poly9(x, *coeffs.values()) ** 2)

    def loss_autograd(coeffs):
        return anp.sum(sum(coeffs[f"c{i}"] * x ** i for i in range(10)) ** 2)

    g = db.grad(loss)(coeffs)
    assert_tree_close(g, autograd.grad(loss_autograd)(coeffs))


# --- an MLP (the example) --------------------------------------------------------

@db.fast_broadcast
def softplus(z):
    return math.log1p(math.exp(-abs(z))) + max(z, 0.0)


def mlp_params(rng, n_in=3, n_hidden=5, n_out=2, dtype=np.float64):
    return {"W1": rng.standard_normal((n_hidden, n_in)).astype(dtype),
            "b1": rng.standard_normal(n_hidden).astype(dtype),
            "W2": rng.standard_normal((n_out, n_hidden)).astype(dtype),
            "b2": rng.standard_normal(n_out).astype(dtype)}


def mlp_loss(params, x, y, act=softplus, np=np):
    h = act(params["W1"] @ x + params["b1"][:, None])
    out = params["W2"] @ h + params["b2"][:, None]
    return np.mean((out - y) ** 2)


def softplus_autograd(z):
    return anp.log1p(anp.exp(-anp.abs(z))) + anp.maximum(z, 0.0)


def test_mlp_loss_gradient_is_a_dict_like_params():
    params = mlp_params(RNG)
    x, y = RNG.standard_normal((3, 8)), RNG.standard_normal((2, 8))
    g = db.grad(mlp_loss)(params, x, y)
    want = autograd.grad(mlp_loss)(params, x, y, act=softplus_autograd, np=anp)
    assert_tree_close(g, want)


def test_mlp_in_float32_keeps_float32():
    params = mlp_params(RNG, dtype=np.float32)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    y = RNG.standard_normal((2, 8)).astype(np.float32)
    g = db.grad(mlp_loss)(params, x, y)
    params64 = {k: v.astype(np.float64) for k, v in params.items()}
    want = autograd.grad(mlp_loss)(params64, x.astype(float), y.astype(float),
                                   act=softplus_autograd, np=anp)
    for k in params:
        assert g[k].dtype == np.float32
        np.testing.assert_allclose(g[k], want[k], rtol=1e-4, atol=1e-5)


# --- a computation graph evaluated with a memo dict (computation-graph seed) ------------

Vertex = collections.namedtuple("Vertex", "name op inputs")


def evaluate(memo, vertex):
    if vertex.name not in memo:
        memo[vertex.name] = vertex.op(*(evaluate(memo, v) for v in vertex.inputs))
    return memo[vertex.name]


def graph(np):
    x = Vertex("x", None, ())
    a = Vertex("a", lambda v: np.tanh(v), (x,))
    b = Vertex("b", lambda v: v * 2.0 + 1.0, (x,))
    c = Vertex("c", lambda u, v: u * v, (a, b))
    d = Vertex("d", lambda u, v: np.sin(u) + v, (c, a))     # a used twice: memoised
    return x, Vertex("out", lambda u: np.sum(u ** 2), (d,))


def test_computation_graph_with_memo_dict():
    x = RNG.standard_normal(6)
    _, out = graph(np)
    g = db.grad(lambda x: evaluate({"x": x}, out))(x)
    _, out_autograd = graph(anp)
    assert_tree_close(g, autograd.grad(lambda x: evaluate({"x": x}, out_autograd))(x))
    check_grads(lambda x: evaluate({"x": x}, out), x)


def test_memoised_vertex_is_evaluated_once_and_its_gradient_adds_up():
    evaluations = collections.Counter()

    def counted(name, op):
        def run(*args):
            evaluations[name] += 1
            return op(*args)
        return run
    x = Vertex("x", None, ())
    a = Vertex("a", counted("a", np.tanh), (x,))
    b = Vertex("b", counted("b", lambda u, v: u * v), (a, a))
    out = Vertex("out", counted("out", lambda u, v: np.sum(u + v)), (a, b))
    xs = RNG.standard_normal(5)
    g = db.grad(lambda x: evaluate({"x": x}, out))(xs)
    assert evaluations == {"a": 1, "b": 1, "out": 1}
    t = np.tanh(xs)
    np.testing.assert_allclose(g, (1.0 + 2.0 * t) * (1.0 - t ** 2), rtol=1e-12)


# --- a large constant touched once (slow-backward-large-constant seed) ------------------

@pytest.mark.parametrize("n", [10, 10 ** 6])
def test_large_constant_touched_once(n):
    c = np.linspace(1.0, 2.0, n)
    p = RNG.standard_normal(4)
    g = db.grad(lambda p: np.sum(c[1] * p))(p)
    np.testing.assert_allclose(g, np.full(4, c[1]), rtol=1e-15)


def test_touching_a_few_elements_of_a_traced_array():
    x = RNG.standard_normal(50)

    def f(x):
        return x[3] * x[7] + x[3] ** 2 + np.sum(x[10:20] * 2.0) + np.sum(x[[1, 1, 2]])

    def f_autograd(x):
        return x[3] * x[7] + x[3] ** 2 + anp.sum(x[10:20] * 2.0) + anp.sum(x[anp.array([1, 1, 2])])
    assert_tree_close(db.grad(f)(x), autograd.grad(f_autograd)(x))


# --- branchy code and the 16-term fold (stack-elision-control-flow seed) -----------------

def qux(a, b, x, np=np):
    aa = np.sin(x) if a else np.cos(x)
    return 1.0 / np.cosh(aa) if b else np.tanh(aa)


@pytest.mark.parametrize("a", [True, False])
@pytest.mark.parametrize("b", [True, False])
def test_qux_branches(a, b):
    value, g = db.value_and_grad(qux, argnums=2)(a, b, 1.0)
    assert type(g) is float
    np.testing.assert_allclose(g, autograd.grad(qux, 2)(a, b, 1.0, np=anp), rtol=1e-12)
    np.testing.assert_allclose(value, qux(a, b, 1.0), rtol=1e-15)


def fold_minus(xs):
    total = xs[0]
    for x in xs[1:]:
        total = total - x
    return total


def test_sixteen_term_fold_over_a_tuple():
    xs = tuple(float(i) for i in range(1, 17))
    g = db.grad(fold_minus)(xs)
    assert type(g) is tuple and len(g) == 16 and all(type(v) is float for v in g)
    assert g == autograd.grad(fold_minus)(xs)
    assert g == (1.0,) + (-1.0,) * 15


# --- kernels with row- and column-broadcast arguments -----------------------------------

@db.fast_broadcast
def morse(r, d, a, r0):
    e = math.exp(-a * (r - r0))
    return d * (1.0 - e) ** 2


def morse_autograd(r, d, a, r0):
    return d * (1.0 - anp.exp(-a * (r - r0))) ** 2


@pytest.mark.parametrize("use_sum", [True, False])
def test_kernel_with_row_and_column_broadcast_arguments(use_sum):
    r = RNG.uniform(0.8, 2.0, (3, 4))
    d = RNG.uniform(1.0, 2.0, (3, 1))      # column
    a = RNG.uniform(1.0, 2.0, (1, 4))      # row
    r0 = 1.1

    def energy(r, d, a, r0):
        return morse.sum(r, d, a, r0) if use_sum else np.sum(morse(r, d, a, r0) * 0.5) * 2.0

    got = db.value_and_grad(energy, argnums=(0, 1, 2, 3))(r, d, a, r0)
    want = autograd.grad(lambda *args: anp.sum(morse_autograd(*args)), (0, 1, 2, 3))(r, d, a, r0)
    np.testing.assert_allclose(got[0], np.sum(morse_autograd(r, d, a, r0)), rtol=1e-12)
    assert_tree_close(got[1], want)
    assert type(got[1][3]) is float


# --- reductions, where/clip, reshapes and stacks, logsumexp -----------------------------

def logsumexp(x, np=np):
    m = np.max(x, axis=-1, keepdims=True)
    return np.sum(m[..., 0] + np.log(np.sum(np.exp(x - m), axis=-1)))


def reductions(x, np=np):
    return (np.sum(np.sum(x, axis=0) ** 2) + np.mean(x, axis=(0, 2)).sum()
            + np.prod(x[0], axis=1, keepdims=True).sum() + np.max(x, axis=1).sum()
            + np.min(x) + np.cumsum(x, axis=2).sum() + x.mean())


def where_clip(x, np=np):
    return np.sum(np.where(x > 0.1, x ** 2, -x) + np.clip(x, -0.5, 0.5) * 3.0)


def reshapes_and_stacks(x, np=np):
    y = x.reshape(4, 6).T
    z = np.concatenate([y, np.sin(y)], axis=1)
    w = np.stack([x.ravel(), np.cos(x).ravel()], axis=0)
    v = np.swapaxes(np.expand_dims(x, 0), 1, 3).squeeze(0)
    return np.sum(z ** 2) + np.sum(w[1] * w[0]) + np.sum(v * np.arange(v.size).reshape(v.shape))


def matrix_products(x, np=np):
    a = x.reshape(4, 6)
    return np.sum(a @ a.T) + np.dot(a[0], a[1]) + np.sum(np.outer(a[0], a[:, 1])) \
        + np.sum(np.dot(a, a[0]))


@pytest.mark.parametrize("program", [logsumexp, reductions, where_clip, reshapes_and_stacks,
                                     matrix_products])
def test_programs_against_autograd(program):
    x = RNG.uniform(-1.0, 1.0, (2, 3, 4))
    value, g = db.value_and_grad(program)(x)
    np.testing.assert_allclose(value, program(x), rtol=1e-12)
    assert_tree_close(g, autograd.grad(lambda x: program(x, np=anp))(x), rtol=1e-9)
    check_grads(program, x)
