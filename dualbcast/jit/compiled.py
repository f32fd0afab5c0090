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

from ..compile_log import logger, watching
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


class FusedRuns:
    """One program's fused function, from its plan on: compiled (or found compiled)
    at its :data:`.policy.FUSE_AFTER`-th call, then run; dropped for good, the replay
    doing without it (the same bits), when the jitted function may fuse no more
    programs or the function fails where it should not.  ``what``: the program, for the
    compile log ("a db.jit program of 12 values")."""

    __slots__ = ("fusion", "fused_functions", "what", "calls", "not_fused")

    def __init__(self, fusion, fused_functions, what):
        self.fusion, self.fused_functions, self.what = fusion, fused_functions, what
        self.calls = 0
        self.not_fused = None           # why it no longer runs fused

    @property
    def active(self):
        """Whether the fused function may run (or compile) at the next call."""
        return self.fusion is not None

    def __call__(self, values):
        """What the fused function gives on ``values``, or None: not compiled yet,
        dropped, or it handed the call back (a non-finite value: the replay meets it)."""
        fusion = self.fusion
        first = None                    # the first call compiles: reported
        if fusion.function is None:
            self.calls += 1
            if self.calls < policy.FUSE_AFTER:
                return None
            try:
                fusion.function = self.fused_functions.function_for(fusion)
            except Exception as error:  # not a user's error: the replay does without
                self.failed("compiling", error)
                return None
            if fusion.function is None:
                self.drop(f"its jitted function has fused {policy.MAX_FUNCTIONS} other "
                          f"programs (a fused function stays in memory until the process "
                          f"ends)")
                return None
            first = watching(fusion.function, lambda: f"{self.what} fused into one Numba "
                                                      f"function")
        try:
            if first is None:           # (the hot path: no context manager)
                return fusion(values)
            with first:
                return fusion(values)
        except Exception as error:
            self.failed("running", error)
            return None

    def drop(self, why):
        self.fusion, self.not_fused = None, why

    def failed(self, stage, error):
        """The fused function failed where it should not (not a user's error: the
        replay does without it, the same bits): said on the log, with the error."""
        self.drop(f"{stage} the fused function raised {type(error).__name__}: {error}")
        logger.warning(f"db.jit: {self.not_fused}; the program is replayed unfused (please "
                       f"report it)", exc_info=error)

    def report(self):
        """Whether the program runs fused, or why not, for people."""
        if self.fusion is None:
            return f"not fused: {self.not_fused}"
        return ("fused into one Numba function" if self.fusion.function is not None
                else "to be fused at its next call")
