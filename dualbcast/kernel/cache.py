"""The on-disk compile cache: generated loops as real files, so Numba can cache them.

Numba caches a function's machine code next to (or keyed by) its source file, and
only for functions defined in one.  A loop is generated code, so it is written to
``<config.cache_dir>/<kernel>-<fingerprint>/loop_<spec>.py`` and run as the module of
that file; Numba's cache (:func:`guarded_njit`) then stores the compiled loop (the
kernel and its dual rules inlined into it) beside that file, and a new process loads
it instead of compiling.

Invalidation: Numba only checks the loop file itself, which never changes; what it
inlines does.  The directory name is therefore a fingerprint of everything the compiled
code depends on: the kernel's bytecode and constants, the same for every function,
helper and kernel it calls (recursively, also through a module: ``helpers.f``) and the
values of the globals, closure variables and module attributes they read
(:mod:`.dependencies`, which Numba freezes), its options, and the versions of
dualbcast (its source files), Numba, NumPy and Python.  Edit any of them and the loop
is compiled afresh into a new directory.

A store that can be damaged or shared: Numba pickles, with the machine code, the
module of each function it calls, by name, and imports it when it loads the entry.
The directory is named by the kernel's module as Numba names it: a Dask or
``multiprocessing`` worker runs a script's ``__main__`` as ``__mp_main__``, and its
entries go into a directory of their own instead of one a plain run of the script,
which has no ``__mp_main__``, would load.  An entry naming a module another process
may not have is not written (:func:`_found_elsewhere`).  And any entry that cannot be
loaded — a file truncated, emptied or garbled (a killed process, a full disk, a bad
copy), or naming a module this process does not have — is compiled afresh and
replaced, never raised: each data file holds a digest of its bytes and its own key
(:class:`_CheckedFile`), so that damage is found before Numba unpickles machine code.
"""
import functools
import hashlib
import importlib.util
import os
import pickle
import sys

import numba
import numpy as np
from numba.core.caching import FunctionCache, IndexDataCacheFile

from ..compile_log import logger
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


def kernel_fingerprint(dependencies, options):
    """A hex digest that changes whenever the compiled loops of a kernel with these
    :class:`~.dependencies.Dependencies` could, or None when the kernel reads a value
    that cannot be digested (it is then compiled without the disk cache)."""
    if dependencies.digest is None:
        return None
    digest = hashlib.sha256(_library_fingerprint().encode())
    digest.update(repr(sorted(options.items())).encode())
    digest.update(dependencies.digest.encode())
    return digest.hexdigest()[:20]


def kernel_cache_key(py_func, fingerprint):
    """The directory of the cached loops of a kernel of Python function ``py_func`` and
    this fingerprint, or None when they are not cached on disk: when the kernel reads
    a value that cannot be digested, or its module cannot be found (code made by
    exec, a module loaded under a name of its own as asv does: Numba would name the
    module "<dynamic>", which a process loading the loops cannot import)."""
    module = sys.modules.get(py_func.__module__)
    if fingerprint is None or module is None:
        return None
    # The module's own name, which Numba pickles, rather than the function's
    # ``__module__``: a script's function sent to a worker by value says "__main__"
    # where the worker's main module is "__mp_main__".
    name = f"{module.__name__}.{py_func.__qualname__}"
    name = "".join(c if c.isalnum() or c in "._" else "_" for c in name)
    return f"{name[:80]}-{fingerprint}"


def load_loop(source, namespace, kernel_dir, spec_name):
    """The module of ``source`` (which defines ``loop``), with ``namespace`` as its
    globals and a real file under ``config.cache_dir`` (None when caching is off or
    the directory is not writable: the caller then compiles without a cache)."""
    if config.cache_dir is None:
        return None
    directory = os.path.join(config.cache_dir, kernel_dir)
    path = os.path.join(directory, f"loop_{spec_name}.py")
    try:
        os.makedirs(directory, exist_ok=True)
        if not _holds(path, source):
            # Written aside then renamed: another process may be reading this file.
            partial = f"{path}.{os.getpid()}.tmp"
            with open(partial, "wb") as file:
                file.write(source.encode())
            os.replace(partial, path)
    except OSError:
        return None
    # Registered in sys.modules: Numba names the module of a cached function and
    # imports it by that name when it loads the machine code.  Named by the file's
    # place in the cache, not by its path: a cache directory moved or copied elsewhere
    # (another home, a CI cache restored) still loads.
    place = f"{kernel_dir}/{spec_name}"
    name = "dualbcast_loop_" + hashlib.sha256(place.encode()).hexdigest()[:24]
    module = sys.modules.get(name)
    if module is None or module.__file__ != path:      # (or config.cache_dir changed)
        module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name,
                                                                                        path))
        module.__dict__.update(namespace)
        # Compiled from ``source``, not imported from the file: an import would read (and
        # write) a bytecode file beside it, and a damaged one would fail every process.
        exec(compile(source, path, "exec"), module.__dict__)
        sys.modules[name] = module
    return module


