"""``jit`` of any function (one that is not made by ``grad``/``value_and_grad``): its
program staged once per signature and run again.

The first call with a signature traces the function on a staging tape
(:mod:`dualbcast.core.staging`): its float arguments (arrays and scalars, alone or in
tuples, lists, dicts) are boxed, and every operation computed from them is recorded,
those of the ``jvp``/``grad``/``hessian`` traces nested inside too -- a tangent, a
backward pass, a kernel's second-order loop.  The records, the guards the trace met
and the output's structure are the program; later calls check what the signature
cannot hold (as a gradient's program does: :class:`.program.Assumptions`) and run
the records as generated Python code, under the replay's floating-point settings
(an error or a warning means tracing again, which meets it as the eager call would).
"""
import numpy as np

from ..compile_log import logger
from ..core.box import Box
from ..core.pytree import flatten, unflatten
from ..core.staging import StagingTape
from ..core.tape import raise_float_errors, restore_float_errors, underflow_ignored
from ..core.trace import start_tracing, stop_tracing, trace_arguments, tracing_state
from ..rules.shapes import take_rows
from .codegen import generate_staged
from .compiled import FusedFunctions, FusedRuns
from .entries import Signatures
from .fused_source import NotFusable
from .program import GuardFailed, Program, interpreted_steps
from .elementwise import describe
from . import policy
from .recorder import ProgramRecorder, Slot
from .staged_fusion import plan_staged_fusion
from .staged_plan import operand_slots, plan_records

_FLOAT_SCALARS = (float, np.float64, np.float32, np.float16)
MISSED = object()       # a short path's "not here": the general path takes the call


def traceable(arg):
    """Whether a staged program takes ``arg`` as an input (keyed by its shape and
    dtype) rather than a constant (keyed by its value): a float array or scalar, an
    integer array (an index: gathers and scatters take it at run time), or a non-empty
    tuple, list or dict of them.  Bool arrays stay constants: a mask decides the shape
    of what it selects."""
    if _input_leaf(arg):
        return True
    if not isinstance(arg, (tuple, list, dict)):
        return False
    leaves = flatten(arg)[0]
    return bool(leaves) and all(map(_input_leaf, leaves))


def _input_leaf(leaf):
    kind = type(leaf)
    return kind in _FLOAT_SCALARS or kind is np.ndarray and leaf.dtype.kind in "fiu"


