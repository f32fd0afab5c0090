"""VJPs and JVPs of reductions and scans: sum, mean, prod, max, min, var, std, cumsum,
cumprod.

Every vjp and jvp here is written in NumPy operations that have rules themselves, so
that it can run on traced cotangents and arguments (a derivative being differentiated);
plain arrays keep their first-order fast paths.  sum, mean and cumsum are linear; the
others' jvps are sums of the tangent times the same local derivatives their vjps use."""
import numpy as np

from ..core.box import apply, constant
from ..core.tape import Traced
from ..core.registry import define
from .common import (as_array, broadcast_lazily, constant_dtype, is_lazy, nan_safe, no_out,
                     shape_of)


def _reject(name, out=None, **unsupported):
    no_out(name, out)
    unsupported = {k: v for k, v in unsupported.items() if v is not None}
    if unsupported:
        raise NotImplementedError(f"dualbcast: numpy.{name} on traced values does not "
                                  f"support the keywords {sorted(unsupported)}")


def _axes(axis, ndim):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axes))


def _restore(g, shape, axis, keepdims):
    """``g`` with the reduced axes put back as length-1 axes (broadcastable to shape)."""
    if keepdims or not shape:
        return g
    return np.expand_dims(g, _axes(axis, len(shape)))


def _sum_vjp(g, ans, x, axis=None, keepdims=False, dtype=None):
    shape = shape_of(x)
    if is_lazy(x) or is_lazy(g):
        return broadcast_lazily(_restore(g, shape, axis, keepdims), x)
    if axis is None and not keepdims and not isinstance(g, Traced):
        # The whole sum (the common case): g everywhere, without expand_dims and
        # broadcast_to (~4 µs on small arrays; the array is needed anyway).
        return np.full(shape, g)
    return np.broadcast_to(_restore(g, shape, axis, keepdims), shape)


def _mean_vjp(g, ans, x, axis=None, keepdims=False, dtype=None):
    shape = shape_of(x)
    count = np.prod([shape[a] for a in _axes(axis, len(shape))], dtype=np.int64)
    if is_lazy(x) or is_lazy(g):
        return broadcast_lazily(_restore(g, shape, axis, keepdims) / count, x)
    return np.broadcast_to(_restore(g, shape, axis, keepdims) / count, shape)


def _prod_vjp(g, ans, x, axis=None, keepdims=False, dtype=None):
    x = as_array(x, "np.prod")
    if x.size == 0:
        return np.zeros(x.shape, np.result_type(g, x))    # nothing to differentiate
    return nan_safe(_restore(g, x.shape, axis, keepdims), _product_of_others(x, axis))


