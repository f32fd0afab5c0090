"""VJPs and JVPs of products (``matmul`` and ``@``, ``dot``, ``outer``) and of
``np.linalg``: ``solve``, ``inv``, ``det``, ``slogdet``, ``norm``.

Every vjp and jvp is written with NumPy functions that have rules themselves, so that
it can be differentiated again (higher order); the matrix norms that the SVD computes
(2, -2, 'nuc') have a second derivative of their own instead (third order raises)."""
import operator

import numpy as np

from ..core.box import Box, apply, constant, inner_foreign, unbox
from ..core.tape import Traced
from ..core.registry import define
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
    a, b = as_array(a, "np.matmul (@, np.dot)"), as_array(b, "np.matmul (@, np.dot)")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = as_array(g, "np.matmul (@, np.dot)")
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
    if _tall(_innermost(a2), _innermost(g2)):
        return apply(tall_transposed_product, _TALL_VJPS, (a2, g2)).reshape(np.shape(b))
    return unbroadcast(np.swapaxes(a2, -1, -2) @ g2, np.shape(b2)).reshape(np.shape(b))


define(np.matmul, vjps=(_matmul_vjp_a, _matmul_vjp_b))


# The cotangent of ``w`` in ``X @ w``, a tall design matrix ``X`` (n, p): ``X.T @ g``.
# OpenBLAS's transposed product of a C-ordered matrix and a column ran 2.5x slower past
# the cache than in blocks of rows that fit in it (10^5 x 10: 415 µs, against 155 µs in
# blocks of 8192 rows; 10^6 x 10: 5.8 ms against 3.1), for 4 to 16 columns (2 columns:
# as fast either way; 32: slower in blocks) and one cotangent column (several: as fast
# either way), one thread and two.  Blocks of ~640 KiB; the blocks' products added in
# order, so the bits follow from the shapes alone (eager and jitted alike).
_TALL_ROWS, _TALL_COLUMNS, _TALL_BLOCK = 65536, (4, 16), 81920


def _innermost(x):
    while type(x) is Box:           # (a value of nested traces: the arrays they trace)
        x = x.value
    return x


def _tall(a, g):
    return (type(a) is np.ndarray and type(g) is np.ndarray and a.ndim == 2 and g.ndim == 2
            and g.shape[1] == 1 and a.shape[0] >= _TALL_ROWS and a.flags.c_contiguous
            and _TALL_COLUMNS[0] <= a.shape[1] <= _TALL_COLUMNS[1]
            and a.dtype == g.dtype == np.float64)


def tall_transposed_product(a, g):
    """``a.T @ g`` for a tall C-ordered matrix ``a`` and a column ``g``, as the sum of
    the products of blocks of rows (see above)."""
    if type(a) is Box or type(g) is Box:       # (traced by an enclosing trace)
        return apply(tall_transposed_product, _TALL_VJPS, (a, g))
    rows = _TALL_BLOCK // a.shape[1]
    total = a[:rows].T @ g[:rows]
    for start in range(rows, a.shape[0], rows):
        total += a[start:start + rows].T @ g[start:start + rows]
    return total


# (its derivatives: a product, linear in each of a and g)
_TALL_VJPS = (lambda ct, ans, a, g: g @ np.swapaxes(ct, -1, -2),
              lambda ct, ans, a, g: a @ ct)
define(tall_transposed_product, jvp=multilinear(tall_transposed_product))


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


define(np.dot, trace=_dot_rule)
define(np.outer, trace=_outer_rule)
for _product in (np.matmul, operator.matmul, np.dot, np.outer):     # (x @ y: operator's)
    define(_product, jvp=multilinear(_product))


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
    # d det(A) = det(A) inv(A)^T, the adjugate's transpose, where A is well conditioned;
    # at a singular A, where the inverse does not exist but the derivative does, and
    # at a nearly singular one, where the derivatives of det(A) inv(A) cancel
    # catastrophically (a Hessian off by O(1) at a condition number of 1e16), the
    # adjugate of a lifted matrix, exact at any A (_adjugate_t).
    batched = inner_foreign((ans, a))
    if batched is not None:         # (a vmap's: chosen for the whole stack, below)
        return batched.trace.function(_det_local, (ans, a), {})
    if isinstance(_innermost(ans), Traced) or isinstance(_innermost(a), Traced):
        # Values of a tape inside a vmap: no branch can be taken per example, and both
        # formulas are exact, so the stacks' values choose one for every example.
        if _well_conditioned_inverse(_plain(ans), _plain(a)) is not None:
            return np.expand_dims(ans, (-1, -2)) * _mT(np.linalg.inv(a))
        return _adjugate_t(a)
    inverse = _well_conditioned_inverse(ans, a)
    if inverse is not None:
        return np.expand_dims(ans, (-1, -2)) * _mT(inverse)
    return _adjugate_t(a)


