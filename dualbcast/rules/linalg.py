"""VJPs and JVPs of products (``matmul`` and ``@``, ``dot``, ``outer``) and of
``np.linalg``: ``solve``, ``inv``, ``det``, ``slogdet``, ``norm``.

Every vjp and jvp is written with NumPy functions that have rules themselves, so that
it can be differentiated again (higher order), but where noted (the SVD's)."""
import operator

import numpy as np

from ..core.box import apply, constant, unbox
from ..core.registry import defjvp, defrule
from .common import as_array, nan_safe, no_out, shape_of, unbroadcast


def multilinear(func):
    """The jvp of ``func``, linear in each of its traced arguments separately (a
    product, a contraction): the sum over the arguments with a tangent of ``func``
    with that argument replaced by its tangent."""
    def jvp(tangents, ans, *args, **kwargs):
        total = None
        for i, t in enumerate(tangents):
            if t is not None:
                term = func(*args[:i], t, *args[i + 1:], **kwargs)
                total = term if total is None else total + term
        return total
    return jvp


def _as_matrices(g, a, b):
    # matmul treats a vector as a matrix with a 1 inserted, then removed: do the same to
    # the operands and the cotangent, so one pair of formulas covers every case.
    a, b = as_array(a), as_array(b)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = as_array(g)
    if b.ndim == 1:
        g2 = g2[..., None]
    if a.ndim == 1:
        g2 = g2[..., None, :]
    return g2, a2, b2


def _matmul_vjp_a(g, ans, a, b):
    g2, a2, b2 = _as_matrices(g, a, b)
    return unbroadcast(g2 @ np.swapaxes(b2, -1, -2), np.shape(a2)).reshape(np.shape(a))


def _matmul_vjp_b(g, ans, a, b):
    g2, a2, b2 = _as_matrices(g, a, b)
    return unbroadcast(np.swapaxes(a2, -1, -2) @ g2, np.shape(b2)).reshape(np.shape(b))


defrule(np.matmul, vjps=(_matmul_vjp_a, _matmul_vjp_b))


def _dot_rule(a, b, out=None):
    no_out("dot", out)
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    if np.ndim(a) > 2 or np.ndim(b) > 2:
        raise NotImplementedError("dualbcast: numpy.dot of arrays with more than 2 "
                                  "dimensions has no gradient rule; use np.matmul")
    return apply(np.dot, (_matmul_vjp_a, _matmul_vjp_b), (a, b))   # dot == matmul here


def _outer_vjp_a(g, ans, a, b):
    return (g @ np.ravel(b)).reshape(np.shape(a))


def _outer_vjp_b(g, ans, a, b):
    return (np.ravel(a) @ g).reshape(np.shape(b))


def _outer_rule(a, b, out=None):
    no_out("outer", out)
    return apply(np.outer, (_outer_vjp_a, _outer_vjp_b), (a, b))


defrule(np.dot, trace=_dot_rule)
defrule(np.outer, trace=_outer_rule)
for _product in (np.matmul, operator.matmul, np.dot, np.outer):     # (x @ y: operator's)
    defjvp(_product, multilinear(_product))


# ------------------------------------------------------------------ solve, inv, det
# Every backward here is written with NumPy functions that have rules themselves
# (matmul, swapaxes, solve, inv), so that it can be differentiated again.

def _mT(a):
    return np.swapaxes(a, -1, -2)


def _solve_vjp_b_batched(g, a, b):
    # The cotangent of b before summing over the batch axes it was broadcast along.
    # NumPy 2: b is a vector (M,) only when 1-d, else a stack of matrices (..., M, K).
    if np.ndim(b) == 1:
        return np.linalg.solve(_mT(a), np.expand_dims(g, -1))[..., 0]
    return np.linalg.solve(_mT(a), g)


def _solve_vjp_a(g, ans, a, b):
    # x = A^-1 b: dA's cotangent is -(A^-T g) x^T.
    gb = _solve_vjp_b_batched(g, a, b)
    if np.ndim(b) == 1:
        return unbroadcast(-(np.expand_dims(gb, -1) @ np.expand_dims(ans, -2)), np.shape(a))
    return unbroadcast(-(gb @ _mT(ans)), np.shape(a))


def _solve_vjp_b(g, ans, a, b):
    return unbroadcast(_solve_vjp_b_batched(g, a, b), np.shape(b))


def _solve_rule(a, b):
    return apply(np.linalg.solve, (_solve_vjp_a, _solve_vjp_b), (a, b))


