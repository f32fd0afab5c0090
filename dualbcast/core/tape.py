"""The tape: a Wengert list of records, and the backward pass that walks it.

Records are appended in execution order, so walking them in reverse visits every value
after all of its uses: a topological order for free, whatever Python control flow,
recursion or memoisation produced the program.  Each record says which slot it filled
(``out``), from which traced slots (``parents``), and how the cotangent of ``out``
flows back to them:

- :class:`Record`: ``ans = func(*args, **kwargs)``; ``vjps[i](g, ans, *args,
  **kwargs)`` is the cotangent of argument ``i`` (``args``: the argument values,
  constants snapshotted);
- :class:`RuleRecord`: the same, made by a rule that ran a loop of its own (a kernel's
  fast rule): ``func(tape, args, parents) -> (ans, vjps)``, its vjps holding what the
  loop computed;
- :class:`LinearRecord`: a scalar ``x + y``, ``x - y``, ``x * y`` or ``x ** c`` (the
  bulk of scalar code), whose local partials were cheap to form: the cotangent of each
  parent is ``g * partial``, with no call at all.

Only traced arguments that a rule can differentiate are parents, so constants cost
nothing in the backward pass.  A record keeps its function and arguments, so a tape
can be read as a program (``dualbcast.jit`` replays it); the core itself never does.
There is no math here: rules supply the vjps and the partials.

A tape may carry a *recorder* (None when tracing eagerly): whoever wants to run the
program again (``dualbcast.jit``) is told, through it, what a record cannot say — the
constants computed from traced values that steered the program (``bool(x)``, ``x >
0``), the constant arrays the records keep, and that the program did something no
replay could redo.  See :class:`Recorder`.
"""
import numpy as np

from .registry import BACKWARD_OPERATIONS
from .scatter import scatter_add

# The scalar types, named: a value of any of them takes the scalar paths (cheap partials,
# nothing to unbroadcast); anything else traced is an array, NumPy's or another library's
# (a Dask array is differentiated lazily, its cotangents built as Dask graphs), and takes
# the array paths.  Named rather than "not an ndarray": an array of another library
# taken for a scalar would lose its unbroadcast, a silently wrong gradient.
SCALARS = frozenset({float, int, bool, complex} | {
    t for t in np.sctypeDict.values() if issubclass(t, (np.number, np.bool_))})


def _replay_settings(current):
    """Float-error settings for a replay, from the caller's ``current`` ones (a dict
    like ``np.geterr()``): division by zero, overflow and invalid operations raise, and
    so does underflow unless the caller ignores it: a replay stops at any event the
    trace it stands for would have reported."""
    return dict(divide="raise", over="raise", invalid="raise",
                under="ignore" if current["under"] == "ignore" else "raise")


try:
    # np.errstate costs ~2 µs, a tenth of a small gradient; the state it sets can be
    # made once per state the caller is in and swapped in (NumPy 2's private context
    # variable behind errstate).  Derived from the caller's state, never frozen at
    # import: the settings not named stay the caller's.
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    class _DerivedState:
        """A float-error state made from the caller's current one by ``derive(current
        settings) -> settings``; remade only when the caller's state changes."""

        __slots__ = ("derive", "last")

        def __init__(self, derive):
            self.derive = derive
            self.last = (None, None, None)      # (caller's state, derived, settings)

        def get(self):
            current = _extobj_contextvar.get()
            last = self.last
            # (in the derived state already -- a tangent computed inside a backward
            # pass that ignores float errors -- deriving again gives that state: the
            # settings are idempotent, and the last pair is kept rather than remade)
            if last[0] is not current and last[1] is not current:
                settings = self.derive(np.geterr())
                last = self.last = (current, _make_extobj(**settings), settings)
            return last

    _IGNORING = _DerivedState(lambda current: dict(current, divide="ignore", invalid="ignore"))
    _RAISING = _DerivedState(_replay_settings)

    def ignore_float_errors():
        return _extobj_contextvar.set(_IGNORING.get()[1])

    def raise_float_errors():
        return _extobj_contextvar.set(_RAISING.get()[1])

    def underflow_ignored():
        """Whether the caller ignores underflow (code that cannot detect it, a fused
        replay, may run only then)."""
        return _RAISING.get()[2]["under"] == "ignore"

    def restore_float_errors(token):
        _extobj_contextvar.reset(token)
