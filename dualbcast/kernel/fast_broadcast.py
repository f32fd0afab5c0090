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
    """Numba could not compile a kernel for the argument types of a call.

    A kernel is compiled at the first call of each mode (map, sum, partials...) with
    each combination of argument types, differentiated arguments as dual numbers.
    When Numba cannot compile it, that call raises this error.  The message names the
    kernel, the argument types (dual types included), the call the kernel made that
    has no implementation for them, the kernel's source line, and what a kernel can
    use instead; Numba's full report is chained (``__cause__``).

    A subclass of :class:`TypeError`: ``except TypeError`` catches it too.

    See Also
    --------
    fast_broadcast : What a kernel's code may use.

    Examples
    --------
    A kernel works on scalars: NumPy's array functions are not among what it can call.

    >>> import numpy as np, dualbcast as db
    >>> @db.fast_broadcast
    ... def norm_of(x):
    ...     return np.linalg.norm(x)
    >>> norm_of(np.ones(3))
    Traceback (most recent call last):
        ...
    dualbcast.kernel.fast_broadcast.KernelCompileError: @fast_broadcast kernel 'norm_of'
    cannot be compiled for argument types (float64): it calls norm(float64), which has no
    implementation for these types (line 3: return np.linalg.norm(x)); a kernel works on
    scalars: ...
    """


