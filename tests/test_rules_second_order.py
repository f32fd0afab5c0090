"""Second order of the NumPy rules (issue 15, items 1 and 4): every rule in
dualbcast/rules/ but the kernels' fast rules pushes tangents forward (``db.jvp``), and
its vjp is differentiable again: Hessian-vector products forward over reverse
(``db.jvp(db.grad(f), ...)``) and reverse over reverse, third order on a few, against
JAX (x64) and central differences; the derivative conventions at second order, beside
the kernels' nested duals; and forward mode takes each rule's declared jvp, never the
transposition of its vjp (slow: a reverse pass per record)."""
import math

import numpy as np
import pytest

import dualbcast as db
from dualbcast.core import forward
from test_rules import BINARY, UNARY
from test_rules_more import AUTOGRAD_CASES, CENTRAL_CASES

RNG = np.random.default_rng(152)

@pytest.fixture(autouse=True)
def no_transposition(monkeypatch):
    """Forward mode must take the jvp each rule declares: transposing a rule's vjp
    fails the test."""
    def refuse(record, i, t):
        raise AssertionError(f"forward mode transposed the vjp of {record.func!r}: it has "
                             f"no jvp of its own")
    monkeypatch.setattr(forward, "transposed", refuse)


def close(got, want, rtol=1e-9, atol=1e-10):
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def hvp(f, x, v):
    """Forward over reverse."""
    return db.jvp(db.grad(f), (x,), (v,))[1]


def hvp_reverse(f, x, v):
    """Reverse over reverse."""
    return db.grad(lambda x: np.sum(db.grad(f)(x) * v))(x)


def central_hvp(f, x, v, h=1e-5):
    return (db.grad(f)(x + h * v) - db.grad(f)(x - h * v)) / (2 * h)


# ------------------------------------------------------------------ programs, against JAX
# (name, f(x, np) with np numpy or jax.numpy, shapes of x): one or more rules each.
R = np.random.default_rng(0)
C3, C4, C34 = R.uniform(0.5, 1.5, 3), R.uniform(0.5, 1.5, 4), R.uniform(0.5, 1.5, (3, 4))
SQUARE = R.standard_normal((3, 3)) + 3 * np.eye(3)
IDX = np.array([0, 2, 2, 1])

