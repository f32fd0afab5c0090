"""Helpers shared by the rules: shapes of tape values, ``unbroadcast``, the NaN-safe
product, and the checks every NumPy-function rule makes on its keywords."""
import math
import operator

import numpy as np

from ..core.box import SCALARS, apply, call_function, inner_foreign
from ..foreign import is_dask_array
from ..core.tape import Traced, ignore_float_errors, restore_float_errors
from ..core.registry import BACKWARD_OPERATIONS, ScalarForm, define
from ..core.scatter import scatter_add
from ..kernel.products import nan_safe_multiply, scaled_sum


def shape_of(x):
    """``np.shape`` for values on the tape (arrays, NumPy and Python scalars), ~10x
    faster on scalars."""
    return getattr(x, "shape", ())


def unbroadcast(ct, shape):
    """Sum ``ct`` over the axes that broadcasting added to or stretched in ``shape``."""
    ct_shape = getattr(ct, "shape", ())
    if ct_shape == shape:
        return ct
    if not shape:                   # to a scalar: one reduction (np.sum's wrapper is ~2 µs)
        return np.add.reduce(ct, axis=None) if type(ct) is np.ndarray else np.sum(ct)
    extra = len(ct_shape) - len(shape)
    axes = tuple(range(extra)) + tuple(
        extra + i for i, n in enumerate(shape) if n == 1 and ct_shape[extra + i] != 1)
    ct = np.sum(ct, axis=axes)
    return ct.reshape(shape) if np.shape(ct) != shape else ct


def nan_safe(g, local, out=None):
    """``g * local``, but 0 where either factor is 0 and the product is nan (the other
    infinite or nan): a value that does not influence the output contributes nothing,
    and neither does a path with a zero partial on it (design.md §4, as the kernels'
    dual numbers do)."""
    kind_g, kind_local = type(g), type(local)       # (inlined: the hot path of scalars)
    if kind_g not in _UNTRACED and isinstance(g, Traced) or \
            kind_local not in _UNTRACED and isinstance(local, Traced):
        return apply(nan_safe_product, _NAN_SAFE_VJPS, (g, local))
    if out is None and type(g) in SCALARS and type(local) in SCALARS:
        # Scalars (the hot path of scalar code): Python's operator, ~10x cheaper than
        # a ufunc call, with the same NEP 50 result type.
        product = g * local
        if product == product or g != 0 and local != 0:
            return product
        return type(product)(0.0)
    if type(local) is not np.ndarray:
        if type(local) in _FINITE_CHECKABLE and math.isfinite(local) and local != 0:
            return np.multiply(g, local, out=out)   # a finite factor: nothing to fix
    elif type(g) in _FINITE_CHECKABLE and math.isfinite(g) and g != 0:
        return np.multiply(g, local, out=out)       # (a scalar cotangent, likewise)
    else:
        product = nan_safe_multiply(g, local, out)  # one compiled pass (float64, one shape)
        if product is not None:
            return product
    # The general case: one extra pass only to *detect* a nan (a sum), the fix-up pass
    # only when there is one.  (Not into a factor's buffer: the fix-up reads the
    # factors, and would find the product there.)
    if out is not None and (np.may_share_memory(out, local) or np.may_share_memory(out, g)):
        out = None
    errors = ignore_float_errors()      # (0 * inf is fixed up below: no warning for it)
    try:
        product = np.multiply(g, local, out=out)
    finally:
        restore_float_errors(errors)
    if type(product) is np.ndarray:
        if not np.isnan(np.add.reduce(product, axis=None)):
            return product
    elif type(product) in SCALARS:
        if product == product:
            return product
    else:
        # A lazy array (Dask): the fix-up joins its graph, computed with the product
        # (asking whether there is a nan would compute it now).
        fixed = np.where(np.isnan(product) & ((g == 0) | (local == 0)), 0.0, product)
        return fixed if fixed.dtype == product.dtype else fixed.astype(product.dtype)
    shape = np.shape(product)
    zero_factor = (np.broadcast_to(g, shape) == 0) | (np.broadcast_to(local, shape) == 0)
    fixed = np.where(zero_factor & np.isnan(product), 0.0, product)
    return fixed.astype(np.result_type(product), copy=False)


_FINITE_CHECKABLE = frozenset({float, int, np.float64, np.float32})
_UNTRACED = frozenset({float, int, np.float64, np.float32, np.ndarray})


def _traced(x):
    return type(x) not in _UNTRACED and isinstance(x, Traced)


