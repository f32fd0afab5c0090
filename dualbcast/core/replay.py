"""Replay: running a traced program again on new inputs, without tracing it.

``value_and_grad`` keeps, per input signature, the program its trace recorded: the
records (which function made each value from which slots and constants) and the guards
(the constants computed from traced values that steered the program: ``bool(x)``,
``x > 0``, ``np.argmax(x)``).  A replay runs the program's forward and backward
passes as generated code (:mod:`.replay_code`) that calls the records' functions and
vjps on the new values: the user's Python code, its boxes, the rule lookups and the
tape's interpretation are skipped.  A guard whose outcome differs stops the replay
before anything is returned, and the caller traces again.  The common call takes a
short path (:meth:`Programs.replay_short`), and a program of kernel sums and scalar
arithmetic is eventually compiled whole into one Numba function
(:mod:`dualbcast.rules.fused`, through the ``plan_fusion`` hook).

The signature a program is kept under holds everything a replay cannot re-check: the
differentiated arguments' structure, shapes, dtypes and strides, and the exact value of
every other argument (numbers by their bits; arrays by shape and dtype here, and by
content in :meth:`Program.run`).  Arguments of other kinds (objects with state) make a
call unreplayable: it is traced every time.

What a replay assumes, as ``jax.jit`` does: ``f`` computes from its arguments.  What
it can check, it does: the globals and closure variables ``f``'s own code names (its
comprehensions and lambdas included) must be the same objects as at the trace
(``lambda x: loss(x, data[i])`` with ``i`` changed is traced again); every constant
array or list an operation used must still hold what it held (compared with the copy
the tape kept); an error the replay meets (``f`` may have caught it), or a
floating-point warning, means tracing again; a program that prints a traced value or
calls ``stop_gradient`` is traced every time.  What it cannot see: an attribute or a
container entry changed (``cfg.scale``, ``params["w"]``), a name rebound inside a
helper ``f`` calls, an array changed in place that only a derived value was computed
from, a random number drawn inside ``f``, another side effect.  Pass such values as
arguments, or use ``value_and_grad(f, replay=False)``.
"""
import operator
import struct
import types
import weakref

import numpy as np

from .pytree import flatten
from .replay_code import generate
from .tape import (Tape, accumulate, backward, ignore_float_errors, raise_float_errors,
                   restore_float_errors)


class Unreplayable(Exception):
    """An argument whose value a replay could not check."""


class GuardFailed(Exception):
    """A replay met a guard with another outcome than the trace: trace again."""


class Rerun:
    """Base of a record ``func`` that is a rule rather than a NumPy function:
    ``func(tape, values, parents) -> (ans, vjps)`` (the kernels' fast rules, whose
    vjps hold what their forward loop computed)."""

    __slots__ = ()


class Slot:
    """Where a guard's argument was a traced value: the slot to read it from."""

    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot


# --------------------------------------------------------------------- signatures

_FLOAT_SCALARS = frozenset({float, np.float64, np.float32, np.float16})
# Arguments a signature holds by identity: functions, and (registered by the rules)
# kernels.  A function's closure could change; that is the assumption of the module
# docstring again.  Not bound methods (obj.apply, d.get, rng.normal): their object's
# state is part of what they compute.
BY_IDENTITY = {types.FunctionType, np.ufunc}


def signature(args, kwargs, differentiated, trees=None):
    """``(key, arrays)``: a hashable key a replay's arguments must match, and the
    non-differentiated arrays whose contents must match too.  Raises
    :class:`Unreplayable` for an argument a replay cannot check.  ``trees``: a list
    that receives ``(leaves, treedef)`` of each differentiated argument (treedef None
    for a lone array or float)."""
    arrays = []
    if trees is None:
        trees = []
    key = [_traced_key(arg, trees) if traced else _constant_key(arg, arrays)
           for arg, traced in zip(args, differentiated)]
    if kwargs:
        key.append(tuple((name, _constant_key(value, arrays)) for name, value in kwargs.items()))
    return tuple(key), arrays


def _traced_key(arg, trees):
    kind = type(arg)
    if kind is np.ndarray:
        trees.append(((arg,), None))
        return (arg.shape, arg.dtype, arg.strides)
    if kind in _FLOAT_SCALARS:
        trees.append(((arg,), None))
        return kind
    leaves, tree = flatten(arg)
    trees.append((leaves, tree))
    return (tree, tuple([(leaf.shape, leaf.dtype, leaf.strides) if type(leaf) is np.ndarray
                         else type(leaf) for leaf in leaves]))


