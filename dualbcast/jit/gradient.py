"""The programs of a jitted gradient whose only inputs are its differentiated
arguments: the trace's forward records, run again on a fresh tape, and the core's
backward pass after them -- the bits the eager call gives.

A program runs interpreted first (:func:`.program.interpreted_steps`, the core's
backward pass on the records it made).  After :data:`.policy.GENERATE_AFTER` runs its
forward and backward passes are written out as Python code (:mod:`.codegen`), and a
program of kernel sums and scalar arithmetic is planned as one Numba function
(:mod:`.fusion`), compiled after :data:`.policy.FUSE_AFTER` short-path runs (or found
compiled: :mod:`.compiled`).
"""
import numpy as np

from ..compile_log import logger
from ..core.box import Box
from ..core.pytree import unflatten
from ..core.tape import (Tape, accumulate, backward, ignore_float_errors, raise_float_errors,
                         restore_float_errors, underflow_ignored)
from ..core.trace import SEED_FOR, gradient_like, leaf_gradients, trace_value, value_and_gradient
from . import policy
from .codegen import generate
from .compiled import FusedFunctions, FusedRuns
from .entries import Signatures
from .fusion import NotFusable, plan_fusion
from .program import GuardFailed, MaskChanged, Program, interpreted_steps
from .recorder import ProgramRecorder
from .signature import Unreplayable, signature


# What GradientPrograms.call gives once a mask changed: the caller stages the call.
STAGED_INSTEAD = object()


class GradientProgram(Program):
    """A gradient's traced program: its forward records, replayed on a fresh tape (or
    as generated code, or fused), and the core's backward pass after them."""

    __slots__ = ("steps", "generated", "runs", "output", "slots", "fused",
                 "fused_functions")

    def __init__(self, tape, recorder, arrays, free, output, fused_functions):
        """``output``: what f returned (a box, or a constant); ``fused_functions``: the
        jitted function's :class:`.compiled.FusedFunctions`."""
        super().__init__(tape, recorder, arrays, free)
        self.slots = len(tape.values)
        self.output = ("slot", output.slot) if type(output) is Box else ("constant", output)
        self.steps = interpreted_steps(tape.records, self.guards)
        self.generated = None       # (forward, backward) once generated
        self.runs = 0
        self.fused = None           # its FusedRuns, once generated as code
        self.fused_functions = fused_functions

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
            if self.runs == policy.GENERATE_AFTER:
                if len(tape.records) <= policy.GENERATE_UP_TO:
                    self._generate(tape.records, values)
                else:
                    logger.debug(f"db.jit: a gradient program of {len(tape.records)} records "
                                 f"replays interpreted: past the {policy.GENERATE_UP_TO} "
                                 f"generated as code")
        kind, output = self.output
        return (output if kind == "constant" else Box(values[output], output, tape)), residuals

    def _generate(self, records, values):
        # From this run's records: the program's constants and functions, no values of
        # the trace kept.
        output = self.output[1] if self.output[0] == "slot" else None
        self.generated = generate(records, self.guards, self.leaves, output)
        fused = self.fused = FusedRuns(None, self.fused_functions,
                                       f"a db.jit program of {self.slots} values")
        if len(records) > policy.FUSE_UP_TO:
            fused.drop(f"{len(records)} records, past the {policy.FUSE_UP_TO} fused")
        else:
            try:
                fused.fusion = plan_fusion(records, values, self.leaves, output, self.guards)
            except NotFusable as refused:
                fused.drop(str(refused))
            except Exception as error:  # not a user's error: the replay does without
                fused.failed("planning", error)
        if not fused.active:
            logger.debug(f"db.jit: a gradient program of {len(records)} records replays as "
                         f"generated Python code, not fused: {fused.not_fused}")

    @property
    def fusion(self):
        """The program's :class:`.fusion.Fusion` while it may run fused, else None."""
        return None if self.fused is None else self.fused.fusion

    def fusion_report(self):
        """Whether the program runs fused, or why not, for people."""
        if self.generated is None:
            if self.runs >= policy.GENERATE_AFTER:
                return (f"replayed interpreted: more than {policy.GENERATE_UP_TO} records "
                        f"(not generated as code, not fused)")
            return "to be generated as code and planned for fusion at its next replay"
        return self.fused.report()

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


def short_gradients(grads, leaves, structures, single, fused=False):
    """The gradients of a replay on the short path, rebuilt per argument (``fused``:
    ``grads`` came from a fused function, an array leaf's a fresh array of its shape
    and dtype, handed out as it is)."""
    if single and structures[0][0] is None:     # one array or float: the common case
        ct = grads[0]
        if fused and ct is not None and type(leaves[0]) is np.ndarray \
                and ct.shape == leaves[0].shape:
            return ct
        return gradient_like(leaves[0], ct, set())
    gradients = leaf_gradients(leaves, grads[:len(leaves)], set())
    results, start = [], 0
    for tree, count in structures:
        results.append(gradients[start] if tree is None
                       else unflatten(tree, gradients[start:start + count]))
        start += count
    return results[0] if single else tuple(results)


