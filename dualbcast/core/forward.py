"""Forward mode: a tape swept as it is written.

A forward-mode trace (``jvp``) is a :class:`.tape.Tape` like any other -- boxes,
levels, the same rules recording the same records -- except that each record is
consumed as it is appended: its output's tangent is computed from its parents'
tangents at once, and the record is dropped.  So every rule that can be recorded can
be pushed forward, with no second set of tracing code, and the tangents of a program
cost one pass beside its values.

A record's tangent comes from, in order:

- a :class:`.tape.LinearRecord`: its partials times the parents' tangents;
- the jvp of its function's :class:`.registry.Primitive` (``jvp=``, or ``linear=True``:
  the function of the tangents), where the function may be a primitive of its own (an
  object a rule makes per call, with its rules);
- an elementwise rule (a primitive's ``diagonal``, the ufuncs): the vjp is the
  cotangent times a local derivative, so the same vjp applied to the tangent is the
  tangent;
- any other rule, by transposition: the vjp is linear in its cotangent ``g``, so the
  tangent ``J t`` is the gradient of ``<vjp(g), t>`` with respect to ``g``: a reverse
  pass over the vjp, on a tape of its own (correct for every rule whose vjp is
  differentiable, which second order needs anyway; slower than a jvp of its own).

Products of tangents and partials are the NaN-safe product of the rules (a zero
tangent meeting an infinite partial contributes 0, design §4).
"""
import numpy as np

from .operators import OPERATOR_UFUNCS
from .registry import BACKWARD_OPERATIONS, NO_RULES, primitive_of
from .box import Box
from .stack import enter_trace, exit_trace
from .tape import (LinearRecord, SparseCotangent, Tape, backward, ignore_float_errors,
                   restore_float_errors)


class ForwardTape(Tape):
    """A forward-mode trace (``jvp``): ``tangents``, the tangent of each slot that has
    one, by slot, computed as each record is appended (its ``records`` compute, not
    keep: a :class:`TangentSweep`)."""

    __slots__ = ("tangents",)
    describe = "jvp"

    def __init__(self, single_use, recorder=None, level=1):
        super().__init__(single_use, recorder, level)
        self.tangents = {}
        self.records = TangentSweep(self)

    def takes_lazy_arrays(self):
        return False


def forward_result(tape, value, tangent):
    """``value``, computed by a rule that found its tangent itself (a kernel's tangent
    loop), as a box of the forward-mode ``tape``; ``tangent`` None: zero."""
    slot = len(tape.values)
    tape.values.append(value)
    if tangent is not None:
        tape.tangents[slot] = _like(tangent, value)
    return Box(value, slot, tape)


class TangentSweep:
    """What a forward-mode tape has for ``records``: ``append(record)`` computes the
    tangent of the record's output (when a parent has one) and keeps nothing."""

    # The tape's tangents and values, not the tape: a tape holding its records and
    # records holding the tape would be a reference cycle, and every jvp's values (a
    # Hessian-vector product's arrays) would wait for the garbage collector -- fresh
    # pages for each call's temporaries meanwhile (a 256 x 256 HVP: 2.2 ms a call, one
    # call in three 10-60 ms).
    __slots__ = ("tangents", "values")

    def __init__(self, tape):
        self.tangents, self.values = tape.tangents, tape.values

    def append(self, record):
        tangents = self.tangents
        parent_tangents = [tangents.get(slot) for slot in record.parents]
        if not any(t is not None for t in parent_tangents):
            return
        if type(record) is LinearRecord:   # (scalars: Python's operators warn of nothing)
            tangent = tangent_of(record, parent_tangents, self.values[record.out])
        else:
            errors = ignore_float_errors()     # (rules divide by zero on purpose: d log 0)
            try:
                tangent = tangent_of(record, parent_tangents, self.values[record.out])
            finally:
                restore_float_errors(errors)
        if tangent is not None:
            tangents[record.out] = tangent

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())

    def __reversed__(self):
        return iter(())