PROGRAMS = [
    ("sin square", lambda x, np: np.sum(np.sin(x) * x ** 2), [(), (4,), (3, 4)]),
    ("exp log", lambda x, np: np.sum(np.log(1.0 + np.exp(x)) * C4), [(4,), (3, 4)]),
    ("divide", lambda x, np: np.sum(C4 / (1.0 + x * x)), [(4,), (3, 4)]),
    ("divide scalar", lambda x, np: np.sum(C4 / (1.0 + x * x)), [()]),
    ("sqrt tanh", lambda x, np: np.sum(np.sqrt(x * x + 1.0) * np.tanh(x)), [(4,)]),
    ("power", lambda x, np: np.sum((x * x + 1.0) ** (0.5 * x)), [(4,)]),
    ("maximum minimum", lambda x, np: np.sum(np.maximum(x, 0.7) ** 2 + np.minimum(x, C4) ** 3),
     [(4,), (3, 4)]),
    ("arctan2 hypot", lambda x, np: np.sum(np.arctan2(x, C4) + np.hypot(x, C4) ** 2),
     [(4,), (3, 4)]),
    ("abs", lambda x, np: np.sum(np.abs(x - 0.7) ** 3), [(4,)]),
    ("sum axis", lambda x, np: np.sum(np.sin(np.sum(x, axis=0)) ** 2), [(3, 4)]),
    ("sum keepdims", lambda x, np: np.sum(np.sin(np.sum(x, axis=1, keepdims=True) * x)),
     [(3, 4)]),
    ("sum method", lambda x, np: np.sin(x.sum()) * x.sum(axis=-1).sum(), [(4,), (3, 4)]),
    ("mean", lambda x, np: np.sum(np.sin(np.mean(x, axis=-1)) * np.mean(x)), [(4,), (3, 4)]),
    ("prod", lambda x, np: np.sum(np.sin(np.prod(x, axis=0))) + np.prod(x), [(4,), (3, 4)]),
    ("prod keepdims", lambda x, np: np.sum(np.prod(x, axis=1, keepdims=True) * x), [(3, 4)]),
    ("max min", lambda x, np: np.sum(np.max(x, axis=1) ** 3) + np.min(x) ** 2
     + np.sum(np.amax(x, axis=0, keepdims=True) * x), [(3, 4)]),
    ("var std", lambda x, np: np.sum(np.var(x, axis=0) ** 2) + np.std(x)
     + np.var(x, ddof=1), [(3, 4)]),
    ("cumsum", lambda x, np: np.sum(np.sin(np.cumsum(x, axis=-1))) + np.sum(np.cumsum(x) ** 2),
     [(4,), (3, 4)]),
    ("cumprod", lambda x, np: np.sum(np.sin(np.cumprod(x))), [(4,), (3, 4)]),
    ("cumprod axis", lambda x, np: np.sum(np.sin(np.cumprod(x, axis=0)) * C34), [(3, 4)]),
    ("reshape transpose", lambda x, np: np.sum(np.sin(np.reshape(x, (4, 3)).T * C34)),
     [(3, 4)]),
    ("ravel swapaxes", lambda x, np: np.sum(np.sin(np.swapaxes(x, 0, 1)) * np.ravel(x)[:3]),
     [(3, 4)]),
    ("moveaxis expand squeeze", lambda x, np: np.sum(
        np.squeeze(np.expand_dims(np.moveaxis(x, 0, 1), 0)) ** 3), [(3, 4)]),
    ("broadcast_to", lambda x, np: np.sum(np.sin(np.broadcast_to(x, (3, 4))) * C34), [(4,)]),
    ("flip", lambda x, np: np.sum(np.flip(x) * x ** 2) + np.sum(np.flip(x, 0)[0] ** 3),
     [(4,), (3, 4)]),
    ("getitem", lambda x, np: np.sum(np.sin(x[1:] * x[:-1])) + x[0] ** 3
     + np.sum(x[IDX] ** 2) + np.sum(x[x > 0.8] ** 3), [(4,)]),
    ("getitem 2-d", lambda x, np: np.sum(x[:, IDX] ** 3) + np.sum(x[1] * x[:, 0].sum())
     + x[2, 3] ** 2, [(3, 4)]),
    ("concatenate stack", lambda x, np: np.sum(np.sin(np.concatenate([x, x * x]))
                                               * np.sum(np.stack([x, x ** 3]))), [(4,)]),
    ("stack axis", lambda x, np: np.sum(np.stack([x, C34, x ** 2], axis=1) ** 3), [(3, 4)]),
    ("hstack vstack", lambda x, np: np.sum(np.hstack([x, x ** 2]) ** 2)
     + np.sum(np.vstack([x, x ** 2]) ** 3), [(4,)]),
    ("where", lambda x, np: np.sum(np.where(x > 0.8, x ** 3, np.sin(x))), [(4,), (3, 4)]),
    ("clip", lambda x, np: np.sum(np.clip(x, 0.5, 0.9) ** 3), [(4,)]),
    ("astype", lambda x, np: np.sum(x.astype(np.float64) ** 3), [(4,)]),
    ("matmul", lambda x, np: np.sum(np.sin(x @ x.T)), [(3, 4)]),
    ("matvec", lambda x, np: np.sum(np.sin(SQUARE @ x) * x) + np.sum(np.matmul(x, SQUARE) ** 2),
     [(3,)]),
    ("dot", lambda x, np: np.sin(np.dot(x, x)) + np.sum(np.dot(C34, x) ** 2), [(4,)]),
    ("outer", lambda x, np: np.sum(np.sin(np.outer(x, x))), [(4,)]),
    ("solve", lambda x, np: np.sum(np.linalg.solve(x @ x.T + np.eye(3), C34) ** 2)
     + np.sum(np.linalg.solve(SQUARE, x) ** 3), [(3, 4)]),
    ("solve vector", lambda x, np: np.sum(np.linalg.solve(np.outer(x, x) + SQUARE, x) ** 2),
     [(3,)]),
    ("inv", lambda x, np: np.sum(np.linalg.inv(x @ x.T + np.eye(3)) ** 2), [(3, 4)]),
    ("det", lambda x, np: np.linalg.det(x[:, :3]) ** 2, [(3, 4)]),
    ("slogdet", lambda x, np: np.linalg.slogdet(x @ x.T + np.eye(3))[1], [(3, 4)]),
    ("norm", lambda x, np: np.linalg.norm(x) ** 3 + np.sum(np.linalg.norm(x, axis=1) ** 3)
     + np.sum(np.linalg.norm(x, 3, axis=0, keepdims=True)), [(3, 4)]),
    ("norm vector", lambda x, np: np.sin(np.linalg.norm(x)) + np.linalg.norm(x, 1) ** 2,
     [(4,)]),
    ("einsum", lambda x, np: np.sum(np.sin(np.einsum("ij,kj->ik", x, x))), [(3, 4)]),
    ("einsum three", lambda x, np: np.einsum("ij,jk,ki->", x, x.T, C34 @ C34.T) ** 2
     + np.einsum("ii", x[:, :3]) ** 3, [(3, 4)]),
    ("tensordot", lambda x, np: np.sum(np.sin(np.tensordot(x, x, axes=([1], [1]))))
     + np.tensordot(x, C34) ** 2, [(3, 4)]),
    ("triu tril", lambda x, np: np.sum(np.triu(x @ x.T) ** 2)
     + np.sum(np.tril(np.sin(x), -1) ** 2), [(3, 4)]),
    ("diagonal trace", lambda x, np: np.sum(np.diagonal(x @ x.T) ** 2) + np.trace(x) ** 3
     + np.sum(np.diagonal(x, 1) ** 3), [(3, 4)]),
    ("diff", lambda x, np: np.sum(np.diff(x ** 3, axis=-1) ** 2)
     + np.sum(np.diff(x, n=2, axis=0) ** 3), [(4,), (3, 4)]),
    ("sort", lambda x, np: np.sum(np.sort(x) ** 3 * C4), [(4,)]),
    ("sort axis", lambda x, np: np.sum(np.sort(x, axis=0) ** 3 * C34), [(3, 4)]),
    ("take", lambda x, np: np.sum(np.take(x, IDX) ** 3), [(4,), (3, 4)]),
    ("take axis", lambda x, np: np.sum(np.take(x, IDX, axis=1) ** 3), [(3, 4)]),
    ("take_along_axis", lambda x, np: np.sum(
        np.take_along_axis(x, np.array([[0, 2, 1, 1]]), axis=0) ** 3), [(3, 4)]),
    ("roll", lambda x, np: np.sum(np.roll(x, 1) * x ** 2), [(4,), (3, 4)]),
    ("repeat", lambda x, np: np.sum(np.repeat(x, 2) ** 3)
     + np.sum(np.repeat(x, np.array([1, 0, 2, 1])) ** 3), [(4,)]),
    ("tile", lambda x, np: np.sum(np.tile(x, 2) ** 3 * np.arange(8.0)), [(4,)]),
    ("pad", lambda x, np: np.sum(np.pad(x, 1) ** 3 * np.arange(6.0)), [(4,)]),
    ("pad widths", lambda x, np: np.sum(np.pad(x, ((1, 0), (0, 2)), constant_values=0.5) ** 3),
     [(3, 4)]),
]
CASES = [pytest.param(f, shape, id=f"{name} {shape}") for name, f, shapes in PROGRAMS
         for shape in shapes]