def _well_conditioned_inverse(ans, a):
    """``inv(a)`` if every determinant in ``ans`` is nonzero and every matrix of ``a``
    invertible and well conditioned, else None."""
    if not np.all(ans != 0):
        return None
    try:
        inverse = np.linalg.inv(a)
    except np.linalg.LinAlgError:
        return None
    return inverse if _well_conditioned(a, inverse) else None


def _plain(x):
    """The plain array inside ``x``, through boxes and batches."""
    while isinstance(x, Traced):
        x = x.value
    return x


# The condition number (1-norm) above which det's derivatives come from _adjugate_t
# (whose lifted matrix B has a condition number below about 1 / _LIFTED_BELOW).
_ILL_CONDITIONED = 1e4


def _well_conditioned(a, inverse):
    if isinstance(a, Traced) or isinstance(inverse, Traced):
        return constant(_well_conditioned, (a, inverse))    # (on the values: a branch)
    condition = np.linalg.norm(a, 1, axis=(-2, -1)) * np.linalg.norm(inverse, 1, axis=(-2, -1))
    return bool(np.all(condition < _ILL_CONDITIONED))


def _det_jvp(tangents, ans, a):
    # d det = <adj(A)^T, dA>: det(A) trace(inv(A) dA) where A is invertible.
    return np.sum(nan_safe(tangents[0], _det_local(ans, a)), axis=(-2, -1))


def _adjugate_t(a):
    """adj(A)^T for square A (stacks too), valid at singular A, written with det, inv
    and products so that it is differentiated like them, to any order.  With constant
    P, Q (n x k) that make B = A + P Q^T invertible, Sylvester's determinant identity and
    Woodbury's inverse give adj(A) = det(B) (det(C) inv(B) + inv(B) P adj(C) Q^T inv(B)),
    C = I - Q^T inv(B) P: an identity of polynomials in A, so it holds at a singular A
    too, and its derivatives are those of det and inv at the invertible B.  P, Q lift
    the k smallest singular values (:func:`_lift`); C (k x k) is then small, and its
    determinant and adjugate are polynomials (:func:`_faddeev_leverrier`)."""
    p, q = _lift(a)
    b = a + p @ _mT(q)
    b_inv = np.linalg.inv(b)
    det_c, adj_c = _faddeev_leverrier(np.eye(p.shape[-1]) - _mT(q) @ b_inv @ p)
    adj = np.expand_dims(np.linalg.det(b), (-1, -2)) * (
        np.expand_dims(det_c, (-1, -2)) * b_inv + b_inv @ p @ adj_c @ _mT(q) @ b_inv)
    return _mT(adj)


# Singular values below this fraction of the largest are lifted by _lift: B's condition
# number stays below about its inverse, and C below has that many rows.
_LIFTED_BELOW = 1e-3


def _lift(a):
    """``(P, Q)`` for :func:`_adjugate_t`, constants from ``a``'s value: with a = U S
    V^T, P = s_max U_k and Q = V_k, the singular vectors of the k smallest singular
    values (k: as many as lie below ``_LIFTED_BELOW`` s_max in any matrix of the stack,
    at least 1), so that B = a + P Q^T has those raised by s_max.  Any P, Q making B
    invertible give the exact adjugate: the choice only keeps B well conditioned."""
    if isinstance(a, Traced):
        return constant(_lift, (a,))    # (its value may be traced by enclosing traces)
    u, s, vh = np.linalg.svd(a)
    n = s.shape[-1]
    top = s[..., :1]
    k = max(1, int(np.max(np.sum(s <= _LIFTED_BELOW * top, axis=-1), initial=0)))
    scale = np.where(top > 0, top, 1)
    return u[..., :, n - k:] * scale[..., None, :], _mT(vh[..., n - k:, :])


