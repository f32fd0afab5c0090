"""The tape: a Wengert list of records, and the backward pass that walks it.

Records are appended in execution order, so walking them in reverse visits every value
after all of its uses: a topological order for free, whatever Python control flow,
recursion or memoisation produced the program.  A record is a plain tuple

    (out_slot, parent_slots, argnums, vjps, ans, saved, kwargs, func, args)

meaning: ``ans = func(*args, **kwargs)`` was stored in ``out_slot``; the arguments at
positions ``argnums`` were traced values living in ``parent_slots``; ``vjps[i](g, ans,
*saved, **kwargs)`` is the cotangent of argument ``i`` given the cotangent ``g`` of
``ans`` (``saved``: the argument values, constants snapshotted).  Scalar ``x + y``,
``x - y`` and ``x * y`` (the bulk of scalar code) record

    (out_slot, parent_slots, local_partials, op, args, partials_of, argnums)

instead (``partials_of``: the registered partials, see :mod:`.registry`): the
cotangent of each parent is ``g * partial``, with no call at all.  Only
traced arguments that a rule can differentiate are parents, so constants cost nothing
in the backward pass.  ``func``/``op`` and ``args`` (boxes and constants) are there
for a replay (:mod:`.replay`); so are the tape's ``guards``, the outcomes that
steered the program.  There is no math here: rules supply the vjps and the partials.
"""
import numpy as np

try:
    # np.errstate costs ~2 µs, a tenth of a small gradient; the state it sets can be
    # made once and swapped in (NumPy 2's private context variable behind errstate).
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
    _IGNORING = _make_extobj(divide="ignore", invalid="ignore")
    _RAISING = _make_extobj(divide="raise", over="raise", invalid="raise")

    def ignore_float_errors():
        return _extobj_contextvar.set(_IGNORING)

    def raise_float_errors():
        return _extobj_contextvar.set(_RAISING)

    def restore_float_errors(token):
        _extobj_contextvar.reset(token)
except ImportError:                                  # another NumPy: the public way
    def ignore_float_errors():
        state = np.errstate(divide="ignore", invalid="ignore")
        state.__enter__()
        return state

    def raise_float_errors():
        state = np.errstate(divide="raise", over="raise", invalid="raise")
        state.__enter__()
        return state

    def restore_float_errors(state):
        state.__exit__(None, None, None)


class Tape:
    """One trace: the values of its slots and the records that produced them."""

    __slots__ = ("values", "records", "closed", "single_use", "gradient_buffers",
                 "for_replay", "guards", "copies", "replayable", "residuals")

    def __init__(self, single_use):
        self.values = []        # primal value of each slot (shape and dtype of its gradient)
        self.records = []
        self.closed = False     # set when the traced function returns
        # A single-use tape (grad, value_and_grad) runs backward once, so rules may
        # overwrite buffers they saved in the forward pass; a vjp pullback may be
        # called many times and must not.
        self.single_use = single_use
        # slot -> the caller's array its gradient goes into (value_and_grad(out=...)):
        # a rule that computes a whole gradient of that slot may write it there.
        self.gradient_buffers = None
        # What a replay needs (kept only when the tape may become one, for_replay):
        # guards, (record count, func, args, kwargs, result) for each constant computed
        # from traced values (bool(x), x > 0, np.argmax(x)) that a replay must find
        # unchanged; copies, (original, copy) for each constant array the records copied.
        self.for_replay = False
        self.guards = []
        self.copies = []
        self.replayable = True  # False once the program did what a replay cannot check
        self.residuals = None   # a replay's: what its backward pass needs from the forward


class SparseCotangent:
    """A cotangent that is zero except at ``index``: what indexing sends back.

    The backward pass adds ``values`` into the parent's gradient buffer in place, so
    reading a few elements of a large traced array costs a few elements per read
    (plus one zeroed buffer per array), not one dense array per read.
    """

    __slots__ = ("index", "values", "repeats")

    def __init__(self, index, values, repeats):
        self.index = index
        self.values = values
        self.repeats = repeats  # integer-array index: positions may repeat (np.add.at)


def backward(tape, seeds):
    """Cotangents of every slot given ``seeds``, pairs ``(slot, cotangent)``.

    Returns the list of cotangents by slot (None where nothing flowed).  Intermediate
    cotangents are dropped as soon as their record has been processed.
    """
    grads = [None] * len(tape.values)
    owned = bytearray(len(tape.values))   # 1 where grads[slot] is a buffer we may add into
    for slot, seed in seeds:
        accumulate(grads, owned, tape.values, slot, seed)
    values = tape.values
    ndarray = np.ndarray
    errors = ignore_float_errors()     # rules divide by zero on purpose (d log at 0)
    try:
        for record in reversed(tape.records):
            g = grads[record[0]]
            if g is None:
                continue
            if len(record) == 7:
                # (out_slot, parent_slots, local_partials, ...) of a scalar x + y, x - y,
                # x * y (its scalar cotangent need not be dropped to free memory).  A
                # zero cotangent contributes nothing (NaN-safe: 0 * inf is 0).
                if g == 0:
                    continue
                # One or two parents, unrolled (a loop costs a quarter of the record).
                parents, partials = record[1], record[2]
                slot = parents[0]
                current = grads[slot]
                if current is None:
                    grads[slot] = g * partials[0]
                elif type(current) is not ndarray:
                    grads[slot] = current + g * partials[0]     # scalars: nothing shared
                else:
                    accumulate(grads, owned, values, slot, g * partials[0])
                if len(parents) == 2:
                    slot = parents[1]
                    current = grads[slot]
                    if current is None:
                        grads[slot] = g * partials[1]
                    elif type(current) is not ndarray:
                        grads[slot] = current + g * partials[1]
                    else:
                        accumulate(grads, owned, values, slot, g * partials[1])
                continue
            out_slot, parents, argnums, vjps, ans, args, kwargs, _, _ = record
            grads[out_slot] = None          # dropped as soon as it is used (arrays: memory)
            for slot, i in zip(parents, argnums):
                ct = vjps[i](g, ans, *args, **kwargs) if kwargs else vjps[i](g, ans, *args)
                if grads[slot] is None and type(ct) is not SparseCotangent:
                    grads[slot] = ct        # the first cotangent of a slot: just keep it
                else:
                    accumulate(grads, owned, values, slot, ct)
    finally:
        restore_float_errors(errors)
    return grads


def accumulate(grads, owned, values, slot, ct):
    """Add the cotangent ``ct`` into ``grads[slot]``."""
    # Cotangents returned by rules may alias each other (``x + y`` hands the same ``g``
    # to both), so only buffers allocated here are ever added into in place.
    current = grads[slot]
    if type(ct) is SparseCotangent:
        if current is None or not owned[slot]:
            primal = values[slot]
            buffer = np.zeros(np.shape(primal), np.result_type(primal))
            if current is not None:
                buffer += current
            grads[slot] = current = buffer
            owned[slot] = 1
        if ct.repeats:
            np.add.at(current, ct.index, ct.values)
        else:
            current[ct.index] += ct.values
    elif current is None:
        grads[slot] = ct
    elif owned[slot]:
        current += ct
    else:
        total = current + ct
        grads[slot] = total
        owned[slot] = type(total) is np.ndarray