def primal_and_directions(shape):
    return (RNG.uniform(0.3, 1.2, shape), RNG.standard_normal(shape),
            RNG.standard_normal(shape))


@pytest.mark.parametrize("f,shape", CASES)
def test_jvp_against_jax(f, shape, jax):
    x, v, _ = primal_and_directions(shape)
    value, tangent = db.jvp(lambda x: f(x, np), (x,), (v,))
    want_value, want = jax.jvp(lambda x: f(x, jax.numpy), (x,), (v,))
    close(value, want_value)
    close(tangent, want)


@pytest.mark.parametrize("f,shape", CASES)
def test_hvp_against_jax(f, shape, jax):
    x, v, _ = primal_and_directions(shape)
    want = jax.jvp(jax.grad(lambda x: f(x, jax.numpy)), (x,), (v,))[1]
    close(hvp(lambda x: f(x, np), x, v), want)
    close(hvp_reverse(lambda x: f(x, np), x, v), want)


THIRD_ORDER = ["sin square", "prod", "max min", "cumprod", "getitem", "solve", "inv", "det",
               "norm", "einsum", "sort", "take", "pad"]


@pytest.mark.parametrize("f,shape", [p for p in CASES if p.id.rsplit(" (", 1)[0] in THIRD_ORDER
                                     and p.id.endswith(("(4,)", "(3, 4)"))])
