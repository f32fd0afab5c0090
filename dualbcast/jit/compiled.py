"""The fused functions of ``db.jit`` programs (:mod:`.fusion`): compiled once per
source and shared, and bounded per jitted function.

Numba never frees what it compiles: its execution engine keeps every module's machine
code for the life of the process (removing one is disabled: numba/numba#5976, #2290),
and a function called from a compiled one stays registered in Numba's target context,
with its compile's intermediate results.  A fused function compiled afresh costs about
4 MB that no program's eviction gives back (about 0.3 MB loaded from the disk cache).
So:

- a fused function's source names no size and no constant (they are its arguments), so
  that one compile serves a program at every shape of its arguments and for every value
  of its non-differentiated floats;
- it is shared by every program, of any jitted function, of the same
  :attr:`.fusion.Fusion.key` (its source and the kernel loops and helpers it calls),
  through a process-wide cache of the :data:`.policy.SHARED_FUNCTIONS` most recently used;
- each jitted function keeps the fused functions its programs used (a program traced
  again after its signature was evicted finds its function there), at most
  :data:`.policy.MAX_FUNCTIONS` different ones: past that its programs are
  replayed unfused (as generated Python code, the same bits), and the ``"dualbcast"``
  logger says so once, at INFO.

What stays in memory is then bounded by the number of different programs, not by the
calls: about 4 MB per fused function compiled in the process.
"""
import threading
from collections import OrderedDict

from ..compile_log import logger
from . import policy

_shared = OrderedDict()     # Fusion.key -> (dispatcher, the objects its key names)
_lock = threading.Lock()


class FusedFunctions:
    """The fused functions of one jitted function's programs, by key."""

    __slots__ = ("name", "functions", "refused")

    def __init__(self, name):
        self.name = name        # the jitted function's, for the log
        self.functions = {}     # key -> (dispatcher, the objects its key names)
        self.refused = False    # whether a program was refused one (said once)

    def function_for(self, fusion):
        """The dispatcher of ``fusion``'s function: this jitted function's, another's
        of the same key, or a new one (compiled at its first call); None past
        :data:`.policy.MAX_FUNCTIONS`."""
        key = fusion.key
        found = self.functions.get(key)
        if found is None:
            if len(self.functions) >= policy.MAX_FUNCTIONS:
                if not self.refused:
                    self.refused = True
                    logger.info(f"db.jit of {self.name}: {policy.MAX_FUNCTIONS} different "
                                f"programs fused, the others are replayed unfused (a fused "
                                f"function stays in memory until the process ends)")
                return None
            with _lock:
                found = _shared.pop(key, None)
            if found is None:
                found = (fusion.compile(), fusion.objects)
            self.functions[key] = found
        with _lock:
            _shared[key] = found            # (the most recently used last)
            _shared.move_to_end(key)
            while len(_shared) > policy.SHARED_FUNCTIONS:
                _shared.popitem(last=False)
        return found[0]
