"""A recorded program: a trace's records and guards, run again on new values of the
same signature without running the traced function's Python code.

A program runs interpreted first: one closure per record rebuilds the record on a
fresh tape (calling the record's function on the new values), the guards are checked
where the trace met them, and the core's backward pass follows.  After
``GENERATE_AFTER`` runs its forward and backward passes are written out as Python
code (:mod:`.codegen`), and a program of kernel sums and scalar arithmetic is planned
as one Numba function (:mod:`.fusion`), compiled after ``FUSE_AFTER`` short-path runs
(or found compiled: :mod:`.compiled`).
"""
import operator
import weakref

import numpy as np

from ..compile_log import logger, watching
from ..core.box import Box
from ..core.tape import (LinearRecord, RuleRecord, accumulate, backward, ignore_float_errors,
                         restore_float_errors)
from ..rules.fast import kernel_prepared
from .codegen import generate
from .fusion import NotFusable, plan_fusion
from . import policy
from .recorder import Slot
from .signature import identical


class GuardFailed(Exception):
    """A replay met a guard with another outcome than the trace: trace again."""


class Program:
    """A traced program, ready to run on new values of the same signature."""

    __slots__ = ("steps", "guards", "generated", "runs", "output", "leaves", "slots",
                 "fusion", "short_runs", "assumptions", "fused_functions", "not_fused")

    def __init__(self, tape, recorder, output, arrays, free, fused_functions):
        """``recorder``: the trace's :class:`.recorder.ProgramRecorder`; ``arrays``:
        copies of the non-differentiated argument arrays as the trace began; ``free``:
        f's free variables then (:func:`.signature.free_variables`);
        ``fused_functions``: the jitted function's :class:`.compiled.FusedFunctions`."""
        self.leaves = len(tape.values) - len(tape.records)
        self.slots = len(tape.values)
        self.output = ("slot", output.slot) if type(output) is Box else ("constant", output)
        self.guards = program_guards(recorder)
        self.steps = interpreted_steps(tape.records, self.guards)
        self.generated = None       # (forward, backward) once generated
        self.runs = 0
        self.fusion = None          # the program as one Numba function, if it can be
        self.not_fused = None       # why it is not, once planned
        self.short_runs = 0
        self.assumptions = Assumptions(tape, recorder, arrays, free)
        self.fused_functions = fused_functions

    def check(self, arrays, read_free_variables):
        """:class:`GuardFailed` unless what the signature cannot hold is as at the
        trace (see :class:`Assumptions`)."""
        self.assumptions.check(arrays, read_free_variables)

    def run(self, tape, arrays, read_free_variables):
        """Fill ``tape`` (its input slots already there): ``(output, residuals)``, the
        output a box or a constant, ``residuals`` what the generated backward pass
        needs (None for an interpreted run, whose records are on the tape);
        :class:`GuardFailed` when the program would differ."""
        self.check(arrays, read_free_variables)
        values = tape.values
        if len(values) != self.leaves:
            raise GuardFailed
        residuals = None
        generated = self.generated
        if generated is not None:
            residuals = generated[0](tape, values)
        else:
            for step in self.steps:
                step(tape, values, tape.records)
            self.runs += 1
            if self.runs == policy.GENERATE_AFTER and len(tape.records) <= policy.GENERATE_UP_TO:
                self._generate(tape.records, values)
        kind, output = self.output
        return (output if kind == "constant" else Box(values[output], output, tape)), residuals

    def _generate(self, records, values):
        # From this run's records: the program's constants and functions, no values of
        # the trace kept.
        output = self.output[1] if self.output[0] == "slot" else None
        self.generated = generate(records, self.guards, self.leaves, output)
        if len(records) > policy.FUSE_UP_TO:
            self.not_fused = f"{len(records)} records, past the {policy.FUSE_UP_TO} fused"
            return
        try:
            self.fusion = plan_fusion(records, values, self.leaves, output, self.guards)
        except NotFusable as refused:
            self.not_fused = str(refused)
        except Exception as error:      # not a user's error: the replay does without
            self._fusion_failed("planning", error)

    def run_fused(self, values):
        """The fused program's ``(value, cotangents by leaf)``, or None: not compiled
        yet (it is after ``FUSE_AFTER`` short-path runs), not to be (the jitted function
        fused as many programs as it may: see :mod:`.compiled`), or it handed the call
        back (a non-finite value, an error: the replay will meet it)."""
        fusion = self.fusion
        first = None                    # the first call compiles: reported
        if fusion.function is None:
            self.short_runs += 1
            if self.short_runs < policy.FUSE_AFTER:
                return None
            try:
                fusion.function = self.fused_functions.function_for(fusion)
            except Exception as error:  # not a user's error: the replay does without
                self._fusion_failed("compiling", error)
                return None
            if fusion.function is None:
                self.fusion = None
                self.not_fused = (f"its jitted function has fused "
                                  f"{policy.MAX_FUNCTIONS} other programs (a "
                                  f"fused function stays in memory until the process ends)")
                return None
            first = watching(fusion.function, lambda: f"a db.jit program of {self.slots} "
                                                      f"values fused into one Numba function")
        try:
            if first is None:           # (the hot path: no context manager)
                return fusion(values)
            with first:
                return fusion(values)
        except Exception as error:
            self._fusion_failed("running", error)
            return None

    def _fusion_failed(self, stage, error):
        """A fused program failed where it should not (not a user's error: the replay
        does without it, the same bits): said on the log, with the error."""
        self.fusion = None
        self.not_fused = f"{stage} the fused function raised {type(error).__name__}: {error}"
        logger.warning(f"db.jit: {self.not_fused}; the program is replayed unfused (please "
                       f"report it)", exc_info=error)

    def fusion_report(self):
        """Whether the program runs fused, or why not, for people."""
        if self.fusion is not None:
            return ("fused into one Numba function" if self.fusion.function is not None
                    else "to be fused at its next call")
        if self.generated is None:
            if self.runs >= policy.GENERATE_AFTER:
                return (f"replayed interpreted: more than {policy.GENERATE_UP_TO} records "
                        f"(not generated as code, not fused)")
            return "to be generated as code and planned for fusion at its next replay"
        return f"not fused: {self.not_fused}"

    def gradients(self, tape, residuals, seeds):
        """The backward pass of a run: cotangents by slot."""
        if residuals is None:           # an interpreted run: the tape has its records
            return backward(tape, seeds)
        return self.backward(tape.values, residuals, seeds)

    def backward(self, values, residuals, seeds):
        """The generated backward pass, from the generated forward's ``residuals``."""
        grads = [None] * self.slots
        owned = bytearray(self.slots)
        for slot, seed in seeds:
            accumulate(grads, owned, values, slot, seed)
        errors = ignore_float_errors()
        try:
            return self.generated[1](values, grads, owned, residuals)
        finally:
            restore_float_errors(errors)