def _solve_jvp(tangents, ans, a, b):
    # A x = b: A dx = db - dA x.
    # NumPy 2: b is a vector (M,) only when 1-d; x then a vector of each matrix of a's
    # stack: made a column and back.
    ta, tb = tangents
    vector = np.ndim(b) == 1
    if vector:
        ans = np.expand_dims(ans, -1)
        tb = None if tb is None else np.expand_dims(tb, -1)
    rhs = tb
    if ta is not None:
        rhs = -(ta @ ans) if rhs is None else rhs - ta @ ans
    dx = np.linalg.solve(a, rhs)
    return dx[..., 0] if vector else dx


def _inv_vjp(g, ans, a):
    # d inv(A) = -inv(A) dA inv(A): the cotangent -inv(A)^T g inv(A)^T.
    ans_t = _mT(ans)
    return -(ans_t @ g @ ans_t)


def _det_vjp(g, ans, a):
    return nan_safe(np.expand_dims(g, (-1, -2)), _det_local(ans, a))


def _det_local(ans, a):
    # d det(A) = det(A) inv(A)^T, the adjugate's transpose; at a singular A, where the
    # inverse does not exist but the derivative does, the adjugate from the SVD.
    if np.all(ans != 0):
        try:
            return np.expand_dims(ans, (-1, -2)) * _mT(np.linalg.inv(a))
        except np.linalg.LinAlgError:
            pass
    return _adjugate_t(a)


def _det_jvp(tangents, ans, a):
    # d det = <adj(A)^T, dA>: det(A) trace(inv(A) dA) where A is invertible.
    return np.sum(nan_safe(tangents[0], _det_local(ans, a)), axis=(-2, -1))