class StagedPrograms(Signatures):
    """The staged programs of one jitted function, by signature."""

    def __init__(self, f, kind="staged", watched=None):
        super().__init__(f, kind, watched)
        self.fused_functions = FusedFunctions(self.name)
        # Whether integer arrays are inputs: until a trace fails on one (an index
        # into a plain array, np.take's rule): then constants, compared on every call,
        # as every other non-float argument.
        self.index_inputs = True
        # Whether a program of this function runs fused: calls try the short path
        # only then (a program that is not fused pays nothing for it).
        self.fused_runs = False

    def takes_as_input(self, arg):
        if self.index_inputs:
            return traceable(arg)
        return traceable(arg) and not _has_integers(arg)

    def __call__(self, args, kwargs):
        f = self.f
        if getattr(tracing_state(), "tape", None) is not None:
            # Inside a trace (jit(f) differentiated, or called by a traced function):
            # f runs as it is, its operations recorded by that trace.
            return f(*args, **kwargs)
        if self.fused_runs and not kwargs:
            output = self._replay_short(args)
            if output is not MISSED:
                return output
        inputs = tuple(map(self.takes_as_input, args))
        trees = []
        entry, arrays = self.entry_for(args, kwargs, inputs, trees)
        if entry is None:
            self.ran_eagerly(None, arrays)
            return f(*args, **kwargs)
        program = entry.program
        why = "the first call with this signature"
        if program is not None:
            values = [leaf for leaves, _ in trees for leaf in leaves]
            errors = raise_float_errors()
            try:
                program.check(arrays, self.free_variables)
                output = program.run(values)
            except GuardFailed as failed:
                why = str(failed) or "a guard failed"
                self.replay_failed(entry, why)
            except Exception as error:      # an error the trace did not meet
                why = f"the replay raised {type(error).__name__} (the trace will meet it)"
                self.replay_failed(entry, why)
            else:
                entry.replays += 1
                if not self.fused_runs and program.runs_fused():
                    self.fused_runs = True
                return output
            finally:
                restore_float_errors(errors)
        elif entry.traces:
            why = entry.why
        if self.runs_eagerly(entry, arrays):
            return f(*args, **kwargs)
        return self._trace(entry, args, kwargs, inputs, arrays, why)

    def _replay_short(self, args):
        """The common call of a fused program on a short path: float arrays as the
        positional arguments, whose signature key is made here as :func:`.signature`
        makes it.  The output, or :data:`MISSED`: the general path takes the call, and
        whatever failed here."""
        key = []
        for arg in args:
            if type(arg) is not np.ndarray or arg.dtype.kind != "f":
                return MISSED
            key.append((arg.shape, arg.dtype, arg.strides))
        entry = self.entries.get(tuple(key))
        program = None if entry is None else entry.program
        if program is None:
            return MISSED
        output = program.run_fused(list(args), self.free_variables)
        if output is not MISSED:
            entry.replays += 1
        return output

    def _trace(self, entry, args, kwargs, inputs, arrays, why):
        """``f(*args, **kwargs)``, traced on a staging tape; its program kept for the
        calls that follow."""
        f = self.f
        recorder = ProgramRecorder(self.watched)
        # What the program is checked against later, taken before f runs (f may write
        # into an argument): its free variables and the argument arrays' contents.
        free = self.free_variables()
        kept = [np.array(a, copy=True) for a in arrays]
        tape = start_tracing(single_use=False, recorder=recorder, kind=StagingTape)
        try:
            traced_args = trace_arguments(tape, args, [i for i, x in enumerate(inputs) if x])[0]
            try:
                out = f(*traced_args, **kwargs)
            except Exception as error:
                failed = f"{type(error).__name__}: {error}"
                # (what tracing cannot do raises these; other errors are f's own)
                limit = isinstance(error, (TypeError, NotImplementedError))
            else:
                failed = None
        finally:
            stop_tracing(tape)
        if failed is not None:
            self.traced(entry, why, recorder)
            if limit and self.index_inputs and any(map(_has_integers, (a for a, x in
                                                                       zip(args, inputs) if x))):
                # (an integer array as an input is what the trace could not take:
                # integer arrays are constants of this function from now on)
                self.index_inputs = False
                entry.replayable, entry.why = False, "integer arrays became constants"
                logger.info(f"db.jit of {self.name}: integer arrays are constants of its "
                            f"programs (compared on every call), not inputs: the trace "
                            f"raised {failed}")
                return self(args, kwargs)
            if limit:
                # An operation that cannot be staged (a NumPy function with no rule
                # called on an input): f runs as it is.
                self.not_recorded(entry, f"the trace raised {failed}")
            else:
                # f's own error, which other values may not meet (an index out of
                # range): f runs as it is, and raises if it does; a later call traces
                # again (while the signature's calls do not fail mostly).
                self.trace_failed(entry, f"the trace raised {failed}")
            return f(*args, **kwargs)
        leaves, tree = flatten(out)
        outputs = [_output(leaf, tape, f) for leaf in leaves]
        entry.program = StagedProgram.of(tape, recorder, kept, free, tree, outputs,
                                         self.fused_functions)
        self.traced(entry, why, recorder)       # (after the program: it ends the recorder)
        if entry.program is None:
            self.not_recorded(entry, recorder.why or "its records are out of order")
        return unflatten(tree, [leaf.value if type(leaf) is Box else leaf for leaf in leaves])


_PLAIN_OUTPUTS = frozenset({float, int, bool, complex, str, bytes, np.ndarray})
# Functions of integer inputs whose answers' shapes follow their operands' shapes, which
# the signature holds (rows taken by an index array: the index's length), not their
# values: not checked after a run (a loop need not write them out for the check).
_SHAPED_BY_SHAPES = frozenset({take_rows})


