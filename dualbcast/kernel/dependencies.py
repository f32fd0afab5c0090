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


class FrozenDependencyChanged(RuntimeError):
    """A value read by code that Numba keeps compiled for good changed.

    A kernel computes with the values its names have when it is called: before each
    call it checks the globals, closure variables and module attributes that its
    code, and the kernels and ``numba.njit`` helpers it calls, read, and it is
    compiled afresh when one changed.  Some code cannot be compiled afresh, because
    Numba keeps it compiled for good: a ``numba.extending.register_jitable`` or
    ``overload`` function, a ``numba.vectorize`` ufunc, an ``njit`` helper's default
    arguments, a name read with ``getattr(module, "name")``.  When a value such code
    reads changes, the kernel's next call (in any mode, and a ``dualbcast.jit``
    replay) raises this error instead of computing with the old value.  The message
    names the value and the code that reads it.

    Pass such a value as an argument, or make the function that reads it a
    ``numba.njit`` helper, which is compiled again.

    See Also
    --------
    fast_broadcast : Kernels compute with the values of the moment.

    Examples
    --------
    (The first line makes this example's functions a user's, as in your own module:
    code defined in dualbcast's modules, where these examples run, is digested by
    name instead of watched.)

    >>> __name__ = "example"
    >>> import dualbcast as db
    >>> from numba.extending import register_jitable
    >>> SCALE = 1.0
    >>> @register_jitable
    ... def scaled(x):
    ...     return SCALE * x
    >>> @db.fast_broadcast
    ... def k(x):
    ...     return scaled(x) ** 2
    >>> k(3.0)
    np.float64(9.0)
    >>> SCALE = 2.0
    >>> k(3.0)
    Traceback (most recent call last):
        ...
    dualbcast.kernel.dependencies.FrozenDependencyChanged: @fast_broadcast kernel 'k':
    'SCALE' (read by scaled) changed, but Numba keeps the code that reads it compiled for
    good ...
    """