def _faddeev_leverrier(c):
    """``(det(C), adj(C))`` of square C (stacks too) from the Faddeev-LeVerrier
    recurrence: products and traces only (no division by a pivot), so defined and
    differentiable at any C.  (For the small C of :func:`_adjugate_t`.)"""
    k = c.shape[-1]
    eye = np.eye(k)
    m = np.broadcast_to(eye, c.shape)
    coefficient = -np.trace(c, axis1=-2, axis2=-1)
    for i in range(2, k + 1):
        m = c @ m + np.expand_dims(coefficient, (-1, -2)) * eye
        coefficient = -np.trace(c @ m, axis1=-2, axis2=-1) / i
    # det(lambda I - C) = lambda^k + ... + coefficient: det(C) = (-1)^k coefficient,
    # and C m + coefficient I = 0 makes adj(C) = (-1)^(k-1) m.
    sign = -1.0 if k % 2 else 1.0
    return sign * coefficient, -sign * m


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


define(np.linalg.solve, trace=_solve_rule, jvp=_solve_jvp)
define(np.linalg.inv, trace=lambda a: apply(np.linalg.inv, (_inv_vjp,), (a,)),
       jvp=lambda tangents, ans, a: -(ans @ tangents[0] @ ans))       # -A^-1 dA A^-1
define(np.linalg.det, trace=lambda a: apply(np.linalg.det, (_det_vjp,), (a,)), jvp=_det_jvp)
define(np.linalg.slogdet, trace=_slogdet_rule)
define(_logabsdet, jvp=_slogdet_jvp)


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
    """d/dx of the matrix 2-norm (the largest singular value), -2 (the smallest) or the
    nuclear norm (their sum) over ``axes``: U diag(w) V^T, ``w`` the weights of the
    singular values in the norm (:func:`_singular_weights`).  Traced, its derivative
    is the norm's Hessian (:func:`_svd_norm_hessian_times`)."""
    return apply(_svd_norm_gradient, (_svd_norm_gradient_vjp,), (x,),
                 {"ord": ord, "axes": axes})


def _svd_norm_gradient(x, ord, axes):
    if isinstance(x, Traced):           # traced by enclosing traces too: recorded there
        return _svd_norm_local(x, ord, axes)
    u, s, vh = np.linalg.svd(np.moveaxis(x, axes, (-2, -1)), full_matrices=False)
    local = (u * _singular_weights(s, ord)[..., None, :]) @ vh
    return np.moveaxis(local, (-2, -1), axes)


def _singular_weights(s, ord):
    """The weight of each singular value (``s``, LAPACK's descending order) in the
    gradient of the norm ``ord``: 1 for 'nuc', but 0 for a zero singular value (where
    the norm has no derivative: the subgradient of least norm, as abs at 0); for 2 and
    -2 the largest / smallest, shared equally between tied ones (where the norm has no
    derivative either: the subgradient JAX's gradient gives), 0 if it is 0."""
    if ord == "nuc":
        return (s > 0).astype(s.dtype)
    extreme = s[..., :1] if ord == 2 else s[..., -1:]
    tied = (s == extreme) & (extreme > 0)
    return tied / np.maximum(np.sum(tied, axis=-1, keepdims=True), 1).astype(s.dtype)


def _svd_norm_gradient_vjp(g, ans, x, ord, axes):
    # The gradient's Jacobian is the norm's Hessian: symmetric, so its vjp is its jvp.
    return _svd_norm_hessian_times(x, g, ord, axes)


def _svd_norm_hessian_times(x, e, ord, axes):
    """The Hessian of ``np.linalg.norm(x, ord, axes)`` (summed over the other axes)
    times ``e``, recorded when traced: linear in ``e`` to any order, refused as third
    order in ``x``."""
    return apply(_svd_norm_hessian_product, _HESSIAN_TIMES_VJPS, (x, e),
                 {"ord": ord, "axes": axes})


