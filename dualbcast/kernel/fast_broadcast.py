"""``@fast_broadcast``: a scalar Python function compiled into fused array loops."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import math
import sys
import threading
from typing import Any, Callable, Sequence, Union

import numba
import numpy as np
from numba import types
from numba.core.errors import NumbaError
from numba.extending import typeof_impl

from ..dual import DualType
from ..vmath import with_vector_math
from ..foreign import is_dask_array
from .arguments import plan_call, signature_key
from .cache import kernel_cache_key, kernel_fingerprint
from .dependencies import Dependencies, FrozenDependencyChanged, refresh_helper
from .errors import summary
from .loops import ACCUMULATE, REGISTER, STORE, TANGENT_MODES, LoopSpec, compile_loop
from .prepared import PreparedCall
from .tangents import TangentCall
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
    add forward-mode derivatives with respect to the ``wrt`` arguments only;
    ``k.jvp(*args, tangents=...)`` and ``k.sum_jvp`` a directional derivative, and
    ``tangents=`` on the partials methods second derivatives along it (nested duals),
    ``k.sum_hessian_diagonal`` the (diagonal) Hessian of the sum in one argument:
    each of these is one loop.
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
        self._fingerprint = None    # of this generation (None: not digestible)
        self._compile_dispatchers()

    def _compile_dispatchers(self):
        """``scalar_kernel`` and ``loop_kernel``: the kernel's function for other jitted
        code, and for its own loops (no compile yet: Numba compiles at the first call)."""
        # (libm=True: only math.floor & co, made float-valued as in every kernel)
        compiled_func = with_vector_math(self.py_func, libm=self.libm)
        # Two dispatchers of one function.  The kernel's own loops, compiled with its
        # options, take its Numba IR into theirs: compiled as a function of its own it
        # was also optimised and turned into machine code that nothing calls (LLVM
        # inlines it; 0.8 s of the first call of a nine-argument Hessian).  Other jitted
        # code calling it (a user's njit function, another kernel, a db.jit program) may
        # have other options (error model, fastmath), so it calls a function compiled
        # with the kernel's, inlined by LLVM (a loop is only vectorised with no calls
        # left in it).  Neither is called from Python: no wrappers.
        options = dict(self._jit_options, no_cpython_wrapper=True, no_cfunc_wrapper=True)
        self.loop_kernel = numba.njit(**options, inline="always")(compiled_func)
        self.scalar_kernel = numba.njit(**options, forceinline=True)(compiled_func)

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
        self._fingerprint = fingerprint
        self._cache_key = kernel_cache_key(self.py_func, fingerprint)
        # (Also the first time: the globals copied when the kernel was defined may
        # have been defined since.)
        self._compile_dispatchers()
        if self.dependencies is not None:
            self.dependencies.retired = True
            self._loops.clear()
            self._prepared.clear()
            self.generation += 1
        self.dependencies = dependencies

    @property
    def fastmath(self) -> bool:
        """Whether the kernel's loops are compiled with fast-math (their results may
        differ in the last bits from IEEE arithmetic's)."""
        return self._jit_options["fastmath"]

    @property
    def cache_key(self):
        """What names this generation's compiled code in the disk cache: None where no
        file names its code (a kernel typed at the prompt), or before its first call."""
        return self._cache_key

    def __repr__(self):
        return f"<fast_broadcast kernel {self.__name__}>"

    def __reduce__(self):
        # Pickled (for a Dask worker, say) by name when an importable module holds it
        # there, with its fingerprint (what it reads: checked where it lands); else by
        # its Python function and options (cloudpickle takes a closure's or a script's
        # function by value, with the values it reads).  Compiled afresh where it
        # lands, or loaded from the on-disk compile cache.  (A script's __main__ is not
        # the worker's.)
        found = sys.modules.get(self.__module__) if self.__module__ != "__main__" else None
        for part in self.__qualname__.split("."):
            found = getattr(found, part, None)
        if found is self:
            self.current_generation()           # (the fingerprint of the moment)
            if self._cache_key is not None:
                return (_by_name, (self.__module__, self.__qualname__, self._cache_key))
        return (_unpickled, (self.py_func, self._jit_options["fastmath"], self.libm))

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

    def value_and_partials(self, *args: Any, wrt: Wrt = 0, tangents: dict | None = None,
                           **kwargs: Any) -> tuple:
        """Values and the partials with respect to the ``wrt`` arguments, each at the
        broadcast shape.  ``wrt`` an int gives one partials array, a tuple a tuple.

        With ``tangents`` (``{argument: tangent}``, as :meth:`jvp`), second order from
        the same one loop: ``(value, value_tangent, partials, partial_tangents)``,
        ``partial_tangents`` (like ``partials``) the partials' directional derivatives
        along the tangents: sum over j of d2k/(d wrt d arg_j) * t_j.

        >>> import math, numpy as np, dualbcast as db
        >>> @db.fast_broadcast
        ... def f(x, y):
        ...     return x * x * y
        >>> v, vt, p, pt = f.value_and_partials(np.array([1.0, 2.0]), 3.0, wrt=0,
        ...                                     tangents={0: 1.0})
        >>> p, pt                           # 2xy and d/dx (2xy) = 2y
        (array([ 6., 12.]), array([6., 6.]))
        """
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("value_and_partials", "{}(...)")
        if tangents is not None:
            return self._second_order("partials_tangent", args, wrt, tangents)
        return self.prepare("partials", args, wrt).value_and_partials(args)

    def sum_and_partials(self, *args: Any, wrt: Wrt = 0, out: Any = None,
                         tangents: dict | None = None, **kwargs: Any) -> tuple:
        """``sum(k(*args))`` and its gradient with respect to each ``wrt`` argument, at
        that argument's own shape and dtype.  A broadcast argument's gradient is
        reduced inside the loop: no temporary of the broadcast size is allocated.
        ``out`` (an array, or a tuple with one array or None per ``wrt`` argument)
        receives the gradients instead of new arrays: repeated calls allocate nothing.

        With ``tangents`` (``{argument: tangent}``, as :meth:`sum_jvp`), second order
        from the same one loop: ``(total, total_tangent, gradients,
        gradient_tangents)``, each gradient tangent reduced like its gradient: with
        the tangent ``v`` of ``x``, the Hessian-vector product of the sum.

        >>> import math, numpy as np, dualbcast as db
        >>> @db.fast_broadcast
        ... def rho(r):
        ...     return math.exp(-3.0 * (r + 1.0))
        >>> x, v = np.array([0.0, 0.5]), np.array([1.0, -1.0])
        >>> s, st, g, hv = rho.sum_and_partials(x, tangents={0: v})
        >>> bool(np.allclose(hv, 9.0 * rho(x) * v))
        True
        """
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("sum_and_partials", "{}.sum(...)")
        if tangents is not None:
            if out is not None:
                raise TypeError(f"{self.__name__}.sum_and_partials: out= is not supported "
                                f"with tangents=")
            return self._second_order("sum_partials_tangent", args, wrt, tangents)
        return self.prepare("sum_partials", args, wrt).sum_and_partials(args, out)

    def sum_hessian_diagonal(self, *args: Any, wrt: int = 0, **kwargs: Any) -> Any:
        """The Hessian of ``k.sum(*args)`` with respect to the argument ``wrt``, which
        is diagonal: its diagonal, at that argument's shape and dtype, from one
        second-order loop.  The kernel maps elementwise, so each term of the sum
        depends on one element of the argument (a broadcast one too), and every entry
        off the diagonal is exactly 0: this is the whole Hessian for that argument (a
        Newton step of a separable energy, a Laplace approximation's precisions).

        >>> import math, numpy as np, dualbcast as db
        >>> @db.fast_broadcast
        ... def f(x, c):
        ...     return c * x ** 3
        >>> f.sum_hessian_diagonal(np.array([1.0, 2.0]), 2.0)        # 6 c x
        array([12., 24.])
        """
        args = self._bind(args, kwargs)
        if type(wrt) is not int:
            raise TypeError(f"{self.__name__}.sum_hessian_diagonal: wrt must be one "
                            f"argument's position, not {wrt!r}")
        if traced(args):
            self._refuse_traced("sum_hessian_diagonal", "{}.sum(...)")
        return self._second_order("sum_partials_tangent", args, wrt, {wrt: 1.0})[3]

    def _second_order(self, mode, args, wrt, tangents):
        """``(value, value_tangent, partials, partial_tangents)`` from one loop of the
        second-order ``mode``; ``wrt`` an int: one partial and its tangent, not tuples."""
        positions, values = self._tangents(tangents)
        value, tangent, partials, partial_tangents = getattr(
            self.prepare(mode, args, (wrt, positions)), mode)(args, values)
        if type(wrt) is int:
            return value, tangent, partials[0], partial_tangents[0]
        return value, tangent, partials, partial_tangents

    def jvp(self, *args: Any, tangents: dict, **kwargs: Any) -> tuple[Any, Any]:
        """Forward mode: ``(k(*args), value_tangent)``, the values and their directional
        derivative ``sum over j of dk/darg_j * t_j``, both at the broadcast shape, from
        one loop.  ``tangents``: ``{argument: tangent}``, each argument a position or
        a parameter name, each tangent a float or an array broadcastable to the
        broadcast shape of ``args``; arguments not named have tangent 0.

        >>> import math, numpy as np, dualbcast as db
        >>> @db.fast_broadcast
        ... def f(x, y):
        ...     return x * math.sin(y)
        >>> value, tangent = f.jvp(2.0, np.array([0.0, 1.0]), tangents={"y": 1.0})
        >>> bool(np.allclose(tangent, 2.0 * np.cos([0.0, 1.0])))
        True
        """
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("jvp", "{}(...)")
        positions, values = self._tangents(tangents)
        return self.prepare("tangent", args, positions).tangent(args, values)

    def sum_jvp(self, *args: Any, tangents: dict, **kwargs: Any) -> tuple[Any, Any]:
        """``(sum(k(*args)), its tangent)`` in one loop (see :meth:`jvp`).

        >>> import numpy as np, dualbcast as db
        >>> square = db.fast_broadcast(lambda x: x * x)
        >>> square.sum_jvp(np.array([1.0, 2.0]), tangents={0: np.array([1.0, 0.5])})
        (np.float64(5.0), np.float64(4.0))
        """
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("sum_jvp", "{}.sum(...)")
        positions, values = self._tangents(tangents)
        return self.prepare("sum_tangent", args, positions).sum_tangent(args, values)

    def _tangents(self, tangents):
        """``{argument: tangent}`` as (positions, tangents), in the order of the
        arguments; a parameter name stands for its position."""
        if not isinstance(tangents, dict) or not tangents:
            raise TypeError(f"{self.__name__}: tangents must be a non-empty dict "
                            f"{{argument position or name: tangent}}, not {tangents!r}")
        names = list(self._signature.parameters)
        positions = []
        for key in tangents:
            if isinstance(key, str):
                if key not in names:
                    raise ValueError(f"{self.__name__}: tangents name {key!r}, which is not "
                                     f"a parameter (parameters: {names})")
                key = names.index(key)
            positions.append(key)
        checked = argument_positions(positions, self._nparams, "tangents", self.__name__)[1]
        order = sorted(range(len(checked)), key=checked.__getitem__)
        values = list(tangents.values())
        return tuple(checked[k] for k in order), tuple(values[k] for k in order)

    def _refuse_traced(self, method, instead):
        raise TypeError(
            f"{self.__name__}.{method} got a value traced by grad/value_and_grad: it "
            f"computes forward-mode partials itself and is not differentiated through. "
            f"Inside grad call the kernel as {instead.format(self.__name__)}: "
            f"grad takes its gradient from the same one loop")

    def bind(self, *args: Any, **kwargs: Any) -> tuple:
        """The arguments of a call as one positional tuple, bound to the kernel's
        parameters as Python binds them (keywords and defaults applied); a TypeError
        names what does not fit.

        >>> import dualbcast as db
        >>> db.fast_broadcast(lambda x, scale=2.0: scale * x).bind(1.0)
        (1.0, 2.0)
        """
        return self._bind(args, kwargs)

    def result_dtype(self, *args: Any, wrt: Wrt | None = None, **kwargs: Any) -> np.dtype:
        """The dtype a call with ``args`` computes in (NumPy arrays, NumPy and Python
        scalars), and every error such a call would raise for their types, shapes and
        ``wrt``, without compiling or running anything: what an adapter checks before it
        builds lazy work (Dask, JAX) from stand-ins of its arrays.

        >>> import numpy as np, dualbcast as db
        >>> db.fast_broadcast(lambda x, n: x * n).result_dtype(np.ones(2, np.float32), 3)
        dtype('float32')
        """
        args = self._bind(args, kwargs)
        # (float16 computes in float32, and promotes as float32 does: a float32 stand-in,
        # lest planning convert a large broadcast stand-in to float32 for a loop)
        args = tuple(np.broadcast_to(np.float32(0.0), a.shape) if type(a) is np.ndarray
                     and a.dtype == np.float16 else a for a in args)
        plan = plan_call(self.__name__, args)
        if wrt is not None:
            self._active(wrt, plan)
        return plan.dtype

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
        if any(is_dask_array(arg) for arg in args):
            from .. import dask as blockwise        # (the optional [dask] extra)
            return blockwise.BlockwiseCall(self, mode, args, wrt)
        if mode in TANGENT_MODES:
            return TangentCall(self, mode, args, wrt)
        plan = plan_call(self.__name__, args)
        active, single = self._active(wrt, plan) if wrt is not None else ((), False)
        spec = LoopSpec(mode, plan.kinds, active, plan.ndim, (), plan.dtype.name)
        return self.prepared_call(spec, plan, single)

    def prepared_call(self, spec, plan, single=False):
        """The :class:`PreparedCall` of the loop for ``spec`` (its ``grad_kinds`` filled
        in here) over calls planned as ``plan``."""
        own = [plan.described[i] for i in spec.active]
        grad_kinds = ()
        if spec.mode in ("sum_partials", "sum_partials_tangent"):
            grad_kinds = tuple(REGISTER if math.prod(shape) == 1 else
                               STORE if shape == plan.shape else ACCUMULATE
                               for shape, _, _ in own)
            spec = dataclasses.replace(spec, grad_kinds=grad_kinds)
        gradients = tuple((kind, *own_spec) for kind, own_spec
                          in zip(grad_kinds or (None,) * len(own), own))
        self.current_generation()
        loop = self.loop(spec)
        # Threads may split the outermost loop unless two chunks would add into the
        # same element of a gradient (an argument broadcast along that loop).
        splittable = all(kind != ACCUMULATE or _outer_stride(plan, shape) != 0
                         for kind, shape, _, _ in gradients)
        return PreparedCall(self, spec.mode, loop, self.dependencies, plan, single, gradients,
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
            loop = self._loops[spec] = compile_loop(spec, self.loop_kernel, self._jit_options,
                                                    self._cache_key)
        return loop

    def _diagnose(self, spec, operands, err):
        """The error for a loop Numba could not compile: the scalar kernel type-checked
        alone for this spec's argument types names the problem best."""
        argtypes = spec.argument_types()
        described = ", ".join(str(t) for t in argtypes)
        try:
            self.scalar_kernel.compile(argtypes)
        except NumbaError as kernel_err:
            why = summary(kernel_err)
            raise KernelCompileError(
                f"@fast_broadcast kernel {self.__name__!r} cannot be compiled for argument "
                f"types ({described}){': ' + why if why else ''}. Numba's error is chained "
                f"above") from kernel_err
        returned = self.scalar_kernel.overloads[argtypes].signature.return_type
        if not isinstance(returned, (DualType, types.Float, types.Integer, types.Boolean)):
            raise TypeError(f"@fast_broadcast kernel {self.__name__!r} must return one scalar; "
                            f"for argument types ({described}) it returns {returned}")
        raise KernelCompileError(
            f"@fast_broadcast kernel {self.__name__!r}: the loop for {spec.mode} could not "
            f"be compiled for operands {_describe(operands)}") from err


_UNCACHEABLE = object()


def _unpickled(py_func, fastmath, libm):
    """A kernel pickled by function: the one this process already unpickled with the
    same name and fingerprint (the same code, options and values read) if any, else a
    new one.  (A Dask task unpickles its kernel afresh: without this every task's copy
    would compile its loops again, seconds each.)"""
    kernel = FastBroadcast(py_func, fastmath=fastmath, libm=libm)
    kernel.current_generation()
    if kernel._fingerprint is None:
        return kernel                   # (reads a value that cannot be digested)
    key = (py_func.__module__, py_func.__qualname__, kernel._fingerprint)
    with _UNPICKLED_LOCK:               # (a Dask worker's threads unpickle at once)
        known = _UNPICKLED.get(key)
        if known is not None:
            known.current_generation()
            if known._fingerprint == kernel._fingerprint:
                return known
        if len(_UNPICKLED) >= _MAX_UNPICKLED:
            _UNPICKLED.pop(next(iter(_UNPICKLED)))      # the oldest
        _UNPICKLED[key] = kernel
    return kernel


_UNPICKLED = {}         # (module, qualname, fingerprint) -> kernel, in this process
_UNPICKLED_LOCK = threading.Lock()
_MAX_UNPICKLED = 64


def _by_name(module, qualname, cache_key):
    """The kernel ``module.qualname`` of the process unpickling it, which must read
    what it read where it was pickled: a global rebound there at run time, and not
    here, would make it compute something else without a word."""
    kernel = importlib.import_module(module)
    for part in qualname.split("."):
        kernel = getattr(kernel, part)
    kernel.current_generation()
    if kernel._cache_key != cache_key:
        raise RuntimeError(
            f"@fast_broadcast kernel {qualname!r} of module {module!r} was pickled by name, "
            f"but here it does not read what it read where it was pickled (a global, a "
            f"closure variable or a helper differs: rebound at run time, or another "
            f"version of the module, or of dualbcast, Numba, NumPy or Python): pass such "
            f"values as arguments, or install the same versions")
    return kernel


def _wrt_key(wrt):
    """``wrt`` as part of a cache key (plain ints only: ``True`` must not find the
    entry of ``1`` and skip its validation); the tangent modes' ``(wrt, positions)``
    too, and their ``(wrt, positions, width)``."""
    if type(wrt) is int or wrt is None:
        return wrt
    if type(wrt) in (tuple, list):
        if _INT.issuperset(map(type, wrt)):
            return (type(wrt), *wrt)
        if len(wrt) in (2, 3):
            key = tuple(map(_wrt_key, wrt))
            if _UNCACHEABLE not in key:
                return (type(wrt), key)
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
    ``fastmath`` lets LLVM reorder the kernel's float math, its values in every mode
    (the chain rule's NaN-safe products excepted, which keep their meaning); ``libm=True`` computes
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
