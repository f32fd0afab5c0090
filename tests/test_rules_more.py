"""Gradient rules of issue 15 item 4 (dualbcast/rules/linalg.py, einsum.py, arrays.py,
reductions.py's cumprod): against autograd where it has the rule, else against
central differences (``check_grads``) and closed forms; float32 and float64 (the
gradient has the argument's dtype), non-contiguous inputs, the conventions at singular
points, and jit replays equal to eager calls bit for bit."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import dualbcast as db
from dualbcast.testing import check_grads
from test_jit_adversarial import compare_calls

RNG = np.random.default_rng(15)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def well_conditioned(*shape):
    return RNG.standard_normal(shape) + 3 * np.eye(shape[-1])


def weighted_grad(f, x, weights):
    return db.grad(lambda a: np.sum(f(a) * weights))(x)


# ------------------------------------------------------------------ against autograd
# (name, dualbcast function, autograd function, argument)
SQUARE = well_conditioned(3, 3)
AUTOGRAD_CASES = [
    ("norm", lambda a: np.linalg.norm(a), lambda a: anp.linalg.norm(a), rand(4)),
    ("norm 2-d", lambda a: np.linalg.norm(a), lambda a: anp.linalg.norm(a), rand(3, 4)),
    ("norm 0-d", lambda a: np.linalg.norm(a), lambda a: anp.linalg.norm(a), np.float64(-1.5)),
    ("norm axis", lambda a: np.linalg.norm(a, axis=1),
     lambda a: anp.linalg.norm(a, axis=1), rand(3, 4)),
    ("norm 2 keepdims", lambda a: np.linalg.norm(a, 2, axis=0, keepdims=True),
     None, rand(3, 4)),                 # (autograd's gradient has the wrong shape)
    ("norm p=3", lambda a: np.linalg.norm(a, 3, axis=-1),
     lambda a: anp.linalg.norm(a, 3, axis=-1), rand(2, 5)),
    ("norm fro", lambda a: np.linalg.norm(a, "fro"), lambda a: anp.linalg.norm(a, "fro"),
     rand(3, 4)),
    ("norm fro axes", lambda a: np.linalg.norm(a, "fro", axis=(0, 2)),
     lambda a: anp.linalg.norm(a, "fro", axis=(0, 2)), rand(3, 2, 4)),
    ("norm nuc", lambda a: np.linalg.norm(a, "nuc"), lambda a: anp.linalg.norm(a, "nuc"),
     rand(3, 4)),
    ("einsum matmul", lambda a: np.einsum("ij,jk->ik", a, SQUARE),
     lambda a: anp.einsum("ij,jk->ik", a, SQUARE), rand(2, 3)),
    ("einsum implicit", lambda a: np.einsum("ij,kj", a, SQUARE),
     lambda a: anp.einsum("ij,kj", a, SQUARE), rand(2, 3)),
    ("einsum trace", lambda a: np.einsum("ii", a), None, rand(3, 3)),
    ("einsum diag", lambda a: np.einsum("ii->i", a), None, rand(3, 3)),
    ("einsum diag ellipsis", lambda a: np.einsum("i...i", a), None, rand(3, 2, 3)),
    ("einsum sum", lambda a: np.einsum("ijk->j", a), lambda a: anp.einsum("ijk->j", a),
     rand(2, 3, 4)),
    ("einsum ellipsis", lambda a: np.einsum("...j,jk->...k", a, SQUARE),
     lambda a: anp.einsum("...j,jk->...k", a, SQUARE), rand(2, 4, 3)),
    ("einsum three", lambda a: np.einsum("ij,jk,kl->il", a, SQUARE, a.T),
     lambda a: anp.einsum("ij,jk,kl->il", a, SQUARE, a.T), rand(2, 3)),
    ("tensordot", lambda a: np.tensordot(a, SQUARE, axes=1),
     lambda a: anp.tensordot(a, SQUARE, axes=1), rand(2, 4, 3)),
    ("tensordot pairs", lambda a, b=rand(4, 2, 3): np.tensordot(a, b, axes=([1, 2], [0, 2])),
     None, rand(2, 4, 3)),
    ("triu", lambda a: np.triu(a, 1), lambda a: anp.triu(a, 1), rand(3, 4)),
    ("tril", lambda a: np.tril(a, -1), lambda a: anp.tril(a, -1), rand(2, 4, 3)),
    ("diff", lambda a: np.diff(a), lambda a: anp.diff(a), rand(3, 4)),
    ("diff n axis", lambda a: np.diff(a, n=2, axis=0), lambda a: anp.diff(a, n=2, axis=0),
     rand(5, 3)),
    ("solve", lambda a, b=rand(3, 2): np.linalg.solve(a, b), None, well_conditioned(3, 3)),
    ("inv", lambda a: np.linalg.inv(a), lambda a: anp.linalg.inv(a), well_conditioned(3, 3)),
    ("inv batch", lambda a: np.linalg.inv(a), lambda a: anp.linalg.inv(a),
     well_conditioned(2, 3, 3)),
    ("det", lambda a: np.linalg.det(a), lambda a: anp.linalg.det(a), rand(3, 3)),
    ("det batch", lambda a: np.linalg.det(a), lambda a: anp.linalg.det(a), rand(2, 4, 4)),
    ("slogdet", lambda a: np.linalg.slogdet(a)[1], lambda a: anp.linalg.slogdet(a)[1],
     rand(3, 3)),
    ("trace", lambda a: np.trace(a), lambda a: anp.trace(a), rand(3, 4)),
    ("trace offset", lambda a: np.trace(a, 1), lambda a: anp.trace(a, 1), rand(3, 4)),
    ("diagonal", lambda a: np.diagonal(a), None, rand(3, 4)),
    ("sort", lambda a: np.sort(a), lambda a: anp.sort(a), rand(6)),
    ("roll", lambda a: np.roll(a, 2), lambda a: anp.roll(a, 2), rand(3, 4)),
    ("roll axis", lambda a: np.roll(a, -1, axis=1), lambda a: anp.roll(a, -1, axis=1),
     rand(3, 4)),
    ("repeat", lambda a: np.repeat(a, 3), lambda a: anp.repeat(a, 3), rand(3, 4)),
    ("repeat axis", lambda a: np.repeat(a, 2, axis=1), lambda a: anp.repeat(a, 2, axis=1),
     rand(3, 4)),
]
AUTOGRAD_CASES = [c for c in AUTOGRAD_CASES if c[2] is not None] + [
    (name, f, "check_grads", x) for name, f, ag, x in AUTOGRAD_CASES if ag is None]


@pytest.mark.parametrize("name,f,oracle,x", AUTOGRAD_CASES, ids=[c[0] for c in AUTOGRAD_CASES])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_against_autograd(name, f, oracle, x, dtype):
    x = np.asarray(x, dtype)[()]
    if oracle == "check_grads":
        check_grads(f, x)
        return
    weights = RNG.standard_normal(np.shape(f(x)))
    g = weighted_grad(f, x, weights)
    assert np.result_type(g) == dtype and np.shape(g) == np.shape(x)
    want = autograd.grad(lambda a: anp.sum(oracle(a) * weights))(np.asarray(x, np.float64))
    tol = 1e-10 if dtype == np.float64 else 2e-3
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol)


# ------------------------------------------------------------------ central differences

def separated(x, axis):
    """``|x|`` plus 0, 1, 2, ... along ``axis``: the sums of a max / min matrix norm
    apart, so that float32's step crosses no tie."""
    shape = [1] * x.ndim
    shape[axis] = -1
    return np.abs(x) + np.arange(x.shape[axis], dtype=float).reshape(shape)


