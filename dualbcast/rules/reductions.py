"""VJPs of reductions and scans: sum, mean, prod, max, min, var, std, cumsum, cumprod."""
import numpy as np

from ..core.box import apply, constant
from ..core.registry import defrule
from .common import constant_dtype, nan_safe, no_out


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
    shape = np.shape(x)
    if axis is None and not keepdims:
        # The whole sum (the common case): g everywhere, without expand_dims and
        # broadcast_to (~4 µs on small arrays; the array is needed anyway).
        return np.full(shape, g)
    return np.broadcast_to(_restore(g, shape, axis, keepdims), shape)


def _mean_vjp(g, ans, x, axis=None, keepdims=False, dtype=None):
    shape = np.shape(x)
    count = np.prod([shape[a] for a in _axes(axis, len(shape))], dtype=np.int64)
    return np.broadcast_to(_restore(g, shape, axis, keepdims) / count, shape)


def _prod_vjp(g, ans, x, axis=None, keepdims=False, dtype=None):
    # The product of all the *other* elements, from exclusive cumulative products from
    # both ends: correct with zeros in x, where ans / x is not.
    x = np.asarray(x)
    if x.size == 0:
        return np.zeros(x.shape, np.result_type(g, x))    # nothing to differentiate
    axes = _axes(axis, x.ndim)
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes))
    flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
    ones = np.ones(flat.shape[:-1] + (1,), flat.dtype)
    left = np.cumprod(np.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([ones, flat[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    others = (left * right).reshape(moved.shape)
    others = np.transpose(others, np.argsort(kept + list(axes)))
    return nan_safe(_restore(g, x.shape, axis, keepdims), others)


def _extremum_vjp(g, ans, x, axis=None, keepdims=False):
    # Ties share the cotangent equally (as np.maximum at a tie: half to each side).
    shape = np.shape(x)
    ans = _restore(ans, shape, axis, keepdims)
    winners = x == ans
    count = np.sum(winners, axis=_axes(axis, len(shape)), keepdims=True)
    return nan_safe(_restore(g, shape, axis, keepdims), winners / count)


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
    shape = np.shape(x)
    if axis is None:
        x, axis = np.ravel(x), 0
    g, ans = np.moveaxis(g, axis, -1), np.moveaxis(ans, axis, -1)
    x = np.moveaxis(x, axis, -1)
    n = np.shape(x)[-1]
    kind = np.result_type(g, ans)
    if n == 0:
        return np.zeros(shape, kind)
    ones = np.ones(np.shape(x)[:-1] + (1,), kind)
    exclusive = np.concatenate([ones, ans[..., :-1]], axis=-1)
    span = np.concatenate([x[..., 1:], 0 * ones], axis=-1)    # x_{k+1} ... x_{k+d}
    total = g                                                # S_k over i < k + d
    d = 1
    while d < n:
        zeros = np.zeros(np.shape(x)[:-1] + (min(d, n),), kind)
        total = total + nan_safe(np.concatenate([total[..., d:], zeros], axis=-1), span)
        span = span * np.concatenate([span[..., d:], zeros], axis=-1)
        d *= 2
    return np.reshape(np.moveaxis(nan_safe(total, exclusive), -1, axis), shape)


def _summed(a, axis=None, keepdims=False, dtype=None):
    """``np.sum(a, ...)``: on an array, the ``np.add.reduce`` call np.sum itself makes
    (the same result, without its wrapper's ~2 µs)."""
    if type(a) is np.ndarray:
        return np.add.reduce(a, axis, dtype, None, keepdims=keepdims)
    return np.sum(a, axis=axis, dtype=dtype, keepdims=keepdims)


def _reduction(func, vjp, computed_by=None):
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
    defrule(func, trace=rule)


_reduction(np.sum, _sum_vjp, computed_by=_summed)
_reduction(np.mean, _mean_vjp)
_reduction(np.prod, _prod_vjp)
for _f in (np.max, np.amax, np.min, np.amin):
    _reduction(_f, _extremum_vjp)


def _cumulative(func, vjp):
    """The rule of a cumulative reduction (``np.cumsum``, ``np.cumprod``)."""
    name = func.__name__

    def rule(a, axis=None, dtype=None, out=None):
        _reject(name, out)
        kwargs = {"axis": axis} if dtype is None else {"axis": axis, "dtype": dtype}
        if constant_dtype(name, dtype):
            return constant(func, (a,), kwargs)
        return apply(func, (vjp,), (a,), kwargs)
    return rule


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


defrule(np.cumsum, trace=_cumulative(np.cumsum, _cumsum_vjp))
defrule(np.cumprod, trace=_cumulative(np.cumprod, _cumprod_vjp))
defrule(np.var, trace=_var_rule)
defrule(np.std, trace=_std_rule)
