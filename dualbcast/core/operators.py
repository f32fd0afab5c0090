"""Python's arithmetic operators on boxes, and their hot path: scalar code.

``x + y`` on traced values runs the Python operator on the values, so a traced program
computes exactly what it would untraced (Python floats stay Python floats, and are
~15x faster than a ufunc call on scalars); the gradient rule is the operator's ufunc's
(:data:`OPERATOR_UFUNCS`).  Scalar code (a fold over a tuple of floats, a polynomial of
a kernel's sum) is recorded here in one step when both operands are scalars and the
ufunc has cheap local partials (``+ - *`` and ``** c``): a :class:`.tape.LinearRecord`
of the partials, whose backward pass only multiplies.  Everything else goes the general
way, through the ``general`` function the box class hands to :func:`binary`.

This module knows boxes only as ``type(self)``: the class that asks for its operators.
"""
import operator

import numpy as np

from .registry import PRIMITIVES
from .tape import LinearRecord, raised

# The ufunc whose rule each Python operator a record may name (its func or op) follows.
OPERATOR_UFUNCS = {operator.add: np.add, operator.sub: np.subtract, operator.mul: np.multiply,
                   operator.truediv: np.true_divide, operator.floordiv: np.floor_divide,
                   operator.mod: np.remainder, operator.pow: np.power,
                   operator.matmul: np.matmul, operator.neg: np.negative, abs: np.absolute}

# The scalars the one-step path takes: a constant of these types needs no snapshot
# (see box.keep), and + - * on them give a scalar.
SCALARS = frozenset({float, int, np.float64, np.float32, np.int64})

_UNRESOLVED = object()
_new = object.__new__
_FIRST, _SECOND, _BOTH = (0,), (1,), (0, 1)


def binary(ufunc, op, general):
    """The methods ``(forward, reflected)`` of the box operator ``op``, whose gradient
    rule is ``ufunc``'s: scalar operands in one step, anything else through
    ``general(ufunc, op, x, y)``.

    The ufunc's partials are looked up once, at the first call (rules register after
    the boxes are defined, before anything is traced): the lookup and its checks were a
    third of an op."""
    linear = constant_partials = _UNRESOLVED

    def resolve():
        nonlocal linear, constant_partials
        linear = PRIMITIVES[ufunc].partials
        constant_partials = linear if type(linear) is tuple else None

    def forward(self, other):
        tape = self.tape
        x = self.value
        if type(other) is type(self):
            y = other.value
            if type(x) in SCALARS and type(y) in SCALARS and other.tape is tape \
                    and not tape.closed:
                if linear is _UNRESOLVED:
                    resolve()
                partials = constant_partials
                if partials is None and linear is not None:
                    partials = linear(x, y)
                    if partials is not None and (partials[0] is None or partials[1] is None):
                        partials = None
                if partials is not None:
                    # (as _with_constant records it, inlined: the hottest path)
                    try:
                        ans = op(x, y)
                    except Exception:
                        raised(tape)
                        raise
                    values = tape.values
                    slot = len(values)
                    values.append(ans)
                    tape.records.append(LinearRecord(slot, (self.slot, other.slot),
                                                     partials, op, (x, y), linear, _BOTH))
                    box = _new(type(self))      # (no __init__ frame: a sixth of an op)
                    box.value, box.slot, box.tape = ans, slot, tape
                    return box
        elif type(other) in SCALARS and type(x) in SCALARS and not tape.closed:
            if linear is _UNRESOLVED:
                resolve()
            if linear is not None:
                recorded = _with_constant(linear, op, x, other, self, 0)
                if recorded is not None:
                    return recorded
        return general(ufunc, op, self, other)

    def reflected(self, other):
        y = self.value
        if type(other) in SCALARS and type(y) in SCALARS and not self.tape.closed:
            if linear is _UNRESOLVED:
                resolve()
            if linear is not None:
                recorded = _with_constant(linear, op, other, y, self, 1)
                if recorded is not None:
                    return recorded
        return general(ufunc, op, other, self)
    return forward, reflected


def _with_constant(linear, op, x, y, box, position):
    """``op(x, y)`` on scalars where argument ``position`` is ``box`` (traced) and the
    other a constant, recorded with its local partial (``linear``: the ufunc's
    partials, see tape.py); None when it has no cheap partial for these values (the
    general path records it)."""
    partials = linear if type(linear) is tuple else linear(x, y)
    if partials is None or partials[position] is None:
        return None
    tape = box.tape
    try:
        ans = op(x, y)
    except Exception:               # np.seterr(all="raise"), a float ** overflowing
        raised(tape)
        raise
    values = tape.values
    slot = len(values)
    values.append(ans)
    tape.records.append(LinearRecord(slot, (box.slot,), (partials[position],), op, (x, y),
                                     linear, (_FIRST, _SECOND)[position]))
    result = _new(type(box))
    result.value, result.slot, result.tape = ans, slot, tape
    return result
