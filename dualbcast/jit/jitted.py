"""``jit``: a ``grad``/``value_and_grad`` function that records its program once per
signature and replays it, and the policy that decides when.

Per signature (:mod:`.signature`) a jitted function keeps an entry: the program its
last recorded trace made (:mod:`.program`), and counts of traces, replays and guard
failures.  The first call with a signature traces and records; later calls replay,
checking first what the signature cannot hold (the free variables of ``f``, argument
arrays' contents, the constants the records keep) and, on the way, every guard; a
replay that would differ from a trace gives way to a trace, which records again.
"""
import functools
from typing import Callable

import numpy as np

from ..core.api import GradientFunction
from ..core.pytree import unflatten
from ..core.tape import (Tape, backward, raise_float_errors, restore_float_errors,
                         underflow_ignored)
from ..core.trace import (SEED_FOR, ArgumentPositions, gradient_like, leaf_gradients,
                          trace_value, tracing_state, value_and_gradient)
from .compiled import FusedFunctions
from ..core.api import value_and_grad
from .entries import Signatures
from .out import written_into
from .program import GuardFailed, compile_program
from .recorder import ProgramRecorder
from .signature import Unreplayable, signature
from .staged import StagedPrograms


def jit(fn: Callable) -> Callable:
    """Record the program of ``fn`` and replay it: the result is called as ``fn`` is,
    and gives what ``fn`` gives.  The contract is ``jax.jit``'s: ``fn`` computes from
    its arguments.

    **Arguments are inputs.**  Float and integer arrays and floats, alone or in tuples,
    lists and dicts, differentiated or not, are the program's inputs, keyed by their
    structure, shapes, dtypes and strides, never by value: a call with new values
    replays, without tracing or compiling again.  Ints, bools, strings and other
    hashable values are static (keyed by value: they decide shapes and branches); a
    bool array is a constant, compared by value on every call (a mask decides the
    shape of what it selects).  Inside ``fn`` an input is a traced value (as under
    ``jax.jit``: ``isinstance(c, float)`` is False there).  The first call with a
    signature traces ``fn`` and records its operations; later calls run the records.

    ``fn`` made by :func:`dualbcast.grad` or :func:`dualbcast.value_and_grad` (any
    ``argnums``, ``out=``) whose only inputs are its differentiated arguments: the
    trace's records are replayed on the new values, the bits tracing gives.  The
    second call writes them out as Python code, and the third compiles a program of
    kernel sums and scalar arithmetic into one Numba function (about a second, once:
    it is cached on disk beside the kernels' loops), which takes the program's sizes
    and constants as arguments, so that a program traced for another shape runs the
    one already compiled.  Numba keeps what it compiles until the process ends, so a
    jitted function fuses at most 8 different programs; it replays the others as
    generated Python code, the same bits, and says so once on the ``"dualbcast"``
    logger.  With other inputs besides (data, index arrays, a temperature), the whole
    gradient is staged, as below: equal to the eager one to rounding.

    An integer array an operation cannot take as an input (an index into a plain
    array, ``np.take``'s rule) makes integer arrays constants of that function,
    compared on every call.

    Any other function (one that calls :func:`dualbcast.jvp`, ``grad``, ``hessian``,
    ``jacobian`` inside -- a Hessian-vector product -- or no derivative at all), and a
    gradient with other inputs: traced once per signature on a staging trace,
    recording every operation on its inputs, those of the derivatives computed inside
    too (their tangents and backward passes; a kernel's loop as one call); later calls
    run the records as generated Python code.  Values, jvps and Hessian-vector
    products come out bit for bit as the eager call's; a gradient computed inside
    runs its backward pass as recorded operations, which may add cotangents in another
    order than the eager pass: equal to rounding.  A staged replay computes a repeated
    operation once, leaves out unused views, and runs float64 elementwise operations
    over 2048 elements or more -- arithmetic, square roots, NaN-safe products, slices
    and their cotangents, ``np.where`` by a mask -- as compiled loops (one per run of
    operations over one shape, cached on disk), with NumPy's bits.  Called inside a
    trace (``db.grad(db.jit(f))``), ``f`` runs as it is.

    What a replay checks, it checks on every call, and traces again when anything
    differs:

    - control flow on traced values (``if x > 0``, ``bool(x)``, masks, ``np.argmax``,
      integer casts, the length of ``np.repeat(x, counts)``): the outcome must be the
      trace's;
    - the globals, closure variables and default arguments ``f``'s own code names
      must be the same objects (``lambda x: loss(x, data[i])`` with ``i`` rebound
      traces again; for a ``functools.partial``, those of the function it wraps and
      its bound arguments), and the arrays among them must hold what they held (a
      closed-over array above 256 KiB is compared on every replay, or makes the
      program eager where no record copied it; ``explain()`` names it: pass it as
      an argument);
    - a kernel called on traced values must read what it read (its globals, closure
      variables, module attributes, helpers: see ``FastBroadcast.current_generation``);
    - an error or a floating-point warning met by a replay (an underflow too, unless
      NumPy's settings ignore it) means tracing again (``f`` may catch it, or warn
      as NumPy's settings say); a program that caught an error, printed a traced
      value or called ``stop_gradient`` (in a gradient function) runs eagerly; so do
      a call with an argument a signature cannot hold (an object with state, a bound
      method) and a program with an operation that cannot be recorded (a NumPy
      function with no gradient rule on an input).

    It says what it did: each trace, failed replay, fallback and refusal to fuse is
    logged on the ``"dualbcast"`` logger with its reason; ``jitted.explain()`` reports
    per signature the traces, replays, eager calls, whether the program is fused and
    why a call was not replayed; a jitted function that ran eagerly on all of its
    first 10 calls warns once (``UserWarning``).

    What it cannot see, and replays regardless: an attribute or container entry
    changed (``cfg.scale``, ``params["w"]``), a name rebound inside a helper ``f``
    calls, an array changed in place that only a derived value was computed from, a
    random number drawn inside ``f``, any other side effect (it happens at the trace
    only).  Pass such values as arguments, or leave the function eager.

    >>> import numpy as np, dualbcast as db
    >>> step = db.jit(db.value_and_grad(lambda x, data: np.sum(x ** 2 * data)))
    >>> [step(np.array([1.0, 2.0]), np.array([d, 1.0]))[1] for d in (1.0, 2.0, 3.0)][-1]
    array([6., 4.])
    >>> hvp = db.jit(lambda x, v: db.jvp(db.grad(lambda x: np.sum(x ** 3)), (x,), (v,))[1])
    >>> [hvp(np.array([1.0, 2.0]), np.array([1.0, 0.0])) for _ in range(3)][-1]
    array([6., 0.])
    """
    if getattr(fn, "__dualbcast_jitted__", False):
        return fn
    spec = getattr(fn, "__dualbcast_gradient__", None)
    if type(spec) is GradientFunction:
        return _jitted(spec)
    if not callable(fn):
        raise TypeError(f"dualbcast.jit takes a function, not {fn!r}")
    return _staged(fn)


