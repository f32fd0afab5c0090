"""Staging: a trace that records a program and differentiates nothing.

``dualbcast.jit`` of a function that is not a ``grad`` (one that calls ``jvp``,
``grad``, ``hessian`` inside, or no derivative at all) traces it once on a staging
tape, the outermost trace (JAX's jaxpr trace): every operation on values computed from
the arguments is recorded there, and so are those of the traces nested in it, since
they compute on its values -- a ``jvp``'s tangents, a ``grad``'s backward pass run as
traced operations.  The staging tape's records are then the whole program, ready to
be run again.

Rules record on a staging tape as on any other (their vjps are never called).  A rule
that computes several outputs in one go (a kernel's loop giving a value, partials and
their tangents) stages the computation as one record with :func:`staged_call`.
"""
import operator

from .box import Box, elementwise_constant, keep, record
from .tape import Tape, Traced, escape, raised


class StagingTape(Tape):
    """The trace of ``dualbcast.jit``: it records the program, differentiating nothing.
    Integer arrays may be its inputs (indices); a constant computed from its values
    that a replay can compute again (an index, a mask) is recorded, not checked; and
    ``stop_gradient`` has nothing to stop."""

    __slots__ = ()
    describe = "dualbcast.jit trace"
    takes_index_inputs = True

    def takes_lazy_arrays(self):
        return False

    def left_as_constant(self, func, args, values, kwargs, result, vjps=None):
        if vjps is None and not elementwise_constant(func, args, kwargs, result):
            return escape(self, func, args, kwargs, result)    # (a branch: checked)
        saved = tuple(value if type(arg) is Box else keep(self, value)
                      for arg, value in zip(args, values))
        others = tuple((i, arg.slot) for i, arg in enumerate(args)
                       if type(arg) is Box and arg.tape is self)
        return record(self, result, (), (), vjps or (None,) * len(args), saved, kwargs,
                      func, others)

    def stop_gradient(self, box):
        return box


def staging_only(values):
    """Whether the boxes among ``values`` (there may be none) all belong to a staging
    trace: computing on them records the plain computation there."""
    for value in values:
        if type(value) is Box:
            if type(value.tape) is not StagingTape:
                return False
        elif isinstance(value, Traced):     # (a vmap's)
            return False
    return True


def staged_call(func, args, outputs=None):
    """``func(*args)`` on the values of ``args``, among them boxes of a staging trace
    (see :func:`staging_only`), recorded there as one record.  ``outputs`` None: the
    result, boxed; else the result is a tuple of that many values, returned as a tuple
    of boxes (each read out of the tuple by a record of its own)."""
    tape = next(arg.tape for arg in args if type(arg) is Box)
    values = [arg.value if type(arg) is Box else arg for arg in args]
    parents = tuple(arg.slot for arg in args if type(arg) is Box)
    argnums = tuple(i for i, arg in enumerate(args) if type(arg) is Box)
    saved = tuple(value if type(arg) is Box else keep(tape, value)
                  for arg, value in zip(args, values))
    try:
        result = func(*values)
    except Exception:
        raised(tape)
        raise
    boxed = record(tape, result, parents, argnums, (None,) * len(args), saved, {}, func)
    if outputs is None:
        return boxed
    if type(result) is not tuple or len(result) != outputs:
        raise RuntimeError(f"dualbcast internal error: {func!r} gave {type(result).__name__} "
                           f"where a tuple of {outputs} values was expected; please report it")
    return tuple(record(tape, item, (boxed.slot,), (0,), (None, None), (result, k), {},
                        operator.getitem)
                 for k, item in enumerate(result))