def test_third_order_against_central_differences_of_the_hvp(f, shape):
    x, v, w = primal_and_directions(shape)
    u = RNG.standard_normal(shape)

    def f_np(x):
        return f(x, np)

    def weighted_hvp(x):
        return np.sum(db.jvp(db.grad(f_np), (x,), (v,))[1] * w)
    third = db.grad(weighted_hvp)(x)
    h = 1e-4
    want = (weighted_hvp(x + h * u) - weighted_hvp(x - h * u)) / (2 * h)
    np.testing.assert_allclose(np.sum(third * u), want, rtol=1e-6, atol=1e-6)
    # The same third derivative forward over forward over reverse.
    forward_third = db.jvp(lambda x: db.jvp(db.grad(f_np), (x,), (v,))[1], (x,), (u,))[1]
    np.testing.assert_allclose(np.sum(forward_third * w), want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ every ufunc, against JAX

JAX_NAMES = {"absolute": "abs"}


def unary_cases():
    for name, low, high in UNARY:
        for shape in [(3, 4), ()]:
            yield pytest.param(name, low, high, shape, id=f"{name} {shape}")


@pytest.mark.parametrize("name,low,high,shape", list(unary_cases()))
def test_unary_ufuncs_at_second_order(name, low, high, shape, jax):
    x = RNG.uniform(low, high, shape)
    v = RNG.standard_normal(shape)
    weights = RNG.standard_normal((3, 4))
    ours, theirs = getattr(np, name), getattr(jax.numpy, JAX_NAMES.get(name, name))
    want_tangent = jax.jvp(lambda x: theirs(x), (x,), (v,))[1]
    close(db.jvp(ours, (x,), (v,))[1], want_tangent)
    want = jax.jvp(jax.grad(lambda x: jax.numpy.sum(weights * theirs(x))), (x,), (v,))[1]
    f = lambda x: np.sum(weights * ours(x))
    close(hvp(f, x, v), want)
    close(hvp_reverse(f, x, v), want)


def binary_cases():
    for name, xr, yr in BINARY:
        for sx, sy in [((3, 4), (3, 4)), ((3, 1), (4,)), ((), (4,))]:
            yield pytest.param(name, xr, yr, sx, sy, id=f"{name} {sx} {sy}")


@pytest.mark.parametrize("name,xr,yr,sx,sy", list(binary_cases()))
def test_binary_ufuncs_at_second_order(name, xr, yr, sx, sy, jax):
    x, y = RNG.uniform(*xr, sx), RNG.uniform(*yr, sy)
    vx, vy = RNG.standard_normal(sx), RNG.standard_normal(sy)
    weights = RNG.standard_normal(np.broadcast_shapes(sx, sy))
    ours, theirs = getattr(np, name), getattr(jax.numpy, name)
    close(db.jvp(ours, (x, y), (vx, vy))[1], jax.jvp(theirs, (x, y), (vx, vy))[1])

    def f(x, y):
        return np.sum(weights * ours(x, y) ** 2)

    def f_jax(x, y):
        return jax.numpy.sum(weights * theirs(x, y) ** 2)
    want = jax.jvp(jax.grad(f_jax, (0, 1)), (x, y), (vx, vy))[1]
    got = db.jvp(db.grad(f, argnums=(0, 1)), (x, y), (vx, vy))[1]
    for g, w in zip(got, want):
        close(g, w, rtol=1e-8)
    got = db.grad(lambda x, y: sum(np.sum(g * t) for g, t in zip(db.grad(f, argnums=(0, 1))(
        x, y), (vx, vy))), argnums=(0, 1))(x, y)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-8)


# ------------------------------------------------------------------ test_rules_more's cases

def more_cases():
    for name, f, _, x in AUTOGRAD_CASES:
        yield pytest.param(f, x, id=name)
    for name, f, x in CENTRAL_CASES:
        yield pytest.param(f, x, id=name)


@pytest.mark.parametrize("f,x", list(more_cases()))
def test_rules_more_cases_at_second_order(f, x):
    # f(x) weighted through sin: the Hessian has f's second derivatives and f's
    # Jacobian squared; against central differences of the (tested) gradient.
    x = np.asarray(x, np.float64)[()]
    shape = np.shape(x)
    v = RNG.standard_normal(shape)[()]
    out_shape = np.shape(f(x))
    u, weights = RNG.standard_normal(out_shape), RNG.standard_normal(out_shape)
    # jvp: the adjoint of the (tested) vjp, and central differences of f.
    value, tangent = db.jvp(f, (x,), (v,))
    assert np.shape(tangent) == out_shape
    pullback = db.vjp(f, x)[1]
    np.testing.assert_allclose(np.sum(tangent * u), np.sum(pullback(u)[0] * v), rtol=1e-10,
                               atol=1e-10)
    h = 1e-6
    np.testing.assert_allclose(tangent, (f(x + h * v) - f(x - h * v)) / (2 * h), rtol=1e-5,
                               atol=1e-6)

    def weighted(x):
        return np.sum(np.sin(f(x)) * weights)
    want = central_hvp(weighted, x, v)
    close(hvp(weighted, x, v), want, rtol=1e-5, atol=1e-6)
    close(hvp_reverse(weighted, x, v), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ the SVD's norms, det

# (issue 27 item 11) np.linalg.norm with ord 2, -2, 'nuc' and det at singular matrices
# had no second derivative (their gradients computed an SVD, which has no rule).

def _distinct_singular_values(x):
    s = np.linalg.svd(x, compute_uv=False)
    assert np.all(np.abs(np.diff(s, axis=-1)) > 1e-3) and np.all(s > 1e-3)


@pytest.mark.parametrize("ord,shape,axis,keepdims", [
    (2, (3, 4), None, False), (-2, (4, 3), None, False), ("nuc", (3, 3), None, False),
    (-2, (3, 3), None, False), (2, (3, 2, 4), (2, 0), True), ("nuc", (2, 3, 4), (1, 2), False)])
def test_svd_norms_second_order_against_jax(ord, shape, axis, keepdims, jax):
    x, v, w = primal_and_directions(shape)
    _distinct_singular_values(np.moveaxis(x, axis or (0, 1), (-2, -1)))

    def f(x, np=np):
        return np.sum(np.sin(np.linalg.norm(x, ord, axis=axis, keepdims=keepdims)))
    hessian = jax.jit(jax.hessian(lambda x: f(x, jax.numpy)))(x)
    close(db.hessian(f)(x), hessian)
    times = lambda v: np.tensordot(hessian, v, v.ndim)      # noqa: E731
    close(hvp(f, x, v), times(v))
    close(hvp_reverse(f, x, v), times(v))
    # linear in the direction, to any order: the hvp differentiated in v
    close(db.grad(lambda v: np.sum(hvp(f, x, v) * w))(v), times(w))


def det_hessian(m):
    """The Hessian of det at a square ``m``, closed form: d cof(A)_ij / dA_kl is the
    signed cofactor of the minor without row i and column j (0 in that row and column);
    from determinants of (n-2) x (n-2) minors only, exact at any m."""
    n = len(m)
    h = np.zeros((n, n, n, n))
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(m, i, 0), j, 1)
            rows, cols = [k for k in range(n) if k != i], [k for k in range(n) if k != j]
            for a, k in enumerate(rows):
                for b, l in enumerate(cols):
                    sub = np.delete(np.delete(minor, a, 0), b, 1)
                    h[i, j, k, l] = (-1) ** (i + j + a + b) * (np.linalg.det(sub) if n > 2
                                                               else 1.0)
    return h