# What autograd lacks (or gets wrong): checked in random directions by check_grads.
CENTRAL_CASES = [
    ("norm 1", lambda a: np.linalg.norm(a, 1, axis=1), rand(3, 4)),
    ("norm inf", lambda a: np.linalg.norm(a, np.inf), rand(5)),
    ("norm -inf", lambda a: np.linalg.norm(a, -np.inf, axis=0), rand(3, 4)),
    ("norm p=0.5", lambda a: np.linalg.norm(a, 0.5), rand(4)),
    ("matrix norm 1", lambda a: np.linalg.norm(a, 1), separated(rand(3, 4), 1)),
    ("matrix norm -1", lambda a: np.linalg.norm(a, -1, axis=(2, 0)),
     separated(rand(3, 2, 4), 0)),
    ("matrix norm inf", lambda a: np.linalg.norm(a, np.inf, axis=(0, 2), keepdims=True),
     separated(rand(3, 2, 4), 0)),
    ("matrix norm -inf", lambda a: np.linalg.norm(a, -np.inf), separated(rand(4, 3), 0)),
    ("matrix norm 2", lambda a: np.linalg.norm(a, 2), rand(3, 4)),
    ("matrix norm -2", lambda a: np.linalg.norm(a, -2, axis=(1, 2)), rand(2, 3, 3)),
    ("einsum broadcast", lambda a, b=rand(4, 1, 3, 2): np.einsum("...ij,...jk->...ik", a, b),
     rand(2, 1, 3)),
    ("einsum sublists", lambda a, b=rand(3, 5): np.einsum(a, [0, 1], b, [1, 2], [2, 0]),
     rand(4, 3)),
    ("einsum repeated", lambda a: np.einsum("iji->j", a), rand(3, 2, 3)),
    ("tensordot 0", lambda a, b=rand(2, 3): np.tensordot(a, b, axes=0), rand(3)),
    ("tensordot 2", lambda a, b=rand(2, 3, 4): np.tensordot(b, a), rand(3, 4, 2)),
    ("triu vector", lambda a: np.triu(a, 1), rand(4)),
    ("diff prepend append", lambda a: np.diff(a, prepend=1.5, append=[[2.0], [3.0], [4.0]]),
     rand(3, 4)),
    ("solve vector", lambda a, b=rand(3): np.linalg.solve(a, b), well_conditioned(3, 3)),
    ("solve batch", lambda a, b=rand(3): np.linalg.solve(a, b), well_conditioned(2, 3, 3)),
    ("slogdet batch", lambda a: np.linalg.slogdet(a).logabsdet, rand(2, 3, 3)),
    ("diagonal offset", lambda a: np.diagonal(a, 1), rand(3, 4)),
    ("diagonal axes", lambda a: np.diagonal(a, -1, axis1=2, axis2=0), rand(3, 2, 4)),
    ("trace axes", lambda a: np.trace(a, -1, axis1=-1, axis2=0), rand(3, 2, 4)),
    ("sort axis 0", lambda a: np.sort(a, axis=0), rand(4, 3)),
    ("sort axis None", lambda a: np.sort(a, axis=None), rand(3, 4)),
    ("take flat", lambda a: np.take(a, [[5, -7], [1, 1]]), rand(3, 4)),
    ("take axis", lambda a: np.take(a, [0, 2, 2, -1], axis=1), rand(3, 4)),
    ("take scalar index", lambda a: np.take(a, 2, axis=1), rand(3, 4)),
    ("take wrap", lambda a: np.take(a, [5, 9], axis=0, mode="wrap"), rand(3, 4)),
    ("take clip", lambda a: np.take(a, [5, -9], axis=-1, mode="clip"), rand(2, 3, 4)),
    ("take 0-d", lambda a: np.take(a, [0, 0, -1]), np.float64(3.0)),
    ("take_along_axis", lambda a: np.take_along_axis(a, np.array([[0, 0, 2, 1]]), axis=0),
     rand(3, 4)),
    ("take_along_axis None", lambda a: np.take_along_axis(a, np.array([0, 0, -2]), axis=None),
     rand(3, 4)),
    ("roll tuple", lambda a: np.roll(a, (1, -2), axis=(0, 2)), rand(2, 3, 4)),
    ("repeat counts", lambda a: np.repeat(a, [1, 0, 3], axis=0), rand(3, 4)),
    ("repeat flat counts", lambda a: np.repeat(a, [1, 0, 3, 1, 2, 1]), rand(2, 3)),
    ("repeat 0-d", lambda a: np.repeat(a, 3), np.float64(2.0)),
    ("tile", lambda a: np.tile(a, 2), rand(3, 4)),
    ("tile more reps", lambda a: np.tile(a, (2, 1, 3)), rand(3, 4)),
    ("tile more dims", lambda a: np.tile(a, (2, 2)), rand(2, 3, 4)),
    ("tile 0-d", lambda a: np.tile(a, 3), np.float64(2.0)),
    ("pad", lambda a: np.pad(a, 1), rand(3, 4)),
    ("pad widths", lambda a: np.pad(a, ((1, 2), (0, 3)), constant_values=2.0), rand(3, 4)),
    ("cumprod", lambda a: np.cumprod(a), rand(3, 4)),
    ("cumprod axis", lambda a: np.cumprod(a, axis=1), rand(2, 9, 3)),
    ("cumprod zeros", lambda a: np.cumprod(a, axis=1),
     np.array([[2.0, 0, 3, 0, 5, 1.5, 2], [1, 2, 0, 4, 0, 0, 3]])),
]


