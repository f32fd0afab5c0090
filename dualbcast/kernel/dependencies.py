"""What a kernel's compiled code depends on besides its arguments, and whether it changed.

Numba freezes what a function reads from outside when it compiles it: global numbers,
tuples and arrays become constants, called functions are bound.  A kernel, though, is
compiled lazily and more than once (a loop per mode and signature, in this process or
loaded from the disk cache in another), so a frozen value would make its modes
disagree, or a new process load code compiled with an old value.  dualbcast keeps
Python's semantics instead: **a kernel computes with the values its names have when
it is called.**

:class:`Dependencies` walks the kernel's code — and the code of every function,
``numba.njit`` helper and kernel it calls, recursively — and records each name it
reads with the value it had: globals (a missing one too: defining it later changes
what the name means), closure variables, and attributes of modules
(``params.SCALE``, ``helpers.f``).  :meth:`Dependencies.unchanged` compares them
again (by identity, then by value for numbers, strings and tuples, by content for
arrays) before every run of a loop; a kernel whose dependencies changed is compiled
again.  The same walk digests the values for the disk cache's directory name
(:mod:`.cache`), so a new process with another value never loads code compiled with
the old one.

Attributes of the libraries themselves (``math``, ``numpy``, ``numba``, dualbcast)
are digested by name, not watched: their versions are part of the cache's key.
"""
import builtins
import dis
import hashlib
import types
import weakref

import numpy as np

_LIBRARIES = frozenset({"math", "cmath", "numpy", "numba", "operator", "builtins",
                        "dualbcast", "llvmlite"})
_MISSING = object()         # a global not defined (yet)


class Uncacheable(Exception):
    """A value whose identity cannot be digested (an arbitrary object)."""


class Dependencies:
    """The names a kernel's code reads from outside, with their values at the walk."""

    __slots__ = ("_watched", "_arrays", "_owners", "kernels", "dispatchers", "digest",
                 "retired")

    def __init__(self, py_func):
        self.retired = False        # the kernel moved on to a new walk: never unchanged
        self._owners = set()        # (namespace or cell, key) already watched
        self._watched = []          # (get, key, value): get(key, _MISSING) is value
        self._arrays = []           # (get, key, copy): an array's contents at the walk
        self.kernels = []           # kernels it calls (each compiled on its own)
        self.dispatchers = []       # numba.njit helpers it calls (outside the libraries)
        digest = hashlib.sha256()
        try:
            _Walk(self, digest).function(py_func)
        except Uncacheable:
            digest = None
            _Walk(self, None).function(py_func)
        self.digest = None if digest is None else digest.hexdigest()

    def unchanged(self):
        """Whether every name still has its value (a name rebound to an equal number,
        string or tuple, or to an array of the same contents, counts as unchanged)."""
        if self.retired:
            return False
        for get, key, value in self._watched:
            if get(key, _MISSING) is not value and not self._rebound_equal(get, key, value):
                return False
        for get, key, copy in self._arrays:
            if not _same_array(get(key, _MISSING), copy):
                return False            # (Numba froze the contents: compared each time)
        return True

    def _rebound_equal(self, get, key, value):
        current = get(key, _MISSING)
        if not _equal_value(value, current):
            return False
        # Keep the new object: the next check is one identity test again.
        self._watched = [(g, k, current if g is get and k == key else v)
                         for g, k, v in self._watched]
        return True

    def watch(self, owner, get, key, value):
        """Watch ``get(key)`` (``owner``: the namespace or cell it reads)."""
        if (id(owner), key) in self._owners:
            return
        self._owners.add((id(owner), key))
        if type(value) is np.ndarray:
            self._arrays.append((get, key, value.copy()))
        else:
            self._watched.append((get, key, value))


# numba.njit helpers kernels call -> their Dependencies when last compiled here.
_HELPERS = weakref.WeakKeyDictionary()


def refresh_helper(helper):
    """Make a ``numba.njit`` helper's compiled code current: Numba froze its globals
    when it compiled it (a user's call from Python, or for a kernel before a global
    changed), so it is compiled again — once when first met with compiled code (its
    values then are unknown), then whenever a name it reads changed."""
    dependencies = _HELPERS.get(helper)
    if dependencies is not None and dependencies.unchanged():
        return
    if helper.signatures:
        helper.recompile()
    _HELPERS[helper] = Dependencies(helper.py_func)