class GradientPrograms(Signatures):
    """The programs of one jitted gradient, by signature."""

    def __init__(self, f):
        super().__init__(f, "value_and_grad")
        self.fused_functions = FusedFunctions(self.name)
        # Why the calls are staged instead (None: they are not): a mask computed from
        # traced values (``np.where(x > 0, ...)``) changed, which these programs can only
        # check, tracing again whenever a value crosses to the mask's other side; a
        # staged program computes it again.
        self.staged_instead = None

    def call(self, args, kwargs, positions, differentiated, out, single):
        """One value and gradient: replayed if it can be, else traced (and recorded);
        :data:`STAGED_INSTEAD` when a mask it checks changed (see ``staged_instead``)."""
        entry, arrays = self.entry_for(args, kwargs, differentiated)
        if entry is None:       # an argument no signature can compare: eager
            self.ran_eagerly(None, arrays)
            return value_and_gradient(self.f, args, positions, out, single,
                                      trace_value(self.f, kwargs))
        call = Call(self, entry, arrays)
        why = "the first call with this signature" if not entry.traces else entry.why
        if call.program is not None:
            try:
                return call.replay(args, positions, out, single)
            except GuardFailed as failed:
                why = str(failed)
                if type(failed) is MaskChanged:
                    self.staged_instead = why
                    logger.info(f"db.jit of {self.name}: {why}: its calls are staged from "
                                f"now on (a staged program computes the mask again)")
                    return STAGED_INSTEAD
        return call.trace(args, kwargs, positions, out, single, why)

    def replay_short(self, args, differentiated, ranks, single):
        """The common call on a short path: no keyword arguments, a program already
        generated (or fused), differentiated arguments of arrays and float scalars
        (alone or in tuples, lists, dicts).  ``(value, gradient)``, or None: the caller
        takes the general path, which also deals with whatever failed here.
        ``ranks``: per differentiated argument in argnums' order, its rank among them
        in argument order; ``single``: whether the gradient is one argument's."""
        if len(args) == 1 and differentiated[0] and type(args[0]) is np.ndarray:
            # (one array, the commonest call: its key as signature() makes it)
            x = args[0]
            key, arrays, trees = ((x.shape, x.dtype, x.strides),), (), [((x,), None)]
        else:
            trees = []
            try:
                key, arrays = signature(args, None, differentiated, trees)
            except (Unreplayable, TypeError):
                return None
        try:
            entry = self.entries.get(key)
        except TypeError:           # (an unhashable dict key)
            return None
        program = None if entry is None else entry.program
        if program is None or program.generated is None or program.output[0] != "slot":
            return None
        values, structures = [], []
        for rank in ranks:      # (trees come in argument order, the leaves' slots in argnums')
            leaves, tree = trees[rank]
            values += leaves
            structures.append((tree, len(leaves)))
        # (every leaf is a float array or scalar: a program exists only for those)
        try:
            program.check(arrays, self.free_variables)
        except Exception:
            return None
        if program.fused.active and underflow_ignored():
            # (the fused code cannot see an underflow the caller wants reported)
            fused = program.fused(values)
            if fused is not None:
                entry.replays += 1
                return fused[0], short_gradients(fused[1], values, structures, single, True)
        tape = Tape(single_use=True)
        tape.values = values
        errors = raise_float_errors()
        try:
            residuals = program.generated[0](tape, values)
        except Exception:
            return None
        finally:
            restore_float_errors(errors)
        output = program.output[1]
        seed = SEED_FOR.get(type(values[output]))
        if seed is None:
            return None
        entry.replays += 1
        grads = program.backward(values, residuals, ((output, seed),))
        return values[output], short_gradients(grads, values, structures, single)


class Call:
    """One call's arguments against its signature's entry (and the entry's program as
    the call found it: another thread may replace it meanwhile)."""

    __slots__ = ("programs", "entry", "arrays", "program")

    def __init__(self, programs, entry, arrays):
        self.programs = programs
        self.entry = entry
        self.arrays = arrays
        self.program = entry.program

    def replay(self, args, positions, out, single):
        """The value and gradient, replayed; :class:`GuardFailed` if they would differ
        from a trace's (nothing is written to the caller's arrays that a trace will
        not overwrite).

        An error the trace did not meet also means tracing again: ``f`` may catch it
        (``try: 1.0 / x``), or run the operation under other NumPy error settings —
        which is also why a replay raises on floating-point errors NumPy would only
        warn about: the trace that follows warns (or raises) as ``f`` says."""
        program = self.program
        residuals = []

        def forward(tape, traced_args):
            errors = raise_float_errors()
            try:
                output, kept = program.run(tape, self.arrays, self.programs.free_variables)
            except GuardFailed as failed:
                self.programs.replay_failed(self.entry, str(failed) or "a guard failed")
                raise
            except Exception as error:
                why = f"the replay raised {type(error).__name__} (the trace will meet it)"
                self.programs.replay_failed(self.entry, why)
                raise GuardFailed(why) from None
            finally:
                restore_float_errors(errors)
            self.entry.replays += 1
            residuals.append(kept)
            return output

        return value_and_gradient(self.programs.f, args, positions, out, single, forward,
                                  lambda tape, seeds: program.gradients(tape, residuals[0],
                                                                        seeds),
                                  rebuild=False)

    def trace(self, args, kwargs, positions, out, single, why):
        """The value and gradient, traced; the trace's program kept for replays."""
        entry, programs = self.entry, self.programs
        f = programs.f
        if programs.runs_eagerly(entry, self.arrays):
            return value_and_gradient(f, args, positions, out, single, trace_value(f, kwargs))
        recorder = ProgramRecorder(f)
        # What the program is checked against later, taken before f runs (f may write
        # into an argument): its free variables and the argument arrays' contents.
        free = programs.free_variables()
        arrays = [np.array(a, copy=True) for a in self.arrays]
        outputs = []

        def forward(tape, traced_args):
            outputs.append(f(*traced_args, **kwargs))
            return outputs[0]

        def gradients_of(tape, seeds):
            program = GradientProgram.of(tape, recorder, arrays, free, outputs[0],
                                         programs.fused_functions)
            programs.traced(entry, why, recorder)
            entry.program = program
            if program is None:
                programs.not_recorded(entry, recorder.why or "its records are out of order")
            return backward(tape, seeds)

        return value_and_gradient(f, args, positions, out, single, forward, gradients_of,
                                  recorder=recorder)
