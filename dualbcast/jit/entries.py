"""The per-signature cache of one jitted function, and what it says about itself.

A jitted function keeps one :class:`Entry` per signature (:mod:`.signature`): the
program its last trace recorded, and what happened to its calls -- traces, replays,
fused or not and why, calls run eagerly and why.  :class:`Signatures` holds them for a
gradient's programs (:mod:`.jitted`) and a staged function's (:mod:`.staged`) alike,
logs each event on the ``"dualbcast"`` logger, answers ``jitted.explain()``, and warns
once (``UserWarning``) when a jitted function has run eagerly on every call: ``db.jit``
is then doing nothing for it.
"""
import os
import sys
import warnings

import numpy as np

from ..compile_log import logger
from ..core.pytree import flatten
from . import policy
from .signature import Unreplayable, free_variables, signature


class Entry:
    """One signature's program (None until a trace recorded it, and again after a
    replay failed) and what happened to its calls."""

    __slots__ = ("program", "traces", "replays", "failures", "replayable", "eager", "why",
                 "described", "notes", "__weakref__")

    MAX_SIGNATURES = 32     # entries a jitted function keeps (the oldest dropped)

    def __init__(self, described):
        self.program = None
        self.traces = 0
        self.replays = 0
        self.failures = 0
        self.eager = 0              # calls run as f runs, not recorded
        self.replayable = True      # False once a trace did what a replay cannot redo
        self.why = None             # why its last call was not replayed, if it was not
        self.described = described  # the signature, for people
        self.notes = ()             # what its program's replays cost that f could avoid

    @property
    def wanted(self):
        # Recorded unless control flow changes on most calls (a branch on a value that
        # keeps changing): every replay would fail after its checks.
        return self.replayable and self.failures <= 2 * self.replays + 4