class _Walk:
    """One pass over a kernel's code and what it calls: records the watched names in
    ``deps`` and feeds ``digest`` (None: watch only)."""

    def __init__(self, deps, digest):
        self.deps, self.digest, self.seen = deps, digest, set()

    def update(self, data):
        if self.digest is not None:
            self.digest.update(data)

    def function(self, func):
        if id(func) in self.seen:
            return
        self.seen.add(id(func))
        code = func.__code__
        self.update(f"{func.__module__}.{func.__qualname__}".encode())
        self.update(repr(func.__defaults__).encode())
        namespace = func.__globals__
        cells = dict(zip(code.co_freevars, func.__closure__ or ()))
        for code_object in _code_objects(code):
            self.update(code_object.co_code)
            self.update(repr([c for c in code_object.co_consts
                              if not isinstance(c, types.CodeType)]).encode())
            for chain in _name_chains(code_object):
                self.chain(chain, namespace, cells)

    def chain(self, chain, namespace, cells):
        """``name.attr.attr...`` as the code reads it: the name (a global, or a
        closure variable: ``cell:`` before it), then each attribute of a module."""
        name, attributes = chain[0], chain[1:]
        self.update(".".join(chain).encode() + b";")
        if name.startswith(_CELL):
            name = name[len(_CELL):]
            if name not in cells:
                return                  # a variable of the kernel's own, shared by a lambda
            owner = cells[name]
            get = _cell_reader(owner)
        else:
            owner, get = namespace, namespace.get
        value = get(name, _MISSING)
        self.deps.watch(owner, get, name, value)
        if value is _MISSING:
            value = getattr(builtins, name, _MISSING)
        for attribute in attributes:
            if type(value) is not types.ModuleType:
                break
            module, library = value, value.__name__.partition(".")[0] in _LIBRARIES
            value = module.__dict__.get(attribute, _MISSING)
            if not library:
                self.deps.watch(module, module.__dict__.get, attribute, value)
        self.value(value)

    def value(self, value):
        py_func = getattr(value, "py_func", None)       # a kernel or a Numba dispatcher
        if isinstance(py_func, types.FunctionType):
            if _in_library(py_func):
                self.update(f"{py_func.__module__}.{py_func.__qualname__}".encode())
                return
            if hasattr(value, "scalar_kernel"):
                self.deps.kernels.append(value)
                self.update(repr(getattr(value, "libm", None)).encode())
            elif hasattr(value, "recompile"):
                self.deps.dispatchers.append(value)
            self.function(py_func)
        elif isinstance(value, types.FunctionType):
            if _in_library(value):
                self.update(f"{value.__module__}.{value.__qualname__}".encode())
            else:
                self.function(value)
        elif isinstance(value, types.ModuleType):
            self.update(value.__name__.encode())
        elif isinstance(value, (types.BuiltinFunctionType, np.ufunc, type)):
            # math.exp, np.exp, a class: their names identify them.
            name = f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', value)}"
            self.update(f"{type(value).__name__}:{name}".encode())
        elif isinstance(value, np.ndarray):
            self.update(repr((value.dtype, value.shape)).encode() + value.tobytes())
        elif isinstance(value, (int, float, complex, bool, str, bytes, type(None), np.generic)):
            self.update(f"{type(value).__name__}:{value!r}".encode())
        elif isinstance(value, tuple):
            self.update(b"(")
            for item in value:
                self.value(item)
            self.update(b")")
        elif value is _MISSING:
            self.update(b"<undefined>")
        elif self.digest is not None:
            raise Uncacheable(type(value).__name__)


def _in_library(func):
    return (func.__module__ or "").partition(".")[0] in _LIBRARIES


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_CELL_LOADS = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF"})
_ATTRIBUTES = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_CELL = "cell:"


def _name_chains(code):
    """Each outside name the code loads, with the attributes read straight off it:
    ``("params", "SCALE")`` for ``params.SCALE``, ``("x",)`` for a plain global,
    ``("cell:x",)`` for a closure variable."""
    chain = None
    for instruction in dis.get_instructions(code):
        if chain is not None and instruction.opname in _ATTRIBUTES:
            chain.append(instruction.argval)
            continue
        if chain is not None:
            yield tuple(chain)
            chain = None
        if instruction.opname in _GLOBAL_LOADS:
            chain = [instruction.argval]
        elif instruction.opname in _CELL_LOADS:
            chain = [_CELL + instruction.argval]
    if chain is not None:
        yield tuple(chain)


def _cell_reader(cell):
    def get(name, default):
        try:
            return cell.cell_contents
        except ValueError:              # an empty cell (a name not yet bound)
            return default
    return get


def _equal_value(a, b):
    """Whether two immutable values are the same value: type and bits (``-0.0`` is not
    ``0.0``, a nan is a nan)."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(x is y or _equal_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (float, complex, np.generic)):
        return np.asarray(a).tobytes() == np.asarray(b).tobytes()
    if isinstance(a, (int, str, bytes, bool)):
        return a == b
    return False


def _same_array(array, copy):
    if type(array) is not np.ndarray or array.shape != copy.shape \
            or array.dtype != copy.dtype:
        return False
    # Bytes compared (a nan equals itself), a block at a time: no copy of a large
    # table per call.
    flat, kept = array.reshape(-1), copy.reshape(-1)
    block = max(1, _BLOCK_BYTES // max(array.itemsize, 1))
    return all(flat[i:i + block].tobytes() == kept[i:i + block].tobytes()
               for i in range(0, flat.size, block))


_BLOCK_BYTES = 1 << 14
