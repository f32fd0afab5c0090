"""A recorded program: a trace's records and guards, run again on new values of the
same signature without running the traced function's Python code.

What every kind of program shares (:class:`Program`): the guards (control flow on
traced values, checked where the trace met them), the assumptions checked before a run
(:class:`Assumptions`), and the interpreter (:func:`interpreted_steps`: one closure
per record, which calls the record's function on the new values), which runs a
program until it is written out as Python code (:mod:`.codegen`) and one too long to
be.
"""
import operator

import numpy as np

from ..core.box import elementwise_constant
from ..core.tape import LinearRecord, RuleRecord
from ..rules.fast import kernel_prepared
from .recorder import Slot, compact, watcher
from .signature import identical


class GuardFailed(Exception):
    """A replay met a guard with another outcome than the trace: trace again."""


class MaskChanged(GuardFailed):
    """The guard that failed checked a mask computed elementwise from traced values
    (``x > 0``), which a staged program computes again instead of checking it."""


class Program:
    """A trace's records, guards and assumptions, run again on new values of the same
    signature without running the traced function's Python code.  Of two kinds:
    :class:`.gradient.GradientProgram` (a gradient's forward records, then the core's
    backward pass) and :class:`.staged.StagedProgram` (every operation, those of the
    derivatives computed inside too, recorded)."""

    __slots__ = ("leaves", "guards", "assumptions")

    @classmethod
    def of(cls, tape, recorder, arrays, free, *more):
        """The program of a finished trace, or None if it cannot be run again: it did
        what a record cannot describe, or its slots are not in record order.
        ``recorder``: the trace's :class:`.recorder.ProgramRecorder`; ``arrays``:
        copies of the constant argument arrays as the trace began; ``free``: f's free
        variables then (:func:`.signature.free_variables`); ``more``: the kind's own."""
        if not recorder.replayable:
            return None
        leaves = len(tape.values) - len(tape.records)
        if any(record.out != leaves + k for k, record in enumerate(tape.records)):
            return None                 # slots not in record order: nothing to rely on
        return cls(tape, recorder, arrays, free, *more)

    def __init__(self, tape, recorder, arrays, free):
        self.leaves = len(tape.values) - len(tape.records)
        self.guards = program_guards(recorder)
        self.assumptions = Assumptions(tape, recorder, arrays, free)

    def check(self, arrays, read_free_variables):
        """:class:`GuardFailed` unless what the signature cannot hold is as at the
        trace (see :class:`Assumptions`)."""
        self.assumptions.check(arrays, read_free_variables)

    def fusion_report(self):
        """How the program runs (generated, fused, its loops), or why not, for people."""
        raise NotImplementedError


class Assumptions:
    """What a recorded program assumes of the world beyond its signature, checked
    before each run: ``f``'s free variables, the argument arrays' and the watched
    constants' contents, and the code the kernels it calls were compiled from."""

    __slots__ = ("free", "arrays", "watched", "kernels")

    def __init__(self, tape, recorder, arrays, free):
        self.arrays = arrays
        # (what a constant holds now, the copy the tape kept): an array or the array a
        # view reads, weakly (a temporary of the trace costs nothing), a list
        # strongly (see recorder.watcher).  The copy stays
        # writeable like the original: a read-only array is another Numba type, and a
        # kernel would compile again for it.
        self.watched = [(watcher(original), kept) for original, kept
                        in {id(pair[1]): pair for pair in recorder.copies}.values()]
        self.free = free            # f's free variables at the trace
        # The kernels' calls: each must still run the code it ran at the trace (a name
        # a kernel reads may change, and the fused program calls its loop directly).
        # (What each was compiled with: retired once the kernel is compiled afresh.)
        prepared_calls = (kernel_prepared(record.func) for record in tape.records
                          if type(record) is RuleRecord)
        self.kernels = [prepared.dependencies for prepared in prepared_calls
                        if prepared is not None]

    def check(self, arrays, read_free_variables):
        """:class:`GuardFailed` unless all of it is as at the trace."""
        free = read_free_variables()
        if len(free) != len(self.free) or not all(map(operator.is_, free, self.free)):
            raise GuardFailed("f names another object than at the trace (a global, a "
                              "closure variable or a default argument rebound)")
        for given, kept in zip(arrays, self.arrays):
            if not identical(given, kept):
                raise GuardFailed("a constant argument (an array compared by value) holds "
                                  "other values")
        for ref, kept in self.watched:
            original = ref()
            # (a broadcast view compared by what it reads: its copy repeats the same)
            if original is not None and not identical(compact(original), compact(kept)):
                raise GuardFailed("a constant array the program uses changed in place")
        for dependencies in self.kernels:
            if not dependencies.unchanged():
                raise GuardFailed("a name a kernel reads changed (it is compiled afresh)")