def _rank(n, r, seed):
    rng = np.random.default_rng(seed)
    u, s, vh = np.linalg.svd(rng.standard_normal((n, n)))
    s[r:] = 0
    return (u * s) @ vh                             # (det of order 1e-17: not exactly 0)


SINGULAR = {
    "rank n-1": _rank(3, 2, 0), "rank n-1, 4x4": _rank(4, 3, 1),
    "rank n-2": _rank(4, 2, 2), "rank 1": _rank(3, 1, 3),
    "diag(1, 1, 0): repeated singular values": np.diag([1.0, 1.0, 0.0]),
    "zeros": np.zeros((3, 3)), "ones": np.ones((4, 4)),
    "integer entries": np.array([[1.0, 2, 3], [2, 4, 6], [0, 1, 1]]),
    "2x2": np.array([[1.0, 2], [2, 4]]),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", SINGULAR)
def test_det_second_order_at_singular_matrices(name, jax):
    m = SINGULAR[name]
    want = det_hessian(m)
    close(db.hessian(np.linalg.det)(m), want, rtol=1e-10, atol=1e-12)
    v = RNG.standard_normal(m.shape)
    close(hvp(np.linalg.det, m, v), np.einsum("ijkl,kl->ij", want, v), rtol=1e-10, atol=1e-12)
    close(hvp_reverse(np.linalg.det, m, v), np.einsum("ijkl,kl->ij", want, v), rtol=1e-10,
          atol=1e-12)
    if name in ("rank n-1", "diag(1, 1, 0): repeated singular values"):
        # JAX agrees here; at lower ranks its Hessian is nan or off for some matrices
        # (its LU-based cofactors), ours is the closed form's
        close(db.hessian(np.linalg.det)(m), jax.jit(jax.hessian(jax.numpy.linalg.det))(m),
              rtol=1e-10, atol=1e-12)
    if len(m) == 3:
        # third order: det is cubic, so central differences of the closed form are exact
        u, h = RNG.standard_normal(m.shape), 0.5
        third = db.jvp(lambda m: hvp(np.linalg.det, m, v), (m,), (u,))[1]
        central = (det_hessian(m + h * u) - det_hessian(m - h * u)) / (2 * h)
        close(third, np.einsum("ijkl,kl->ij", central, v), rtol=1e-10, atol=1e-12)


def test_det_second_order_of_a_stack_with_singular_and_regular_matrices():
    stack = np.stack([SINGULAR["rank n-1"], RNG.standard_normal((3, 3)), SINGULAR["zeros"]])
    got = db.hessian(lambda a: np.sum(np.linalg.det(a)))(stack)
    for i, m in enumerate(stack):
        close(got[i, :, :, i], det_hessian(m), rtol=1e-10, atol=1e-12)
        for j in set(range(3)) - {i}:
            assert np.all(got[i, :, :, j] == 0)


def central_hessian_times(f, x, v, h=1e-5):
    return (db.grad(f)(x + h * v) - db.grad(f)(x - h * v)) / (2 * h)


def test_svd_norms_at_repeated_singular_values(jax):
    # Where the norm is differentiable twice the Hessian is exact, also where two
    # singular values are equal (JAX's differentiates the SVD: nan there); against
    # central differences of the (tested) gradient.
    for ord, x in [("nuc", 2.0 * np.eye(3)), ("nuc", np.diag([2.0, 2.0, 1.0])),
                   ("nuc", np.diag([2.0, 2.0, 1.0])[:, :2]), (2, np.diag([3.0, 1.0, 1.0])),
                   (-2, np.diag([3.0, 3.0, 1.0]))]:
        for v in (RNG.standard_normal(x.shape), np.ones(x.shape)):
            f = lambda x: np.linalg.norm(x, ord)        # noqa: E731
            close(hvp(f, x, v), central_hessian_times(f, x, v), rtol=1e-7, atol=1e-8)
            close(hvp_reverse(f, x, v), central_hessian_times(f, x, v), rtol=1e-7, atol=1e-8)
    # A repeated largest (2) / smallest (-2) singular value: the gradient is JAX's, the
    # tied singular vectors' average, which has no derivative there: a clear error.
    for ord, x in [(2, 2.0 * np.eye(3)), (2, np.diag([2.0, 2.0, 1.0])),
                   (-2, np.diag([3.0, 1.0, 1.0])), (2, np.diag([2.0, 2.0, 1.0])[:, :2])]:
        want = jax.grad(lambda x: jax.numpy.linalg.norm(x, ord))(x)
        close(db.grad(lambda x: np.linalg.norm(x, ord))(x), want, rtol=1e-14, atol=1e-15)
        for second in (db.hessian, lambda f: lambda x: hvp(f, x, np.ones(x.shape))):
            with pytest.raises(np.linalg.LinAlgError, match="repeated"):
                second(lambda x: np.linalg.norm(x, ord))(x)


def test_svd_norms_where_they_have_no_derivative():
    # The gradient 0 there (README conventions) is held: its derivative is 0 too (abs).
    for ord, x in [(2, np.zeros((2, 3))), ("nuc", np.zeros((2, 2))),
                   (-2, np.diag([3.0, 2.0, 0.0])), (-2, np.zeros((3, 2)))]:
        assert np.all(db.hessian(lambda x: np.linalg.norm(x, ord))(x) == 0)


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
def test_svd_norms_third_order_raises_naming_the_norm(ord):
    x = RNG.standard_normal((3, 3))
    v = RNG.standard_normal((3, 3))
    hvp_of = lambda x: hvp(lambda x: np.linalg.norm(x, ord), x, v)     # noqa: E731
    with pytest.raises(NotImplementedError, match=r"third derivatives of np\.linalg\.norm"):
        db.jvp(hvp_of, (x,), (v,))
    with pytest.raises(NotImplementedError, match=r"third derivatives of np\.linalg\.norm"):
        db.grad(lambda x: np.sum(hvp_of(x)))(x)


def test_svd_norms_and_det_at_second_order_under_jit():
    x, v, _ = primal_and_directions((3, 4))
    singular = SINGULAR["rank n-1"]
    for f, at in [(lambda x: np.linalg.norm(x, "nuc") + np.linalg.norm(x, 2), x),
                  (np.linalg.det, singular)]:
        jitted = db.jit(lambda x, v: hvp(f, x, v))
        for y in (at, 2 * at, at):
            close(jitted(y, v[:, :at.shape[1]]), hvp(f, y, v[:, :at.shape[1]]), rtol=1e-13,
                  atol=1e-14)


# ------------------------------------------------------------------ dtypes

def test_float32_stays_float32_at_second_order():
    x = RNG.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    v = RNG.standard_normal((3, 4)).astype(np.float32)

    def f(x):
        return np.sum(np.sin(x @ x.T)) + np.prod(x[0]) + np.sum(np.cumprod(x, axis=1))
    value, tangent = db.jvp(f, (x,), (v,))
    assert np.result_type(tangent) == np.float32
    got = hvp(f, x, v)
    assert got.dtype == np.float32
    want = hvp(f, x.astype(np.float64), v.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    assert hvp_reverse(f, x, v).dtype == np.float32


# ------------------------------------------------------------------ conventions

def second(f, x):
    return db.grad(db.grad(f))(x)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_conventions_at_second_order():
    # README "Derivative conventions", differentiated once more.
    assert second(lambda x: x ** 2, 0.0) == 2.0
    assert second(lambda x: np.square(x), 0.0) == 2.0
    assert second(lambda x: x ** 3, 0.0) == 0.0
    assert db.grad(db.grad(db.grad(lambda x: x ** 3)))(0.0) == 6.0
    assert second(lambda x: np.abs(x), 0.0) == 0.0
    assert second(lambda x: np.abs(x), -2.0) == 0.0
    assert db.grad(lambda x: np.sqrt(x))(0.0) == np.inf
    assert second(lambda x: np.sqrt(x), 0.0) == -np.inf
    assert second(lambda x: np.log(x), 0.0) == -np.inf
    assert second(lambda x: np.hypot(x, 0.0), 0.0) == 0.0
    for f in (lambda x: np.sum(x ** 2), lambda x: np.sum(x ** 3), lambda x: np.sum(np.abs(x)),
              lambda x: np.sum(np.sqrt(x))):
        zeros = np.zeros(3)
        close(hvp(f, zeros, np.ones(3)), hvp_reverse(f, zeros, np.ones(3)), rtol=0, atol=0)
    np.testing.assert_array_equal(hvp(lambda x: np.sum(x ** 2), np.zeros(2), np.ones(2)), 2.0)
    np.testing.assert_array_equal(hvp(lambda x: np.sum(x ** 3), np.zeros(2), np.ones(2)), 0.0)
    np.testing.assert_array_equal(hvp(lambda x: np.sum(np.sqrt(x)), np.zeros(2), np.ones(2)),
                                  -np.inf)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name,rule,scalar", [
    ("w sqrt(r)", lambda w, r: w * np.sqrt(r), lambda w, r: w * math.sqrt(r)),
    ("w r**3", lambda w, r: w * r ** 3, lambda w, r: w * r ** 3),
    ("w log(r)", lambda w, r: w * np.log(r), lambda w, r: w * math.log(r)),
    ("w |r|", lambda w, r: w * np.abs(r), lambda w, r: w * abs(r)),
    ("hypot", lambda w, r: np.hypot(w, r), lambda w, r: math.hypot(w, r)),
    ("w / r", lambda w, r: w / r, lambda w, r: w / r),
])
@pytest.mark.parametrize("at", [(0.0, 0.0), (0.0, 2.0), (1.5, 0.0)])
def test_second_derivatives_agree_with_the_kernels_nested_duals(name, rule, scalar, at):
    # NaN-safe at second order: a zero weight meeting an infinite second derivative
    # gives 0 (w sqrt(r) at w = r = 0: d2/dr2 is 0, not nan), exactly as the kernels.
    kernel = db.fast_broadcast(scalar)
    w, r = (np.array([value]) for value in at)
    grad = db.grad(lambda w, r: np.sum(rule(w, r)), argnums=(0, 1))
    for direction in ((1.0, 0.0), (0.0, 1.0)):
        tangents = {i: t for i, t in enumerate(direction) if t}
        _, _, _, want = kernel.value_and_partials(w, r, wrt=(0, 1), tangents=tangents)
        got = db.jvp(grad, (w, r), tuple(np.array([t]) for t in direction))[1]
        reverse = db.grad(lambda w, r: sum(np.sum(g * t) for g, t in zip(grad(w, r), direction)),
                          argnums=(0, 1))(w, r)
        for g, rg, k in zip(got, reverse, want):
            np.testing.assert_array_equal(g, k)
            np.testing.assert_array_equal(rg, k)


