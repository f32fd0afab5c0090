"""What dualbcast compiles, and how long it takes.

Every compile (or load from Numba's disk cache) of a kernel's loop, of the threaded
driver of a loop, and of a ``db.jit`` program fused into one Numba function is
reported on the ``logging`` logger named ``"dualbcast"`` at INFO: what it was (the
kernel, the mode, the argument types the scalar kernel takes), the seconds it took,
and whether the disk cache served it::

    import logging
    logging.basicConfig()
    logging.getLogger("dualbcast").setLevel(logging.INFO)

A compile that takes longer than ``dualbcast.config.compile_notice`` seconds (2 by
default) also prints one line on stderr, so that a first call that pauses for seconds
says why; ``dualbcast.config.compile_notice = None`` (or ``DUALBCAST_COMPILE_NOTICE=off``)
turns the notice off.
"""
import logging
import sys
import time

from .config import config

logger = logging.getLogger("dualbcast")


class watching:
    """``with watching(dispatcher, describe):`` around a call of a Numba dispatcher that
    may compile: if the call added a compiled version, the compile is reported
    (``describe()`` says what it was).  Used on first calls only: it costs a few
    microseconds."""

    __slots__ = ("dispatcher", "describe", "versions", "hits", "start")

    def __init__(self, dispatcher, describe):
        self.dispatcher, self.describe = dispatcher, describe

    def __enter__(self):
        self.versions = len(self.dispatcher.overloads)
        self.hits = _cache_hits(self.dispatcher)
        self.start = time.perf_counter()
        return self

    def __exit__(self, kind, error, traceback):
        seconds = time.perf_counter() - self.start
        if kind is None and len(self.dispatcher.overloads) > self.versions:
            cached = _cache_hits(self.dispatcher) > self.hits
            report(self.describe(), seconds, cached)
        return False


def report(what, seconds, cached):
    """Report one compile of ``what``: at INFO, and on stderr past the notice time."""
    message = f"{what}: {'loaded from the disk cache' if cached else 'compiled'} in " \
              f"{seconds:.2f} s"
    logger.info(message)
    notice = config.compile_notice
    if notice is not None and seconds > notice:
        print(f"dualbcast: {message} (once; dualbcast.config.compile_notice = None turns "
              f"this notice off)", file=sys.stderr)


def _cache_hits(dispatcher):
    stats = getattr(dispatcher, "stats", None)
    return sum(stats.cache_hits.values()) if stats is not None else 0