class Signatures:
    """The entries of one jitted function (a dict by signature key, oldest first), its
    log and its report."""

    def __init__(self, f, kind, watched=None):
        """``kind``: what the function is, for people ("value_and_grad", "staged");
        ``watched``: the function whose free variables a replay checks (``f`` itself
        unless ``f`` wraps it)."""
        self.f = f
        self.watched = watched or f
        self.name = getattr(watched or f, "__qualname__", None) or repr(watched or f)
        self.kind = kind
        self.free_variables = free_variables(watched or f)
        self.entries = {}
        self.unkeyed = 0            # calls with an argument no signature can hold
        self.unkeyed_why = None
        self.warned = False

    def entry_for(self, args, kwargs, inputs, trees=None):
        """``(entry, arrays)`` for a call (``inputs``: per argument, whether it is an
        input of the program), or ``(None, why)`` when no signature can hold it."""
        try:
            key, arrays = signature(args, kwargs, inputs, trees)
            entry = self.entries.get(key)
        except (Unreplayable, TypeError) as error:  # TypeError: an unhashable dict key
            why = str(error) if type(error) is Unreplayable else "an unhashable dict key"
            return None, f"{why} among the arguments: a signature cannot hold it"
        if entry is None:
            if len(self.entries) >= Entry.MAX_SIGNATURES:
                del self.entries[next(iter(self.entries))]
            entry = self.entries[key] = Entry(describe_arguments(args, kwargs, inputs))
        return entry, arrays

    def runs_eagerly(self, entry, arrays):
        """Whether a call of ``entry``'s signature that did not replay runs as ``f``
        runs rather than traced: its programs cannot be replayed, its control flow
        changes on most calls, or its constant arguments ``arrays`` are too large to
        compare on every call (said on the log, and counted)."""
        size = sum(a.nbytes for a in arrays)
        if entry.wanted and size > policy.COPY_LIMIT:
            # Arguments this large would be copied and compared on every replay (a
            # 400 MB one: 400 MB and ~0.1 s a call): more than replaying saves.
            self.not_recorded(entry, f"its constant arguments (bool, complex or object "
                                     f"arrays) hold {size / 2 ** 20:.1f} MiB, compared on "
                                     f"every call past {policy.COPY_LIMIT // 1024} KiB; pass "
                                     f"them as float or integer arrays")
        if entry.wanted:
            return False
        self.ran_eagerly(entry, entry.why if not entry.replayable else
                         "control flow on traced values changed on most calls")
        return True

    # ------------------------------------------------------------------ events

    def ran_eagerly(self, entry, why):
        """A call ran as ``f`` runs (``entry`` None: no signature held it)."""
        if entry is None:
            self.unkeyed += 1
            if self.unkeyed_why != why:
                logger.info(f"db.jit of {self.name}: ran eagerly: {why}")
            self.unkeyed_why = why
        else:
            entry.eager += 1
            if entry.why != why:
                logger.info(f"db.jit of {self.name}: ran eagerly for ({entry.described}): "
                            f"{why}")
            entry.why = why
        self._warn_if_useless(why)

    def traced(self, entry, why, recorder):
        """A call traced ``f`` and recorded its program (``why``: what made it trace;
        ``recorder``: the trace's, with its notes; its program, if any, already
        made)."""
        recorder.release()          # (what the trace alone held is gone: not noted)
        entry.traces += 1
        logger.debug(f"db.jit of {self.name}: traced for ({entry.described}): {why}")
        if recorder.notes and tuple(recorder.notes) != entry.notes:
            for note in recorder.notes:
                logger.info(f"db.jit of {self.name}, ({entry.described}): {note}")
        entry.notes = tuple(recorder.notes)
        if entry.traces > 1:
            entry.why = why
            self._warn_if_useless(why)

    def not_recorded(self, entry, why):
        """A trace's program cannot be replayed: later calls of its signature run
        eagerly."""
        entry.replayable = False
        entry.why = why
        logger.info(f"db.jit of {self.name}: not recorded for ({entry.described}): {why}; "
                    f"its calls run eagerly")

    def trace_failed(self, entry, why):
        """A trace met ``f``'s own error (which other values may not meet): counted as
        a failed call, traced again on the next (while the signature's calls do not
        fail mostly: :attr:`Entry.wanted`)."""
        entry.failures += 1
        entry.program = None
        entry.why = why
        logger.debug(f"db.jit of {self.name}: the trace for ({entry.described}) raised, "
                     f"{why}; the call ran eagerly")

    def replay_failed(self, entry, why):
        entry.failures += 1
        entry.program = None
        entry.why = why
        logger.debug(f"db.jit of {self.name}: replay for ({entry.described}) gave way to a "
                     f"trace: {why}")

    def _warn_if_useless(self, why):
        if self.warned:
            return
        entries = self.entries.values()
        calls = self.unkeyed + sum(entry.eager + entry.traces for entry in entries)
        if calls >= policy.WARN_AFTER and not any(entry.replays for entry in entries):
            self.warned = True
            warnings.warn(f"db.jit of {self.name} has run eagerly on all of its {calls} calls "
                          f"(db.jit is doing nothing for it): {why}; the jitted function's "
                          f".explain() says more", UserWarning, stacklevel=_callers_level())

    # ------------------------------------------------------------------ report

    def explain(self):
        """What happened to this jitted function's calls, per signature, as text."""
        lines = [f"db.jit of {self.name} ({self.kind}): {len(self.entries)} signature"
                 f"{'' if len(self.entries) == 1 else 's'} kept"]
        if self.unkeyed:
            lines.append(f"  {self.unkeyed} call{'' if self.unkeyed == 1 else 's'} ran "
                         f"eagerly: {self.unkeyed_why}")
        for entry in self.entries.values():
            lines.append(f"  ({entry.described}):")
            lines.append(f"    {_counted(entry.traces, 'trace')}, "
                         f"{_counted(entry.replays, 'replay')}, "
                         f"{_counted(entry.eager, 'eager call')}, "
                         f"{_counted(entry.failures, 'failed replay')}")
            if entry.program is not None:
                lines.append(f"    {entry.program.fusion_report()}")
            lines += [f"    note: {note}" for note in entry.notes]
            if entry.why is not None:
                state = "replays" if entry.program is not None else (
                    "runs eagerly" if not entry.wanted else "traces on its next call")
                lines.append(f"    now {state}; last not replayed because: {entry.why}")
        return "\n".join(lines)


def _callers_level():
    """The ``stacklevel`` of the first frame outside dualbcast: the user's call."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _counted(n, what):
    return f"{n} {what}{'' if n == 1 else 's'}"


def describe_arguments(args, kwargs, inputs):
    """A signature for people: each input by its kind, dtype and shape, the other
    arguments by their values (shortened)."""
    parts = [_described(arg, traced) for arg, traced in zip(args, inputs)]
    parts += [f"{name}={_described(value, False)}" for name, value in (kwargs or {}).items()]
    return ", ".join(parts)


def _described(arg, traced):
    if not traced:
        if type(arg) is np.ndarray:
            return f"constant {arg.dtype}{list(arg.shape)}"
        text = repr(arg)
        return text if len(text) <= 40 else text[:37] + "..."
    if type(arg) is np.ndarray:
        return f"{arg.dtype}{list(arg.shape)}"
    if isinstance(arg, (float, np.floating)):
        return type(arg).__name__
    leaves = flatten(arg)[0]
    return f"{type(arg).__name__} of {len(leaves)} input{'' if len(leaves) == 1 else 's'}"
