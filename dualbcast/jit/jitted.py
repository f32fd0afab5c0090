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
from .program import Entry, GuardFailed, compile_program
from .recorder import COPY_LIMIT, ProgramRecorder
from .signature import Unreplayable, free_variables, signature
from .staged import StagedPrograms


def jit(fn: Callable) -> Callable:
    """Record the program of ``fn`` and replay it: the result is called as ``fn`` is,
    and gives what ``fn`` gives.

    ``fn`` made by :func:`dualbcast.grad` or :func:`dualbcast.value_and_grad` (with any
    ``argnums`` and ``out=``): the first call with a given signature — the
    differentiated arguments' structure, shapes, dtypes and strides, the other
    arguments' values — traces ``f`` and records its operations; later calls replay
    them on the new values without running ``f``'s Python code.  The program takes its
    final form early: the second call writes it out as Python code, and the third
    compiles a program of kernel sums and scalar arithmetic into one Numba function
    (about a second, once: it is cached on disk beside the kernels' loops).  That
    function takes the program's sizes and constants as arguments: a program traced
    for another shape, or another value of a non-differentiated float, runs the one
    already compiled.  Numba keeps what it compiles until the process ends, so a
    jitted function fuses at most 8 different programs (a loop whose length is an
    argument makes one per length); it replays the others as generated Python code,
    the same bits, and says so once on the ``"dualbcast"`` logger.

    Any other function (one that calls :func:`dualbcast.jvp`, ``grad``, ``hessian``,
    ``jacobian`` inside — a Hessian-vector product — or no derivative at all): its
    float arguments (arrays and scalars, alone or in tuples, lists and dicts) are its
    inputs, keyed by shape and dtype; every other argument by its value.  The first call
    with a signature traces it once, recording every operation on its inputs, those of
    the derivatives computed inside too (their tangents and backward passes; a
    kernel's second-order loop as one call); later calls run the records as generated
    Python code.  Values, jvps and Hessian-vector products come out bit for bit as the
    eager call's; a gradient computed inside runs its backward pass as recorded
    operations, which may add cotangents in another order than the eager pass: equal
    to rounding.  Called inside a trace (``db.grad(db.jit(f))``), ``f`` runs as it is;
    an operation that cannot be recorded (a NumPy function with no gradient rule on
    an input) makes the signature eager.

    The contract is ``jax.jit``'s: ``f`` computes from its arguments.  What a replay
    checks, it checks on every call, and traces again when anything differs:

    - control flow on traced values (``if x > 0``, ``bool(x)``, masks, ``np.argmax``,
      integer casts): the outcome must be the trace's;
    - the globals, closure variables and default arguments ``f``'s own code names
      must be the same objects (``lambda x: loss(x, data[i])`` with ``i`` rebound
      traces again; for a ``functools.partial``, those of the function it wraps and
      its bound arguments);
    - a kernel called on traced values must read what it read (its globals, closure
      variables, module attributes, helpers: see ``FastBroadcast.current_generation``);
    - argument arrays not differentiated, and every constant array or list an
      operation or a kernel used, must hold what they held (they are copied and
      compared: a call whose non-differentiated argument arrays, or any one such
      constant, hold more than 256 KiB is run eagerly instead, never recorded);
    - an error or a floating-point warning met by a replay (an underflow too, unless
      NumPy's settings ignore it) means tracing again (``f`` may catch it, or warn
      as NumPy's settings say); a program that caught an error, printed a traced
      value or called ``stop_gradient`` (in a gradient function) is traced on every
      call; so is a call with an argument a signature cannot compare (an object
      with state, a bound method).

    What it cannot see, and replays regardless: an attribute or container entry
    changed (``cfg.scale``, ``params["w"]``), a name rebound inside a helper ``f``
    calls, an array changed in place that only a derived value was computed from, a
    random number drawn inside ``f``, any other side effect (it happens at the trace
    only).  Pass such values as arguments, or leave the function eager.

    >>> import numpy as np, dualbcast as db
    >>> step = db.jit(db.value_and_grad(lambda x: np.sum(x ** 2)))
    >>> [step(np.array([1.0, 2.0]))[1] for _ in range(3)][-1]
    array([2., 4.])
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
    setattr(jitted, "__dualbcast_jitted__", True)
    return jitted


def _jitted(spec):
    f, argnums, out, with_value = spec
    positions_for = ArgumentPositions(argnums, f)      # argnums checked now
    single = positions_for.single
    programs = Programs(f)
    short = out is None         # the short path of Programs.replay_short

    by_count = positions_for.by_count
    thread = tracing_state()

    @functools.wraps(f)
    def jitted(*args, **kwargs):
        # (the lookups of positions_for and current_tape inlined: a tenth of a call)
        known = by_count.get(len(args))
        positions, differentiated, ranks = known or positions_for(len(args))
        if short and not kwargs and getattr(thread, "tape", None) is None:
            replayed = programs.replay_short(args, differentiated, ranks)
            if replayed is not None:
                value, grads, leaves, structures = replayed
                gradient = _short_gradients(grads, leaves, structures, single)
                return (value, gradient) if with_value else gradient
        result = programs.call(args, kwargs, positions, differentiated, out, single)
        return result if with_value else result[1]
    setattr(jitted, "__dualbcast_gradient__", spec)
    setattr(jitted, "__dualbcast_jitted__", True)
    return jitted


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


class Programs:
    """The programs of one jitted function, by signature."""

    def __init__(self, f):
        self.f = f
        self.free_variables = free_variables(f)
        self.entries = {}       # signature key -> program.Entry, oldest first
        self.fused_functions = FusedFunctions(getattr(f, "__qualname__", repr(f)))

    def call(self, args, kwargs, positions, differentiated, out, single):
        """One value and gradient: replayed if it can be, else traced (and recorded)."""
        call = self.lookup(args, kwargs, differentiated)
        if call is not None and call.program is not None:
            try:
                return call.replay(args, positions, out, single)
            except GuardFailed:
                pass
        if call is None:        # an argument no signature can compare: eager
            return value_and_gradient(self.f, args, positions, out, single,
                                      trace_value(self.f, kwargs))
        return call.trace(args, kwargs, positions, out, single)

    def lookup(self, args, kwargs, differentiated):
        """The :class:`Call` for these arguments (``differentiated``: a bool per
        argument), or None if they cannot be replayed."""
        try:
            key, arrays = signature(args, kwargs, differentiated)
            entry = Entry.of(self.entries, key)
        except (Unreplayable, TypeError):       # TypeError: an unhashable dict key
            return None
        return Call(self, entry, arrays)

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
            except Exception:
                self.entry.failures += 1
                self.entry.program = None
                raise GuardFailed from None
            finally:
                restore_float_errors(errors)
            self.entry.replays += 1
            residuals.append(kept)
            return output

        return value_and_gradient(self.programs.f, args, positions, out, single, forward,
                                  lambda tape, seeds: program.gradients(tape, residuals[0],
                                                                        seeds),
                                  rebuild=False)

    def trace(self, args, kwargs, positions, out, single):
        """The value and gradient, traced; the trace's program kept for replays."""
        entry, f = self.entry, self.programs.f
        if entry.wanted and sum(a.nbytes for a in self.arrays) > COPY_LIMIT:
            # Arguments this large would be copied and compared on every replay (a
            # 400 MB one: 400 MB and ~0.1 s a call): more than replaying saves.
            entry.replayable = False
        if not entry.wanted:
            entry.traces += 1
            return value_and_gradient(f, args, positions, out, single, trace_value(f, kwargs))
        recorder = ProgramRecorder()
        # What the program is checked against later, taken before f runs (f may write
        # into an argument): its free variables and the argument arrays' contents.
        free = self.programs.free_variables()
        arrays = [np.array(a, copy=True) for a in self.arrays]
        outputs = []

        def forward(tape, traced_args):
            outputs.append(f(*traced_args, **kwargs))
            return outputs[0]

        def gradients_of(tape, seeds):
            program = compile_program(tape, recorder, outputs[0], arrays, free,
                                      self.programs.fused_functions)
            entry.traces += 1
            entry.program = program
            entry.replayable = program is not None
            return backward(tape, seeds)

        return value_and_gradient(f, args, positions, out, single, forward, gradients_of,
                                  recorder=recorder)