# ------------------------------------------------------------------ no transposition

def transposition_count(monkeypatch, f, x, v):
    calls = []
    original = forward.transposed

    def counted(record, i, t):
        calls.append(record.func)
        return original(record, i, t)
    monkeypatch.setattr(forward, "transposed", counted)
    db.jvp(f, (x,), (v,))
    db.jvp(db.grad(f), (x,), (v,))
    return calls


@pytest.mark.parametrize("f,shape", [pytest.param(f, shapes[-1], id=name)
                                     for name, f, shapes in PROGRAMS])
def test_forward_mode_takes_each_rules_own_jvp(f, shape, monkeypatch):
    # Every record has a jvp of its own or is elementwise.
    x, v, _ = primal_and_directions(shape)
    assert transposition_count(monkeypatch, lambda x: f(x, np), x, v) == []


def test_forward_mode_does_not_transpose_operators(monkeypatch):
    x = np.arange(1.0, 4.0)
    assert transposition_count(monkeypatch, lambda x: np.sum(x * x / (x - 0.5) ** 2), x, x) == []


# ------------------------------------------------------------------ formulas that cancelled

def _mp_cases():
    """(name, f, exact first and second derivative as mpmath functions, points)."""
    mp = pytest.importorskip("mpmath")
    unit = [1e-300, 1e-17, -1e-12, 1e-9, 0.3, 0.5, -0.7, 1.0 - 2.0 ** -27, 1.0 - 2.0 ** -30,
            -(1.0 - 2.0 ** -52)]
    return mp, [
        ("arctanh", np.arctanh, lambda x: 1 / (1 - x * x), lambda x: 2 * x / (1 - x * x) ** 2,
         unit),
        ("arcsin", np.arcsin, lambda x: 1 / mp.sqrt(1 - x * x),
         lambda x: x / (1 - x * x) ** mp.mpf(1.5), unit),
        ("arccos", np.arccos, lambda x: -1 / mp.sqrt(1 - x * x),
         lambda x: -x / (1 - x * x) ** mp.mpf(1.5), unit),
        ("hypot(x, 2)", lambda x: np.hypot(x, 2.0), lambda x: x / mp.hypot(x, 2),
         lambda x: 4 / mp.hypot(x, 2) ** 3, [1e-200, 0.5, 3.0, -1e3, 1e10, -1e100, 1e150]),
        ("hypot(2, x)", lambda x: np.hypot(2.0, x), lambda x: x / mp.hypot(x, 2),
         lambda x: 4 / mp.hypot(x, 2) ** 3, [1e-200, -3.0, 1e10, 1e100]),
        ("tanh", np.tanh, lambda x: mp.sech(x) ** 2, lambda x: -2 * mp.tanh(x) * mp.sech(x) ** 2,
         [1e-300, -1e-9, 0.3, 0.5499, 0.5501, -0.56, 1.0, -5.0, 20.0, -40.0, 300.0]),
        ("expm1", np.expm1, mp.exp, mp.exp, [-700.0, -40.0, -5.0, -1.0, -1e-20, 0.5, 700.0]),
    ]