def broadcast_lazily(value, like):
    """``value`` (a scalar, or an array broadcastable to ``like``) broadcast over the
    lazy array ``like`` (a Dask array), in its blocks: its own dtype, ``like``'s
    chunks (NumPy's broadcast_to would give a view of ``like``'s whole size, which Dask
    would cut into blocks of copies)."""
    dtype = value.dtype if hasattr(value, "dtype") else np.result_type(value)
    return np.zeros_like(like, dtype=dtype) + value


def is_lazy(x):
    """Whether ``x`` is a lazy array (not a scalar, an ndarray or a traced value): a Dask
    array, whose cotangents are Dask graphs too."""
    return type(x) is not np.ndarray and type(x) not in SCALARS and not isinstance(x, Traced)


def numpy_only(*values, function):
    """Refuse a lazy (Dask) value in the rule of ``function`` (its name, as users call
    it) that computes on NumPy arrays (converting it would compute the whole graph now,
    into memory)."""
    if any(is_dask_array(value) for value in values):
        raise NotImplementedError(
            f"dualbcast: the gradient rule of {function} computes on NumPy arrays; over "
            f"Dask arrays it has no lazy rule (kernel maps and sums, elementwise functions, "
            f"sums, means, slices and reshapes have one)")


def as_array(x, function):
    """``x`` as a NumPy array (a NumPy or Python scalar too); a traced value as it is; a
    Dask array refused in ``function``'s rule (:func:`numpy_only`)."""
    numpy_only(x, function=function)
    return x if isinstance(x, Traced) else np.asarray(x)


def nan_safe_product(g, local):
    """:func:`nan_safe` as a function of its own, recorded when a factor is traced (a
    backward pass being differentiated): its derivatives are NaN-safe products too."""
    return nan_safe(g, local)


def _nan_safe_product_jvp(tangents, ans, g, local):
    t_g, t_local = tangents
    if t_g is None:
        return nan_safe(g, t_local)
    if t_local is None:
        return nan_safe(t_g, local)
    return apply(nan_safe_sum, _NAN_SAFE_SUM_VJPS, (t_g, local, g, t_local))


def nan_safe_sum(a, x, b, y):
    """``nan_safe(a, x) + nan_safe(b, y)``: the tangent of a NaN-safe product, in one
    compiled pass where it can be (a scalar cotangent and its tangent over float64
    arrays: the Hessian-vector product of a kernel sum), recorded as one operation."""
    if type(x) is np.ndarray:
        total = scaled_sum(a, x, b, y)
        if total is not None:
            return total
    return nan_safe(a, x) + nan_safe(b, y)


def _nan_safe_sum_vjp(factor, position):
    return lambda g, ans, *args: unbroadcast(nan_safe(g, args[factor]),
                                             shape_of(args[position]))


# (each argument's cotangent: the cotangent times the factor it multiplies)
_NAN_SAFE_SUM_VJPS = (_nan_safe_sum_vjp(1, 0), _nan_safe_sum_vjp(0, 1),
                      _nan_safe_sum_vjp(3, 2), _nan_safe_sum_vjp(2, 3))
define(nan_safe_sum, vjps=_NAN_SAFE_SUM_VJPS, diagonal=True)

_NAN_SAFE_SCALAR_VJPS = (lambda g, ans, x, local: nan_safe(g, local),
                         lambda g, ans, x, local: nan_safe(g, x))
_NAN_SAFE_VJPS = (lambda g, ans, x, local: unbroadcast(nan_safe(g, local), shape_of(x)),
                  lambda g, ans, x, local: unbroadcast(nan_safe(g, x), shape_of(local)))
# (its form: the product, which is the NaN-safe one wherever it is finite; a compiled
# loop hands a non-finite value back to this function, which meets NumPy's error
# settings as the eager call does)
define(nan_safe_product, vjps=_NAN_SAFE_VJPS, scalar_vjps=_NAN_SAFE_SCALAR_VJPS,
       form=ScalarForm("{x} * {y}"), jvp=_nan_safe_product_jvp)


def where_value(mask_of, a, b, x, y=0.0):
    """``np.where(mask_of(x, y), a, b)``: which of two formulas of a rule applies where
    (``tanh'`` as ``1 - tanh(x)**2`` near 0, as a product past 0.55), the mask a
    piecewise-constant function of the values ``x`` and ``y``.  Recorded as one
    operation when any of them is traced: differentiable in ``a`` and ``b``, of
    derivative 0 in ``x`` and ``y`` (which makes them parents of the record, so that it
    is recorded even when ``a`` and ``b`` are constants), so that a replay computes the
    mask again from its own values.  The comparison made on traced values instead
    would be a guard of ``dualbcast.jit``: a replay whose values fall on other sides of
    the switch would trace the program again."""
    if _traced(a) or _traced(b) or _traced(x) or _traced(y):
        return apply(where_value, _WHERE_VALUE_VJPS, (mask_of, a, b, x, y))
    return np.where(mask_of(x, y), a, b)[()]


