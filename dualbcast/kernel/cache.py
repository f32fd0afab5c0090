"""The on-disk compile cache: generated loops as real files, so Numba can cache them.

Numba caches a function's machine code next to (or keyed by) its source file, and
only for functions defined in one.  A loop is generated code, so it is written to
``<config.cache_dir>/<kernel>-<fingerprint>/loop_<spec>.py`` and imported from there;
``numba.njit(cache=True)`` then stores the compiled loop (the kernel and its dual rules
inlined into it) beside that file, and a new process loads it instead of compiling.

Invalidation: Numba only checks the loop file itself, which never changes; what it
inlines does.  The directory name is therefore a fingerprint of everything the compiled
code depends on: the kernel's bytecode and constants, the same for every function,
helper and kernel it calls (recursively, also through a module: ``helpers.f``) and the
values of the globals, closure variables and module attributes they read
(:mod:`.dependencies`, which Numba freezes), its options, and the versions of
dualbcast (its source files), Numba, NumPy and Python.  Edit any of them and the loop
is compiled afresh into a new directory.
"""
import functools
import hashlib
import importlib.util
import os
import sys

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
