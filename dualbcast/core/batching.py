"""Batching: the trace of ``vmap``, and the values it batches.

A :class:`BatchTrace` maps a function over a leading axis of its arguments.  Its values
are :class:`Batched`: ``value`` holds every example's value stacked along axis 0 (a
mapped axis is moved there when a value enters), while the box reports one example's
shape, ``ndim`` and ``size``, so a program written for one example reads as it would
on one.

Each operation on a batched value runs its batching rule (its :class:`.registry.Primitive`'s
``batch``, given with :func:`.registry.define`; every ufunc has one, elementwise): the
operation on the whole stack at once -- a reduction's axes moved past the batch axis,
an index prefixed with a full slice, a kernel's loop broadcast over the batch.  An
operation without a rule raises, naming it: a batched value is never converted to a
plain array or looped over in Python.

Levels: a batch trace takes the next level on the thread's stack of traces, as a tape
does (:func:`.stack.enter_trace`).  Where values of several traces meet, the innermost
(the highest level) processes the operation and the others' values are constants to
it, which it computes on, so that their own traces record.  A tape's box hands an
operation with an inner batched value among its operands over to the batch trace
(:func:`.box.inner_foreign`), and a batched value hands one with an inner box among
its operands over to the box's tape (:meth:`BatchTrace.ufunc`, :meth:`BatchTrace.function`).
"""
import math
import operator

import numpy as np

from .methods import install_array_methods
from .registry import NO_RULES, PRIMITIVES
from .tape import Traced


class BatchTrace:
    """One ``vmap`` call: ``size`` examples, at ``level`` on the thread's stack of
    traces (``outer``: the trace below it, see :mod:`.stack`).  What other code asks of
    the innermost trace: it records no program (``recorder``) and takes no lazy
    arrays."""

    __slots__ = ("size", "level", "outer", "closed")
    recorder = None
    describe = "vmap"
    kernel_rule = None              # how a kernel call on its values runs (rules)

    def __init__(self, size):
        self.size = size
        self.level = 1
        self.outer = None
        self.closed = False

    def takes_lazy_arrays(self):
        return False

    # ------------------------------------------------------------------ processing
    def ufunc(self, ufunc, method, inputs, kwargs):
        """``getattr(ufunc, method)(*inputs, **kwargs)`` with values of this trace (and
        maybe others) among ``inputs``."""
        inner = _inner_value(self, inputs, kwargs.values())
        if inner is not None:
            return inner.__array_ufunc__(ufunc, method, *inputs, **kwargs)
        if "out" in kwargs:
            raise TypeError(f"numpy.{ufunc.__name__}(..., out=...) with a value batched by "
                            f"vmap: an in-place write cannot hold the batch; use the "
                            f"returned value")
        if method == "__call__":
            rule = PRIMITIVES.get(ufunc, NO_RULES).batch or PRIMITIVES[np.ufunc].batch
        else:
            rule = PRIMITIVES.get((np.ufunc, method), NO_RULES).batch
            if rule is None:
                raise NotImplementedError(f"dualbcast.vmap has no batching rule for "
                                          f"numpy.{ufunc.__name__}.{method}")
            kwargs = dict(kwargs, ufunc=ufunc)
        return self._run(rule, ufunc, inputs, kwargs)

    def function(self, func, args, kwargs):
        """``func(*args, **kwargs)`` with values of this trace (and maybe others) among
        ``args`` (one list deep) and ``kwargs``."""
        inner = _inner_value(self, args, kwargs.values())
        if inner is not None:
            if type(inner) is Batched:
                return inner.trace.function(func, args, kwargs)
            from .box import call_function
            return call_function(func, args, kwargs)
        p = PRIMITIVES.get(func, NO_RULES)
        if p.shape_only:
            return func(*_stand_ins(self, args), **_stand_ins(self, kwargs))
        rule = p.batch
        if rule is None:
            if isinstance(func, np.ufunc):
                return self.ufunc(func, "__call__", args, kwargs)
            raise NotImplementedError(f"dualbcast.vmap has no batching rule for "
                                      f"{_name(func)} (called on a value batched by vmap)")
        return self._run(rule, func, args, kwargs, p.itemwise)

    def _run(self, rule, func, args, kwargs, itemwise=()):
        if self.closed:
            raise RuntimeError("a value batched by vmap was used after its vmap call "
                               "returned; return it from the function instead")
        values, batched = [], []
        for arg in args:
            if type(arg) in (list, tuple):
                flags = tuple(_of(self, item) for item in arg)
                if type(arg) in itemwise:
                    # a sequence of arrays (np.stack's), or an index's parts: a flag each
                    values.append(type(arg)(self.unbatched(item) for item in arg))
                    batched.append(flags)
                    continue
                if any(flags):
                    raise NotImplementedError(
                        f"dualbcast.vmap: {_name(func)} got a list or tuple holding "
                        f"batched values; make it an array first (np.stack)")
                # (any other list is an array constant: [1.0, 2.0] is not a sequence
                # of examples)
            values.append(self.unbatched(arg))
            batched.append(_of(self, arg))
        for key, value in kwargs.items():
            if _of(self, value):
                instead = ("write np.where(where, x, identity) first" if key == "where"
                           else "pass it positionally")
                raise NotImplementedError(f"dualbcast.vmap: {_name(func)} got a batched "
                                          f"value as its keyword argument {key}=; "
                                          f"{instead}")
        result = rule(self.size, func, values, batched, **kwargs)
        return self.wrap(result)

    def unbatched(self, x):
        """``x``'s stack of examples if it is a value of this trace, else ``x``."""
        return x.value if type(x) is Batched and x.trace is self else x

    def wrap(self, result):
        """A rule's result as values of this trace: an array (or a tuple of them) with
        the batch along axis 0; a :class:`Unbatched` result stays what it holds."""
        if type(result) is Unbatched:
            return result.value
        if isinstance(result, tuple):
            items = [self.wrap(item) for item in result]
            return tuple(items) if type(result) is tuple else type(result)(*items)
        return Batched(result, self)