@pytest.mark.parametrize("name,f,x", CENTRAL_CASES, ids=[c[0] for c in CENTRAL_CASES])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_against_central_differences(name, f, x, dtype):
    check_grads(f, np.asarray(x, dtype)[()])


NONCONTIGUOUS = [
    ("norm", lambda a: np.linalg.norm(a, axis=0)),
    ("einsum", lambda a: np.einsum("ij,jk->ik", a, a.T)),
    ("inv", lambda a: np.linalg.inv(a[:3, :3] + 3 * np.eye(3))),
    ("det", lambda a: np.linalg.det(a[:3])),
    ("sort", lambda a: np.sort(a, axis=0)),
    ("take_along_axis", lambda a: np.take_along_axis(a, np.zeros((1, 3), int), axis=0)),
    ("cumprod", lambda a: np.cumprod(a, axis=0)),
    ("pad", lambda a: np.pad(a, (2, 1))),
    ("diagonal", lambda a: np.diagonal(a, 1)),
]


@pytest.mark.parametrize("name,f", NONCONTIGUOUS, ids=[c[0] for c in NONCONTIGUOUS])
def test_non_contiguous_inputs(name, f):
    base = rand(6, 8)
    view = base[::-2, 1::3].T          # (3, 3), strided both ways and transposed
    contiguous = np.ascontiguousarray(view)
    weights = RNG.standard_normal(np.shape(f(contiguous)))
    np.testing.assert_array_equal(weighted_grad(f, view, weights),
                                  weighted_grad(f, contiguous, weights))
    check_grads(f, view)