class Dependencies:
    """The names a kernel's code reads from outside, with their values at the walk."""

    __slots__ = ("_watched", "_contents", "_owners", "_frozen", "kernels", "dispatchers",
                 "digest", "retired")

    def __init__(self, py_func):
        self.retired = False        # the kernel moved on to a new walk: never unchanged
        self._owners = set()        # (namespace or cell, key) already watched
        self._watched = []          # (get, key, value): get(key, _MISSING) is value
        self._contents = []         # (get, key, snapshot): arrays (in tuples too)
        self._frozen = []           # (get, key, value, what): read by code Numba keeps
        self.kernels = []           # kernels it calls (each compiled on its own)
        self.dispatchers = []       # numba.njit helpers it calls, callees before callers
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
        for get, key, snapshot in self._contents:
            if not _same_contents(get(key, _MISSING), snapshot):
                return False            # (Numba froze the contents: compared each time)
        return True

    def frozen_changes(self):
        """What changed among the names read by code Numba keeps compiled for good:
        ``[(name, the function that reads it)]``."""
        return [(key, what) for get, key, value, what in self._frozen
                if not _same_contents(get(key, _MISSING), value)]

    def _rebound_equal(self, get, key, value):
        current = get(key, _MISSING)
        if not _equal_value(value, current):
            return False
        # Keep the new object: the next check is one identity test again.
        self._watched = [(g, k, current if g is get and k == key else v)
                         for g, k, v in self._watched]
        return True

    def watch(self, owner, get, key, value, frozen_by=None):
        """Watch ``get(key)`` (``owner``: the namespace, cell or function it reads);
        ``frozen_by``: the function Numba keeps compiled that reads it, if any."""
        if (id(owner), key) in self._owners:
            return
        self._owners.add((id(owner), key))
        if _holds_array(value):
            self._contents.append((get, key, _snapshot(value)))
        else:
            self._watched.append((get, key, value))
        if frozen_by is not None:
            self._frozen.append((get, key, _snapshot(value), frozen_by))


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
        self.frozen_by = None       # the function Numba keeps compiled, while under one

    def update(self, data):
        if self.digest is not None:
            self.digest.update(data)

    def function(self, func, frozen_by=None, defaults_frozen_by=None):
        """Walk ``func``; ``frozen_by``: the object whose compiled code Numba keeps for
        good, if ``func`` is its code; ``defaults_frozen_by``: the same for its default
        arguments only (a Numba dispatcher reads them when it is made)."""
        if id(func) in self.seen:
            return
        self.seen.add(id(func))
        outer, self.frozen_by = self.frozen_by, self.frozen_by or frozen_by
        try:
            self._walk_function(func, self.frozen_by or defaults_frozen_by)
        finally:
            self.frozen_by = outer

    def _walk_function(self, func, defaults_frozen_by):
        code = func.__code__
        self.update(f"{func.__module__}.{func.__qualname__}".encode())
        self.update(b"defaults:")
        self.value(func.__defaults__)       # (exactly: an array by its bytes, not its repr)
        self.deps.watch(func, _attribute_reader(func), "__defaults__", func.__defaults__,
                        defaults_frozen_by)
        namespace = func.__globals__
        cells = dict(zip(code.co_freevars, func.__closure__ or ()))
        # Names a module may be read by without an attribute chain (``m = params;
        # m.SCALE``, ``getattr(params, "SCALE")``): every attribute name and string.
        names, strings = set(), set()
        for code_object in _code_objects(code):
            names.update(code_object.co_names)
            strings.update(c for c in code_object.co_consts if type(c) is str)
        names = (names, strings - names)
        for code_object in _code_objects(code):
            self.update(code_object.co_code)
            self.update(repr([c for c in code_object.co_consts
                              if not isinstance(c, types.CodeType)]).encode())
            for chain in _name_chains(code_object):
                self.chain(chain, namespace, cells, names)

    def chain(self, chain, namespace, cells, names):
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
        self.deps.watch(owner, get, name, value, self.frozen_by)
        if value is _MISSING:
            value = getattr(builtins, name, _MISSING)
        for attribute in attributes:
            if type(value) is not types.ModuleType:
                break
            module = value
            value = module.__dict__.get(attribute, _MISSING)
            if not _is_library(module):
                self.deps.watch(module, module.__dict__.get, attribute, value, self.frozen_by)
        if type(value) is types.ModuleType and not _is_library(value):
            self.module(value, names)
        self.value(value)

    def module(self, module, names):
        """A module the code holds: each of its attributes the code could name (as an
        attribute, or as a string: ``getattr(module, "name")``, which Numba resolves
        once per process, for good)."""
        get = module.__dict__.get
        attributes, strings = names
        for name in sorted(attributes | strings):
            value = get(name, _MISSING)
            if value is not _MISSING:
                self.update(f"{module.__name__}.{name}=".encode())
                frozen_by = self.frozen_by or (f"getattr({module.__name__}, {name!r})"
                                               if name in strings else None)
                self.deps.watch(module, get, name, value, frozen_by)
                self.value(value)

    def value(self, value):
        py_func = getattr(value, "py_func", None)       # a kernel or a Numba dispatcher
        if isinstance(py_func, types.FunctionType):
            if _in_library(py_func):
                self.update(f"{py_func.__module__}.{py_func.__qualname__}".encode())
                return
            if hasattr(value, "_scalar_kernel"):
                # (its options change its code: a fastmath kernel called, libm's math)
                self.update(repr((getattr(value, "libm", None),
                                  getattr(value, "fastmath", None))).encode())
                self.function(py_func)
                self.deps.kernels.append(value)
            elif hasattr(value, "recompile"):
                # (a numba.njit helper: its options too -- fastmath, error_model)
                self.update(repr(sorted(getattr(value, "targetoptions", {}).items())).encode())
                self.function(py_func, defaults_frozen_by=value)
                if self.frozen_by is None:
                    self.deps.dispatchers.append(value)     # (after its own callees)
            else:
                self.function(py_func, frozen_by=value)
        elif isinstance(value, types.FunctionType):
            if _in_library(value):
                self.update(f"{value.__module__}.{value.__qualname__}".encode())
            else:
                # Callable from compiled code only through an overload Numba keeps
                # compiled (register_jitable, numba.extending.overload).
                self.function(value, frozen_by=value)
        elif isinstance(value, types.ModuleType):
            self.update(value.__name__.encode())
        elif isinstance(value, np.ufunc) and getattr(np, value.__name__, None) is not value:
            raise Uncacheable(f"the ufunc {value.__name__}")   # (its code is not at hand)
        elif hasattr(value, "_dispatcher") and hasattr(value, "ufunc"):
            # A numba.vectorize DUFunc: compiled by Numba, for good, per signature.
            self.update(b"dufunc:")
            self.function(value._dispatcher.py_func, frozen_by=value)
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


def _is_library(module):
    return module.__name__.partition(".")[0] in _LIBRARIES


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
        if instruction.opname == "EXTENDED_ARG":
            continue                    # (a prefix of the next instruction's argument)
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


def _attribute_reader(obj):
    def get(name, default):
        return getattr(obj, name, default)
    return get


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


def _holds_array(value):
    return isinstance(value, np.ndarray) or type(value) is tuple and any(map(_holds_array,
                                                                             value))


def _snapshot(value):
    """What a value is compared with later: arrays copied (as plain arrays), in
    tuples too; anything else itself."""
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True, subok=False)
    if type(value) is tuple and _holds_array(value):
        return tuple(map(_snapshot, value))
    return value


def _same_contents(current, snapshot):
    if type(snapshot) is np.ndarray:
        return isinstance(current, np.ndarray) and _same_array(current, snapshot)
    if type(snapshot) is tuple and _holds_array(snapshot):
        return type(current) is tuple and len(current) == len(snapshot) and all(
            map(_same_contents, current, snapshot))
    return current is snapshot or _equal_value(snapshot, current)


def _same_array(array, copy):
    if array.shape != copy.shape or array.dtype != copy.dtype:
        return False
    # Bytes compared (a nan equals itself), a block at a time: no copy of a large
    # table per call.
    flat, kept = array.reshape(-1), copy.reshape(-1)
    block = max(1, _BLOCK_BYTES // max(array.itemsize, 1))
    return all(flat[i:i + block].tobytes() == kept[i:i + block].tobytes()
               for i in range(0, flat.size, block))


_BLOCK_BYTES = 1 << 14
