"""The on-disk compile cache: generated loops as real files, so Numba can cache them.

Numba caches a function's machine code next to (or keyed by) its source file, and
only for functions defined in one.  A loop is generated code, so it is written to
``<config.cache_dir>/<kernel>-<fingerprint>/loop_<spec>.py`` and imported from there;
``numba.njit(cache=True)`` then stores the compiled loop (the kernel and its dual rules
inlined into it) beside that file, and a new process loads it instead of compiling.

Invalidation: Numba only checks the loop file itself, which never changes; what it
inlines does.  The directory name is therefore a fingerprint of everything the compiled
code depends on: the kernel's bytecode and constants, the same for every function and
kernel it calls (recursively) and the values of the global numbers it reads (Numba
freezes them), its options, and the versions of dualbcast (its source files), Numba,
NumPy and Python.  Edit any of them and the loop is compiled afresh into a new
directory.
"""
import builtins
import functools
import hashlib
import importlib.util
import os
import sys
import types

import numba
import numpy as np

from ..config import config

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=1)
def _library_fingerprint():
    digest = hashlib.sha256()
    for version in (numba.__version__, np.__version__, sys.version):
        digest.update(version.encode())
    for root, dirs, files in sorted(os.walk(_PACKAGE_DIR)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(root, name), "rb") as source:
                    digest.update(name.encode() + source.read())
    return digest.hexdigest()


def kernel_fingerprint(py_func, options):
    """A hex digest that changes whenever the compiled loops of this kernel could, or
    None when the kernel reads a value that cannot be fingerprinted."""
    digest = hashlib.sha256(_library_fingerprint().encode())
    digest.update(repr(sorted(options.items())).encode())
    try:
        _digest_function(digest, py_func, set())
    except Uncacheable:
        return None
    return digest.hexdigest()[:20]


def _digest_function(digest, func, seen):
    if id(func) in seen:
        return
    seen.add(id(func))
    code = func.__code__
    digest.update(f"{func.__module__}.{func.__qualname__}".encode())
    digest.update(repr(func.__defaults__).encode())
    globals_ = func.__globals__
    closure = dict(zip(code.co_freevars, func.__closure__ or ()))
    for code_object in _code_objects(code):
        digest.update(code_object.co_code)
        digest.update(repr([c for c in code_object.co_consts
                            if not isinstance(c, types.CodeType)]).encode())
        # Every name the code reads (globals, builtins, attributes, closure variables)
        # and, where it is a variable, its value.
        for name in code_object.co_names + code_object.co_freevars:
            digest.update(name.encode() + b";")
            if name in closure:
                try:
                    value = closure[name].cell_contents
                except ValueError:
                    continue
            elif name in globals_:
                value = globals_[name]
            elif hasattr(builtins, name):
                value = getattr(builtins, name)
            else:
                continue
            _digest_value(digest, value, seen)


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


class Uncacheable(Exception):
    """A kernel reads a value whose identity cannot be fingerprinted (an arbitrary
    object): it is compiled without the disk cache."""


def _digest_value(digest, value, seen):
    py_func = getattr(value, "py_func", None)          # a kernel or a Numba dispatcher
    if isinstance(py_func, types.FunctionType):
        digest.update(repr(getattr(value, "libm", None)).encode())
        _digest_function(digest, py_func, seen)
    elif isinstance(value, types.FunctionType):
        _digest_function(digest, value, seen)
    elif isinstance(value, types.ModuleType):
        digest.update(value.__name__.encode())
    elif isinstance(value, (types.BuiltinFunctionType, np.ufunc, type)):
        # math.exp, np.exp, a class: their names identify them.
        name = f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', value)}"
        digest.update(f"{type(value).__name__}:{name}".encode())
    elif isinstance(value, np.ndarray):
        digest.update(repr((value.dtype, value.shape)).encode() + value.tobytes())
    elif isinstance(value, (int, float, complex, bool, str, bytes, type(None), np.generic)):
        digest.update(f"{type(value).__name__}:{value!r}".encode())
    elif isinstance(value, tuple):
        digest.update(b"(")
        for item in value:
            _digest_value(digest, item, seen)
        digest.update(b")")
    else:
        raise Uncacheable(type(value).__name__)


def load_loop(source, namespace, kernel_dir, spec_name):
    """The module of ``source`` (which defines ``loop``), with ``namespace`` as its
    globals and a real file under ``config.cache_dir`` (None when caching is off or the directory is not
    writable: the caller then compiles without a cache)."""
    if config.cache_dir is None:
        return None
    directory = os.path.join(config.cache_dir, kernel_dir)
    path = os.path.join(directory, f"loop_{spec_name}.py")
    try:
        os.makedirs(directory, exist_ok=True)
        if not _holds(path, source):
            # Written aside then renamed: another process may be reading this file.
            partial = f"{path}.{os.getpid()}.tmp"
            with open(partial, "w") as file:
                file.write(source)
            os.replace(partial, path)
    except OSError:
        return None
    # Registered in sys.modules: Numba names the module of a cached function and
    # imports it by that name when it loads the machine code.
    name = "dualbcast_loop_" + hashlib.sha256(path.encode()).hexdigest()[:24]
    module = sys.modules.get(name)
    if module is None:
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        module.__dict__.update(namespace)
        module_spec.loader.exec_module(module)
        sys.modules[name] = module
    return module


def _holds(path, source):
    try:
        with open(path) as file:
            return file.read() == source
    except OSError:
        return False