def _derivatives(f, x):
    """First derivative, then the second three ways (forward over reverse, reverse over
    reverse, on an array and on a float)."""
    x = np.array(x)
    ones = np.ones_like(x)
    with np.errstate(all="ignore"):
        first = db.grad(lambda t: np.sum(f(t)))(x)
        seconds = {"jvp(grad)": hvp(lambda t: np.sum(f(t)), x, ones),
                   "grad(grad)": hvp_reverse(lambda t: np.sum(f(t)), x, ones),
                   "scalar grad(grad)": np.array([db.grad(db.grad(f))(float(t)) for t in x])}
    return first, seconds


@pytest.mark.parametrize("x, y", [(5e-324, 0.0), (1e-310, 1e-320), (-1e-310, 0.0)])
def test_hypot_second_derivative_at_subnormal_arguments(x, y):
    # d2 hypot / dx2 = y^2 / r^3: 0 on the axis, ~1e290 at (1e-310, 1e-320); computing
    # the sign as x / |x| made it inf - inf = nan there (1 / |x| overflows).
    r = math.hypot(x, y)
    hessian = db.hessian(lambda v: np.hypot(v[0], v[1]))(np.array([x, y]))
    want = (y / r) * (y / r) / r
    assert hessian[0, 0] == pytest.approx(want, rel=1e-12, abs=0.0)
    assert db.grad(db.grad(lambda t: np.hypot(t, y)))(x) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("case", range(7), ids=lambda k: ["arctanh", "arcsin", "arccos",
                                                          "hypot(x, 2)", "hypot(2, x)",
                                                          "tanh", "expm1"][k])