except ImportError:                                  # another NumPy: the public way
    def ignore_float_errors():
        state = np.errstate(divide="ignore", invalid="ignore")
        state.__enter__()
        return state

    def raise_float_errors():
        state = np.errstate(**_replay_settings(np.geterr()))
        state.__enter__()
        return state

    def underflow_ignored():
        return np.geterr()["under"] == "ignore"

    def restore_float_errors(state):
        state.__exit__(None, None, None)


class Record:
    """``ans = func(*args, **kwargs)`` stored in slot ``out``; the arguments at
    positions ``argnums`` are traced values living in slots ``parents``; ``others``:
    ``(position, slot)`` of traced arguments no gradient flows through."""

    __slots__ = ("out", "parents", "argnums", "vjps", "ans", "args", "kwargs", "func",
                 "others")

    def __init__(self, out, parents, argnums, vjps, ans, args, kwargs, func, others):
        self.out, self.parents, self.argnums, self.vjps = out, parents, argnums, vjps
        self.ans, self.args, self.kwargs, self.func = ans, args, kwargs, func
        self.others = others


class RuleRecord(Record):
    """A :class:`Record` whose ``func`` is a rule, ``func(tape, args, parents) -> (ans,
    vjps)``: running it again gives fresh vjps (a kernel's loop computes its partials
    with its value)."""

    __slots__ = ()


class LinearRecord:
    """A scalar ``op(*args)`` in slot ``out`` whose local partials, one per parent
    (the arguments at positions ``argnums``), are ``partials``: what
    ``partials_of(*args)`` gave, or ``partials_of`` itself when it is a constant pair
    (``+`` and ``-``)."""

    __slots__ = ("out", "parents", "partials", "op", "args", "partials_of", "argnums")

    def __init__(self, out, parents, partials, op, args, partials_of, argnums):
        self.out, self.parents, self.partials, self.op = out, parents, partials, op
        self.args, self.partials_of, self.argnums = args, partials_of, argnums


def traced_positions(record):
    """``{argument position: slot}`` of the traced arguments of ``record`` (a
    :class:`Record`, differentiated or not, or a :class:`LinearRecord`)."""
    traced = dict(zip(record.argnums, record.parents))
    if type(record) is not LinearRecord:
        traced.update(record.others)
    return traced


class Recorder:
    """What a tape tells whoever records it as a program (the base does nothing).

    - ``guard(tape, func, args, kwargs, result)``: ``result = func(*args, **kwargs)``,
      computed from traced values (boxes among ``args``), left the tape as a constant
      (a branch, a mask, an index); called before the next record is appended;
    - ``constant(original, kept)``: a record keeps ``kept`` (``original`` snapshotted:
      see :func:`dualbcast.core.box.snapshot`) of a constant argument; returns what
      the record should keep instead;
    - ``opaque(tape, why)``: the program did something a record cannot describe (an
      error it may have caught, a printed value, ``stop_gradient``), ``why`` says what.
    """

    __slots__ = ()

    def guard(self, tape, func, args, kwargs, result):
        pass

    def constant(self, original, kept):
        return kept

    def opaque(self, tape, why):
        pass


def escape(tape, func, args, kwargs, result):
    """``result = func(*args, **kwargs)``, computed from traced values, leaves the
    tape as a constant: tell the tape's recorder; returns ``result``."""
    recorder = tape.recorder
    if recorder is not None and not tape.closed:
        recorder.guard(tape, func, args, kwargs, result)
    return result


def raised(tape):
    """An operation on traced values raised: ``f`` may catch it and go on, so its
    control flow depended on the error, which no record describes."""
    if tape is not None and tape.recorder is not None and not tape.closed:
        tape.recorder.opaque(tape, "an operation on traced values raised (f may catch "
                                   "the error and go on)")


