"""``@fast_broadcast``: a scalar Python function compiled into fused array loops."""
from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, Sequence, Union

import numba
import numpy as np
from numba import types
from numba.core.errors import NumbaError
from numba.extending import typeof_impl

from ..dual import DualType
from ..vmath import with_vector_math
from .arguments import plan_call, signature_key
from .cache import kernel_fingerprint
from .dependencies import Dependencies, FrozenDependencyChanged, refresh_helper
from .loops import ACCUMULATE, REGISTER, STORE, LoopSpec, compile_loop
from .prepared import PreparedCall
from ..positions import argument_positions
from .tracing import hook, traced

_OPTIONS = ("fastmath", "libm")
Wrt = Union[int, Sequence[int]]
_MAX_PREPARED = 256          # prepared calls kept per kernel (then the cache restarts)


class KernelCompileError(TypeError):
    """Numba could not compile a kernel for the argument types of a call."""


class FastBroadcast:
    """A scalar kernel that broadcasts like a ufunc and differentiates in one loop.

    Create with :func:`fast_broadcast`.  ``k(*args)`` maps, ``k.sum(*args)`` sums,
    ``k.value_and_partials(*args, wrt=...)`` and ``k.sum_and_partials(*args, wrt=...)``
    add forward-mode derivatives with respect to the ``wrt`` arguments only.
    """

    def __init__(self, py_func: Callable, *, fastmath: bool = False, libm: bool = False):
        functools.update_wrapper(self, py_func)
        self.py_func = py_func
        self._signature = inspect.signature(py_func)
        kinds = {p.kind for p in self._signature.parameters.values()}
        if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY}:
            raise TypeError(f"@fast_broadcast kernel {py_func.__name__!r} must take a fixed "
                            f"list of scalar parameters (no *args, **kwargs or keyword-only)")
        self._nparams = len(self._signature.parameters)
        self._jit_options = {"error_model": "numpy", "fastmath": fastmath}
        # Unless libm is asked for, the kernel sees dualbcast.vmath's vectorisable
        # math.exp & co (see dualbcast.vmath).
        self.libm = libm
        self._loops = {}            # LoopSpec -> compiled loop, of this generation
        self._prepared = {}
        # Compiled afresh (a new generation) whenever a name the kernel reads changes:
        # see dependencies.py.  The first call walks its dependencies.
        self.generation = 0
        self.dependencies = None    # a Dependencies: what this generation was compiled with
        self._cache_key = None
        self.scalar_kernel = self._scalar_kernel()

    def _scalar_kernel(self):
        # (libm=True: only math.floor & co, made float-valued as in every kernel)
        compiled_func = with_vector_math(self.py_func, libm=self.libm)
        # Inlined into the loops wherever it is called (LLVM only vectorises a loop
        # with no calls left in it).
        return numba.njit(**self._jit_options, forceinline=True)(compiled_func)

    def current_generation(self) -> int:
        """The kernel's generation: it starts a new one, compiled afresh, when a name
        its code (or code it calls) reads is bound to another value than when it was
        compiled (a global, a closure variable, a module's attribute, an array's
        contents), so that every mode computes with the values of the moment."""
        dependencies = self.dependencies
        if dependencies is None or not dependencies.unchanged():
            self._new_generation()
        return self.generation

    def _new_generation(self):
        if self.dependencies is not None:
            frozen = self.dependencies.frozen_changes()
            if frozen:
                described = ", ".join(f"{name!r} (read by {getattr(what, '__name__', what)})"
                                      for name, what in frozen)
                raise FrozenDependencyChanged(
                    f"@fast_broadcast kernel {self.__name__!r}: {described} changed, but "
                    f"Numba keeps the code that reads it compiled for good (a "
                    f"register_jitable or overload function, a numba.vectorize ufunc): "
                    f"pass the value as an argument, or make the function a numba.njit "
                    f"helper, which is compiled again")
        dependencies = Dependencies(self.py_func)
        self._signature = inspect.signature(self.py_func)     # (defaults may be rebound)
        for kernel in dependencies.kernels:
            kernel.current_generation()         # a kernel it calls, compiled afresh first
        for helper in dependencies.dispatchers:
            refresh_helper(helper)
        fingerprint = kernel_fingerprint(dependencies, {**self._jit_options, "libm": self.libm})
        self._cache_key = None
        if fingerprint is not None:
            name = f"{self.py_func.__module__}.{self.py_func.__qualname__}"
            name = "".join(c if c.isalnum() or c in "._" else "_" for c in name)
            self._cache_key = f"{name[:80]}-{fingerprint}"
        # (Also the first time: the globals copied when the kernel was defined may
        # have been defined since.)
        self.scalar_kernel = self._scalar_kernel()
        if self.dependencies is not None:
            self.dependencies.retired = True
            self._loops.clear()
            self._prepared.clear()
            self.generation += 1
        self.dependencies = dependencies

    def __repr__(self):
        return f"<fast_broadcast kernel {self.__name__}>"

    # ------------------------------------------------------------------ public API

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The kernel applied elementwise with NumPy broadcasting (a scalar for
        all-scalar input, like a ufunc).  Inside ``grad``, traced arguments get
        their partials from the same loop (the fast broadcast rule)."""
        if traced(args) or kwargs and traced(kwargs.values()):
            return hook.call(self, self._bind(args, kwargs))
        args = self._bind(args, kwargs)
        return self.prepare("map", args).map(args)

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        """``sum(k(*args))`` in one loop, without materialising ``k(*args)``.  Inside
        ``grad``, the gradient of the sum comes from the same loop (the sum-of-map rule)."""
        if traced(args) or kwargs and traced(kwargs.values()):
            return hook.sum(self, self._bind(args, kwargs))
        args = self._bind(args, kwargs)
        return self.prepare("sum", args).sum(args)

    def value_and_partials(self, *args: Any, wrt: Wrt = 0, **kwargs: Any) -> tuple[Any, Any]:
        """Values and the partials with respect to the ``wrt`` arguments, each at the
        broadcast shape.  ``wrt`` an int gives one partials array, a tuple a tuple."""
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("value_and_partials", "{}(...)")
        return self.prepare("partials", args, wrt).value_and_partials(args)

    def sum_and_partials(self, *args: Any, wrt: Wrt = 0, out: Any = None,
                         **kwargs: Any) -> tuple[Any, Any]:
        """``sum(k(*args))`` and its gradient with respect to each ``wrt`` argument, at
        that argument's own shape and dtype.  A broadcast argument's gradient is
        reduced inside the loop: no temporary of the broadcast size is allocated.
        ``out`` (an array, or a tuple with one array or None per ``wrt`` argument)
        receives the gradients instead of new arrays: repeated calls allocate nothing."""
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("sum_and_partials", "{}.sum(...)")
        return self.prepare("sum_partials", args, wrt).sum_and_partials(args, out)

    def _refuse_traced(self, method, instead):
        raise TypeError(
            f"{self.__name__}.{method} got a value traced by grad/value_and_grad: it "
            f"computes forward-mode partials itself and is not differentiated through. "
            f"Inside grad call the kernel as {instead.format(self.__name__)}: "
            f"grad takes its gradient from the same one loop")

    @property
    def specializations(self) -> dict:
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

    def prepare(self, mode, args, wrt=None):
        """The :class:`PreparedCall` for ``mode`` over arguments like ``args`` (bound:
        positional and complete): planned, validated and compiled on the first call
        with their signature, then reused.  A replay holds on to it: its arguments
        have the same signature on every run."""
        signature = signature_key(args)
        wrt_key = wrt if wrt is None or type(wrt) is int else _wrt_key(wrt)
        key = (mode, wrt_key, signature)
        call = self._prepared.get(key)
        if call is None:
            if signature is None or wrt_key is _UNCACHEABLE:
                key = None
            call = self._make_prepared(mode, args, wrt)
            if key is not None:
                if len(self._prepared) >= _MAX_PREPARED:
                    self._prepared.clear()
                self._prepared[key] = call
        return call

    def _make_prepared(self, mode, args, wrt):
        plan = plan_call(self.__name__, args)
        active, single = self._active(wrt, plan) if wrt is not None else ((), False)
        own = [plan.described[i] for i in active]
        grad_kinds = ()
        if mode == "sum_partials":
            grad_kinds = tuple(REGISTER if math.prod(shape) == 1 else
                               STORE if shape == plan.shape else ACCUMULATE
                               for shape, _, _ in own)
        gradients = tuple((kind, *own_spec) for kind, own_spec
                          in zip(grad_kinds or (None,) * len(own), own))
        spec = LoopSpec(mode, plan.kinds, active, plan.ndim, grad_kinds, plan.dtype.name)
        self.current_generation()
        loop = self.loop(spec)
        # Threads may split the outermost loop unless two chunks would add into the
        # same element of a gradient (an argument broadcast along that loop).
        splittable = all(kind != ACCUMULATE or _outer_stride(plan, shape) != 0
                         for kind, shape, _, _ in gradients)
        return PreparedCall(self, mode, loop, self.dependencies, plan, single, gradients,
                            splittable)

    def _active(self, wrt, plan):
        single, active = argument_positions(wrt, len(plan.kinds), "wrt", self.__name__)
        if not active:
            raise ValueError(f"{self.__name__}: wrt={wrt!r} names no argument")
        for i in active:
            dtype = plan.described[i][1]
            if dtype.kind != "f":
                raise TypeError(f"{self.__name__}: cannot differentiate with respect to argument "
                                f"{i} of dtype {dtype}: integer and bool arguments are promoted "
                                f"to float for values but never differentiated")
        return active, single

    def loop(self, spec):
        """The loop for ``spec`` in this generation (compiled, or loaded from the disk
        cache, at its first call).  If Numba cannot compile it, ``_diagnose`` says why."""
        loop = self._loops.get(spec)
        if loop is None:
            loop = self._loops[spec] = compile_loop(spec, self.scalar_kernel, self._jit_options,
                                                    self._cache_key)
        return loop

    def _diagnose(self, spec, operands, err):
        """The error for a loop Numba could not compile: the scalar kernel type-checked
        alone for this spec's argument types names the problem best."""
        float_t = getattr(types, spec.dtype)
        n = len(spec.active)
        argtypes = tuple(DualType(float_t, n) if i in spec.active else float_t
                         for i in range(len(spec.kinds)))
        described = ", ".join(str(t) for t in argtypes)
        try:
            self.scalar_kernel.compile(argtypes)
        except NumbaError as kernel_err:
            raise KernelCompileError(
                f"@fast_broadcast kernel {self.__name__!r} cannot be compiled for argument "
                f"types ({described}); Numba's error is chained above") from kernel_err
        returned = self.scalar_kernel.overloads[argtypes].signature.return_type
        if not isinstance(returned, (DualType, types.Float, types.Integer, types.Boolean)):
            raise TypeError(f"@fast_broadcast kernel {self.__name__!r} must return one scalar; "
                            f"for argument types ({described}) it returns {returned}")
        raise KernelCompileError(
            f"@fast_broadcast kernel {self.__name__!r}: the loop for {spec.mode} could not "
            f"be compiled for operands {_describe(operands)}") from err