class Assumptions:
    """What a recorded program assumes of the world beyond its signature, checked
    before each run: ``f``'s free variables, the argument arrays' and the watched
    constants' contents, and the code the kernels it calls were compiled from."""

    __slots__ = ("free", "arrays", "watched", "kernels")

    def __init__(self, tape, recorder, arrays, free):
        self.arrays = arrays
        # (reference to a constant, the copy the tape kept): weak for an array (a
        # temporary of the trace costs nothing), strong for a list.  The copy stays
        # writeable like the original: a read-only array is another Numba type, and a
        # kernel would compile again for it.
        self.watched = [(_reference(original), kept) for original, kept
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
            if original is not None and not identical(original, kept):
                raise GuardFailed("a constant array the program uses changed in place")
        for dependencies in self.kernels:
            if not dependencies.unchanged():
                raise GuardFailed("a name a kernel reads changed (it is compiled afresh)")


def program_guards(recorder):
    """The guards a trace's recorder collected, as ``(record count, check)``:
    ``check(values)`` raises :class:`GuardFailed` when the outcome differs."""
    return [(position, _guard(*rest)) for position, *rest in recorder.guards]


def compile_program(tape, recorder, output, arrays, free, fused_functions):
    """The :class:`Program` of a finished trace, or None if it cannot be replayed."""
    if not recorder.replayable:
        return None
    leaves = len(tape.values) - len(tape.records)
    if any(record.out != leaves + k for k, record in enumerate(tape.records)):
        return None                     # slots not in record order: nothing to rely on
    return Program(tape, recorder, output, arrays, free, fused_functions)


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


def _reference(original):
    try:
        return weakref.ref(original)
    except TypeError:                   # a list
        return lambda: original


def _guard(func, args, kwargs, expected):
    def check(values):
        bound = [_bind(arg, values) for arg in args]
        result = func(*bound, **{k: _bind(v, values) for k, v in kwargs.items()})
        if not identical(result, expected):
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
