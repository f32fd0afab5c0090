"""``jit``: which programs a jitted function's calls run.

A gradient (``grad``/``value_and_grad``) whose only inputs are its differentiated
arguments replays its forward records and the core's backward pass
(:mod:`.gradient`); a gradient with other inputs, and any other function, is staged
whole (:mod:`.staged`).  Either keeps one entry per signature (:mod:`.entries`,
:mod:`.signature`): the first call with a signature traces and records; later calls
replay, checking first what the signature cannot hold (:class:`.program.Assumptions`)
and, on the way, every guard; a replay that would differ from a trace gives way to a
trace, which records again.
"""
import functools
from typing import Callable

from ..core.api import GradientFunction, value_and_grad
from ..core.trace import ArgumentPositions, tracing_state
from .gradient import STAGED_INSTEAD, GradientPrograms
from .out import written_into
from .staged import StagedPrograms


def jit(fn: Callable) -> Callable:
    """Record the program of ``fn`` once per signature, and replay it on later calls.

    The result is called as ``fn`` is, and gives what ``fn`` gives.  The contract is
    ``jax.jit``'s: ``fn`` computes from its arguments.  The first call with a signature
    traces ``fn`` and records its operations; later calls with that signature run the
    records instead of ``fn``, checking on every call what could make them differ from
    a run of ``fn``, and tracing again when anything does.  Programs made of kernel sums
    and scalar arithmetic (a gradient, a Hessian-vector product) are fused into one
    compiled Numba function.

    Parameters
    ----------
    fn : callable
        The function to record: one made by :func:`dualbcast.grad` or
        :func:`dualbcast.value_and_grad` (any ``argnums``, ``out``), or any other function
        of arrays and floats (one that calls :func:`dualbcast.jvp`, ``grad``,
        ``hessian`` or ``jacobian`` inside -- a Hessian-vector product -- or no
        derivative at all).  A function ``jit`` returned is returned as it is.

    Returns
    -------
    callable
        The jitted function, called as ``fn`` is.  Its ``explain()`` method returns a
        report (a str): per signature, the traces, replays, eager calls, whether the
        program is fused, and why a call was not replayed.  Called inside a trace
        (``db.grad(db.jit(f))``), it runs ``fn`` as it is.

    Raises
    ------
    TypeError
        If ``fn`` is not callable.  The jitted function raises what ``fn`` raises: a
        replay that meets an error traces again, so the error is ``fn``'s own.

    Warns
    -----
    UserWarning
        Once, when the jitted function ran eagerly on all of its first 10 calls
        (``jit`` is doing nothing for it); the message says why.

    See Also
    --------
    dualbcast.grad, dualbcast.value_and_grad, dualbcast.jvp

    Notes
    -----
    **Arguments are inputs.**  Float and integer arrays and floats, alone or in
    tuples, lists and dicts, differentiated or not, are the program's inputs, keyed by
    their structure, shapes, dtypes and strides, never by value: a call with new
    values replays, without tracing or compiling again.  Ints, bools, strings and
    other hashable values are static (keyed by value: they decide shapes and
    branches); a bool array is a constant, compared by value on every call (a mask
    decides the shape of what it selects).  Inside ``fn`` an input is a traced value (as
    under ``jax.jit``: ``isinstance(c, float)`` is False there).  An integer array an
    operation cannot take as an input (an index into a plain array, ``np.take``'s
    rule) makes integer arrays constants of that function, compared on every call.

    **Gradients.**  For ``fn`` made by ``grad`` or ``value_and_grad`` whose only inputs
    are its differentiated arguments, the trace's records are replayed on the new
    values, giving the bits tracing gives.  The second call writes them out as Python
    code, and the third compiles a program of kernel sums and scalar arithmetic into
    one Numba function (about a second, once: it is cached on disk beside the
    kernels' loops), which takes the program's sizes and constants as arguments, so
    that a program traced for another shape runs the one already compiled.  Numba
    keeps what it compiles until the process ends, so a jitted function fuses at most
    8 different programs; it replays the others as generated Python code, the same
    bits, and says so once on the ``"dualbcast"`` logger.  With other inputs besides
    (data, index arrays, a temperature), or once a mask computed from traced values
    (``np.where(x > 0, ...)``) changed between calls (such a program checks it,
    tracing again whenever a value crosses to the mask's other side), the whole
    gradient is staged, as below: equal to the eager one to rounding.

    **Other functions are staged.**  Any other function, and a gradient with other
    inputs, is traced once per signature on a staging trace, recording every
    operation on its inputs, those of the derivatives computed inside too (their
    tangents and backward passes; a kernel's loop as one call); later calls run the
    records as generated Python code.  Values, jvps and Hessian-vector products come
    out bit for bit as the eager call's; a gradient computed inside runs its backward
    pass as recorded operations, which may add cotangents in another order than the
    eager pass: equal to rounding.  Masks computed elementwise from traced values
    (comparisons, ``np.isnan``, ``np.sign``, ``~``, ``&``, ``|``) are operations of
    the program, computed again by every replay; a branch on one (``if mask.any()``)
    is checked, as any ``bool()`` of a traced value is.  A staged replay computes a
    repeated operation once, leaves out unused views, and runs float64 elementwise
    operations over 2048 elements or more as compiled loops (one per run of
    operations over one shape, cached on disk), with NumPy's bits (its order of
    additions included): arithmetic, square roots, NaN-safe products, slices and
    their cotangents, rows gathered by index arrays and their cotangents added back,
    comparisons and masks, ``np.where`` by a mask, ``np.maximum``/``np.minimum``,
    ``np.sign``, kernel calls (their values and partials), and ``np.sum`` of their
    values over all axes, the leading or the trailing ones.  A staged program made
    only of kernel sums and their derivatives' loops, float64 scalar arithmetic and
    NaN-safe passes over the gradients they give (the Hessian-vector product of
    ``F(k.sum(x))``) runs from its first replay as one Numba function, as a
    gradient's program does, with the same bits.

    **What a replay checks**, it checks on every call, and traces again when anything
    differs:

    - control flow on traced values (``if x > 0``, ``bool(x)``, masks, ``np.argmax``,
      integer casts, the length of ``np.repeat(x, counts)``): the outcome must be the
      trace's;
    - the globals, closure variables and default arguments ``fn``'s own code names
      must be the same objects (``lambda x: loss(x, data[i])`` with ``i`` rebound
      traces again; for a ``functools.partial``, those of the function it wraps and
      its bound arguments), and the arrays among them must hold what they held (a
      closed-over array above 256 KiB is compared on every replay, or makes the
      program eager where no record copied it; ``explain()`` names it: pass it as
      an argument);
    - a kernel called on traced values must read what it read (its globals, closure
      variables, module attributes, helpers: see :func:`fast_broadcast`'s Notes);
    - an error or a floating-point warning met by a replay (an underflow too, unless
      NumPy's settings ignore it) means tracing again (``fn`` may catch it, or warn as
      NumPy's settings say).

    **What runs eagerly** (every call runs ``fn``, as without ``jit``): a program that
    caught an error, printed a traced value or called ``stop_gradient`` (in a
    gradient function); a call with an argument a signature cannot hold (an object
    with state, a bound method); a program with an operation that cannot be recorded
    (a NumPy function with no gradient rule on an input).

    **It says what it did.**  Each trace, failed replay, fallback and refusal to fuse
    is logged on the ``"dualbcast"`` logger with its reason; ``explain()`` reports it
    per signature; a jitted function that ran eagerly on all of its first 10 calls
    warns once.

    **What it cannot see, and replays regardless:** an attribute or container entry
    changed (``cfg.scale``, ``params["w"]``), a name rebound inside a helper ``fn``
    calls, an array changed in place that only a derived value was computed from, a
    random number drawn inside ``fn``, any other side effect (it happens at the trace
    only).  Pass such values as arguments, or leave the function eager.

    Examples
    --------
    A gradient with data as a second input: new data replays the same program.

    >>> import numpy as np, dualbcast as db
    >>> step = db.jit(db.value_and_grad(lambda x, data: np.sum(x ** 2 * data)))
    >>> [step(np.array([1.0, 2.0]), np.array([d, 1.0]))[1] for d in (1.0, 2.0, 3.0)][-1]
    array([6., 4.])

    A Hessian-vector product, staged:

    >>> hvp = db.jit(lambda x, v: db.jvp(db.grad(lambda x: np.sum(x ** 3)), (x,), (v,))[1])
    >>> [hvp(np.array([1.0, 2.0]), np.array([1.0, 0.0])) for _ in range(3)][-1]
    array([6., 0.])

    A branch on a traced value is checked by every replay; the other outcome traces
    again, and ``explain()`` says so:

    >>> absolute = db.jit(lambda x: x if x > 0 else -x)
    >>> [absolute(v) for v in (1.0, 2.0, -3.0)]
    [1.0, 2.0, 3.0]
    >>> print(absolute.explain())
    db.jit of <lambda> (staged): 1 signature kept
      (float):
        2 traces, 1 replay, 0 eager calls, 1 failed replay
    ...
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
    programs = GradientPrograms(f)
    # Calls whose other arguments are inputs too (arrays, floats): the gradient staged
    # with them
    staged = StagedGradients(f, argnums, out, single)
    short = out is None         # the short path of GradientPrograms.replay_short

    by_count = positions_for.by_count
    thread = tracing_state()

    @functools.wraps(f)
    def jitted(*args, **kwargs):
        # (the lookups of positions_for and current_tape inlined: a tenth of a call)
        known = by_count.get(len(args))
        positions, differentiated, ranks = known or positions_for(len(args))
        if programs.staged_instead is not None or len(positions) < len(args) \
                and any(map(staged.other_input, args, differentiated)):
            result = staged(args, kwargs)
            return result if with_value else result[1]
        if short and not kwargs and getattr(thread, "tape", None) is None:
            replayed = programs.replay_short(args, differentiated, ranks, single)
            if replayed is not None:
                return replayed if with_value else replayed[1]
        result = programs.call(args, kwargs, positions, differentiated, out, single)
        if result is STAGED_INSTEAD:            # (a mask changed: staged from now on)
            result = staged(args, kwargs)
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
        why = self.programs.staged_instead
        if why is None:
            return self.programs.explain() + "\n" + staged.explain()
        return (self.programs.explain().split("\n")[0] + f"\n  staged since {why}\n"
                + staged.explain())


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
                                       "value_and_grad, staged", watched=f)

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