def _output(leaf, tape, f):
    """Where a replay finds an output leaf: ``("slot", n, kind)`` for a value the
    program computes (``kind``: the type the trace's value had), ``("constant", value)``
    for one it does not."""
    if type(leaf) is Box:
        if leaf.tape is tape:
            return ("slot", leaf.slot, type(leaf.value))
        raise RuntimeError("a traced value was used after its grad/vjp/jvp call returned; "
                           "return it from that function instead")
    if type(leaf) not in _PLAIN_OUTPUTS and not isinstance(leaf, np.generic) \
            and leaf is not None:
        raise TypeError(f"dualbcast.jit: {getattr(f, '__name__', f)!r} returned a "
                        f"{type(leaf).__name__}; a jitted function returns arrays, numbers, "
                        f"and tuples, lists and dicts of them")
    return ("constant", _fresh(leaf))       # (a copy: the trace hands out the original)


class StagedProgram(Program):
    """A staged trace: every operation on its inputs recorded, run again as generated
    Python code (after its plan: :mod:`.staged_plan`) on new values of the signature."""

    __slots__ = ("records", "forward", "tree", "outputs", "shapes", "plan", "fused")

    def __init__(self, tape, recorder, arrays, free, tree, outputs, fused_functions):
        """``tree``, ``outputs``: the output's structure and where a replay finds each
        of its leaves (:func:`_output`); ``fused_functions``: the jitted function's
        :class:`.compiled.FusedFunctions`."""
        super().__init__(tape, recorder, arrays, free)
        self.records = tape.records
        self.forward = None         # generated at the first run
        self.tree, self.outputs = tree, outputs
        # The arrays computed from integer values (an index input, a count): their
        # shapes may follow those values (np.repeat by counts), where f's Python code
        # took the trace's shapes as given; checked after each run.
        values = tape.values
        self.shapes = [(record.out, values[record.out].shape) for record in tape.records
                       if type(values[record.out]) is np.ndarray
                       and getattr(record, "func", None) not in _SHAPED_BY_SHAPES
                       and any(_integral(values[slot]) for slot in operand_slots(record))]
        self.plan = None
        if len(self.records) <= policy.GENERATE_UP_TO:
            guard_reads = [(position, _slots_read(args, kwargs))
                           for position, _, args, kwargs, _ in recorder.guards]
            needed = {output[1] for output in outputs if output[0] == "slot"}
            needed.update(slot for slot, _ in self.shapes)
            needed.update(slot for _, slots in guard_reads for slot in slots)
            self.plan = plan_records(self.records, values, self.leaves, needed, guard_reads)
        self.fused = None           # its FusedRuns, if it may be fused (planned now,
        if self.plan is not None:   # while the trace's values are at hand)
            self.fused = self._fused(values, fused_functions)

    def _fused(self, values, fused_functions):
        fused = FusedRuns(None, fused_functions,
                          f"a db.jit staged program of {len(values)} values")
        if len(self.records) > policy.FUSE_UP_TO:
            fused.drop(f"{len(self.records)} records, past the {policy.FUSE_UP_TO} fused")
            return fused
        try:
            fused.fusion = plan_staged_fusion(self.plan, values, self.leaves, self.outputs,
                                              self.guards, self.shapes)
        except NotFusable as refused:
            fused.drop(str(refused))
        except Exception as error:      # not a user's error: the replay does without
            fused.failed("planning", error)
        return fused

    def run(self, values):
        """The output on the input leaves ``values`` (a list, extended with every
        record's value); :class:`GuardFailed` when the program would differ."""
        if len(values) != self.leaves:
            raise GuardFailed
        forward = self.forward
        if forward is None:
            if self.plan is None:
                logger.debug(f"db.jit: a staged program of {len(self.records)} records "
                             f"replays interpreted: past the {policy.GENERATE_UP_TO} "
                             f"generated as code")
                forward = self.forward = self._interpreted()
            else:
                forward = self.forward = generate_staged(self.plan, self.guards,
                                                         len(self.records))
                self.plan.release()
            self.records = None             # (their values of the trace: not kept)
        if not self._ran_fused(values):
            forward(values)
        for slot, shape in self.shapes:
            if np.shape(values[slot]) != shape:
                raise GuardFailed("an array computed from an integer input has another "
                                  "shape than at the trace")
        return self._output(values)

    def runs_fused(self):
        """Whether the program's fused function is compiled and in use."""
        fused = self.fused
        return fused is not None and fused.fusion is not None \
            and fused.fusion.function is not None

    def run_fused(self, values, read_free_variables):
        """:meth:`run` by the fused function alone, on the input leaves ``values`` of a
        call with no constant argument: the output, or :data:`MISSED` (not fused yet
        or any more, a check failed, or the function handed the call back), where the
        caller takes the general path, which checks again and meets what failed.  No
        floating-point state is set: the fused function runs no NumPy operation, and
        gives the call back at a non-finite value."""
        if not self.runs_fused() or self.shapes:
            return MISSED
        try:
            self.check((), read_free_variables)
        except GuardFailed:
            return MISSED
        # (_ran_fused checks the rest: underflow ignored, and the kernels' loops the
        # function calls, which are not among the kernel calls the check above sees)
        if not self._ran_fused(values):
            return MISSED
        return self._output(values)

    def _output(self, values):
        """The output's structure filled in from the program's ``values``."""
        return unflatten(self.tree, [_as_traced(values[output[1]], output[2])
                                     if output[0] == "slot" else _fresh(output[1])
                                     for output in self.outputs])

    def _ran_fused(self, values):
        """Whether the fused function ran, writing the outputs into ``values``: not
        while the caller wants underflow reported (the fused code cannot see one), nor
        once a kernel's loop is compiled afresh (a name it reads changed: the fused
        function calls the old loop)."""
        fused = self.fused
        if fused is None or not fused.active or not underflow_ignored():
            return False
        if not fused.fusion.current():
            fused.drop("a name a kernel reads changed (its loop is compiled afresh)")
            return False
        return fused(values) is not None

    def fusion_report(self):
        if self.plan is None:
            return "replayed record by record (too long to generate as code)"
        plan = self.plan
        loops = "".join(f"; a loop of {describe(group)}" for group in plan.groups)
        return (f"replayed as generated Python code: {plan.removed} records of the trace "
                f"not run (unused views, or computed twice){loops}; {self.fused.report()}")

    def _interpreted(self):
        """``forward(values)`` as a loop over the records (a program too long to be
        compiled as Python source in reasonable time)."""
        steps = interpreted_steps(self.records, self.guards)

        def forward(values):
            records = []
            for step in steps:
                step(None, values, records)
        return forward