def _constant_key(value, arrays):
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str or kind is bytes:
        return (kind, value)
    if kind is float:
        return (kind, _bits(value))         # -0.0 is not 0.0; nor is -nan nan
    if kind is np.ndarray:
        if value.dtype.hasobject:
            raise Unreplayable("an object array")
        arrays.append(value)
        return (kind, value.shape, value.dtype, value.strides)
    if isinstance(value, np.generic):
        return (kind, value.tobytes())
    if kind is complex:
        return (kind, _bits(value.real), _bits(value.imag))
    if kind is tuple or kind is list or isinstance(value, tuple):       # and namedtuples
        return (kind, tuple(_constant_key(item, arrays) for item in value))
    if kind is dict:
        return (kind, tuple((_constant_key(k, arrays), _constant_key(v, arrays))
                            for k, v in value.items()))
    if kind in BY_IDENTITY or kind is types.BuiltinFunctionType and (
            value.__self__ is None or type(value.__self__) is types.ModuleType):
        return (kind, value)                # math.sin, len: not a bound method
    raise Unreplayable(f"an argument of type {kind.__name__}")


def identical(a, b):
    """Whether two constants are the same value: type, shape, dtype and bits (so
    -0.0 differs from 0.0 and nan equals nan)."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is np.ndarray:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        unsigned = _UNSIGNED.get(a.dtype.itemsize)
        if a.nbytes <= 1 << 16 or unsigned is None:
            return a.tobytes() == b.tobytes()     # 4x faster than a ufunc when small
        return bool((a.view(unsigned) == b.view(unsigned)).all())
    if kind is tuple or kind is list:
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if kind is float:
        return _bits(a) == _bits(b)
    if isinstance(a, np.generic):
        return a.tobytes() == b.tobytes()
    return bool(a == b)


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_bits = struct.Struct("<d").pack        # a float's bits (hex() hides a nan's sign)


# --------------------------------------------------------------------- programs

def free_variables(f):
    """A function returning the objects ``f``'s own code names from outside: its
    globals (missing ones as None) and its closure cells' contents; nothing for a
    callable that is not a Python function."""
    code = getattr(f, "__code__", None)
    if code is None:
        return list
    get, names, cells = f.__globals__.get, _names(code), f.__closure__ or ()

    def read():
        found = list(map(get, names))
        for cell in cells:
            try:
                found.append(cell.cell_contents)
            except ValueError:              # a cell not filled yet
                found.append(None)
        return found
    return read


def _names(code):
    # The global names a function's code reads, its comprehensions and lambdas included.
    names = list(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names += _names(constant)
    return tuple(names)


class Program:
    """A traced program, ready to run on new values of the same signature.

    It runs interpreted first: one closure per record rebuilds the record on a fresh
    tape, and the tape's own backward pass follows.  After ``GENERATE_AFTER`` runs its
    forward and backward passes are written out as Python code (:mod:`.replay_code`),
    ~2x faster for small programs; compiling that code costs ~150 µs per record (a
    tenth of a second for a thousand), which only a program run that often pays back.
    """

    GENERATE_AFTER = 64
    GENERATE_UP_TO = 2000       # records: Python's compile time grows faster than that
    # Replays (on the short path) after which a program that can be is fused into one
    # Numba function (dualbcast.rules.fused): compiling costs about a second.
    FUSE_AFTER = 256

    __slots__ = ("steps", "guards", "generated", "runs", "output", "arrays", "watched",
                 "leaves", "free", "slots", "fusion", "short_runs")

    def __init__(self, tape, output, box_type, arrays, free):
        """``arrays``: copies of the non-differentiated argument arrays as the trace
        began; ``free``: f's free variables then (:func:`free_variables`)."""
        self.leaves = len(tape.values) - len(tape.records)
        self.slots = len(tape.values)
        self.output = ("slot", output.slot) if type(output) is box_type else ("constant", output)
        self.guards = [(position, _guard(*rest)) for position, *rest in tape.guards]
        self.steps = _steps(tape.records, self.guards)
        self.generated = None       # (forward, backward) once generated
        self.runs = 0
        self.fusion = None          # the program as one Numba function, if it can be
        self.short_runs = 0
        self.arrays = arrays
        # (reference to a constant, the copy the tape kept): weak for an array (a
        # temporary of the trace costs nothing), strong for a list.  The copy stays
        # writeable like the original: a read-only array is another Numba type, and a
        # kernel would compile again for it.
        self.watched = [(_reference(original), kept) for original, kept
                        in {id(pair[1]): pair for pair in tape.copies}.values()]
        self.free = free            # f's free variables at the trace

    def check(self, arrays, read_free_variables):
        """:class:`GuardFailed` unless what the signature cannot hold is as at the
        trace: ``f``'s free variables, the argument arrays' and the watched constants'
        contents."""
        free = read_free_variables()
        if len(free) != len(self.free) or not all(map(operator.is_, free, self.free)):
            raise GuardFailed           # f names another object than at the trace
        for given, kept in zip(arrays, self.arrays):
            if not identical(given, kept):
                raise GuardFailed
        for ref, kept in self.watched:
            original = ref()
            if original is not None and not identical(original, kept):
                raise GuardFailed       # a global array changed in place since the trace

    def run(self, tape, arrays, box_type, read_free_variables):
        """Fill ``tape`` (its input slots already there) and return the output, a box
        or a constant; :class:`GuardFailed` when the program would differ."""
        self.check(arrays, read_free_variables)
        values = tape.values
        if len(values) != self.leaves:
            raise GuardFailed
        generated = self.generated
        if generated is not None:
            tape.residuals = generated[0](tape, values)
        else:
            for step in self.steps:
                step(tape, values, tape.records)
            self.runs += 1
            if self.runs == self.GENERATE_AFTER and len(tape.records) <= self.GENERATE_UP_TO:
                # From this run's records: the program's constants and functions, no
                # values of the trace kept.
                output = self.output[1] if self.output[0] == "slot" else None
                self.generated = generate(tape.records, self.guards, self.leaves, output,
                                          Rerun)
                if plan_fusion is not None:
                    try:
                        self.fusion = plan_fusion(tape.records, values, self.leaves,
                                                  output, self.guards)
                    except Exception:   # not a user's error: the replay does without
                        self.fusion = None
        kind, output = self.output
        return output if kind == "constant" else box_type(values[output], output, tape)

    def run_fused(self, values):
        """The fused program's ``(value, cotangents by leaf)``, or None: not compiled
        yet (it is after ``FUSE_AFTER`` short-path runs), or it handed the call back (a
        non-finite value, an error: the replay will meet it)."""
        fusion = self.fusion
        if fusion.function is None:
            self.short_runs += 1
            if self.short_runs < self.FUSE_AFTER:
                return None
            try:
                fusion.compile()
            except Exception:           # not a user's error: the replay does without
                self.fusion = None
                return None
        try:
            return fusion(values)
        except Exception:
            return None

    def gradients(self, tape, seeds):
        """The backward pass of a run: cotangents by slot."""
        if tape.residuals is None:      # an interpreted run: the tape has its records
            return backward(tape, seeds)
        return self.backward(tape.values, tape.residuals, seeds)

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