def test_several_differentiated_operands():
    a, b, c = rand(3, 4), rand(4, 5), rand(5)
    got = db.grad(lambda a, b, c: np.einsum("ij,jk,k->", a, b, c), argnums=(0, 1, 2))(a, b, c)
    want = autograd.grad(lambda a, b, c: anp.einsum("ij,jk,k->", a, b, c), (0, 1, 2))(a, b, c)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    check_grads(lambda a, b: np.tensordot(a, b, axes=([0, 1], [1, 0])), rand(3, 4, 5),
                rand(4, 3, 2))
    check_grads(np.linalg.solve, well_conditioned(3, 3), rand(3, 2))
    check_grads(np.linalg.solve, well_conditioned(2, 3, 3), rand(3, 2))
    check_grads(lambda a, p: np.diff(a, prepend=p), rand(3, 4), 2.0)      # a traced prepend
    check_grads(lambda a, c: np.pad(a, (1, 2), constant_values=c), rand(3, 4), 2.0)


# ------------------------------------------------------------------ closed forms

def test_closed_forms():
    a = rand(4, 4)
    np.testing.assert_allclose(db.grad(np.linalg.det)(a),
                               np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-12)
    np.testing.assert_allclose(db.grad(lambda m: np.linalg.slogdet(m)[1])(a),
                               np.linalg.inv(a).T, rtol=1e-12)
    x = rand(5)
    np.testing.assert_allclose(db.grad(np.linalg.norm)(x), x / np.linalg.norm(x), rtol=1e-15)
    np.testing.assert_allclose(db.grad(lambda m: np.trace(m))(rand(3, 4)), np.eye(3, 4))
    sign, logdet = np.linalg.slogdet(a)
    value = db.vjp(lambda m: np.linalg.slogdet(m), a)[0]
    assert type(value) is type(np.linalg.slogdet(a)) and value == (sign, logdet)


