"""Vectorisable math for kernels.

Numba compiles ``math.exp`` in a loop to a call into libm per element, which LLVM cannot
vectorise (Numba's wheels carry no SIMD math library).  Kernels are therefore compiled
against :data:`VECTOR_MATH`, a copy of the ``math`` module in which ``exp expm1 log
log1p tanh pow sin cos`` are replaced by branch-free implementations
(:mod:`.explog`, :mod:`.trig`; accuracy and speed measured in their docstrings) that
inline into the loop and vectorise.  ``sqrt`` is already a vector instruction.
``@fast_broadcast(libm=True)`` keeps libm.

``math.floor``, ``ceil`` and ``trunc`` are swapped too, in every kernel (libm or not),
for another reason: Numba's return an ``int64``, and ``floor(inf)``, ``floor(nan)``,
``floor(1e300)`` cast to one is ``-2**63``.  Their stand-ins return the float, as
NumPy's ``np.floor`` does, and so do their dual rules: every kernel mode agrees.  The
builtin ``round`` likewise (:data:`ROUND`): ``round(x)`` is ``np.rint(x)``, Python's
round half to even kept a float, where Numba's int gave ``-2**63`` for inf, nan and
1e300.

How a kernel gets them: :func:`with_vector_math` gives the kernel's function a copy of
its globals (and closure) in which the ``math`` module and those functions (also when
imported by name, ``from math import exp``) are swapped.  Functions the kernel calls
are not rewritten: a ``numba.njit`` helper keeps libm, another ``@fast_broadcast``
kernel uses its own setting.

Each stand-in is an ordinary Python function (calling libm when called from Python)
with Numba overloads: for floats and ints here, for dual numbers in
:mod:`dualbcast.dual.rules`.
"""
import math
import types as pytypes

import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.extending import overload

from . import explog, missing, trig  # noqa: F401  (missing: overloads)
from .common import OVERLOAD_OPTIONS as _JIT_OPTIONS
_IMPLEMENTATIONS = {
    math.exp: explog.exp, math.expm1: explog.expm1, math.log: explog.log,
    math.log1p: explog.log1p, math.tanh: explog.tanh, math.sin: trig.sin, math.cos: trig.cos,
}


def _is_number(t):
    return isinstance(t, (types.Float, types.Integer, types.Boolean))


def _unary_stand_in(math_fn, impl, python_fn, doc):
    """What kernels call instead of ``math_fn``: ``impl`` on a float (an int or bool
    converted to float64 first), ``python_fn`` when called from Python."""
    def stand_in(x, *base):
        return python_fn(x, *base)      # (math.log takes a base too)

    @overload(stand_in, jit_options=_JIT_OPTIONS)
    def compiled(x):
        if isinstance(x, types.Float):
            return lambda x: impl(x)
        if _is_number(x):
            return lambda x: impl(np.float64(x))
        return None
    _named(stand_in, math_fn.__name__, doc)
    return stand_in


def _named(stand_in, name, doc):
    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.__module__ = __name__
    stand_in.__doc__ = doc


def _log_with_base(log_stand_in):
    # math.log(x, base): log(x) / log(base), as Python computes it (floats and duals)
    @overload(log_stand_in, jit_options=_JIT_OPTIONS)
    def with_base(x, base):
        return lambda x, base: log_stand_in(x) / log_stand_in(base)


def _pow_stand_in(x, y):
    return math.pow(x, y)


@overload(_pow_stand_in, jit_options=_JIT_OPTIONS)
def _vectorised_pow(x, y):
    if x == y == types.float32:
        return lambda x, y: explog.pow(x, y)
    if _is_number(x) and _is_number(y):
        return lambda x, y: explog.pow(np.float64(x), np.float64(y))
    return None


#: ``math`` function returning an int in Numba -> its stand-in returning the float
#: (NumPy's function); their dual rules are the table's piecewise-constant ones.
FLOAT_VALUED = {
    fn: _unary_stand_in(fn, np_fn, np_fn, f"``math.{fn.__name__}`` returning a float "
                                          f"(``numpy.{fn.__name__}``).")
    for fn, np_fn in ((math.floor, np.floor), (math.ceil, np.ceil), (math.trunc, np.trunc))}

#: (Python's round(x, 2.0) raises too; a kernel's arguments are all floats)
ROUND_NDIGITS_ERROR = TypingError(
    "round(x, ndigits) needs an integer ndigits, as Python's round does; a kernel's "
    "arguments are floats: write round(x, int(n)), or a constant")


def _round_stand_in(x, ndigits=None):
    return round(x, ndigits)