def compile_program(tape, output, box_type, arrays, free):
    """The :class:`Program` of a finished trace, or None if it cannot be replayed."""
    if not tape.replayable:
        return None
    leaves = len(tape.values) - len(tape.records)
    if any(record[0] != leaves + k for k, record in enumerate(tape.records)):
        return None                     # slots not in record order: nothing to rely on
    return Program(tape, output, box_type, arrays, free)


def _steps(records, guards):
    """One closure per record and guard, in trace order: ``step(tape, values,
    records)`` appends the record's value and its new record."""
    steps = []
    guards = list(guards)
    for k, record in enumerate(records):
        while guards and guards[0][0] == k:
            steps.append(_checking(guards.pop(0)[1]))
        steps.append(_linear_step(*record) if len(record) == 7 else _record_step(*record))
    steps += [_checking(check) for _, check in guards]
    return steps


def _checking(check):
    def step(tape, values, records):
        check(values)
    return step


def _bound(argnums, parents, others, saved):
    """``(constants, positions)``: the arguments with traced ones blanked, and
    ``(position, slot)`` of each traced one."""
    positions = tuple(zip(argnums, parents)) + others
    constants = list(saved)
    for i, _ in positions:
        constants[i] = None             # drop the traced value: only its slot matters
    return constants, positions


def _record_step(out_slot, parents, argnums, vjps, ans, saved, kwargs, func, others):
    constants, positions = _bound(argnums, parents, others, saved)
    rerun = isinstance(func, Rerun)

    def step(tape, values, records):
        args = constants.copy()
        for i, slot in positions:
            args[i] = values[slot]
        if rerun:
            result, fresh_vjps = func(tape, args, parents)
        else:
            result = func(*args, **kwargs)
            fresh_vjps = vjps
        values.append(result)
        records.append((out_slot, parents, argnums, fresh_vjps, result, tuple(args), kwargs,
                        func, others))
    return step


def _linear_step(out_slot, parents, partials, op, saved, partials_of, argnums):
    (x, y), positions = _bound(argnums, parents, (), saved)
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
        records.append((out_slot, parents, local, op, (a, b), partials_of, argnums))
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
            raise GuardFailed
    return check


def _bind(arg, values):
    if type(arg) is Slot:
        return values[arg.slot]
    if type(arg) in (list, tuple):
        return type(arg)(_bind(item, values) for item in arg)
    return arg


# --------------------------------------------------------------------- the cache