def tangent_of(record, parent_tangents, ans):
    """The tangent of ``record``'s output, given its parents' (None: zero)."""
    product = BACKWARD_OPERATIONS.product
    if type(record) is LinearRecord:
        total = None
        for partial, t in zip(record.partials, parent_tangents):
            if t is not None:
                total = _plus(total, product(t, partial))
        return _like(total, ans)
    func = record.func
    by_position = [None] * len(record.args)
    for i, t in zip(record.argnums, parent_tangents):
        by_position[i] = t
    rules = primitive_of(func) or NO_RULES
    if rules.linear:
        tangent = _linear(record, by_position)
    elif rules.jvp is not None:
        tangent = rules.jvp(by_position, record.ans, *record.args, **record.kwargs)
    elif (primitive_of(OPERATOR_UFUNCS.get(func, func)) or NO_RULES).diagonal:
        # (an elementwise rule; x * y records operator.mul)
        tangent = None
        for i, t in enumerate(by_position):
            if t is not None:
                tangent = _plus(tangent, record.vjps[i](t, record.ans, *record.args,
                                                        **record.kwargs)
                                if _same_shape(t, ans) else
                                _diagonal_broadcast(record, i, t, ans))
    else:
        tangent = None
        for i, t in enumerate(by_position):
            if t is not None:
                tangent = _plus(tangent, transposed(record, i, t))
    return _like(tangent, ans)


def _same_shape(t, ans):
    return getattr(t, "shape", ()) == getattr(ans, "shape", ())


def _diagonal_broadcast(record, i, t, ans):
    """An elementwise rule's vjp applied to a tangent smaller than the output: the
    tangent and the arguments broadcast to the output's shape first, so that the vjp
    sums nothing back (its unbroadcast is then the identity)."""
    shape = getattr(ans, "shape", ())
    args = [np.broadcast_to(arg, shape) if _is_array_like(arg) else arg
            for arg in record.args]
    return record.vjps[i](np.broadcast_to(t, shape), record.ans, *args, **record.kwargs)


def _is_array_like(x):
    return hasattr(x, "shape") or isinstance(x, (float, int))


def _linear(record, by_position):
    """A linear function's tangent: the function of its arguments' tangents (zeros for
    a constant among its differentiable arguments)."""
    args = list(record.args)
    for i, vjp in enumerate(record.vjps):
        if vjp is None:
            continue                # a shape, an index: kept
        t = by_position[i]
        args[i] = t if t is not None else np.zeros(np.shape(args[i]), _dtype(args[i]))
    return record.func(*args, **record.kwargs)


def transposed(record, i, t):
    """``J_i t`` for a record whose vjp for argument ``i`` is ``g -> J_i^T g``: the
    gradient with respect to ``g`` of ``<vjp(g), t>``, by a reverse pass over the vjp
    traced on a tape of its own (the vjp is linear in ``g``: where it is traced does
    not matter, so ``g`` is ones)."""
    ans = record.ans
    tape = Tape(single_use=False)
    enter_trace(tape)
    try:
        g = _leaf(tape, np.ones(np.shape(ans), _dtype(ans)) if np.ndim(ans)
                  else _dtype(ans).type(1.0))
        ct = record.vjps[i](g, ans, *record.args, **record.kwargs)
        if type(ct) is SparseCotangent:
            ct = BACKWARD_OPERATIONS.dense(ct, record.args[i])
    finally:
        exit_trace(tape)
    if getattr(ct, "tape", None) is not tape:
        return None                 # the vjp did not depend on g: a zero tangent
    return backward(tape, [(ct.slot, t)])[g.slot]


def _leaf(tape, value):
    """``value`` boxed as the first leaf of the fresh ``tape``."""
    tape.values.append(value)
    return Box(value, 0, tape)


def _dtype(x):
    dtype = getattr(x, "dtype", None)
    return np.dtype(np.float64) if dtype is None else np.dtype(dtype)


def _plus(total, term):
    if term is None:
        return total
    return term if total is None else total + term


def _like(tangent, ans):
    """``tangent`` at ``ans``'s shape (a tangent computed from a smaller argument is
    broadcast) and dtype."""
    if tangent is None:
        return None
    shape = getattr(ans, "shape", ())
    if getattr(tangent, "shape", ()) != shape:
        tangent = np.broadcast_to(tangent, shape)
    dtype = _dtype(ans)
    if _dtype(tangent) != dtype and (shape or hasattr(ans, "dtype")):
        # (a NumPy scalar's too, traced or not: its tangent computed from a float64
        # tangent would otherwise stay float64, and a jitted jvp, whose values are
        # traced, would form it otherwise than the eager one)
        tangent = tangent.astype(dtype) if hasattr(tangent, "astype") else dtype.type(tangent)
    return tangent