class Traced:
    """The base of traced values (:class:`dualbcast.core.box.Box`), so that the tape
    can tell a traced seed from a plain one without knowing boxes."""

    __slots__ = ()


class Tape:
    """One trace: the values of its slots and the records that produced them.

    ``level``: how deeply this trace is nested in others on its thread (see
    :mod:`.stack`).  This class is reverse mode (``grad``, ``vjp``): it keeps its
    records for a backward pass.  A forward-mode trace (:class:`.forward.ForwardTape`)
    and a trace that only records the program (:class:`.staging.StagingTape`) are
    subclasses; each kind owns its decisions (the methods and class attributes below),
    which the rules ask it rather than branch on what it is."""

    __slots__ = ("values", "records", "closed", "single_use", "gradient_buffers",
                 "recorder", "level", "outer")
    describe = "grad, vjp, jacobian or hessian"     # (in messages: what this trace is)
    takes_index_inputs = False      # whether an integer array may be a leaf (an input)
    kernel_rule = None              # how a kernel call on its values is recorded (rules)

    def __init__(self, single_use, recorder=None, level=1):
        self.values = []        # primal value of each slot (shape and dtype of its gradient)
        self.records = []
        self.level = level
        self.outer = None       # the tape this thread records on when this one closes
        self.closed = False     # set when the traced function returns
        # A single-use tape (grad, value_and_grad) runs backward once, so rules may
        # overwrite buffers they saved in the forward pass; a vjp pullback may be
        # called many times and must not.
        self.single_use = single_use
        # slot -> the caller's array its gradient goes into (value_and_grad(out=...)):
        # a rule that computes a whole gradient of that slot may write it there.
        self.gradient_buffers = None
        self.recorder = recorder

    def takes_lazy_arrays(self):
        """Whether Dask arrays may enter this trace: a first-order reverse trace run
        eagerly (not nested in another, not recorded by jit)."""
        return self.level == 1 and self.recorder is None

    def left_as_constant(self, func, args, values, kwargs, result, vjps=None):
        """``result = func(*values, **kwargs)``, computed from traced ``args`` (with
        this trace's boxes unwrapped in ``values``), leaves this trace as a constant:
        a computation from traced values no gradient flows through (an index; ``vjps``
        its rule's), or (``vjps`` None) a constant such as a comparison.  Noted for
        the recorder (:func:`escape`); returns what the program has in its place,
        ``result``."""
        return escape(self, func, args, kwargs, result)

    def stop_gradient(self, box):
        """``dualbcast.stop_gradient`` of one of this trace's boxes: its value,
        read-only (the tape still needs it unchanged)."""
        if self.recorder is not None and not self.closed:
            # A constant no record computes: a replay could not compute it again.
            self.recorder.opaque(self, "stop_gradient was called")
        value = box.value
        if isinstance(value, np.ndarray):
            value = value.view()
            value.flags.writeable = False
        return value


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

    A nested tape (its values may be traced by an enclosing trace) or a traced seed
    (a pullback differentiated) runs :func:`traced_backward` instead.
    """
    if tape.level > 1 or any(isinstance(seed, Traced) for _, seed in seeds):
        return traced_backward(tape, seeds)
    grads = [None] * len(tape.values)
    owned = bytearray(len(tape.values))   # 1 where grads[slot] is a buffer we may add into
    for slot, seed in seeds:
        accumulate(grads, owned, tape.values, slot, seed)
    values = tape.values
    ndarray = np.ndarray
    errors = ignore_float_errors()     # rules divide by zero on purpose (d log at 0)
    try:
        for record in reversed(tape.records):
            g = grads[record.out]
            if g is None:
                continue
            if type(record) is LinearRecord:
                if type(g) not in SCALARS:
                    # A lazy (Dask) cotangent of a scalar: "g == 0?" would compute it.
                    for slot, partial in zip(record.parents, record.partials):
                        accumulate(grads, owned, values, slot,
                                   BACKWARD_OPERATIONS.product(g, partial))
                    continue
                # A scalar's cotangent need not be dropped to free memory.  A zero
                # cotangent contributes nothing (NaN-safe: 0 * inf is 0), nor does a
                # zero partial (inf * 0 is 0 too).
                if g == 0:
                    continue
                # One or two parents, unrolled (a loop costs a quarter of the record).
                parents, partials = record.parents, record.partials
                slot = parents[0]
                ct = g * partials[0]
                if ct != ct and partials[0] == 0:
                    ct = type(ct)(0.0)
                current = grads[slot]
                if current is None:
                    grads[slot] = ct
                elif type(current) is not ndarray:
                    grads[slot] = current + ct      # scalars: nothing shared
                else:
                    accumulate(grads, owned, values, slot, ct)
                if len(parents) == 2:
                    slot = parents[1]
                    ct = g * partials[1]
                    if ct != ct and partials[1] == 0:
                        ct = type(ct)(0.0)
                    current = grads[slot]
                    if current is None:
                        grads[slot] = ct
                    elif type(current) is not ndarray:
                        grads[slot] = current + ct
                    else:
                        accumulate(grads, owned, values, slot, ct)
                continue
            grads[record.out] = None        # dropped as soon as it is used (arrays: memory)
            vjps, ans, args, kwargs = record.vjps, record.ans, record.args, record.kwargs
            for slot, i in zip(record.parents, record.argnums):
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
        if type(ct.values) is not np.ndarray and type(ct.values) not in SCALARS \
                or type(values[slot]) is not np.ndarray \
                and not isinstance(values[slot], np.generic):
            raise NotImplementedError(
                "dualbcast: a gathering operation (indexing with index arrays or None, "
                "np.take, np.repeat) between a NumPy array and a Dask array, or on a Dask "
                "array, has no lazy gradient rule")
        if current is None or not owned[slot]:
            primal = values[slot]
            buffer = np.zeros(np.shape(primal), np.result_type(primal))
            if current is not None and type(current) is not np.ndarray \
                    and type(current) not in SCALARS:
                # a lazy cotangent (Dask's) so far: this one dense, added to it lazily
                _scatter(buffer, ct)
                grads[slot] = current + buffer
                return
            if current is not None:
                buffer += current
            grads[slot] = current = buffer
            owned[slot] = 1
        _scatter(current, ct)
    elif current is None:
        grads[slot] = ct
    elif owned[slot] and (type(ct) is np.ndarray or type(ct) in SCALARS):
        current += ct
    else:
        total = current + ct
        grads[slot] = total
        owned[slot] = type(total) is np.ndarray


def _scatter(buffer, sparse):
    """Add a :class:`SparseCotangent` into ``buffer`` in place."""
    if sparse.repeats:
        scatter_add(buffer, sparse.index, sparse.values)
    else:
        buffer[sparse.index] += sparse.values


def traced_backward(tape, seeds):
    """:func:`backward` as operations an enclosing trace can record: every product and
    sum goes through the values' own NumPy dispatch (boxes record it, arrays compute
    it), nothing is added into in place, and a sparse cotangent is made dense by a
    traced scatter.  What makes derivatives of derivatives: the vjps of the rules
    are themselves differentiable.  The product and the scatter are the rules'
    (:data:`.registry.BACKWARD_OPERATIONS`)."""
    product, dense = BACKWARD_OPERATIONS.product, BACKWARD_OPERATIONS.dense
    values = tape.values
    grads = [None] * len(values)

    def add(slot, ct):
        if type(ct) is SparseCotangent:
            ct = dense(ct, values[slot])
        current = grads[slot]
        grads[slot] = ct if current is None else current + ct

    for slot, seed in seeds:
        add(slot, seed)
    errors = ignore_float_errors()     # rules divide by zero on purpose (d log at 0)
    try:
        for record in reversed(tape.records):
            g = grads[record.out]
            if g is None:
                continue
            grads[record.out] = None
            if type(record) is LinearRecord:
                for slot, partial in zip(record.parents, record.partials):
                    add(slot, product(g, partial))
                continue
            vjps, ans, args, kwargs = record.vjps, record.ans, record.args, record.kwargs
            for slot, i in zip(record.parents, record.argnums):
                add(slot, vjps[i](g, ans, *args, **kwargs))
    finally:
        restore_float_errors(errors)
    return grads