def positive(x, _):
    """The mask ``x > 0`` (for :func:`where_value`)."""
    return x > 0


def abs_value(x):
    """``|x|`` by :func:`where_value`: its derivatives ask no sign of a traced ``x``
    (``np.abs``'s rule computes ``np.sign(x)``, a guard of ``dualbcast.jit`` when ``x``
    is traced), and at 0 it is -1, not ``np.abs``'s convention: for formulas that do
    not use it there."""
    return where_value(positive, x, -x, x)


def _zero_like(x):
    return np.zeros(shape_of(x), x.dtype if isinstance(x, Traced) else np.result_type(x))[()]


# (the cotangent of a formula: the cotangent where it was chosen, 0 elsewhere; of what
# chose it, 0)
_WHERE_VALUE_VJPS = (
    None,
    lambda g, ans, mask_of, a, b, x, y: unbroadcast(where_value(mask_of, g, 0.0, x, y),
                                                    shape_of(a)),
    lambda g, ans, mask_of, a, b, x, y: unbroadcast(where_value(mask_of, 0.0, g, x, y),
                                                    shape_of(b)),
    lambda g, ans, mask_of, a, b, x, y: _zero_like(x),
    lambda g, ans, mask_of, a, b, x, y: _zero_like(y))
define(where_value, vjps=_WHERE_VALUE_VJPS)


def _where_value_jvp(tangents, ans, mask_of, a, b, x, y):
    _, t_a, t_b, _, _ = tangents
    if t_a is None and t_b is None:
        return None
    return where_value(mask_of, 0.0 if t_a is None else t_a, 0.0 if t_b is None else t_b,
                       x, y)


define(where_value, jvp=_where_value_jvp)


def dense_cotangent(sparse, primal):
    """A :class:`SparseCotangent` of ``primal`` as a dense array of its shape and dtype
    (recorded when its values are traced: a backward pass being differentiated)."""
    shape = shape_of(primal)
    dtype = primal.dtype if isinstance(primal, Traced) else np.result_type(primal)
    return apply(scattered, _SCATTERED_VJPS,
                 (sparse.values, sparse.index, sparse.repeats, shape, dtype))


def gather(a, index):
    """``a[index]``, through the indexing rule when the index is traced (an integer
    input of a ``dualbcast.jit`` program, or an index batched by a ``vmap``) and ``a``
    is not: NumPy would convert it."""
    parts = index if type(index) is tuple else (index,)
    if not isinstance(a, Traced) and any(isinstance(part, Traced) for part in parts):
        return call_function(operator.getitem, (a, index), {})
    return a[index]


def scattered(values, index, repeats, shape, dtype):
    if isinstance(values, Traced):  # traced by an enclosing trace (or vmap): its rule
        return apply(scattered, _SCATTERED_VJPS, (values, index, repeats, shape, dtype))
    batched = inner_foreign(index if type(index) is tuple else (index,))
    if batched is not None:         # the index of each example differs: the vmap's rule
        return batched.trace.function(scattered, (values, index, repeats, shape, dtype), {})
    buffer = np.zeros(shape, dtype)
    if repeats:
        scatter_add(buffer, index, values)
    else:
        buffer[index] += values
    return buffer


_SCATTERED_VJPS = (lambda g, ans, values, index, *_: unbroadcast(gather(g, index),
                                                                 shape_of(values)),
                   None, None, None, None)
define(scattered, linear=True)
BACKWARD_OPERATIONS.product = nan_safe
BACKWARD_OPERATIONS.dense = dense_cotangent


def no_out(name, out):
    """``out=`` would write a traced result into a plain array: refuse, clearly."""
    if out is not None:
        raise TypeError(f"numpy.{name}(..., out=...) with traced values: an in-place write "
                        f"would detach or corrupt the gradient; use the returned value")


def constant_dtype(name, dtype):
    """Whether ``dtype=`` makes ``name``'s result a constant (an int or bool result is
    never differentiated); complex and other dtypes have no rules."""
    if dtype is None:
        return False
    kind = np.dtype(dtype).kind
    if kind not in "iubf":
        raise NotImplementedError(f"dualbcast: numpy.{name} with dtype={np.dtype(dtype)} on "
                                  f"traced values has no gradient rule (only float results "
                                  f"are traced)")
    return kind != "f"
