"""What ``dualbcast.jit`` learns from a trace besides its records: the tape's
recorder (:class:`dualbcast.core.tape.Recorder`) collects the guards (constants
computed from traced values that steered the program), copies of the constant arrays
the records use (a replay checks that they still hold the same values), and whether
the program did something no replay can redo."""
import numpy as np

from ..core.box import Box
from ..core.tape import Recorder


class Slot:
    """Where a guard's argument was a traced value: the slot to read it from."""

    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot


# A constant array above this size that a record does not copy anyway makes the program
# unreplayable rather than copied: no copy the size of the work.  So do non-differentiated
# argument arrays above it in all (jitted.py).  Comparing 256 KiB costs ~10-15 us a
# replay on this machine (~50 us per MiB), about what replaying saves on a small program.
COPY_LIMIT = 1 << 18


class ProgramRecorder(Recorder):
    """``guards``: ``(record count, func, args, kwargs, expected result)``, traced
    arguments as :class:`Slot`; ``copies``: ``(original, copy)`` of each constant
    array the records keep; ``replayable``: False once the program did what a replay
    cannot check."""

    __slots__ = ("guards", "copies", "replayable")

    def __init__(self):
        self.guards = []
        self.copies = []
        self.replayable = True

    def guard(self, tape, func, args, kwargs, result):
        # Boxes are kept as their slots (a tape must not hold its own boxes, or it
        # would live until the next garbage collection), and the expected outcome is
        # copied: f may write into the array it was handed.
        self.guards.append((len(tape.records), func, tuple(self._slot(arg) for arg in args),
                            {k: self._slot(v) for k, v in kwargs.items()}, _copied(result)))

    def _slot(self, arg):
        if type(arg) is Box:
            return Slot(arg.slot)
        if type(arg) in (list, tuple) and any(type(item) is Box for item in arg):
            return type(arg)(self._slot(item) for item in arg)
        return self.constant(arg, arg)      # a constant operand (x > t): copied, watched

    def constant(self, original, kept):
        # Every array (read-only ones too: another view may write their data) and
        # every list (a kernel takes one as it is) is copied and the pair noted, so
        # that a replay can check that the original still holds what was copied.
        # An object NumPy converts (``__array__``, ``__array_interface__``) may give
        # other values each time, which no copy can check: the program is not replayed.
        if type(original) not in _PLAIN and not isinstance(original, np.generic) \
                and _array_like(original):
            self.replayable = False
            return kept
        if kept is original and _mutable(original):
            if _nbytes(original) > COPY_LIMIT:
                self.replayable = False
                return kept
            kept = _copied(original)
        if kept is not original:
            self.copies.append((original, kept))
        return kept

    def opaque(self, tape):
        self.replayable = False


_PLAIN = frozenset({np.ndarray, float, int, bool, complex, str, type(None), list, tuple})


def _array_like(constant):
    kind = type(constant)
    return any(hasattr(kind, name) for name in ("__array__", "__array_interface__",
                                                "__array_struct__"))


def _mutable(constant):
    kind = type(constant)
    return kind is np.ndarray or kind is list or kind is tuple and any(map(_mutable, constant))


def _nbytes(constant):
    if type(constant) is np.ndarray:
        return constant.nbytes
    return sum(map(_nbytes, constant)) if type(constant) in (list, tuple) else 0


def _copied(constant):
    kind = type(constant)
    if kind is np.ndarray:
        return constant.copy()
    if kind in (list, tuple):
        return kind(map(_copied, constant))
    return constant