class FastBroadcast:
    """A scalar kernel that broadcasts like a ufunc and differentiates in one loop.

    Create with :func:`fast_broadcast`.  Calling the kernel, ``k(*args)``, applies
    the scalar function to every element of the broadcast of its arguments (see
    :meth:`__call__`).  Its methods run the same function in other modes, each in
    one compiled loop over the data:

    - :meth:`sum`: the sum of the map, without storing the map;
    - :meth:`value_and_partials`, :meth:`sum_and_partials`: the values (or their sum)
      and the partial derivatives with respect to the ``wrt`` arguments only (forward
      mode: only those arguments become dual numbers);
    - :meth:`jvp`, :meth:`sum_jvp`: a directional derivative along tangents;
      ``tangents=`` on the partials methods: second derivatives along them (nested
      dual numbers);
    - :meth:`sum_hessian_diagonal`: the Hessian of the sum with respect to one
      argument, which is diagonal.

    In a function differentiated by ``dualbcast.grad``, ``value_and_grad``, ``vjp``,
    ``jvp`` or ``hessian``, batched by ``vmap`` or compiled by ``dualbcast.jit``,
    ``k(...)`` and ``k.sum(...)`` are operations like NumPy's: their partials with
    respect to the traced arguments come from the same loop as their values.  The
    other methods compute on plain arrays and refuse traced ones.

    Parameters
    ----------
    py_func : callable
        The scalar function: scalars in, one scalar out, with a fixed list of
        parameters (no ``*args``, ``**kwargs`` or keyword-only parameters).
    fastmath : bool, default False
        Compile with LLVM's fast-math flags (see :func:`fast_broadcast`).
    libm : bool, default False
        Compute ``math.exp`` & co with the C library (see :func:`fast_broadcast`).

    Attributes
    ----------
    py_func : callable
        The Python function, as written (the kernel also takes its ``__name__``,
        ``__doc__`` and ``__module__``, and names it ``__wrapped__``).

    Raises
    ------
    TypeError
        If ``py_func`` takes ``*args``, ``**kwargs`` or keyword-only parameters.

    See Also
    --------
    fast_broadcast : The decorator that makes kernels.
    dualbcast.grad : Differentiates NumPy programs that call kernels.

    Notes
    -----
    Every mode takes the arguments as a call does: one per parameter of the function,
    positionally or by name, defaults applied.  Each is a Python or NumPy number, a
    NumPy array (of any layout: non-contiguous, Fortran-ordered, read-only and
    ``np.broadcast_to`` views too) or what ``np.asarray`` converts (a list), of a real
    dtype: float16, float32, float64, integer or bool.  Dask arrays make the call
    lazy (see :mod:`dualbcast.dask`); for PyTorch and JAX see :mod:`dualbcast.torch`
    and :mod:`dualbcast.jax`.

    The arguments broadcast as NumPy's do, and the result dtype is a ufunc's: NumPy's
    promotion of the arrays' and NumPy scalars' dtypes (Python numbers are weak:
    they never change it), an integer or bool result made float64, float16 computed
    and returned in float32.  The function receives its arguments as floats of that
    dtype.  Integer and bool arguments are never differentiated.  The values (and
    partials) of arguments that are all scalars, 0-d arrays included, are NumPy
    scalars; results never alias the arguments.

    A kernel computes with the values the names it reads have when it is called:
    globals, closure variables and module attributes read by its code and by the
    kernels and ``numba.njit`` helpers it calls are checked before each call, and the
    kernel is compiled afresh when one changed.

    Examples
    --------
    >>> import math, numpy as np, dualbcast as db
    >>> @db.fast_broadcast
    ... def morse(r, d, a, r0):
    ...     e = math.exp(-a * (r - r0))
    ...     return d * (1.0 - e) ** 2
    >>> r = np.array([1.0, 1.5, 2.0])
    >>> morse(r, 1.2, 1.5, 1.0).round(4)
    array([0.    , 0.3341, 0.7242])
    >>> bool(np.isclose(morse.sum(r, 1.2, 1.5, 1.0), morse(r, 1.2, 1.5, 1.0).sum()))
    True
    >>> value, (dr, da) = morse.value_and_partials(r, 1.2, 1.5, 1.0, wrt=(0, 2))
    >>> dr.shape, da.shape
    ((3,), (3,))
    >>> float32 = morse(r.astype(np.float32), np.array([[1.0], [2.0]], np.float32), 1.5, 1)
    >>> float32.shape, float32.dtype
    ((2, 3), dtype('float32'))
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
        self._libm = libm
        self._loops = {}            # LoopSpec -> compiled loop, of this generation
        self._prepared = {}
        # Compiled afresh (a new generation) whenever a name the kernel reads changes:
        # see dependencies.py.  The first call walks its dependencies.
        self._generation = 0
        self._dependencies = None   # a Dependencies: what this generation was compiled with
        self._cache_key = None
        self._fingerprint = None    # of this generation (None: not digestible)
        self._compile_dispatchers()

    def _compile_dispatchers(self):
        """``_scalar_kernel`` and ``_loop_kernel``: the kernel's function for other jitted
        code, and for its own loops (no compile yet: Numba compiles at the first call)."""
        # (libm=True: only math.floor & co, made float-valued as in every kernel)
        compiled_func = with_vector_math(self.py_func, libm=self._libm)
        # Two dispatchers of one function.  The kernel's own loops, compiled with its
        # options, take its Numba IR into theirs: compiled as a function of its own it
        # was also optimised and turned into machine code that nothing calls (LLVM
        # inlines it; 0.8 s of the first call of a nine-argument Hessian).  Other jitted
        # code calling it (a user's njit function, another kernel, a db.jit program) may
        # have other options (error model, fastmath), so it calls a function compiled
        # with the kernel's, inlined by LLVM (a loop is only vectorised with no calls
        # left in it).  Neither is called from Python: no wrappers.
        options = dict(self._jit_options, no_cpython_wrapper=True, no_cfunc_wrapper=True)
        self._loop_kernel = numba.njit(**options, inline="always")(compiled_func)
        self._scalar_kernel = numba.njit(**options, forceinline=True)(compiled_func)

    def _current_generation(self) -> int:
        """The kernel's generation: it starts a new one, compiled afresh, when a name
        its code (or code it calls) reads is bound to another value than when it was
        compiled (a global, a closure variable, a module's attribute, an array's
        contents), so that every mode computes with the values of the moment."""
        dependencies = self._dependencies
        if dependencies is None or not dependencies.unchanged():
            self._new_generation()
        return self._generation

    def _new_generation(self):
        if self._dependencies is not None:
            frozen = self._dependencies.frozen_changes()
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
            kernel._current_generation()        # a kernel it calls, compiled afresh first
        for helper in dependencies.dispatchers:
            refresh_helper(helper)
        fingerprint = kernel_fingerprint(dependencies, {**self._jit_options, "libm": self._libm})
        self._fingerprint = fingerprint
        self._cache_key = kernel_cache_key(self.py_func, fingerprint)
        # (Also the first time: the globals copied when the kernel was defined may
        # have been defined since.)
        self._compile_dispatchers()
        if self._dependencies is not None:
            self._dependencies.retired = True
            self._loops.clear()
            self._prepared.clear()
            self._generation += 1
        self._dependencies = dependencies

    @property
    def fastmath(self) -> bool:
        """Whether the kernel is compiled with LLVM's fast-math flags.

        Set by ``@fast_broadcast(fastmath=True)``; read only.  With them the kernel's
        results, in every mode, may differ in the last bits from IEEE arithmetic's.

        Examples
        --------
        >>> import dualbcast as db
        >>> db.fast_broadcast(fastmath=True)(lambda x: x * x).fastmath
        True
        """
        return self._jit_options["fastmath"]

    @property
    def libm(self) -> bool:
        """Whether the kernel computes ``math.exp`` & co with the C library.

        Set by ``@fast_broadcast(libm=True)``; read only.  False (the default): the
        kernel's ``math.exp log expm1 log1p tanh pow sin cos`` are dualbcast's
        vectorisable versions (see ``dualbcast.vmath``).

        Examples
        --------
        >>> import dualbcast as db
        >>> db.fast_broadcast(lambda x: x * x).libm
        False
        """
        return self._libm

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
            self._current_generation()          # (the fingerprint of the moment)
            if self._cache_key is not None:
                return (_by_name, (self.__module__, self.__qualname__, self._cache_key))
        return (_unpickled, (self.py_func, self._jit_options["fastmath"], self._libm))

    # ------------------------------------------------------------------ public API

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The kernel applied to every element of the broadcast of its arguments.

        Like a ufunc: NumPy broadcasting, NumPy's dtype rules, a scalar for
        all-scalar input (see the notes of :class:`FastBroadcast`).  Inside
        ``dualbcast.grad`` and the other transformations, the partials with respect
        to the traced arguments come from the same loop as the values.

        Parameters
        ----------
        *args, **kwargs
            One argument per parameter of the kernel's function, positionally or by
            name (defaults apply): numbers or arrays.

        Returns
        -------
        numpy.ndarray or numpy scalar
            The values, at the arguments' broadcast shape, in the result dtype
            (float32 or float64); a NumPy scalar when every argument is a scalar.  A
            lazy Dask array when an argument is one.

        Raises
        ------
        TypeError
            If the arguments do not fit the kernel's parameters, if one is not a
            real number or array of real numbers (a complex, string or object
            array; a PyTorch or JAX array), or if the function returns something
            other than one scalar.
        ValueError
            If the arguments' shapes do not broadcast together.
        KernelCompileError
            If Numba cannot compile the function for the arguments' types.
        FrozenDependencyChanged
            If a value read by code Numba keeps compiled for good changed.
        ZeroDivisionError
            If the function computes ``x ** -n``, ``n`` an integer, at ``x == 0``, as
            Python's ``0.0 ** -2`` does (``1.0 / x`` gives ``inf`` there).

        Examples
        --------
        >>> import numpy as np, dualbcast as db
        >>> @db.fast_broadcast
        ... def scaled(x, scale=2.0):
        ...     return scale * x
        >>> scaled(np.array([1.0, 2.0]))
        array([2., 4.])
        >>> scaled(1.0, scale=3)
        np.float64(3.0)
        >>> scaled(np.ones(3), np.ones(4))
        Traceback (most recent call last):
            ...
        ValueError: scaled: operands could not be broadcast together with shapes (3,) (4,)
        """
        if traced(args) or kwargs and traced(kwargs.values()):
            return hook.call(self, self._bind(args, kwargs))
        args = self._bind(args, kwargs)
        return self._prepare("map", args).map(args)

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        """The sum of ``k(*args)``, in one loop that never stores ``k(*args)``.

        ``np.sum(k(*args))`` and ``k(*args).sum()`` give the same value.  Inside
        ``dualbcast.grad`` and the other transformations, the gradient of the sum,
        reduced to each traced argument's shape, comes from the same loop.

        Parameters
        ----------
        *args, **kwargs
            The kernel's arguments, as for a call (see :meth:`__call__`).

        Returns
        -------
        numpy scalar
            The sum, a NumPy scalar of the result dtype (0 for an empty broadcast);
            a lazy 0-d Dask array when an argument is a Dask array.

        Raises
        ------
        TypeError
            If the arguments do not fit the kernel's parameters or are not real
            numbers (as for a call: see :meth:`__call__`, which lists every error).
        ValueError
            If the arguments' shapes do not broadcast together.
        KernelCompileError
            If Numba cannot compile the function for the arguments' types.

        Notes
        -----
        The sum is added up chunk by chunk in an order fixed by the broadcast shape,
        so it is the same on any number of threads; it may differ in the last bits
        from ``np.sum``'s, which adds in another order.

        Examples
        --------
        >>> import numpy as np, dualbcast as db
        >>> square = db.fast_broadcast(lambda x: x * x)
        >>> square.sum(np.array([1.0, 2.0, 3.0]))
        np.float64(14.0)
        """
        if traced(args) or kwargs and traced(kwargs.values()):
            return hook.sum(self, self._bind(args, kwargs))
        args = self._bind(args, kwargs)
        return self._prepare("sum", args).sum(args)

    def value_and_partials(self, *args: Any, wrt: Wrt = 0, tangents: dict | None = None,
                           **kwargs: Any) -> tuple:
        """The values and their partial derivatives with respect to the ``wrt`` arguments.

        Forward mode, from one loop: only the ``wrt`` arguments become dual numbers,
        so each element carries one partial per ``wrt`` argument, whatever the
        number of parameters.  With ``tangents``, the same one loop (of nested dual
        numbers) also gives the partials' directional derivatives along them: second
        derivatives.

        Parameters
        ----------
        *args, **kwargs
            The kernel's arguments, as for a call (see :meth:`__call__`).
        wrt : int or tuple of int, default 0
            The positions of the arguments to differentiate with respect to
            (negative positions count from the end): each a float argument.
        tangents : dict, optional
            ``{argument: tangent}``, as for :meth:`jvp`: each argument a position or
            a parameter name, each tangent a number or an array that broadcasts to
            the arguments' broadcast shape; arguments not named have tangent 0.

        Returns
        -------
        value : numpy.ndarray or numpy scalar
            ``k(*args)``, at the broadcast shape in the result dtype.
        value_tangent : numpy.ndarray or numpy scalar
            Only with ``tangents``, second: the values' directional derivative,
            the sum over ``j`` of ``dk/darg_j * t_j``.
        partials : numpy.ndarray or tuple of numpy.ndarray
            ``dk/darg_i`` for each ``i`` in ``wrt``, at the broadcast shape in the
            result dtype: one for an int ``wrt``, a tuple for a tuple.  NumPy
            scalars for an all-scalar call.
        partial_tangents : numpy.ndarray or tuple of numpy.ndarray
            Only with ``tangents``, last, like ``partials``: each partial's
            directional derivative, the sum over ``j`` of
            ``d2k/(darg_i darg_j) * t_j``.

        Raises
        ------
        TypeError
            If the arguments do not fit the kernel (see :meth:`__call__`); if
            ``wrt`` is not an int or a tuple of ints, or names an integer or bool
            argument; if ``tangents`` is not a non-empty dict or gives a tangent to
            an integer or bool argument; if an argument or tangent is traced by
            ``dualbcast.grad`` or ``jvp`` (call the kernel itself there: its
            partials come from the same loop).
        ValueError
            If the shapes do not broadcast together; if ``wrt`` is empty, repeats an
            argument or is out of range; if ``tangents`` names no parameter of the
            kernel, or a tangent does not broadcast to the arguments' shape.
        KernelCompileError
            If Numba cannot compile the function for the arguments' types.

        See Also
        --------
        sum_and_partials : The sum and its gradient, at each argument's own shape.
        jvp : The directional derivative of the values alone.

        Examples
        --------
        >>> import math, numpy as np, dualbcast as db
        >>> @db.fast_broadcast
        ... def f(x, y):
        ...     return x * x * y
        >>> x = np.array([1.0, 2.0])
        >>> f.value_and_partials(x, 3.0, wrt=(0, 1))    # x**2 y, (2xy, x**2)
        (array([ 3., 12.]), (array([ 6., 12.]), array([1., 4.])))
        >>> v, vt, p, pt = f.value_and_partials(x, 3.0, wrt=0, tangents={0: 1.0})
        >>> p, pt                           # 2xy and d/dx (2xy) = 2y
        (array([ 6., 12.]), array([6., 6.]))
        """
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("value_and_partials", "{}(...)")
        if tangents is not None:
            return self._second_order("partials_tangent", args, wrt, tangents)
        return self._prepare("partials", args, wrt).value_and_partials(args)

    def sum_and_partials(self, *args: Any, wrt: Wrt = 0, out: Any = None,
                         tangents: dict | None = None, **kwargs: Any) -> tuple:
        """The sum of ``k(*args)`` and its gradient with respect to the ``wrt`` arguments.

        From one loop, forward mode.  Each gradient has its argument's own shape and
        dtype: a broadcast argument's gradient (a scalar coefficient's, say) is
        reduced inside the loop, so no temporary of the broadcast size is allocated.
        With ``tangents``, the same one loop also gives the gradients' directional
        derivatives along them: with the tangent ``v`` of ``x``, the Hessian-vector
        product of the sum.

        Parameters
        ----------
        *args, **kwargs
            The kernel's arguments, as for a call (see :meth:`__call__`).
        wrt : int or tuple of int, default 0
            The positions of the arguments to differentiate with respect to
            (negative positions count from the end): each a float argument.
        out : numpy.ndarray or tuple, optional
            Arrays that receive the gradients instead of new ones, so that repeated
            calls allocate nothing: for an int ``wrt`` an array, for a tuple a tuple
            with an array or None per ``wrt`` argument.  Each must have its
            gradient's shape and dtype, be writeable and C-contiguous, and overlap
            no other ``out`` array and no argument.  Not with ``tangents``.
        tangents : dict, optional
            ``{argument: tangent}``, as for :meth:`sum_jvp`: each argument a position
            or a parameter name, each tangent a number or an array that broadcasts
            to the arguments' broadcast shape; arguments not named have tangent 0.

        Returns
        -------
        total : numpy scalar
            ``k.sum(*args)``, in the result dtype.
        total_tangent : numpy scalar
            Only with ``tangents``, second: the sum's directional derivative.
        gradients : numpy.ndarray or numpy scalar, or a tuple of them
            The gradient of the sum with respect to each ``wrt`` argument, at its
            shape and dtype (float16 included; a Python float's is a NumPy
            float64): one for an int ``wrt``, a tuple for a tuple.  The ``out``
            arrays where given.
        gradient_tangents : numpy.ndarray or numpy scalar, or a tuple of them
            Only with ``tangents``, last, like ``gradients``: each gradient's
            directional derivative along the tangents.

        Raises
        ------
        TypeError
            If the arguments do not fit the kernel (see :meth:`__call__`); if
            ``wrt`` is not an int or a tuple of ints, or names an integer or bool
            argument; if ``tangents`` is not a non-empty dict or gives a tangent to
            an integer or bool argument; if ``out`` is given with ``tangents``, or
            is not a tuple of one entry per ``wrt`` argument for a tuple ``wrt``;
            if an argument or tangent is traced by ``dualbcast.grad`` or ``jvp``
            (call ``k.sum`` there: its gradient comes from the same loop).
        ValueError
            If the shapes do not broadcast together; if ``wrt`` is empty, repeats an
            argument or is out of range; if ``tangents`` names no parameter of the
            kernel, or a tangent does not broadcast to the arguments' shape; if an
            ``out`` array has another shape or dtype than its gradient, is read-only
            or not C-contiguous, or overlaps another ``out`` array or an argument.
        KernelCompileError
            If Numba cannot compile the function for the arguments' types.

        See Also
        --------
        value_and_partials : The values and partials at the broadcast shape.
        sum_hessian_diagonal : The Hessian of the sum in one argument.

        Examples
        --------
        >>> import math, numpy as np, dualbcast as db
        >>> @db.fast_broadcast
        ... def f(x, c):
        ...     return c * x * x
        >>> x = np.array([1.0, 2.0, 3.0])
        >>> f.sum_and_partials(x, 0.5, wrt=(0, 1))           # c x and sum(x**2)
        (np.float64(7.0), (array([1., 2., 3.]), np.float64(14.0)))
        >>> g = np.empty(3)
        >>> total, (dx, dc) = f.sum_and_partials(x, 0.5, wrt=(0, 1), out=(g, None))
        >>> dx is g
        True

        Second order: with the tangent ``v`` of ``x``, the Hessian-vector product
        (here the Hessian is ``2 c`` times the identity):

        >>> v = np.array([1.0, 0.0, -1.0])
        >>> total, total_tangent, dx, hv = f.sum_and_partials(x, 0.5, tangents={0: v})
        >>> hv
        array([ 1.,  0., -1.])
        """
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("sum_and_partials", "{}.sum(...)")
        if tangents is not None:
            if out is not None:
                raise TypeError(f"{self.__name__}.sum_and_partials: out= is not supported "
                                f"with tangents=")
            return self._second_order("sum_partials_tangent", args, wrt, tangents)
        return self._prepare("sum_partials", args, wrt).sum_and_partials(args, out)

    def sum_hessian_diagonal(self, *args: Any, wrt: int = 0, **kwargs: Any) -> Any:
        """The diagonal of the Hessian of ``k.sum(*args)`` with respect to one argument.

        The kernel maps elementwise, so each term of the sum depends on one element
        of the argument (of a broadcast one too), and every entry off the diagonal is
        exactly 0: the diagonal is the whole Hessian for that argument (a Newton step
        of a separable energy, a Laplace approximation's precisions).  It comes from
        one second-order loop.

        Parameters
        ----------
        *args, **kwargs
            The kernel's arguments, as for a call (see :meth:`__call__`).
        wrt : int, default 0
            The position of the argument (negative positions count from the end):
            a float argument.

        Returns
        -------
        numpy.ndarray or numpy scalar
            The diagonal, at the argument's shape and dtype.

        Raises
        ------
        TypeError
            If the arguments do not fit the kernel (see :meth:`__call__`); if
            ``wrt`` is not a Python int, or names an integer or bool argument; if
            an argument is traced by ``dualbcast.grad`` or ``jvp``.
        ValueError
            If the shapes do not broadcast together, or ``wrt`` is out of range.
        KernelCompileError
            If Numba cannot compile the function for the arguments' types.

        See Also
        --------
        sum_and_partials : With ``tangents``, Hessian-vector products of the sum.

        Examples
        --------
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
            self._prepare(mode, args, (wrt, positions)), mode)(args, values)
        if type(wrt) is int:
            return value, tangent, partials[0], partial_tangents[0]
        return value, tangent, partials, partial_tangents

    def jvp(self, *args: Any, tangents: dict, **kwargs: Any) -> tuple[Any, Any]:
        """The values and their directional derivative along ``tangents``, from one loop.

        Forward mode: ``(k(*args), value_tangent)`` with ``value_tangent`` the sum
        over ``j`` of ``dk/darg_j * t_j``, both at the broadcast shape.  The
        tangents are plain numbers and arrays; for traced ones (a tangent that is
        itself differentiated) use ``dualbcast.jvp(k, primals, tangents)``.

        Parameters
        ----------
        *args, **kwargs
            The kernel's arguments, as for a call (see :meth:`__call__`).
        tangents : dict
            ``{argument: tangent}``, keyword only: each argument a position
            (negative ones count from the end) or a parameter name, each tangent a
            number or an array that broadcasts to the arguments' broadcast shape
            (it never changes the result's shape or dtype).  Arguments not named
            have tangent 0.

        Returns
        -------
        value : numpy.ndarray or numpy scalar
            ``k(*args)``.
        value_tangent : numpy.ndarray or numpy scalar
            The directional derivative, at the broadcast shape in the result dtype.

        Raises
        ------
        TypeError
            If the arguments do not fit the kernel (see :meth:`__call__`); if
            ``tangents`` is not a non-empty dict, or gives a tangent to an integer
            or bool argument; if an argument or tangent is traced by
            ``dualbcast.grad`` or ``jvp``.
        ValueError
            If the shapes do not broadcast together; if ``tangents`` names no
            parameter of the kernel, a position out of range, or a tangent that
            does not broadcast to the arguments' shape.
        KernelCompileError
            If Numba cannot compile the function for the arguments' types.

        See Also
        --------
        sum_jvp : The same for the sum.
        value_and_partials : With ``tangents``, the partials' tangents too.

        Examples
        --------
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
        return self._prepare("tangent", args, positions).tangent(args, values)

    def sum_jvp(self, *args: Any, tangents: dict, **kwargs: Any) -> tuple[Any, Any]:
        """The sum of ``k(*args)`` and its directional derivative along ``tangents``.

        One loop, as :meth:`jvp`, which never stores the map or its tangent.

        Parameters
        ----------
        *args, **kwargs
            The kernel's arguments, as for a call (see :meth:`__call__`).
        tangents : dict
            ``{argument: tangent}``, keyword only, as for :meth:`jvp`.

        Returns
        -------
        total : numpy scalar
            ``k.sum(*args)``.
        total_tangent : numpy scalar
            Its directional derivative, the sum over the elements and over ``j`` of
            ``dk/darg_j * t_j``.

        Raises
        ------
        TypeError
            If the arguments do not fit the kernel (see :meth:`__call__`); if
            ``tangents`` is not a non-empty dict, or gives a tangent to an integer
            or bool argument; if an argument or tangent is traced by
            ``dualbcast.grad`` or ``jvp``.
        ValueError
            If the shapes do not broadcast together; if ``tangents`` names no
            parameter of the kernel, a position out of range, or a tangent that
            does not broadcast to the arguments' shape.
        KernelCompileError
            If Numba cannot compile the function for the arguments' types.

        See Also
        --------
        jvp : The same for the values, at the broadcast shape.
        sum_and_partials : The gradient of the sum.

        Examples
        --------
        >>> import numpy as np, dualbcast as db
        >>> square = db.fast_broadcast(lambda x: x * x)
        >>> square.sum_jvp(np.array([1.0, 2.0]), tangents={0: np.array([1.0, 0.5])})
        (np.float64(5.0), np.float64(4.0))
        """
        args = self._bind(args, kwargs)
        if traced(args):
            self._refuse_traced("sum_jvp", "{}.sum(...)")
        positions, values = self._tangents(tangents)
        return self._prepare("sum_tangent", args, positions).sum_tangent(args, values)

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

    def _result_dtype(self, *args: Any, wrt: Wrt | None = None, **kwargs: Any) -> np.dtype:
        """The dtype a call with ``args`` computes in (NumPy arrays, NumPy and Python
        scalars), and every error such a call would raise for their types, shapes and
        ``wrt``, without compiling or running anything: what an adapter checks before it
        builds lazy work (Dask, JAX) from stand-ins of its arrays.

        >>> import numpy as np, dualbcast as db
        >>> db.fast_broadcast(lambda x, n: x * n)._result_dtype(np.ones(2, np.float32), 3)
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
    def _specializations(self) -> dict:
        """The compiled loops: ``{LoopSpec: [Numba signatures]}`` (for inspection)."""
        return {loop.spec: list(loop.signatures) for loop in self._loops.values()}

    def _prepare(self, mode, args, wrt=None):
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
        return self._prepared_call(spec, plan, single)

    def _prepared_call(self, spec, plan, single=False):
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
        self._current_generation()
        loop = self._loop(spec)
        # Threads may split the outermost loop unless two chunks would add into the
        # same element of a gradient (an argument broadcast along that loop).
        splittable = all(kind != ACCUMULATE or _outer_stride(plan, shape) != 0
                         for kind, shape, _, _ in gradients)
        return PreparedCall(self, spec.mode, loop, self._dependencies, plan, single, gradients,
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

    def _loop(self, spec):
        """The loop for ``spec`` in this generation (compiled, or loaded from the disk
        cache, at its first call).  If Numba cannot compile it, ``_diagnose`` says why."""
        loop = self._loops.get(spec)
        if loop is None:
            loop = self._loops[spec] = compile_loop(spec, self._loop_kernel, self._jit_options,
                                                    self._cache_key)
        return loop

    def _diagnose(self, spec, operands, err):
        """The error for a loop Numba could not compile: the scalar kernel type-checked
        alone for this spec's argument types names the problem best."""
        argtypes = spec.argument_types()
        described = ", ".join(str(t) for t in argtypes)
        try:
            self._scalar_kernel.compile(argtypes)
        except NumbaError as kernel_err:
            why = summary(kernel_err)
            raise KernelCompileError(
                f"@fast_broadcast kernel {self.__name__!r} cannot be compiled for argument "
                f"types ({described}){': ' + why if why else ''}. Numba's error is chained "
                f"above") from kernel_err
        returned = self._scalar_kernel.overloads[argtypes].signature.return_type
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
    kernel._current_generation()
    if kernel._fingerprint is None:
        return kernel                   # (reads a value that cannot be digested)
    key = (py_func.__module__, py_func.__qualname__, kernel._fingerprint)
    with _UNPICKLED_LOCK:               # (a Dask worker's threads unpickle at once)
        known = _UNPICKLED.get(key)
        if known is not None:
            known._current_generation()
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
    kernel._current_generation()
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
    return types.Dispatcher(kernel._scalar_kernel)


def fast_broadcast(func: Callable | None = None, **options: bool) -> Any:
    """Compile a scalar Python function into a broadcasting, differentiable kernel.

    Use as ``@fast_broadcast`` or with options, ``@fast_broadcast(fastmath=True)``.
    The function takes scalars and returns one scalar; it may use arithmetic,
    comparisons, ``math.*``, ``if``/``elif``/``else``, ``for`` and ``while`` loops,
    early ``return``, and call other kernels and ``numba.njit`` helpers.  Its
    arguments arrive as floats of the call's result dtype, like a ufunc's typed loop
    (see :class:`FastBroadcast`).  Numba compiles it at the first call of each mode
    with each combination of argument types, or loads it from the on-disk compile
    cache (``dualbcast.config.cache_dir``).

    Parameters
    ----------
    func : callable, optional
        The scalar function, when used as ``@fast_broadcast`` without options.
        Omitted, ``fast_broadcast(**options)`` returns the decorator.
    fastmath : bool, default False
        Keyword only.  Let LLVM reorder the kernel's float math (fast-math flags), in
        its values in every mode; the chain rule's NaN-safe products keep their
        meaning.  Results may differ in the last bits from IEEE arithmetic's.
    libm : bool, default False
        Keyword only.  Compute ``math.exp log expm1 log1p tanh pow sin cos`` with the
        C library instead of dualbcast's versions, which LLVM vectorises (within 2
        ulp of the C library's; see ``dualbcast.vmath``).  Only the kernel's own
        code is rewritten: a ``numba.njit`` helper it calls keeps the C library, and
        another kernel it calls keeps its own setting.

    Returns
    -------
    FastBroadcast or callable
        The kernel; without ``func``, a decorator that makes one.

    Raises
    ------
    TypeError
        If an option is unknown or given positionally, if ``func`` is not callable,
        or if it takes ``*args``, ``**kwargs`` or keyword-only parameters.

    See Also
    --------
    FastBroadcast : The kernel: calling it, and its methods.
    dualbcast.grad : Differentiates NumPy programs that call kernels.

    Notes
    -----
    A kernel computes with the values its names have when it is called: Numba freezes
    the globals it compiles with, so each call first checks what the kernel's code
    reads (globals, closure variables, module attributes, in every kernel and
    ``njit`` helper it calls; a global array's contents too), and the kernel is
    compiled afresh when one changed.  Where Numba keeps code compiled for good (a
    ``register_jitable`` or ``overload`` function, a ``numba.vectorize`` ufunc) a
    change raises :class:`FrozenDependencyChanged` instead.

    Examples
    --------
    >>> import math, numpy as np, dualbcast as db
    >>> @db.fast_broadcast
    ... def rho(r):
    ...     return math.exp(-3.0 * (r + 1.0))
    >>> x = np.array([0.0, 0.5])
    >>> rho(x).round(4)
    array([0.0498, 0.0111])
    >>> s, g = rho.sum_and_partials(x)
    >>> bool(np.allclose(g, -3.0 * rho(x)))
    True

    With options, and control flow:

    >>> @db.fast_broadcast(libm=True)
    ... def soft_clip(x, limit):
    ...     if x > limit:
    ...         return limit + math.log1p(x - limit)
    ...     return max(x, -limit)
    >>> soft_clip(np.array([-2.0, 0.5, 3.0]), 1.0).round(4)
    array([-1.    ,  0.5   ,  2.0986])
    >>> soft_clip.libm, soft_clip.fastmath
    (True, False)
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