def _svd_norm_hessian_product(x, e, ord, axes):
    if isinstance(x, Traced) or isinstance(e, Traced):    # traced by enclosing traces
        return _svd_norm_hessian_times(x, e, ord, axes)
    moved = np.moveaxis(x, axes, (-2, -1))
    e = np.moveaxis(e, axes, (-2, -1))
    u, s, vh = np.linalg.svd(moved, full_matrices=False)
    w = _singular_weights(s, ord)
    tied = np.sum(w > 0, axis=-1)
    if ord != "nuc" and np.any(tied > 1):
        which = "largest" if ord == 2 else "smallest"
        value = s[..., 0 if ord == 2 else -1][tied > 1].flat[0]
        raise np.linalg.LinAlgError(
            f"np.linalg.norm(x, {ord}) has no second derivative where the {which} singular "
            f"value of x is repeated ({float(value)}, {np.max(tied)} times): its gradient there "
            f"is the average over the tied singular vectors (as JAX's), which has no "
            f"derivative")
    return np.moveaxis(_weighted_singular_hessian(u, s, vh, w, e), (-2, -1), axes)


def _weighted_singular_hessian(u, s, vh, w, e):
    """The Hessian of sum_k w_k s_k(X) times E at X = U diag(s) V^T (thin SVD of m x n
    stacks; w held fixed).  With E~ = U^T E V, the pair (a, b) of singular values gives
    U M V^T, M_ab = (alpha_ab E~_ab + beta_ab E~_ba): alpha = (w_b s_b - w_a s_a) /
    (s_b^2 - s_a^2), beta = (w_b s_a - w_a s_b) / (s_b^2 - s_a^2) -- for equal weights
    w / (s_a + s_b) and its negative, finite at repeated singular values (the weights
    differ only between different ones: :func:`_singular_weights`); and the directions
    outside U's and V's spans give (I - U U^T) E V D V^T + U D U^T E (I - V V^T), D =
    diag(w / s).  Checked against JAX's Hessians, which differentiate the SVD itself
    (nan wherever two singular values are equal)."""
    v, ut = _mT(vh), _mT(u)
    e_tilde = ut @ e @ v
    sa, sb = s[..., :, None], s[..., None, :]
    wa, wb = w[..., :, None], w[..., None, :]
    equal = wa == wb
    dtype = s.dtype
    with np.errstate(divide="ignore", invalid="ignore"):
        plus = np.where(equal & (wa != 0), wa / np.where(equal & (wa != 0), sa + sb, 1), 0)
        apart = np.where(equal, 1, sb * sb - sa * sa)
        alpha = np.where(equal, plus, (wb * sb - wa * sa) / apart)
        beta = np.where(equal, -plus, (wb * sa - wa * sb) / apart)
        d = np.where(w != 0, w / np.where(s > 0, s, 1), 0).astype(dtype)
    off_diagonal = 1 - np.eye(s.shape[-1], dtype=dtype)
    m = (alpha.astype(dtype) * e_tilde + beta.astype(dtype) * _mT(e_tilde)) * off_diagonal
    outside_u = e - u @ (ut @ e)
    outside_v = e - (e @ v) @ vh
    return u @ m @ vh + ((outside_u @ v) * d[..., None, :]) @ vh \
        + (u * d[..., None, :]) @ (ut @ outside_v)


def _hessian_times_x_vjp(g, ans, x, e, ord, axes):
    raise NotImplementedError(
        f"third derivatives of np.linalg.norm(x, {ord!r}) are not supported (its second "
        f"derivative comes from x's singular value decomposition)")


_HESSIAN_TIMES_VJPS = (
    _hessian_times_x_vjp,
    lambda g, ans, x, e, ord, axes: _svd_norm_hessian_times(x, g, ord, axes))


def _svd_norm_hessian_jvp(tangents, ans, x, e, ord, axes):
    if tangents[0] is not None:
        _hessian_times_x_vjp(None, ans, x, e, ord, axes)
    return _svd_norm_hessian_times(x, tangents[1], ord, axes)


define(_svd_norm_gradient,
       jvp=lambda tangents, ans, x, ord, axes: _svd_norm_hessian_times(x, tangents[0], ord, axes))
define(_svd_norm_hessian_product, jvp=_svd_norm_hessian_jvp)


define(np.linalg.norm, trace=_norm_rule, jvp=_norm_jvp)