@overload(_round_stand_in, jit_options=_JIT_OPTIONS)
def _float_valued_round(x, ndigits=None):
    if not _is_number(x):
        return None
    if ndigits is None or isinstance(ndigits, (types.NoneType, types.Omitted)):
        # Python's round(x) of a float: the integer nearest, half to even: NumPy's rint.
        if isinstance(x, types.Float):
            return lambda x, ndigits=None: np.rint(x)
        return lambda x, ndigits=None: np.rint(np.float64(x))
    if isinstance(ndigits, types.Integer):
        # Numba's round(x, ndigits) of a float (a float already; an int's would be an int)
        if isinstance(x, types.Float):
            return lambda x, ndigits=None: round(x, ndigits)
        return lambda x, ndigits=None: round(np.float64(x), ndigits)
    raise ROUND_NDIGITS_ERROR


#: The builtin ``round`` as kernels see it: a float, as ``floor`` (see the module
#: docstring); ``round(x, ndigits)`` is Numba's.
ROUND = _round_stand_in
_named(ROUND, "round", "``round`` returning a float (``numpy.rint``) inside kernels.")
#: builtin -> its stand-in, for a kernel naming the builtin (not a global of its module).
_BUILTIN_SWAPS = {"round": ROUND}

#: ``math`` function -> its vectorisable stand-in.
STAND_INS = {fn: _unary_stand_in(fn, impl, fn, f"``math.{fn.__name__}``, vectorisable "
                                               f"inside kernels.")
             for fn, impl in _IMPLEMENTATIONS.items()}
#: unary stand-in -> the vmath function it calls on a float (a dual rule calls that
#: directly: one overload less to compile).
IMPLEMENTATION_OF = {STAND_INS[fn]: impl for fn, impl in _IMPLEMENTATIONS.items()}
STAND_INS[math.pow] = _pow_stand_in
_named(_pow_stand_in, "pow", "``math.pow``, vectorisable inside kernels.")
_log_with_base(STAND_INS[math.log])


def _math_module(name, doc, stand_ins):
    module = pytypes.ModuleType(name, doc)
    module.__dict__.update({name: value for name, value in vars(math).items()
                            if not name.startswith("__")})
    module.__dict__.update({fn.__name__: stand_in for fn, stand_in in stand_ins.items()})
    return module


#: The ``math`` module as kernels see it.
VECTOR_MATH = _math_module("dualbcast.vmath.math", "math with vectorisable functions",
                           {**STAND_INS, **FLOAT_VALUED})
#: The ``math`` module as ``libm=True`` kernels see it.
LIBM_MATH = _math_module("dualbcast.vmath.libm_math", "math with float-valued floor & co",
                         FLOAT_VALUED)

_SWAPS = {id(math): VECTOR_MATH, id(round): ROUND,
          **{id(fn): stand_in for fn, stand_in in {**STAND_INS, **FLOAT_VALUED}.items()}}
_LIBM_SWAPS = {id(math): LIBM_MATH, id(round): ROUND,
               **{id(fn): stand_in for fn, stand_in in FLOAT_VALUED.items()}}


def with_vector_math(py_func, *, libm=False):
    """``py_func`` with its own copy of its globals and closure in which ``math`` and
    the vectorisable ``math`` functions are replaced (see the module docstring); with
    ``libm=True`` only ``floor``, ``ceil``, ``trunc`` and ``round`` (made float-valued).  Call
    :func:`refresh_globals` before compiling it again: globals the function's module
    defined later are copied then."""
    swaps = _LIBM_SWAPS if libm else _SWAPS
    closure = py_func.__closure__
    if closure is not None:
        closure = tuple(_swapped_cell(cell, swaps) for cell in closure)
    rebound = pytypes.FunctionType(py_func.__code__, {}, py_func.__name__,
                                   py_func.__defaults__, closure)
    rebound.__kwdefaults__ = py_func.__kwdefaults__
    rebound.__qualname__ = py_func.__qualname__
    rebound.__module__ = py_func.__module__
    rebound.__doc__ = py_func.__doc__
    rebound.__wrapped_globals__ = py_func.__globals__
    rebound.__math_swaps__ = swaps
    refresh_globals(rebound)
    return rebound


def refresh_globals(rebound):
    """Copy the original globals of a :func:`with_vector_math` function again."""
    swaps = rebound.__math_swaps__
    wrapped = rebound.__wrapped_globals__
    rebound.__globals__.update({name: swaps.get(id(value), value)
                                for name, value in wrapped.items()})
    # A builtin the kernel names is found after the globals: its stand-in is a global of
    # the copy, unless the module defines that name (then the module's value is used).
    rebound.__globals__.update({name: stand_in for name, stand_in in _BUILTIN_SWAPS.items()
                                if name not in wrapped})


def _swapped_cell(cell, swaps):
    try:
        contents = cell.cell_contents
    except ValueError:                  # an empty cell (a name not yet bound)
        return cell
    swapped = swaps.get(id(contents), contents)
    return cell if swapped is contents else pytypes.CellType(swapped)
