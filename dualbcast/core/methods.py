"""NumPy's array methods on traced values: one table, installed on each kind of traced
value (a tape's :class:`.box.Box`, a vmap's :class:`.batching.Batched`) with the
function that kind dispatches a NumPy call through.  ``x.sum(...)`` and
``np.sum(x, ...)`` then share one rule, looked up at call time (so rules may register
after the classes are built)."""
import numpy as np

# method name -> the NumPy function it is
ARRAY_METHODS = {
    "sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min,
    "var": np.var, "std": np.std, "cumsum": np.cumsum, "cumprod": np.cumprod,
    "dot": np.dot, "clip": np.clip, "ravel": np.ravel,
    "flatten": np.ravel,    # a copy in NumPy; traced values are immutable, so a view is one
    "squeeze": np.squeeze, "swapaxes": np.swapaxes, "argmax": np.argmax,
    "argmin": np.argmin, "argsort": np.argsort, "nonzero": np.nonzero, "any": np.any,
    "all": np.all, "take": np.take, "repeat": np.repeat, "diagonal": np.diagonal,
    "trace": np.trace, "round": np.round, "searchsorted": np.searchsorted,
}
# the methods that take a shape as separate integers or as one tuple:
# x.reshape(2, 3) and x.reshape((2, 3)), x.transpose(1, 0) and x.transpose((1, 0))
SHAPE_METHODS = {"reshape": np.reshape, "transpose": np.transpose}


def install_array_methods(cls, dispatch):
    """Give ``cls`` the methods of :data:`ARRAY_METHODS` and :data:`SHAPE_METHODS`, each
    calling ``dispatch(func, args, kwargs)`` with the value as the first argument.  A
    name ``cls`` defines itself is left to it (a batched value's ``trace`` is its
    trace, not ``np.trace``)."""
    for name, func in ARRAY_METHODS.items():
        if name not in cls.__dict__:
            setattr(cls, name, _method(func, dispatch, name))
    for name, func in SHAPE_METHODS.items():
        setattr(cls, name, _shape_method(func, dispatch, name))


def _method(func, dispatch, name):
    def method(self, *args, **kwargs):
        return dispatch(func, (self,) + args, kwargs)
    method.__name__ = name
    method.__doc__ = f"Traced ``numpy.{func.__name__}``."
    return method


def _shape_method(func, dispatch, name):
    def method(self, *shape, **kwargs):
        if not shape:
            return dispatch(func, (self,), kwargs)
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        return dispatch(func, (self, shape), kwargs)
    method.__name__ = name
    method.__doc__ = f"Traced ``numpy.{func.__name__}``."
    return method