def _has_integers(arg):
    return any(type(leaf) is np.ndarray and leaf.dtype.kind in "iu"
               for leaf in (flatten(arg)[0] if isinstance(arg, (tuple, list, dict)) else (arg,)))


def _slots_read(args, kwargs):
    """The slots a guard's arguments (:class:`.recorder.Slot`, in lists and tuples)
    read."""
    slots = []
    for arg in list(args) + list(kwargs.values()):
        if type(arg) is Slot:
            slots.append(arg.slot)
        elif type(arg) in (list, tuple):
            slots += _slots_read(arg, {})
    return slots


def _integral(value):
    kind = type(value)
    if kind is np.ndarray:
        return value.dtype.kind in "iub"
    return kind is int or kind is bool or isinstance(value, (np.integer, np.bool_))


def _as_traced(value, kind):
    """An output as the trace gave it: a 0-d array where the trace's value was one
    (NumPy's operations on 0-d arrays give scalars, which the replay's generated code
    may hand out where the eager call's rules kept an array), a scalar where it was
    a scalar."""
    if kind is np.ndarray and type(value) is not np.ndarray and isinstance(value, np.generic):
        return np.asarray(value)
    if kind is not np.ndarray and issubclass(kind, np.generic) and type(value) is np.ndarray \
            and value.ndim == 0:
        return value[()]
    return value


def _fresh(constant):
    # A constant array of the output is handed out anew each call: the caller may
    # write into it, as into the eager call's result.
    return constant.copy(order="K") if type(constant) is np.ndarray else constant