def test_det_at_singular_matrices_is_the_cofactor_matrix():
    # det is a polynomial: differentiable everywhere, d det / dA = cof(A), also where A
    # has no inverse.
    def cofactors(m):
        n = len(m)
        return np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(m, i, 0), j, 1))
                          for j in range(n)] for i in range(n)])
    for m in (np.array([[1.0, 2, 3], [2, 4, 6], [0, 1, 1]]), np.zeros((3, 3)),
              np.array([[1.0, 2], [2, 4]]), np.ones((4, 4))):
        assert np.linalg.det(m) == 0
        np.testing.assert_allclose(db.grad(np.linalg.det)(m), cofactors(m), atol=1e-12)


def test_slogdet_at_a_singular_matrix_raises():
    with pytest.raises(np.linalg.LinAlgError):
        db.grad(lambda m: np.linalg.slogdet(m)[1])(np.zeros((2, 2)))


def test_norm_at_zero_is_zero():
    # The subgradient 0, as hypot at the origin and abs at 0 (README conventions).
    for f, x in [(lambda a: np.linalg.norm(a), np.zeros(3)),
                 (lambda a: np.linalg.norm(a), np.zeros((2, 3))),
                 (lambda a: np.linalg.norm(a, axis=1), np.array([[0.0, 0], [3, 4]])),
                 (lambda a: np.linalg.norm(a, 1), np.zeros(3)),
                 (lambda a: np.linalg.norm(a, np.inf), np.zeros(3)),
                 (lambda a: np.linalg.norm(a, 3), np.zeros(3)),
                 (lambda a: np.linalg.norm(a, 0.5), np.array([0.0, 2.0])),
                 (lambda a: np.linalg.norm(a, "fro"), np.zeros((2, 2))),
                 (lambda a: np.linalg.norm(a, 2), np.zeros((2, 2))),
                 (lambda a: np.linalg.norm(a, "nuc"), np.zeros((2, 2))),
                 (lambda a: np.linalg.norm(a, 1), np.zeros((2, 2)))]:
        g = db.grad(lambda a: np.sum(f(a)))(x)
        assert np.all(np.isfinite(g)), g
    g = db.grad(lambda a: np.sum(np.linalg.norm(a, axis=1)))(np.array([[0.0, 0], [3, 4]]))
    np.testing.assert_array_equal(g, [[0, 0], [0.6, 0.8]])
    # (1.0 to rounding: norm is sqrt(2)**2, 2 + 4e-16 where the libm's pow rounds so)
    np.testing.assert_allclose(db.grad(lambda a: np.linalg.norm(a, 0.5))(
        np.array([0.0, 2.0])), [0.0, 1.0], rtol=1e-15, atol=0)
    np.testing.assert_array_equal(db.grad(np.linalg.norm)(np.zeros(3)), np.zeros(3))


def test_norm_ties_share_and_count_norm_is_constant():
    x = np.array([1.0, -3.0, 3.0])
    np.testing.assert_array_equal(db.grad(lambda a: np.linalg.norm(a, np.inf))(x),
                                  [0, -0.5, 0.5])
    np.testing.assert_array_equal(db.grad(lambda a: np.linalg.norm(a, 0))(x), np.zeros(3))
    m = np.array([[1.0, -2.0], [-1.0, 2.0]])    # matrix 1-norm: column sums 2 and 4
    np.testing.assert_array_equal(db.grad(lambda a: np.linalg.norm(a, 1))(m),
                                  [[0, -1], [0, 1]])