class Programs:
    """The programs of one ``value_and_grad`` function, by signature."""

    MAX_SIGNATURES = 32

    def __init__(self, f, box_type):
        self.free_variables = free_variables(f)
        self.box_type = box_type
        self.entries = {}       # signature key -> _Entry, oldest first

    def lookup(self, args, kwargs, differentiated):
        """The :class:`Call` for these arguments (``differentiated``: a bool per
        argument), or None if they cannot be replayed."""
        try:
            key, arrays = signature(args, kwargs, differentiated)
            entry = self.entries.get(key)
        except (Unreplayable, TypeError):       # TypeError: an unhashable dict key
            return None
        if entry is None:
            if len(self.entries) >= self.MAX_SIGNATURES:
                del self.entries[next(iter(self.entries))]
            entry = self.entries[key] = _Entry()
        return Call(self, entry, arrays)


    def replay_short(self, args, differentiated, ranks, seed_for):
        """The common call on a short path: no keyword arguments, a program already
        generated (or fused), differentiated arguments of arrays and float scalars
        (alone or in tuples, lists, dicts).  ``(value, cotangents by leaf, leaves,
        structures)`` (per differentiated argument ``(treedef or None for a lone leaf,
        number of leaves)``), or None: the caller takes the general path, which also
        deals with whatever failed here.  ``seed_for``: the output's type -> the
        backward pass's seed; ``ranks``: per differentiated argument in argnums' order,
        its rank among them in argument order."""
        trees = []
        try:
            key, arrays = signature(args, None, differentiated, trees)
            entry = self.entries.get(key)
        except (Unreplayable, TypeError):
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
        if program.fusion is not None:
            fused = program.run_fused(values)
            if fused is not None:
                entry.replays += 1
                return fused + (values, structures)
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
        seed = seed_for.get(type(values[output]))
        if seed is None:
            return None
        entry.replays += 1
        return (values[output], program.backward(values, residuals, ((output, seed),)),
                values, structures)


# Set by dualbcast.rules.fused: (records, values, leaves, output, guards) -> a fusion
# of the program into one Numba function, or None.
plan_fusion = None

RECORD_FROM_CALL = 2     # the call with a signature whose trace is kept for replays


class _Entry:
    __slots__ = ("program", "traces", "replays", "failures", "replayable")

    def __init__(self):
        self.program = None
        self.traces = 0
        self.replays = 0
        self.failures = 0
        self.replayable = True      # False once a trace did what a replay cannot redo

    @property
    def wanted(self):
        # Recorded from the second call with a signature on (a function called once,
        # db.grad(f)(x), pays nothing for replay), unless control flow changes on most
        # calls (a branch on a value that keeps changing): every replay would fail
        # after its checks.
        return self.traces >= RECORD_FROM_CALL - 1 and self.replayable and \
            self.failures <= 2 * self.replays + 4


class Call:
    """One call's arguments against its signature's entry (and the entry's program as
    the call found it: another thread may replace it meanwhile)."""

    __slots__ = ("programs", "entry", "arrays", "program")

    def __init__(self, programs, entry, arrays):
        self.programs = programs
        self.entry = entry
        self.arrays = arrays
        self.program = entry.program

    @property
    def wanted(self):
        return self.entry.wanted

    def run(self, tape):
        """The replay's output on ``tape``; :class:`GuardFailed` if it would differ.

        An error the trace did not meet also means tracing again: ``f`` may catch it
        (``try: 1.0 / x``), or run the operation under other NumPy error settings —
        which is also why a replay raises on floating-point errors NumPy would only
        warn about: the trace that follows warns (or raises) as ``f`` says."""
        errors = raise_float_errors()
        try:
            result = self.program.run(tape, self.arrays, self.programs.box_type,
                                      self.programs.free_variables)
        except Exception:
            self.entry.failures += 1
            self.entry.program = None
            raise GuardFailed from None
        finally:
            restore_float_errors(errors)
        self.entry.replays += 1
        return result

    def gradients(self, tape, seeds):
        """The backward pass of :meth:`run`."""
        return self.program.gradients(tape, seeds)

    def tracing(self):
        """What a trace's program is checked against later, taken before ``f`` runs
        (``f`` may write into an argument): the function's free variables and copies
        of the non-differentiated argument arrays."""
        return (self.programs.free_variables(),
                [np.array(a, copy=True) for a in self.arrays])

    def traced(self):
        """A trace ran without being recorded."""
        self.entry.traces += 1

    def keep(self, tape, output, before):
        """Compile and keep the program ``tape`` traced; ``before``: :meth:`tracing`."""
        free, arrays = before
        program = compile_program(tape, output, self.programs.box_type, arrays, free)
        self.entry.traces += 1
        self.entry.program = program
        self.entry.replayable = program is not None