class Unbatched:
    """A batching rule's result that is the same for every example (a shape, a mask of
    constants): handed back as it is."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _of(trace, x):
    return type(x) is Batched and x.trace is trace


def _inner_value(trace, *groups):
    """The value, among ``groups`` of arguments, of the innermost trace there when that
    is not ``trace`` (a tape's box, or another vmap's value): that trace processes the
    operation, this trace's values constants to it."""
    from .box import innermost
    return innermost(groups, trace.level)


def _stand_ins(trace, args):
    """``args`` with this trace's values as one example's stand-in (a read-only array
    of its shape and dtype): what a function of shapes and dtypes alone computes on."""
    def stand_in(x):
        if _of(trace, x):
            return np.broadcast_to(np.zeros((), x.dtype), x.shape)
        if type(x) in (list, tuple):
            return type(x)(map(stand_in, x))
        return x
    if type(args) is dict:
        return {key: stand_in(value) for key, value in args.items()}
    return tuple(map(stand_in, args))


def _name(func):
    name = getattr(func, "__name__", repr(func))
    module = getattr(func, "__module__", None)
    if isinstance(func, np.ufunc) or module is None:
        module = "numpy"
    return f"{module}.{name}"


def _refuse(what):
    def method(self, *args, **kwargs):
        raise TypeError(f"{what} of a value batched by vmap: it holds one value per "
                        f"example, and the function is written for one; use np.where for "
                        f"a choice per example, or compute it outside vmap")
    return method


def _binary(ufunc):
    def forward(self, other):
        return _operator(ufunc, self, other)

    def reflected(self, other):
        return _operator(ufunc, other, self)
    return forward, reflected


def _operator(ufunc, x, y):
    trace = x.trace if type(x) is Batched else y.trace     # (the ufunc finds the innermost)
    return trace.ufunc(ufunc, "__call__", (x, y), {})


def _dtype_of(x):
    dtype = getattr(x, "dtype", None)
    return np.result_type(x) if dtype is None else np.dtype(dtype)


class Batched(Traced):
    """A value of a ``vmap``: ``value`` holds each example's value along axis 0; the
    box behaves as one example's value (its ``shape``, ``ndim``, ``size``, ``dtype``)."""

    __slots__ = ("value", "trace")
    __hash__ = None

    def __init__(self, value, trace):
        self.value = value
        self.trace = trace

    def __repr__(self):
        return f"Batched({self.value!r})"

    shape = property(lambda self: tuple(self.value.shape[1:]))
    ndim = property(lambda self: len(self.value.shape) - 1)
    size = property(lambda self: math.prod(self.value.shape[1:]))
    dtype = property(lambda self: _dtype_of(self.value))
    T = property(lambda self: self.trace.function(np.transpose, (self,), {}))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d value (batched by vmap)")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return self.trace.ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return self.trace.function(func, args, kwargs)

    __array__ = _refuse("Converting to a plain NumPy array (np.asarray, buf[...] = x, "
                        "a NumPy function without a batching rule, or a plain array "
                        "indexed by it, a[i], which NumPy cannot hand to vmap: use "
                        "np.take_along_axis, or pass a as an argument)")
    __bool__ = _refuse("bool() (an if or while on the value, and/or/not)")
    __float__ = _refuse("float()")
    __int__ = _refuse("int()")
    __index__ = _refuse("operator.index()")
    __complex__ = _refuse("complex()")
    item = _refuse(".item()")
    tolist = _refuse(".tolist()")

    __add__, __radd__ = _binary(np.add)
    __sub__, __rsub__ = _binary(np.subtract)
    __mul__, __rmul__ = _binary(np.multiply)
    __truediv__, __rtruediv__ = _binary(np.true_divide)
    __floordiv__, __rfloordiv__ = _binary(np.floor_divide)
    __mod__, __rmod__ = _binary(np.remainder)
    __pow__, __rpow__ = _binary(np.power)
    __matmul__, __rmatmul__ = _binary(np.matmul)
    __and__, __rand__ = _binary(np.bitwise_and)
    __or__, __ror__ = _binary(np.bitwise_or)
    __xor__, __rxor__ = _binary(np.bitwise_xor)
    __lt__ = _binary(np.less)[0]
    __le__ = _binary(np.less_equal)[0]
    __gt__ = _binary(np.greater)[0]
    __ge__ = _binary(np.greater_equal)[0]
    __eq__ = _binary(np.equal)[0]
    __ne__ = _binary(np.not_equal)[0]

    def __neg__(self):
        return self.trace.ufunc(np.negative, "__call__", (self,), {})

    def __pos__(self):
        return self

    def __abs__(self):
        return self.trace.ufunc(np.absolute, "__call__", (self,), {})

    def __invert__(self):
        return self.trace.ufunc(np.invert, "__call__", (self,), {})

    def __getitem__(self, index):
        return self.trace.function(operator.getitem, (self, index), {})

    def __setitem__(self, index, value):
        raise TypeError("x[...] = v on a value batched by vmap: build the result with "
                        "np.where, np.concatenate or arithmetic instead")

    def copy(self):
        return self

    def astype(self, dtype, **kwargs):
        return self.trace.function(np.ndarray.astype, (self, dtype), kwargs)

    def conj(self):
        return self.trace.ufunc(np.conjugate, "__call__", (self,), {})
    conjugate = conj


def _dispatch(func, args, kwargs):
    return args[0].trace.function(func, args, kwargs)


install_array_methods(Batched, _dispatch)
