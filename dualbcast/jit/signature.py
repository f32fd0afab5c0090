"""What a recorded program is kept under, and what it checks before it runs: the
signature of a call's arguments, exact comparison of constants, and the free variables
of the traced function.

The signature holds everything a replay cannot re-check: the differentiated
arguments' structure, shapes, dtypes and strides, and the exact value of every other
argument (numbers by their bits; arrays by shape and dtype here, and by content before
each replay).  Arguments of other kinds (objects with state) make a call unreplayable:
it is traced every time.
"""
import functools
import struct
import types

import numpy as np

from ..core.pytree import flatten
from ..kernel import FastBroadcast


class Unreplayable(Exception):
    """An argument whose value a replay could not check."""


_FLOAT_SCALARS = frozenset({float, np.float64, np.float32, np.float16})
# Arguments a signature holds by identity: functions and kernels.  A function's closure
# could change; that is jit's assumption (f computes from its arguments) again.  Not
# bound methods (obj.apply, d.get, rng.normal): their object's state is part of what
# they compute.
BY_IDENTITY = {types.FunctionType, np.ufunc, FastBroadcast}


def signature(args, kwargs, differentiated, trees=None):
    """``(key, arrays)``: a hashable key a replay's arguments must match, and the
    non-differentiated arrays whose contents must match too.  Raises
    :class:`Unreplayable` for an argument a replay cannot check.  ``trees``: a list
    that receives ``(leaves, treedef)`` of each differentiated argument (treedef None
    for a lone array or float)."""
    arrays = []
    if trees is None:
        trees = []
    key = [_traced_key(arg, trees) if traced else _constant_key(arg, arrays)
           for arg, traced in zip(args, differentiated)]
    if kwargs:
        key.append(tuple((name, _constant_key(value, arrays)) for name, value in kwargs.items()))
    return tuple(key), arrays


def _traced_key(arg, trees):
    kind = type(arg)
    if kind is np.ndarray:
        trees.append(((arg,), None))
        return (arg.shape, arg.dtype, arg.strides)
    if kind in _FLOAT_SCALARS:
        trees.append(((arg,), None))
        return kind
    leaves, tree = flatten(arg)
    if not _PLAIN_LEAVES.issuperset(map(type, leaves)):
        # An ndarray subclass (np.memmap, a user's) is differentiated as a plain view
        # of its data, as a trace does: keyed by its shape like any array.
        leaves = [leaf.view(np.ndarray) if isinstance(leaf, np.ndarray) else leaf
                  for leaf in leaves]
    trees.append((leaves, tree))
    return (_typed_keys(tree),
            tuple([(leaf.shape, leaf.dtype, leaf.strides) if type(leaf) is np.ndarray
                   else type(leaf) for leaf in leaves]))


_PLAIN_LEAVES = frozenset({np.ndarray, float, np.float64, np.float32, np.float16})


def _typed_keys(tree):
    """``tree`` (a treedef) with each dict key paired with its type: keys equal by
    ``==`` but of other types (``0``, ``0.0``, ``False``) make other programs (``f`` may
    index with them, or branch on their types)."""
    if type(tree) is not tuple:
        return tree                         # a leaf
    kind, keys, children = tree
    if keys is not None:
        keys = tuple((type(key), key) for key in keys)
    return (kind, keys, tuple(map(_typed_keys, children)))


def _constant_key(value, arrays):
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str or kind is bytes:
        return (kind, value)
    if kind is float:
        return (kind, _bits(value))         # -0.0 is not 0.0; nor is -nan nan
    if kind is np.ndarray:
        if value.dtype.hasobject:
            raise Unreplayable("an object array")
        arrays.append(value)
        return (kind, value.shape, value.dtype, value.strides)
    if isinstance(value, np.generic):
        return (kind, value.tobytes())
    if kind is complex:
        return (kind, _bits(value.real), _bits(value.imag))
    if kind is tuple or kind is list or isinstance(value, tuple):       # and namedtuples
        return (kind, tuple(_constant_key(item, arrays) for item in value))
    if kind is dict:
        return (kind, tuple((_constant_key(k, arrays), _constant_key(v, arrays))
                            for k, v in value.items()))
    if kind in BY_IDENTITY or kind is types.BuiltinFunctionType and (
            value.__self__ is None or type(value.__self__) is types.ModuleType):
        return (kind, value)                # math.sin, len: not a bound method
    raise Unreplayable(f"an argument of type {kind.__name__}")


def identical(a, b):
    """Whether two constants are the same value: type, shape, dtype and bits (so
    -0.0 differs from 0.0 and nan equals nan)."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is np.ndarray:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        unsigned = _UNSIGNED.get(a.dtype.itemsize)
        if a.nbytes <= 1 << 16 or unsigned is None:
            return a.tobytes() == b.tobytes()     # 4x faster than a ufunc when small
        return bool((a.view(unsigned) == b.view(unsigned)).all())
    if kind is tuple or kind is list:
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if kind is float:
        return _bits(a) == _bits(b)
    if isinstance(a, np.generic):
        return a.tobytes() == b.tobytes()
    return bool(a == b)


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_bits = struct.Struct("<d").pack        # a float's bits (hex() hides a nan's sign)


def free_variables(f):
    """A function returning the objects ``f``'s own code names from outside: its
    globals (missing ones as None), its closure cells' contents and its default
    arguments (``f.__defaults__`` may be rebound); for a ``functools.partial``, those
    of the function it wraps and its bound arguments; nothing for another callable
    that is not a Python function."""
    if isinstance(f, functools.partial):
        # functools.partial(loss, data=...): the wrapped function's free variables and
        # the bound arguments (as objects, like closure variables).
        inner = free_variables(f.func)
        return lambda: [*inner(), f.func, *f.args, *f.keywords.values()]
    code = getattr(f, "__code__", None)
    if code is None:
        return list
    get, names, cells = f.__globals__.get, _names(code), f.__closure__ or ()

    def read():
        found = list(map(get, names))
        found.append(f.__defaults__)
        found.append(f.__kwdefaults__)
        for cell in cells:
            try:
                found.append(cell.cell_contents)
            except ValueError:              # a cell not filled yet
                found.append(None)
        return found
    return read


def _names(code):
    # The global names a function's code reads, its comprehensions and lambdas included.
    names = list(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names += _names(constant)
    return tuple(names)
