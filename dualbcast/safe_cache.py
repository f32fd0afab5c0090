"""Numba's disk cache, made safe to damage and to share: :func:`guarded_njit`.

Numba pickles, with a function's machine code, the module of each function it calls,
by name, and imports it when it loads the entry; its loader tolerates a missing file
and nothing else.  Every Numba function dualbcast caches on disk (a kernel's loops in
``config.cache_dir``, and its own helpers in the package's ``__pycache__``) goes
through :func:`guarded_njit` instead, under which:

- an entry that cannot be loaded — a file truncated, emptied or garbled (a killed
  process, a full disk, a bad copy), or naming a module this process does not have —
  is compiled afresh and replaced, never raised (reported at INFO on the
  ``"dualbcast"`` logger): each data file holds a digest of its bytes and its own key
  (:class:`_CheckedFile`), so that damage is found before pickle reads machine code;
- an entry naming a module another process may not have (:func:`_found_elsewhere`) is
  not written;
- a failed write (a full disk) leaves the function compiled and uncached;
- dualbcast's own helpers are stamped with :func:`library_fingerprint`, not with their
  file: Numba's stamp is the function's own file, and a helper inlines the helpers it
  calls from other files (``vmath.trig.sin`` calls ``vmath.common.two_sum``), so an
  edit of any of them must recompile it.
"""
import functools
import hashlib
import os
import pickle
import sys

import numba
import numpy as np
from numba.core.caching import FunctionCache, IndexDataCacheFile

from .compile_log import logger

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=1)
def library_fingerprint():
    """A hex digest of dualbcast's source files and the versions of Numba, NumPy and
    Python: what compiled code inlining dualbcast's helpers depends on."""
    digest = hashlib.sha256()
    for version in (numba.__version__, np.__version__, sys.version):
        digest.update(version.encode())
    for root, _, files in sorted(os.walk(_PACKAGE_DIR, followlinks=True)):
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(root, name), "rb") as source:
                    digest.update(name.encode() + source.read())
    return digest.hexdigest()


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
        stamp = self._impl.locator.get_source_stamp()
        if _in_library(py_func):    # (Numba's too: a zipped or frozen package has no sources)
            stamp = (stamp, "dualbcast", library_fingerprint())
        self._cache_file = _CheckedFile(self._cache_path, self._impl.filename_base, stamp)
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


def _in_library(py_func):
    path = os.path.abspath(py_func.__code__.co_filename)
    try:
        return os.path.commonpath([path, _PACKAGE_DIR]) == _PACKAGE_DIR
    except ValueError:              # (another drive)
        return False


def _found_elsewhere(name):
    """Whether a process loading a cache entry will have the module ``name``, which
    Numba imports by that name: the main module (``__main__``, or the one this process
    runs, "__mp_main__" in a worker: the directory's name says which, see
    :func:`.kernel.cache.kernel_cache_key`) or a module imported by its name (a loop's
    module too: :func:`.kernel.cache.load_loop` registers it before Numba loads the
    loop)."""
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
