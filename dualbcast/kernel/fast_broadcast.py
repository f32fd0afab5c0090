"""``@fast_broadcast``: a scalar Python function compiled into fused array loops."""
import functools
import inspect
import math
import operator

import numba
import numpy as np
from numba import types
from numba.core.errors import NumbaError
from numba.extending import typeof_impl

from ..dual import DualType
from .arguments import plan_call
from .loops import ACCUMULATE, REGISTER, STORE, LoopSpec, compile_loop
from .tracing import hook, traced

_OPTIONS = ("fastmath",)


class KernelCompileError(TypeError):
    """Numba could not compile a kernel for the argument types of a call."""


class FastBroadcast:
    """A scalar kernel that broadcasts like a ufunc and differentiates in one loop.

    Create with :func:`fast_broadcast`.  ``k(*args)`` maps, ``k.sum(*args)`` sums,
    ``k.value_and_partials(*args, wrt=...)`` and ``k.sum_and_partials(*args, wrt=...)``
    add forward-mode derivatives with respect to the ``wrt`` arguments only.
    """

    def __init__(self, py_func, *, fastmath=False):
        functools.update_wrapper(self, py_func)
        self.py_func = py_func
        self._signature = inspect.signature(py_func)
        kinds = {p.kind for p in self._signature.parameters.values()}
        if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY}:
            raise TypeError(f"@fast_broadcast kernel {py_func.__name__!r} must take a fixed "
                            f"list of scalar parameters (no *args, **kwargs or keyword-only)")
        self._nparams = len(self._signature.parameters)
        self._jit_options = {"error_model": "numpy", "fastmath": fastmath}
        self.scalar_kernel = numba.njit(**self._jit_options)(py_func)
        self._loops = {}

    def __repr__(self):
        return f"<fast_broadcast kernel {self.__name__}>"

    # ------------------------------------------------------------------ public API

    def __call__(self, *args, **kwargs):
        """The kernel applied elementwise with NumPy broadcasting (a scalar for
        all-scalar input, like a ufunc).  Inside ``grad``, traced arguments get
        their partials from the same loop (the fast broadcast rule)."""
        if traced(args) or traced(kwargs.values()):
            return hook.call(self, self._bind(args, kwargs))
        plan = self._plan(args, kwargs)
        out = np.empty(plan.shape, plan.dtype)
        self._run(plan, "map", (), (), out.reshape(-1))
        return out if out.ndim else out[()]

    def sum(self, *args, **kwargs):
        """``sum(k(*args))`` in one loop, without materialising ``k(*args)``.  Inside
        ``grad``, the gradient of the sum comes from the same loop (the sum-of-map rule)."""
        if traced(args) or traced(kwargs.values()):
            return hook.sum(self, self._bind(args, kwargs))
        plan = self._plan(args, kwargs)
        (total,) = self._run(plan, "sum")
        return plan.dtype.type(total)

    def value_and_partials(self, *args, wrt=0, **kwargs):
        """Values and the partials with respect to the ``wrt`` arguments, each at the
        broadcast shape.  ``wrt`` an int gives one partials array, a tuple a tuple."""
        plan = self._plan(args, kwargs)
        active, single = self._active(wrt, plan)
        out = np.empty(plan.shape, plan.dtype)
        parts = np.empty((len(active),) + plan.shape, plan.dtype)
        self._run(plan, "partials", active, (), out.reshape(-1), parts.reshape(len(active), -1))
        if not plan.shape:
            out, parts = out[()], [p[()] for p in parts]
        return out, (parts[0] if single else tuple(parts))

    def sum_and_partials(self, *args, wrt=0, **kwargs):
        """``sum(k(*args))`` and its gradient with respect to each ``wrt`` argument, at
        that argument's own shape and dtype.  A broadcast argument's gradient is
        reduced inside the loop: no temporary of the broadcast size is allocated."""
        plan = self._plan(args, kwargs)
        active, single = self._active(wrt, plan)
        own = [(np.shape(plan.originals[i]), np.result_type(plan.originals[i])) for i in active]
        grad_kinds, buffers, loop_buffers = [], [], []
        for shape, dtype in own:
            if math.prod(shape) == 1:
                grad_kinds.append(REGISTER)
                buffers.append(None)
            elif shape == plan.shape:
                grad_kinds.append(STORE)
                buffers.append(np.empty(shape, _storable(dtype)))
                loop_buffers.append(buffers[-1].reshape(-1))
            else:
                grad_kinds.append(ACCUMULATE)
                buffers.append(np.zeros(shape, np.float64))
                loop_buffers.append(plan.loop_view(buffers[-1]))
        total, *registers = self._run(plan, "sum_partials", active, tuple(grad_kinds),
                                      *loop_buffers)
        registers = iter(registers)
        grads = []
        for i, (shape, dtype), kind, buffer in zip(active, own, grad_kinds, buffers):
            if kind == REGISTER:
                g = np.full(shape, next(registers), dtype)
                grads.append(g if isinstance(plan.originals[i], np.ndarray) else g[()])
            else:
                grads.append(buffer.astype(dtype, copy=False))
        return plan.dtype.type(total), (grads[0] if single else tuple(grads))

    @property
    def specializations(self):
        """The compiled loops: ``{LoopSpec: [Numba signatures]}`` (for inspection)."""
        return {loop.spec: list(loop.signatures) for loop in self._loops.values()}

    # ------------------------------------------------------------------ internals

    def _bind(self, args, kwargs):
        """The arguments as one positional tuple (keywords and defaults applied)."""
        if kwargs or len(args) != self._nparams:
            try:
                bound = self._signature.bind(*args, **kwargs)
            except TypeError as err:
                raise TypeError(f"{self.__name__}(): {err}") from None
            bound.apply_defaults()
            args = bound.args
        return args

    def _plan(self, args, kwargs):
        return plan_call(self.__name__, self._bind(args, kwargs))

    def _active(self, wrt, plan):
        single = not isinstance(wrt, (tuple, list))
        indices = (wrt,) if single else tuple(wrt)
        nargs = len(plan.kinds)
        active = []
        for i in indices:
            try:
                if isinstance(i, (bool, np.bool_)):
                    raise TypeError
                i = operator.index(i)
            except TypeError:
                raise TypeError(f"{self.__name__}: wrt must be an int or a tuple of ints, "
                                f"not {wrt!r}") from None
            if not -nargs <= i < nargs:
                raise ValueError(f"{self.__name__}: wrt={wrt!r} is out of range for a kernel "
                                 f"of {nargs} arguments")
            active.append(i % nargs)
        if not active:
            raise ValueError(f"{self.__name__}: wrt={wrt!r} names no argument")
        if len(set(active)) != len(active):
            raise ValueError(f"{self.__name__}: wrt={wrt!r} repeats an argument")
        for i in active:
            dtype = np.result_type(plan.originals[i])
            if dtype.kind != "f":
                raise TypeError(f"{self.__name__}: cannot differentiate with respect to argument "
                                f"{i} of dtype {dtype}: integer and bool arguments are promoted "
                                f"to float for values but never differentiated")
        return tuple(active), single

    def _run(self, plan, mode, active=(), grad_kinds=(), *outputs):
        """Run (compiling on first use) the loop for this mode over the planned call."""
        key = (mode, plan.kinds, active, plan.ndim, grad_kinds, plan.dtype)
        loop = self._loops.get(key)
        if loop is None:
            spec = LoopSpec(mode, plan.kinds, active, plan.ndim, grad_kinds,
                            plan.dtype.name)
            loop = self._loops[key] = self._compile(spec)
        try:
            return loop(plan.loop_shape, *plan.operands, *outputs)
        except ZeroDivisionError as err:
            # Numba's float ** negative-int raises at 0 whatever the error model
            # (dual powers do not: they give inf like NumPy).  Say where it came from.
            raise ZeroDivisionError(
                f"@fast_broadcast kernel {self.__name__!r}: {err} (Numba raises for "
                f"0.0 ** negative int; write 1.0 / x ** n to get inf)") from err
        except NumbaError as err:
            raise KernelCompileError(
                f"@fast_broadcast kernel {self.__name__!r}: the loop for {mode} could not "
                f"be compiled for operands {_describe(plan.operands)}") from err

    def _compile(self, spec):
        """Type-check the scalar kernel for this spec, then build the loop around it."""
        float_t = getattr(types, spec.dtype)
        n = len(spec.active)
        argtypes = tuple(DualType(float_t, n) if i in spec.active else float_t
                         for i in range(len(spec.kinds)))
        described = ", ".join(str(t) for t in argtypes)
        try:
            self.scalar_kernel.compile(argtypes)
        except NumbaError as err:
            raise KernelCompileError(
                f"@fast_broadcast kernel {self.__name__!r} cannot be compiled for argument "
                f"types ({described}); Numba's error is chained above") from err
        returned = self.scalar_kernel.overloads[argtypes].signature.return_type
        if not isinstance(returned, (DualType, types.Float, types.Integer, types.Boolean)):
            raise TypeError(f"@fast_broadcast kernel {self.__name__!r} must return one scalar; "
                            f"for argument types ({described}) it returns {returned}")
        return compile_loop(spec, self.scalar_kernel, self._jit_options)