def _staged(f):
    programs = StagedPrograms(f)

    @functools.wraps(f)
    def jitted(*args, **kwargs):
        return programs(args, kwargs)
    return _marked(jitted, programs)


def _marked(jitted, programs):
    setattr(jitted, "__dualbcast_jitted__", True)
    jitted.explain = programs.explain
    return jitted


def _jitted(spec):
    f, argnums, out, with_value = spec
    positions_for = ArgumentPositions(argnums, f)      # argnums checked now
    single = positions_for.single
    programs = Programs(f)
    # Calls whose other arguments are inputs too (arrays, floats): the gradient staged
    # with them
    staged = StagedGradients(f, argnums, out, single)
    short = out is None         # the short path of Programs.replay_short

    by_count = positions_for.by_count
    thread = tracing_state()

    @functools.wraps(f)
    def jitted(*args, **kwargs):
        # (the lookups of positions_for and current_tape inlined: a tenth of a call)
        known = by_count.get(len(args))
        positions, differentiated, ranks = known or positions_for(len(args))
        if len(positions) < len(args) and any(map(staged.other_input, args, differentiated)):
            result = staged(args, kwargs)
            return result if with_value else result[1]
        if short and not kwargs and getattr(thread, "tape", None) is None:
            replayed = programs.replay_short(args, differentiated, ranks)
            if replayed is not None:
                value, grads, leaves, structures = replayed
                gradient = _short_gradients(grads, leaves, structures, single)
                return (value, gradient) if with_value else gradient
        result = programs.call(args, kwargs, positions, differentiated, out, single)
        return result if with_value else result[1]
    setattr(jitted, "__dualbcast_gradient__", spec)
    return _marked(jitted, _Both(programs, staged))


