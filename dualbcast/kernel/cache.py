"""The on-disk compile cache: generated loops as real files, so Numba can cache them.

Numba caches a function's machine code next to (or keyed by) its source file, and
only for functions defined in one.  A loop is generated code, so it is written to
``<config.cache_dir>/<kernel>-<fingerprint>/loop_<spec>.py`` and run as the module of
that file; Numba's cache (:func:`..safe_cache.guarded_njit`) then stores the compiled loop (the
kernel and its dual rules inlined into it) beside that file, and a new process loads
it instead of compiling.

Invalidation: Numba only checks the loop file itself, which never changes; what it
inlines does.  The directory name is therefore a fingerprint of everything the compiled
code depends on: the kernel's bytecode and constants, the same for every function,
helper and kernel it calls (recursively, also through a module: ``helpers.f``) and the
values of the globals, closure variables and module attributes they read
(:mod:`.dependencies`, which Numba freezes), its options, and the versions of
dualbcast (its source files), Numba, NumPy and Python.  Edit any of them and the loop
is compiled afresh into a new directory.  dualbcast's own generated code (fused
replays, elementwise loops) is named by its source, in a directory named by the
library's fingerprint (:func:`library_directory`): it inlines dualbcast's helpers.

A store that can be damaged or shared: Numba pickles, with the machine code, the
module of each function it calls, by name, and imports it when it loads the entry.
The directory is named by the kernel's module as Numba names it: a Dask or
``multiprocessing`` worker runs a script's ``__main__`` as ``__mp_main__``, and its
entries go into a directory of their own instead of one a plain run of the script,
which has no ``__mp_main__``, would load.  An entry naming a module another process
may not have is not written.  And any entry that cannot be
loaded — a file truncated, emptied or garbled (a killed process, a full disk, a bad
copy), or naming a module this process does not have — is compiled afresh and
replaced, never raised (:mod:`dualbcast.safe_cache`, which every Numba function of
dualbcast cached on disk goes through).
"""
import hashlib
import importlib.util
import os
import sys

from ..config import config
from ..safe_cache import library_fingerprint


def library_directory(kind):
    """The cache directory of dualbcast's own generated code of ``kind`` (``"fused"``
    replays, ``"elementwise"`` loops): named by the library's fingerprint, since the
    compiled code inlines dualbcast's helpers (``fused_runtime``'s sums), which Numba's
    cache does not check -- a new version of dualbcast compiles afresh."""
    return f"{kind}-{library_fingerprint()[:20]}"


def kernel_fingerprint(dependencies, options):
    """A hex digest that changes whenever the compiled loops of a kernel with these
    :class:`~.dependencies.Dependencies` could, or None when the kernel reads a value
    that cannot be digested (it is then compiled without the disk cache)."""
    if dependencies.digest is None:
        return None
    digest = hashlib.sha256(library_fingerprint().encode())
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