def _product_of_others(x, axis):
    """For each element of ``x`` (non-empty), the product of the *other* elements of
    its reduction along ``axis``: from exclusive cumulative products from both ends,
    correct with zeros in x, where ans / x is not."""
    axes = _axes(axis, x.ndim)
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes))
    flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
    ones = np.ones(flat.shape[:-1] + (1,), flat.dtype)
    left = np.cumprod(np.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([ones, flat[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    others = (left * right).reshape(moved.shape)
    return np.transpose(others, np.argsort(kept + list(axes)))


def _prod_jvp(tangents, ans, x, axis=None, keepdims=False, dtype=None):
    x = as_array(x, "np.prod")
    if x.size == 0:
        return None                 # the empty product: a constant 1
    return summed(nan_safe(tangents[0], _product_of_others(x, axis)), axis=axis,
                   keepdims=keepdims)


def _extremum_vjp(g, ans, x, axis=None, keepdims=False):
    return nan_safe(_restore(g, shape_of(x), axis, keepdims), _winners(ans, x, axis, keepdims))


def _winners(ans, x, axis, keepdims):
    """The share of the max (min) ``ans`` each element of ``x`` has: ties share it
    equally (as np.maximum at a tie: half to each side); a constant."""
    shape = shape_of(x)
    winners = x == _restore(ans, shape, axis, keepdims)
    count = np.sum(winners, axis=_axes(axis, len(shape)), keepdims=True)
    return winners / count


def _extremum_jvp(tangents, ans, x, axis=None, keepdims=False):
    return summed(nan_safe(tangents[0], _winners(ans, x, axis, keepdims)), axis=axis,
                   keepdims=keepdims)


def _cumsum_vjp(g, ans, x, axis=None, dtype=None):
    if axis is None:
        return np.cumsum(g[::-1])[::-1].reshape(np.shape(x))
    return np.flip(np.cumsum(np.flip(g, axis), axis), axis)


def _cumprod_vjp(g, ans, x, axis=None, dtype=None):
    # y_i = x_0 ... x_i, so dy_i/dx_k = (x_0 ... x_{k-1}) (x_{k+1} ... x_i) for i >= k:
    # the cotangent of x_k is E_k S_k, E_k = y_{k-1} (exclusive products) and
    # S_k = sum_{i >= k} g_i x_{k+1} ... x_i, the reverse recurrence S_k = g_k + x_{k+1}
    # S_{k+1} -- summed by doubling (log2(n) vector steps), multiplying and never
    # dividing: correct with zeros in x.
    shape = shape_of(x)
    if axis is None:
        x, axis = np.ravel(x), 0
    g, ans = np.moveaxis(g, axis, -1), np.moveaxis(ans, axis, -1)
    x = np.moveaxis(x, axis, -1)
    kind = np.result_type(g, ans)
    if shape_of(x)[-1] == 0:
        return np.zeros(shape, kind)
    ones = np.ones(shape_of(x)[:-1] + (1,), kind)
    exclusive = np.concatenate([ones, ans[..., :-1]], axis=-1)
    span = np.concatenate([x[..., 1:], 0 * ones], axis=-1)    # x_{k+1}
    total = _reverse_scan(g, span, kind)
    return np.reshape(np.moveaxis(nan_safe(total, exclusive), -1, axis), shape)


def _reverse_scan(first, span, kind):
    """``S_k = first_k + span_k S_{k+1}`` along the last axis (S beyond the end: 0), by
    doubling: log2(n) vector steps, NaN-safe products."""
    n = shape_of(first)[-1]
    total = first                                            # S_k over i < k + d
    d = 1
    while d < n:
        zeros = np.zeros(shape_of(first)[:-1] + (min(d, n),), kind)
        total = total + nan_safe(np.concatenate([total[..., d:], zeros], axis=-1), span)
        span = span * np.concatenate([span[..., d:], zeros], axis=-1)
        d *= 2
    return total


def _cumprod_jvp(tangents, ans, x, axis=None, dtype=None):
    # The tangent of y_i = y_{i-1} x_i is dy_i = E_i t_i + x_i dy_{i-1}: the reverse
    # scan of the vjp, run from the other end.
    shape = shape_of(ans)
    t = tangents[0]
    if axis is None:
        x, t, axis = np.ravel(x), np.ravel(t), 0
    t, ans, x = np.moveaxis(t, axis, -1), np.moveaxis(ans, axis, -1), np.moveaxis(x, axis, -1)
    kind = np.result_type(t, ans)
    if shape_of(x)[-1] == 0:
        return None
    ones = np.ones(shape_of(x)[:-1] + (1,), kind)
    exclusive = np.concatenate([ones, ans[..., :-1]], axis=-1)
    total = _reverse_scan(nan_safe(t, exclusive)[..., ::-1], x[..., ::-1], kind)[..., ::-1]
    return np.reshape(np.moveaxis(total, -1, axis), shape)


def summed(a, axis=None, keepdims=False, dtype=None):
    """``np.sum(a, ...)``: on an array, the ``np.add.reduce`` call np.sum itself makes
    (the same result, without its wrapper's ~2 µs), or, over a short last axis, the
    same additions column by column (:func:`_sum_of_short_rows`)."""
    if type(a) is np.ndarray:
        if type(axis) is int and a.ndim > 1 and axis in (-1, a.ndim - 1) and dtype is None \
                and a.shape[-1] <= SHORT_ROWS and a.dtype in _FLOATS and a.flags.c_contiguous:
            total = _sum_of_short_rows(a)
            return total[..., None] if keepdims else total
        return np.add.reduce(a, axis, dtype, None, keepdims=keepdims)
    return np.sum(a, axis=axis, dtype=dtype, keepdims=keepdims)


# NumPy sums a row of up to 7 elements in order, from 0.0: ((0.0 + a0) + a1) + ...
# (pairwise summation starts at 8); its reduction loop does it row by row, ~10 ns a
# row, where adding the columns of a C-contiguous array takes ~1 ns a row (12440 x 3:
# 143 µs against 12 µs).  The same additions in the same order: the same bits,
# -0.0 and NaN included (tests/test_rules_more.py).
SHORT_ROWS = 7
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


def _sum_of_short_rows(a):
    """``np.add.reduce(a, axis=-1)`` for a C-contiguous float array whose rows have at
    most :data:`SHORT_ROWS` elements."""
    if a.shape[-1] == 0:
        return np.zeros(a.shape[:-1], a.dtype)
    total = a[..., 0] + a.dtype.type(0.0)       # (-0.0 + 0.0 is 0.0, as NumPy starts)
    for k in range(1, a.shape[-1]):
        total += a[..., k]
    return total


def is_whole_sum(func, vjps, kwargs):
    """Whether a record of ``func`` with ``vjps`` and ``kwargs`` is this rule's
    ``np.sum(a)`` of a whole array (no axis, keepdims or dtype): the value NumPy's
    ``np.add.reduce`` gives, the cotangent ``g`` everywhere (for code that compiles it:
    dualbcast.jit's fused segments)."""
    return func is summed and tuple(vjps) == (_sum_vjp,) and kwargs == _WHOLE


_WHOLE = {"axis": None, "keepdims": False}


def _reduction(func, vjp, jvp, computed_by=None):
    """The rule of a reduction, recording ``computed_by`` (default ``func``) with its
    ``vjp``, and its ``jvp`` for forward mode (None: it is linear, the reduction of the
    tangent)."""
    name = func.__name__
    computed_by = computed_by or func

    # NumPy itself rejects dtype= for max and min before dispatching here.
    def rule(a, axis=None, dtype=None, out=None, keepdims=False, **unsupported):
        _reject(name, out, **unsupported)
        kwargs = {"axis": axis, "keepdims": keepdims}
        if dtype is not None:
            kwargs["dtype"] = dtype
        if constant_dtype(name, dtype):
            return constant(func, (a,), kwargs)
        return apply(computed_by, (vjp,), (a,), kwargs)
    define(func, trace=rule)
    define(computed_by, jvp=jvp, linear=jvp is None)


_reduction(np.sum, _sum_vjp, None, computed_by=summed)
_reduction(np.mean, _mean_vjp, None)
_reduction(np.prod, _prod_vjp, _prod_jvp)
for _f in (np.max, np.amax, np.min, np.amin):
    _reduction(_f, _extremum_vjp, _extremum_jvp)


def _cumulative(func, vjp, jvp):
    """The rule of a cumulative reduction (``np.cumsum``, ``np.cumprod``) and its
    ``jvp`` (as :func:`_reduction`)."""
    name = func.__name__

    def rule(a, axis=None, dtype=None, out=None):
        _reject(name, out)
        kwargs = {"axis": axis} if dtype is None else {"axis": axis, "dtype": dtype}
        if constant_dtype(name, dtype):
            return constant(func, (a,), kwargs)
        return apply(func, (vjp,), (a,), kwargs)
    define(func, trace=rule, jvp=jvp, linear=jvp is None)


def _var_rule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **unsupported):
    # Composed from traced operations: sum((a - mean(a))**2) / max(n - ddof, 0), NumPy's
    # divisor: ddof >= n divides by 0 (inf, or nan for an empty or constant a), never by
    # a negative count.
    _reject("var", out, dtype=dtype, **unsupported)
    shape = np.shape(a)
    count = int(np.prod([shape[i] for i in _axes(axis, len(shape))]))
    centred = a - np.mean(a, axis=axis, keepdims=True)
    return np.sum(centred * centred, axis=axis, keepdims=keepdims) / float(max(count - ddof, 0))


def _std_rule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **unsupported):
    _reject("std", out, dtype=dtype, **unsupported)
    return np.sqrt(_var_rule(a, axis=axis, ddof=ddof, keepdims=keepdims))


_cumulative(np.cumsum, _cumsum_vjp, None)
_cumulative(np.cumprod, _cumprod_vjp, _cumprod_jvp)
define(np.var, trace=_var_rule)        # (var and std record what they are made of)
define(np.std, trace=_std_rule)