_UNCACHEABLE = object()


def _wrt_key(wrt):
    """``wrt`` as part of a cache key (plain ints only: ``True`` must not find the
    entry of ``1`` and skip its validation)."""
    if type(wrt) is int or wrt is None:
        return wrt
    if type(wrt) in (tuple, list) and _INT.issuperset(map(type, wrt)):
        return (type(wrt), *wrt)
    return _UNCACHEABLE


_INT = frozenset({int})


def _outer_stride(plan, shape):
    # The stride along the outermost loop of a C-ordered buffer of ``shape`` viewed over
    # the call's loops (0 where the argument is broadcast along it).
    if not plan.groups:
        return 0
    return plan.loop_view(np.empty(shape)).strides[0]


def _describe(operands):
    return "(" + ", ".join(str(numba.typeof(op)) for op in operands) + ")"


@typeof_impl.register(FastBroadcast)
def _typeof_kernel(kernel, context):
    # Inside another kernel or an njit function, a kernel is its scalar function:
    # duals flow through it like through any njit helper.
    return types.Dispatcher(kernel.scalar_kernel)


def fast_broadcast(func: Callable | None = None, **options: bool) -> Any:
    """Compile a scalar Python function into a broadcasting, differentiable kernel.

    Use as ``@fast_broadcast`` or with options, ``@fast_broadcast(fastmath=True)``:
    ``fastmath`` lets LLVM reorder the kernel's float math; ``libm=True`` computes
    ``math.exp log expm1 log1p tanh pow sin cos`` with the C library instead of
    dualbcast's vectorisable versions (within 2 ulp of it, see ``dualbcast.vmath``).  The function
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
