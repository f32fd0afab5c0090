"""What ``dualbcast.jit`` learns from a trace besides its records: the tape's
recorder (:class:`dualbcast.core.tape.Recorder`) collects the guards (constants
computed from traced values that steered the program), copies of the constant arrays
the records use (a replay checks that they still hold the same values), and whether
the program did something no replay can redo."""
import weakref

import numpy as np

from ..core.box import Box
from ..core.tape import Recorder
from . import policy


class Slot:
    """Where a guard's argument was a traced value: the slot to read it from."""

    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot


class ProgramRecorder(Recorder):
    """``guards``: ``(record count, func, args, kwargs, expected result)``, traced
    arguments as :class:`Slot`; ``copies``: ``(original, copy)`` of each constant
    array the records keep; ``why``: None while the program can be replayed, else
    what it did that a replay cannot check; ``notes``: what costs a replay time that
    the user may avoid.  ``f``: the traced function (its free
    variables name a large constant in ``why``)."""

    __slots__ = ("guards", "copies", "why", "f", "large")

    def __init__(self, f=None):
        self.guards = []
        self.copies = []
        self.why = None
        self.f = f
        self.large = []             # (reference to a large constant, what to say of it)

    @property
    def notes(self):
        """What a user may want to change: the large constants compared on every
        replay that outlive the trace (a temporary the trace made, the backward pass's
        broadcast of a constant seed, is gone, and never compared)."""
        return [note for reference, note in self.large if reference() is not None]

    @property
    def replayable(self):
        return self.why is None

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
            self._refuse(f"a constant {type(original).__name__} that NumPy converts "
                         f"(it may give other values each time)")
            return kept
        large = _nbytes(original) > policy.COPY_LIMIT
        if kept is original and _mutable(original):
            if large:
                self._refuse(f"{_named(original, self.f)} ({_nbytes(original) / 2 ** 20:.1f} "
                             f"MiB) is a constant, not copied past {policy.COPY_LIMIT // 1024} KiB "
                             f"to be compared on every call: pass it as an argument "
                             f"(arguments are inputs, never compared)")
                return kept
            kept = _copied(original)
        elif large and kept is not original and not any(o is original for o, _ in self.copies):
            # (copied by the record anyway, for the backward pass: compared on every
            # replay, ~50 µs per MiB; said once per array)
            self.large.append((watcher(original),
                               f"{_named(original, self.f)} ({_nbytes(original) / 2 ** 20:.1f} "
                               f"MiB) is a constant, compared on every replay: pass it as an "
                               f"argument (arguments are inputs, never compared)"))
        if kept is not original:
            self.copies.append((original, kept))
        return kept

    def release(self):
        """Drop the originals of the copies (the program made from the trace has
        what it needs of them), so that the trace's temporaries are gone."""
        self.copies = []

    def opaque(self, tape, why):
        self._refuse(why)

    def _refuse(self, why):
        if self.why is None:
            self.why = why


def watcher(original):
    """A function giving what the constant ``original`` (an array or a list) holds now,
    or None once nothing else can change it.  A view (``W.T``, ``W[:, ::-1]``) is
    rebuilt from the array whose memory it reads: the view made for the trace dies
    with it, while that array may be the caller's, changed in place; an array the
    trace made dies with the trace, and is never compared."""
    if type(original) is not np.ndarray:
        return lambda: original                 # (a list: kept, compared)
    root = original
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is original:
        return weakref.ref(original)
    offset = original.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    shape, dtype, strides = original.shape, original.dtype, original.strides
    try:
        np.ndarray(shape, dtype, buffer=root, offset=offset, strides=strides)
    except (TypeError, ValueError):             # (no buffer to rebuild it from: kept)
        return lambda: original
    reference = weakref.ref(root)

    def current():
        found = reference()
        return None if found is None else np.ndarray(shape, dtype, buffer=found,
                                                     offset=offset, strides=strides)
    return current


def _named(constant, f):
    """``constant`` named as ``f``'s code names it (a global or a closure variable),
    or the array it is a view of (``W.T``), if it does."""
    viewed = constant
    while type(viewed) is np.ndarray and isinstance(viewed.base, np.ndarray):
        viewed = viewed.base
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    if code is not None:
        found = getattr(f, "__globals__", {}).get
        for candidate, how in ((constant, ""), (viewed, ", read through a view")):
            for name in code.co_names:
                if found(name) is candidate:
                    return f"the global array {name!r}{how}"
            for name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
                try:
                    if cell.cell_contents is candidate:
                        return f"the closure variable {name!r}{how}"
                except ValueError:
                    pass
    return f"a closed-over array of shape {np.shape(constant)}"


_PLAIN = frozenset({np.ndarray, float, int, bool, complex, str, type(None), list, tuple})


def _array_like(constant):
    kind = type(constant)
    return any(hasattr(kind, name) for name in ("__array__", "__array_interface__",
                                                "__array_struct__"))


def _mutable(constant):
    kind = type(constant)
    return kind is np.ndarray or kind is list or kind is tuple and any(map(_mutable, constant))


def _nbytes(constant):
    """The bytes of memory ``constant`` reads: an axis of stride 0 (a broadcast view,
    the backward pass's cotangent of a mean) repeats one element."""
    if type(constant) is np.ndarray:
        return compact(constant).nbytes
    return sum(map(_nbytes, constant)) if type(constant) in (list, tuple) else 0


def compact(array):
    """``array`` without the repeats of its axes of stride 0 (a view of their first
    element: what a broadcast view reads), or ``array`` itself if it has none (or is
    no array: a list)."""
    if type(array) is not np.ndarray or array.size <= 1 or 0 not in array.strides:
        return array
    return array[tuple(slice(0, 1) if stride == 0 else slice(None)
                       for stride in array.strides)]


def _copied(constant):
    kind = type(constant)
    if kind is np.ndarray:
        if not constant.flags.writeable and compact(constant) is not constant:
            # (a read-only broadcast view: what it reads copied, and broadcast again,
            # as small and of the same Numba type, read-only)
            return np.broadcast_to(compact(constant).copy(), constant.shape)
        return constant.copy(order="K")      # (its memory order: BLAS adds by it)
    if kind in (list, tuple):
        return kind(map(_copied, constant))
    return constant