def _holds(path, source):
    try:
        with open(path, "rb") as file:      # (as bytes: a garbled file may not decode)
            return file.read() == source.encode()
    except OSError:
        return False


def guarded_njit(cache=False, **options):
    """``numba.njit(cache=cache, **options)``, but an entry of the disk cache that
    cannot be loaded is compiled afresh and replaced, and one that could not be loaded
    elsewhere is not written (see the module docstring); a failed write (a full disk)
    leaves the function compiled and uncached."""
    def decorate(function):
        dispatcher = numba.njit(**options)(function)
        if cache:
            dispatcher._cache = _GuardedCache(function)     # (where cache=True puts its own)
        return dispatcher
    return decorate


class _GuardedCache(FunctionCache):
    """Numba's disk cache of one function, which never fails a call of it.  (Reports
    name the function by its file: a loop's says which kernel it is.)"""

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _CheckedFile(self._cache_path, self._impl.filename_base,
                                        self._impl.locator.get_source_stamp())
        self._file = self._py_func.__code__.co_filename

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as error:      # whatever a damaged entry makes pickle or Numba raise
            logger.info("%s: the disk cache entry for %s could not be loaded (%s: %s); "
                        "compiling it afresh", self._file, sig, type(error).__name__, error)
            return None

    def save_overload(self, sig, data):
        modules = {env.globals.get("__name__") for env
                   in (data.environment, *data._find_referenced_environments())}
        missing = sorted(map(str, (m for m in modules if not _found_elsewhere(m))))
        if missing:
            logger.info("%s: not cached on disk: its compiled code for %s names the modules "
                        "%s, which another process may not have", self._file, sig, missing)
            return
        try:
            super().save_overload(sig, data)
        except Exception as error:      # a full disk, a directory made read-only, ...
            logger.info("%s: the disk cache entry for %s could not be written (%s: %s)",
                        self._file, sig, type(error).__name__, error)


def _found_elsewhere(name):
    """Whether a process loading a cache entry will have the module ``name``, which
    Numba imports by that name: the main module (``__main__``, or the one this process
    runs, "__mp_main__" in a worker: the directory's name says which, see
    :func:`kernel_cache_key`) or a module imported by its name (a loop's module too:
    :func:`load_loop` registers it before Numba loads the loop)."""
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None:
        return False
    if name == "__main__" or module is sys.modules.get("__main__"):
        return True
    spec = getattr(module, "__spec__", None)
    return spec is not None and spec.name == name


class _CheckedFile(IndexDataCacheFile):
    """Numba's index and data files of one function's cache entries, checked: each
    data file holds a digest of its bytes, so that a truncated or garbled one raises
    :class:`_Damaged` before pickle reads it, and its own key, so that one an index
    names by mistake (files swapped; a process stopped between writing the index and
    the data) raises before Numba uses it; a damaged index is replaced when an entry
    is saved."""

    def save(self, key, data):
        try:
            self._load_index()
        except Exception:               # truncated, emptied, garbled: start a new one
            self._save_index({})
        super().save(key, (key, data))

    def load(self, key):
        stored = super().load(key)
        if stored is None:
            return None
        stored_key, data = stored
        if stored_key != key:
            raise _Damaged("the data file holds another entry")
        return data

    def _save_data(self, name, data):
        data = self._dump(data)
        with self._open_for_write(self._data_path(name)) as file:   # (written aside, renamed)
            file.write(hashlib.sha256(data).digest() + data)

    def _load_data(self, name):
        with open(self._data_path(name), "rb") as file:
            digest, data = file.read(_DIGEST), file.read()
        if hashlib.sha256(data).digest() != digest:
            raise _Damaged("the data file's digest does not match its bytes")
        return pickle.loads(data)


_DIGEST = hashlib.sha256().digest_size


class _Damaged(Exception):
    """A cache data file that is not what its index says it is."""