def test_sort_ties_follow_the_stable_sort():
    x = np.array([2.0, 1.0, 2.0, 1.0])
    g = db.grad(lambda a: np.sum(np.sort(a) * np.arange(4.0)))(x)
    np.testing.assert_array_equal(g, [2, 0, 3, 1])


def brute_cumprod_grad(x, w):
    g = np.zeros_like(x)
    for k in range(len(x)):
        for i in range(k, len(x)):
            g[k] += w[i] * np.prod(np.delete(x[:i + 1], k))
    return g


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, -2.0, 0.5, 3.0]), min_size=1, max_size=12))
def test_cumprod_with_zeros_is_exact(values):
    # Small integers and halves: every product is exact, so the scan's sums equal the
    # brute force's in any order.
    x = np.array(values)
    w = np.arange(1.0, len(x) + 1)
    g = weighted_grad(np.cumprod, x, w)
    np.testing.assert_array_equal(g, brute_cumprod_grad(x, w))


def test_cumprod_nan_safe():
    # An infinite factor after a zero cotangent: 0, not nan (the NaN-safe convention).
    x = np.array([2.0, np.inf, 3.0])
    g = db.grad(lambda a: np.cumprod(a)[0])(x)
    np.testing.assert_array_equal(g, [1.0, 0.0, 0.0])


def test_take_repeats_add_up():
    x = rand(5)
    g = db.grad(lambda a: np.sum(np.take(a, [1, 1, 1, 4, -1])))(x)
    np.testing.assert_array_equal(g, [0, 3, 0, 0, 2])
    many = np.array([0, 3, 3] * 20)     # above the compiled scatter's threshold
    g = db.grad(lambda a: np.sum(np.take_along_axis(a, many, axis=None)))(x)
    np.testing.assert_array_equal(g, [20, 0, 0, 40, 0])


def test_errors():
    with pytest.raises(NotImplementedError, match="mode='edge'"):
        db.grad(lambda a: np.sum(np.pad(a, 1, mode="edge")))(rand(3))
    with pytest.raises(NotImplementedError, match="order="):
        db.grad(lambda a: np.sum(np.sort(a, order="x")))(rand(3))
    with pytest.raises(TypeError, match="out="):
        db.grad(lambda a: np.sum(np.take(a, [0], out=np.zeros(1))))(rand(3))
    with pytest.raises(NotImplementedError, match="constant_values"):
        db.grad(lambda c: np.sum(np.pad(c * np.ones(2), 1, constant_values=np.stack([c, c]))))(1.0)


def test_integer_results_are_constants():
    x = rand(3, 3)
    assert db.grad(lambda a: np.sum(a) + np.trace(a, dtype=int))(x).tolist() == \
        np.ones((3, 3)).tolist()
    assert db.grad(lambda a: np.sum(a) + np.cumprod(a, dtype=int)[-1])(x).tolist() == \
        np.ones((3, 3)).tolist()
    assert db.grad(lambda a: np.sum(a) + np.einsum("ii", a, dtype=int, casting="unsafe"))(x).tolist() == \
        np.ones((3, 3)).tolist()


# ------------------------------------------------------------------ jit replays

def _lj(x):
    i, j = np.triu_indices(len(x), 1)
    r = np.linalg.norm(x[i] - x[j], axis=1)
    s6 = (1.0 / r) ** 6
    return np.sum(4 * (s6 * s6 - s6))


JIT_PROGRAMS = [
    ("lj norm", _lj, lambda: rand(6, 3) * 2),
    ("einsum det solve", lambda a: np.einsum("ij,ij->", a, a) + np.linalg.det(a)
     + np.sum(np.linalg.solve(a, np.ones(3))), lambda: well_conditioned(3, 3)),
    ("sort take cumprod", lambda a: np.sum(np.sort(a) * np.arange(5.0))
     + np.sum(np.take(a, [0, 0, 4])) + np.sum(np.cumprod(a)), lambda: rand(5)),
    ("pad roll tile diff", lambda a: np.sum(np.diff(np.pad(np.roll(np.tile(a, 2), 1), 1)) ** 2)
     + np.trace(np.tensordot(a, a, axes=0)), lambda: rand(4)),
    ("slogdet inv triu", lambda a: np.linalg.slogdet(a)[1] + np.sum(np.triu(np.linalg.inv(a)))
     + np.sum(np.repeat(np.diagonal(a), [1, 2, 0])), lambda: well_conditioned(3, 3)),
]