def _adjugate_t(a):
    """adj(A)^T for square A (stacks too), valid at singular A: with A = U S V^T,
    adj(A) = det(U) det(V) V adj(S) U^T, adj(S) = diag(product of the *other* singular
    values) -- formed from exclusive cumulative products, without dividing.  (First
    order only: np.linalg.svd has no rule.)"""
    u, s, vh = np.linalg.svd(a)
    n = s.shape[-1]
    ones = np.ones(s.shape[:-1] + (1,), s.dtype)
    left = np.cumprod(np.concatenate([ones, s[..., :n - 1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([ones, s[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    others = left * right
    sign = np.linalg.det(u) * np.linalg.det(vh)
    adj = (_mT(vh) * others[..., None, :]) @ _mT(u) * sign[..., None, None]
    return _mT(adj)


def _slogdet_vjp(g, ans, a):
    # d log|det A| = inv(A)^T.  At a singular A (log|det| = -inf) it does not exist:
    # np.linalg.inv raises its LinAlgError.
    return np.expand_dims(g, (-1, -2)) * _mT(np.linalg.inv(a))


def _slogdet_jvp(tangents, ans, a):
    # d log|det A| = trace(inv(A) dA).
    return np.sum(_mT(np.linalg.inv(a)) * tangents[0], axis=(-2, -1))


def _logabsdet(a):
    return np.linalg.slogdet(a)[1]


def _sign_of_det(a):
    return np.linalg.slogdet(a)[0]


_SlogdetResult = type(np.linalg.slogdet(np.eye(1)))


def _slogdet_rule(a):
    # The sign is piecewise constant (a constant, checked again by a replay), the log
    # of the absolute value is traced.
    return _SlogdetResult(constant(_sign_of_det, (a,)), apply(_logabsdet, (_slogdet_vjp,), (a,)))


defrule(np.linalg.solve, trace=_solve_rule)
defrule(np.linalg.inv, trace=lambda a: apply(np.linalg.inv, (_inv_vjp,), (a,)))
defrule(np.linalg.det, trace=lambda a: apply(np.linalg.det, (_det_vjp,), (a,)))
defrule(np.linalg.slogdet, trace=_slogdet_rule)
defjvp(np.linalg.solve, _solve_jvp)
defjvp(np.linalg.inv, lambda tangents, ans, a: -(ans @ tangents[0] @ ans))   # -A^-1 dA A^-1
defjvp(np.linalg.det, _det_jvp)
defjvp(_logabsdet, _slogdet_jvp)


# ------------------------------------------------------------------ norm

def _norm_case(ndim, ord, axis):
    """``(kind, axes)`` of ``np.linalg.norm(x, ord, axis)`` as NumPy decides it: kind
    ``"2"`` (the Euclidean or Frobenius norm), ``"p"`` (another vector norm), ``"max"``
    / ``"min"`` (vector inf / -inf), ``"1"``, ``"0"``, ``"colmax"``, ``"colmin"``,
    ``"rowmax"``, ``"rowmin"`` (matrix 1, -1, inf, -inf), ``"svd"`` (matrix 2, -2,
    'nuc'); ``axes`` the reduced axes (None for the whole array)."""
    if axis is None:
        if ord is None or (ord in ("f", "fro") and ndim == 2) or (ord == 2 and ndim == 1):
            return "2", None
        axis = tuple(range(ndim))
    elif not isinstance(axis, tuple):
        axis = (int(axis),)
    axes = tuple(int(a) % ndim if ndim else int(a) for a in axis)
    if len(axes) == 1:
        if isinstance(ord, str):
            return None, axes           # NumPy raises its ValueError
        kinds = {np.inf: "max", -np.inf: "min", 0: "0", 1: "1", 2: "2", None: "2"}
        return kinds.get(ord, "p"), axes
    if len(axes) == 2:
        kinds = {1: "colmax", -1: "colmin", np.inf: "rowmax", -np.inf: "rowmin",
                 None: "2", "fro": "2", "f": "2", 2: "svd", -2: "svd", "nuc": "svd"}
        return kinds.get(ord), axes
    return None, axes


def _norm_rule(x, ord=None, axis=None, keepdims=False):
    kind, _ = _norm_case(np.ndim(unbox(x)), ord, axis)
    kwargs = {"ord": ord, "axis": axis, "keepdims": keepdims}
    if kind == "0" or kind is None:     # a count of nonzeros (or NumPy's error): constant
        return constant(np.linalg.norm, (x,), kwargs)
    return apply(np.linalg.norm, (_norm_vjp,), (x,), kwargs)


def _norm_vjp(g, ans, x, ord=None, axis=None, keepdims=False):
    # Where the norm is 0 its gradient is 0 (the subgradient 0, as hypot at the origin
    # and abs at 0); ties of a max/min norm share the cotangent (as np.max).
    kind, axes = _norm_case(np.ndim(x), ord, axis)
    if axes is not None and not keepdims:
        g, ans = np.expand_dims(g, axes), np.expand_dims(ans, axes)
    if kind == "2":
        return nan_safe(g, x / np.where(ans == 0, 1, ans))
    if kind == "svd":
        return nan_safe(g, _svd_norm_local(x, ord, axes))
    sign = np.sign(x)
    if kind == "1":
        return nan_safe(g, sign)
    if kind == "p":
        safe = np.where(ans == 0, 1, ans)
        return nan_safe(g, nan_safe(sign, (np.abs(x) / safe) ** (ord - 1)))
    if kind in ("max", "min"):
        summed, share_over = np.abs(x), axes
    else:                               # a matrix 1 / inf norm: the winning column / row
        row, col = axes
        summed_over, share_over = (row, (col,)) if kind.startswith("col") else (col, (row,))
        summed = np.sum(np.abs(x), axis=summed_over, keepdims=True)
    winners = summed == ans
    count = np.sum(winners, axis=share_over, keepdims=True)
    return nan_safe(g, sign * (winners / count))


def _norm_jvp(tangents, ans, x, ord=None, axis=None, keepdims=False):
    # The tangent times the local derivative the vjp uses, summed over the reduced axes.
    _, axes = _norm_case(np.ndim(x), ord, axis)
    local = _norm_vjp(np.ones(shape_of(ans), np.result_type(ans)), ans, x, ord, axis, keepdims)
    return np.sum(nan_safe(tangents[0], local), axis=axes, keepdims=keepdims)


def _svd_norm_local(x, ord, axes):
    """d/dx of the matrix 2-norm (the largest singular value: u1 v1^T), -2 (the
    smallest) or nuclear norm (U V^T), over the nonzero singular values only: 0 where
    the norm is 0 (first order only: np.linalg.svd has no rule)."""
    moved = np.moveaxis(x, axes, (-2, -1))
    u, s, vh = np.linalg.svd(moved, full_matrices=False)
    if ord == 2:
        u, s, vh = u[..., :1], s[..., :1], vh[..., :1, :]
    elif ord == -2:
        u, s, vh = u[..., -1:], s[..., -1:], vh[..., -1:, :]
    local = (u * (s > 0)[..., None, :]) @ vh
    return np.moveaxis(local, (-2, -1), axes)


defrule(np.linalg.norm, trace=_norm_rule)
defjvp(np.linalg.norm, _norm_jvp)
