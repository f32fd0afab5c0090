"""The elementwise loops of the process (:mod:`.elementwise`), by source: compiled
once, from the disk cache's file of the source where there is one, and bounded in
number (Numba keeps what it compiles until the process ends)."""
import hashlib
import threading

from ..compile_log import logger
from ..kernel.cache import library_directory, load_loop
from ..safe_cache import guarded_njit
from . import policy


class _Loops:
    """The loops of the process, by source: one dispatcher per source, shared by every
    group that has it (a program traced again, another function's).  Numba keeps what
    it compiles until the process ends, so their number is bounded: past
    :data:`.policy.MAX_LOOPS`, new groups run as NumPy calls (said once, at INFO)."""

    def __init__(self):
        self.by_source = {}
        self.lock = threading.Lock()
        self.full = False           # (whether the bound was met: said once)

    def __len__(self):
        return len(self.by_source)

    def dispatcher(self, source, namespace, cacheable):
        """The dispatcher of ``source``'s loop (compiled at its first call, from the
        disk cache's file of its source where there is one and ``cacheable``), the
        kernels it calls bound by ``namespace``; None past the bound.  (A source names
        the kernels it calls, by their cache keys, or identities: one source, one
        computation.)"""
        with self.lock:
            function = self.by_source.get(source)
            if function is None:
                if len(self.by_source) >= policy.MAX_LOOPS:
                    if not self.full:
                        self.full = True
                        logger.info(f"db.jit: {policy.MAX_LOOPS} different elementwise loops "
                                    f"compiled in this process; further ones run as NumPy "
                                    f"calls (compiled code stays in memory until the "
                                    f"process ends)")
                    return None
                function = self.by_source[source] = _dispatcher(source, namespace, cacheable)
            return function


LOOPS = _Loops()


def _dispatcher(source, namespace, cacheable):
    name = hashlib.sha256(source.encode()).hexdigest()[:24]
    module = load_loop(source, namespace, library_directory("elementwise"), name) \
        if cacheable else None
    if module is None:
        namespace = dict(namespace)
        exec(compile(source, "<dualbcast elementwise loop>", "exec"), namespace)
        return guarded_njit(error_model="numpy", nogil=True)(namespace["loop"])
    return guarded_njit(error_model="numpy", nogil=True, cache=True)(module.loop)