@pytest.mark.parametrize("name,f,make", JIT_PROGRAMS, ids=[c[0] for c in JIT_PROGRAMS])
def test_jit_replays_equal_eager(name, f, make):
    calls = [(make(),) for _ in range(4)]
    compare_calls(f, calls)
    compare_calls(f, [(np.asarray(c[0], np.float32),) for c in calls])


def test_constants_of_no_array_library_are_not_taken_for_lazy_arrays():
    """Lists beside traced values (the rules' Dask paths are for Dask arrays only)."""
    x = np.array([3.0, 4.0])
    np.testing.assert_array_equal(db.grad(lambda x: np.dot(x, [1.0, 2.0]))(x), [1.0, 2.0])
    np.testing.assert_array_equal(
        db.grad(lambda x: np.sum(np.concatenate([x, [1.0, 2.0]]) ** 2))(x), [6.0, 8.0])
    np.testing.assert_array_equal(
        db.grad(lambda x: x[0] * np.sum(np.reshape([1.0, 2.0], (2, 1)) * x))(x), [30.0, 9.0])


# ---------------------------------------------------------------- fast paths, NumPy's bits

SPECIALS = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e300, -1e300, 1e-310, 5e-324, 1.0, -1.0]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 40), lead=st.sampled_from([(), (3,)]), width=st.integers(1, 7),
       dtype=st.sampled_from([np.float64, np.float32]), seed=st.integers(0, 2 ** 16),
       keepdims=st.booleans())
def test_a_sum_over_a_short_last_axis_gives_numpys_bits(rows, lead, width, dtype, seed,
                                                        keepdims):
    # (dualbcast.rules.reductions: column by column, as NumPy adds a short row)
    rng = np.random.default_rng(seed)
    shape = lead + (rows, width)
    a = (rng.normal(size=shape) * 10.0 ** rng.integers(-12, 12, shape)).astype(dtype)
    special = rng.random(shape) < 0.25
    a[special] = rng.choice(np.array(SPECIALS, dtype), int(special.sum()))
    with np.errstate(all="ignore"):
        want = np.add.reduce(a, axis=-1, keepdims=keepdims)
        value, tangent = db.jvp(lambda a: np.sum(a, axis=-1, keepdims=keepdims), (a,),
                                (np.ones_like(a),))
        traced = db.value_and_grad(lambda a: np.sum(np.sum(a, axis=a.ndim - 1) * 1.5))(a)
    assert value.dtype == want.dtype and value.shape == want.shape
    assert value.tobytes() == want.tobytes()
    assert traced[1].shape == a.shape and np.all(traced[1] == np.float32(1.5))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), shape=st.sampled_from([(4,), (5, 2), (3, 2, 2)]),
       seed=st.integers(0, 2 ** 16), kind=st.sampled_from(["int64", "int32", "uint8"]))
def test_a_gather_by_an_integer_array_is_numpys_indexing(n, shape, seed, kind):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n,) + shape[1:])
    index = rng.integers(0 if kind == "uint8" else -n, n, shape).astype(kind)
    value, gradient = db.value_and_grad(lambda x: np.sum(np.sin(x[index])))(x)
    assert value == np.sum(np.sin(x[index]))
    expected = np.zeros_like(x)
    np.add.at(expected, index, np.cos(x[index]))
    np.testing.assert_array_equal(gradient, expected)
    out_of_range = np.where(index.astype(np.int64) == 0, n, index)     # (n: past the end)
    out_of_range.flat[0] = n
    with pytest.raises(IndexError):
        db.grad(lambda x: np.sum(x[out_of_range]))(x)
