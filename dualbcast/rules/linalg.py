"""VJPs of products: ``matmul`` (and ``@``), ``dot``, ``outer``."""
import numpy as np

from ..core.box import apply
from ..core.registry import defrule
from .common import no_out, unbroadcast


def _as_matrices(g, a, b):
    # matmul treats a vector as a matrix with a 1 inserted, then removed: do the same to
    # the operands and the cotangent, so one pair of formulas covers every case.
    a, b = np.asarray(a), np.asarray(b)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = np.asarray(g)
    if np.ndim(b) == 1:
        g2 = g2[..., None]
    if np.ndim(a) == 1:
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