def _storable(dtype):
    # Gradients are stored in the argument's dtype where Numba can store it.
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)


def _describe(operands):
    return "(" + ", ".join(str(numba.typeof(op)) for op in operands) + ")"


@typeof_impl.register(FastBroadcast)
def _typeof_kernel(kernel, context):
    # Inside another kernel or an njit function, a kernel is its scalar function:
    # duals flow through it like through any njit helper.
    return types.Dispatcher(kernel.scalar_kernel)


def fast_broadcast(func=None, **options):
    """Compile a scalar Python function into a broadcasting, differentiable kernel.

    Use as ``@fast_broadcast`` or ``@fast_broadcast(fastmath=True)``.  The function
    takes scalars and returns one scalar; it may use ``math.*``, ``if``, loops and call
    other kernels or ``numba.njit`` helpers.  Arguments arrive as floats of the call's
    result dtype (float32 if every float input is float32, else float64), like a
    ufunc's typed loop.

    >>> import math, numpy as np
    >>> @fast_broadcast
    ... def rho(r):
    ...     return math.exp(-3.0 * (r + 1.0))
    >>> x = np.array([0.0, 0.5])
    >>> rho(x).round(4)
    array([0.0498, 0.0111])
    >>> s, g = rho.sum_and_partials(x)
    >>> bool(np.allclose(g, -3.0 * rho(x)))
    True
    """
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"fast_broadcast got unknown options {sorted(unknown)}; "
                        f"known: {list(_OPTIONS)}")
    if func is None:
        return lambda f: FastBroadcast(f, **options)
    if not callable(func):
        raise TypeError(f"fast_broadcast decorates a function, not {type(func).__name__}")
    return FastBroadcast(func, **options)