def test_first_and_second_derivatives_where_the_formulas_cancelled(case):
    # The NumPy rules' derivative formulas, differentiated again, lost their digits (issue
    # 27, the rules' side of item 5): arctanh'' near 0 ((1 - x)(1 + x) differentiated: 0 at
    # 1e-17), arcsin'/arccos' near +-1 (1 - x*x: 5.6e-9 of itself at 1 - 2**-27, at both
    # orders), hypot(x, c)'' far from the origin (x / r differentiated: 0 at 1e10); and at
    # first order already tanh' = 1 - y^2 (0 at 20 for 1.7e-17) and expm1' = y + 1 (0 at
    # -40 for 4.2e-18).  Against the closed forms in 50 digits.
    mp, cases = _mp_cases()
    name, f, d1, d2, points = cases[case]
    mp.mp.dps = 50
    first, seconds = _derivatives(f, points)
    for k, x in enumerate(points):
        X = mp.mpf(x)
        for label, got, want in [("first", first[k], d1(X))] + [
                (way, got[k], d2(X)) for way, got in seconds.items()]:
            assert float(got) == pytest.approx(float(want), rel=2e-15, abs=0), (
                f"{name} at {x!r}, {label}: {float(got)!r}, exact {float(want)!r}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("x", [2.0, -3.0, 0.5, 1e-300, 0.0, -0.0, np.inf, np.nan])
def test_power_hessian_at_exponent_zero_is_symmetric(x, jax):
    # d/dx x ** y at y = 0 was np.where's constant 0, its derivative in y lost: the
    # Hessian was [[0, 0], [1/x, log(x)^2]].  Now y / x there (0 where x is 0 or nan, as
    # the kernels' table): 1/x on both sides, as JAX; the kernels' nested duals agree.
    v = np.array([x, 0.0])
    f = lambda v: v[0] ** v[1]                                  # noqa: E731
    hessian = db.hessian(f)(v)
    reverse = np.array([db.grad(lambda w: db.grad(f)(w)[k])(v) for k in range(2)])
    kernel = db.fast_broadcast(lambda a, b: a ** b)
    columns = [kernel.value_and_partials(np.array([x]), np.array([0.0]), wrt=(0, 1),
                                         tangents={k: np.ones(1)})[3] for k in range(2)]
    from_kernel = np.array([[c[0][0], c[1][0]] for c in columns]).T
    np.testing.assert_array_equal(hessian, reverse)
    np.testing.assert_array_equal(hessian, from_kernel)
    if x != 0 and not np.isnan(x):
        assert hessian[0, 1] == hessian[1, 0] == 1.0 / x
    elif x == 0:
        assert hessian[0, 1] == hessian[1, 0] == 0.0
    if 1e-100 < x < np.inf:
        # (JAX: nan for x < 0 and where x ** (y - 2) overflows, times y (y - 1) = 0)
        want = np.asarray(jax.hessian(lambda w: w[0] ** w[1])(jax.numpy.array(v)))
        np.testing.assert_allclose(hessian, want, rtol=1e-15, atol=0)