class _Both:
    """The report of a jitted gradient: its programs', and its staged ones' if any."""

    def __init__(self, programs, staged):
        self.programs, self.staged = programs, staged

    def explain(self):
        staged = self.staged.programs
        if not staged.entries and not staged.unkeyed:
            return self.programs.explain()
        if not self.programs.entries and not self.programs.unkeyed:
            return staged.explain()
        return self.programs.explain() + "\n" + staged.explain()


class StagedGradients:
    """The calls of a jitted gradient whose other arguments are inputs too (arrays,
    floats: data, masks of indices, time steps): the whole ``value_and_grad`` call is
    staged (:mod:`.staged`), its backward pass recorded as operations, so that those
    arguments are inputs of the program, as the differentiated ones are, never
    compared by value.  The gradient is then equal to the eager one to rounding (the
    backward pass may add cotangents in another order)."""

    def __init__(self, f, argnums, out, single):
        self.f, self.argnums, self.out, self.single = f, argnums, out, single
        self.programs = StagedPrograms(value_and_grad(f, argnums),
                                       "value_and_grad with other inputs, staged", watched=f)

    def other_input(self, arg, differentiated):
        """Whether ``arg``, an argument not differentiated, is an input."""
        return not differentiated and self.programs.takes_as_input(arg)

    def __call__(self, args, kwargs):
        if self.out is not None and getattr(tracing_state(), "tape", None) is not None:
            return value_and_grad(self.f, self.argnums, out=self.out)(*args, **kwargs)
        value, gradient = self.programs(args, kwargs)
        if self.out is not None:
            gradient = written_into(self.out, gradient, self.single, args)
        return value, gradient


def _short_gradients(grads, leaves, structures, single):
    """The gradients of a replay on the short path, rebuilt per argument."""
    if single and structures[0][0] is None:     # one array or float: the common case
        return gradient_like(leaves[0], grads[0], set())
    gradients = leaf_gradients(leaves, grads[:len(leaves)], set())
    results, start = [], 0
    for tree, count in structures:
        results.append(gradients[start] if tree is None
                       else unflatten(tree, gradients[start:start + count]))
        start += count
    return results[0] if single else tuple(results)


class Programs(Signatures):
    """The programs of one jitted gradient, by signature."""

    def __init__(self, f):
        super().__init__(f, "value_and_grad")
        self.fused_functions = FusedFunctions(self.name)

    def call(self, args, kwargs, positions, differentiated, out, single):
        """One value and gradient: replayed if it can be, else traced (and recorded)."""
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
        return call.trace(args, kwargs, positions, out, single, why)

    def replay_short(self, args, differentiated, ranks):
        """The common call on a short path: no keyword arguments, a program already
        generated (or fused), differentiated arguments of arrays and float scalars
        (alone or in tuples, lists, dicts).  ``(value, cotangents by leaf, leaves,
        structures)`` (per differentiated argument ``(treedef or None for a lone leaf,
        number of leaves)``), or None: the caller takes the general path, which also
        deals with whatever failed here.  ``ranks``: per differentiated argument in
        argnums' order, its rank among them in argument order."""
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
        if program.fusion is not None and underflow_ignored():
            # (the fused code cannot see an underflow the caller wants reported)
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
        seed = SEED_FOR.get(type(values[output]))
        if seed is None:
            return None
        entry.replays += 1
        return (values[output], program.backward(values, residuals, ((output, seed),)),
                values, structures)


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
            program = compile_program(tape, recorder, outputs[0], arrays, free,
                                      programs.fused_functions)
            programs.traced(entry, why, recorder)
            entry.program = program
            if program is None:
                programs.not_recorded(entry, recorder.why or "its records are out of order")
            return backward(tape, seeds)

        return value_and_gradient(f, args, positions, out, single, forward, gradients_of,
                                  recorder=recorder)