def program_guards(recorder):
    """The guards a trace's recorder collected, as ``(record count, check)``:
    ``check(values)`` raises :class:`GuardFailed` when the outcome differs."""
    return [(position, _guard(func, args, kwargs, expected,
                              elementwise_constant(func, args, kwargs, expected)))
            for position, func, args, kwargs, expected in recorder.guards]


def interpreted_steps(records, guards):
    """One closure per record and guard, in trace order: ``step(tape, values,
    records)`` appends the record's value and its new record."""
    steps = []
    guards = list(guards)
    for k, record in enumerate(records):
        while guards and guards[0][0] == k:
            steps.append(_checking(guards.pop(0)[1]))
        steps.append(_linear_step(record) if type(record) is LinearRecord
                     else _record_step(record))
    steps += [_checking(check) for _, check in guards]
    return steps


def _checking(check):
    def step(tape, values, records):
        check(values)
    return step


def bound_arguments(argnums, parents, others, args):
    """``(constants, positions)``: the arguments with traced ones blanked, and
    ``(position, slot)`` of each traced one."""
    positions = tuple(zip(argnums, parents)) + others
    constants = list(args)
    for i, _ in positions:
        constants[i] = None             # drop the traced value: only its slot matters
    return constants, positions


def _record_step(record):
    out, parents, argnums, kwargs = record.out, record.parents, record.argnums, record.kwargs
    func, vjps, others = record.func, record.vjps, record.others
    constants, positions = bound_arguments(argnums, parents, others, record.args)
    kind = type(record)

    def step(tape, values, records):
        args = constants.copy()
        for i, slot in positions:
            args[i] = values[slot]
        if kind is RuleRecord:
            result, fresh_vjps = func(tape, args, parents)
        else:
            result = func(*args, **kwargs)
            fresh_vjps = vjps
        values.append(result)
        records.append(kind(out, parents, argnums, fresh_vjps, result, tuple(args), kwargs,
                            func, others))
    return step


def _linear_step(record):
    out, parents, argnums = record.out, record.parents, record.argnums
    op, partials_of = record.op, record.partials_of
    (x, y), positions = bound_arguments(argnums, parents, (), record.args)
    kept = argnums[0] if len(argnums) == 1 else None   # the one partial kept, if one

    def step(tape, values, records):
        a, b = x, y
        for i, slot in positions:
            if i:
                b = values[slot]
            else:
                a = values[slot]
        result = op(a, b)
        local = partials_of if type(partials_of) is tuple else partials_of(a, b)
        if kept is not None:
            local = (local[kept],)
        values.append(result)
        records.append(LinearRecord(out, parents, local, op, (a, b), partials_of, argnums))
    return step


def _guard(func, args, kwargs, expected, mask):
    def check(values):
        bound = [_bind(arg, values) for arg in args]
        result = func(*bound, **{k: _bind(v, values) for k, v in kwargs.items()})
        if not identical(result, expected):
            if mask:
                raise MaskChanged(f"a mask computed from traced values ({_name(func)}) "
                                  f"had another outcome than at the trace")
            raise GuardFailed(f"control flow on traced values ({_name(func)}) had another "
                              f"outcome than at the trace")
    return check


def _name(func):
    name = getattr(func, "__name__", None) or type(func).__name__
    return f"numpy.{name}" if isinstance(func, np.ufunc) else name


def _bind(arg, values):
    if type(arg) is Slot:
        return values[arg.slot]
    if type(arg) in (list, tuple):
        return type(arg)(_bind(item, values) for item in arg)
    return arg
