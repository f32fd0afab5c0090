"""``grad``, ``value_and_grad``, ``vjp`` and ``stop_gradient``: tracing a function on
boxed arguments, then running the tape backward."""
import functools
import threading
from contextlib import contextmanager

import numpy as np

from ..positions import argument_positions
from .box import Box, snapshot
from .pytree import LEAF, describe, flatten, flatten_like, unflatten
from .replay import GuardFailed, Programs
from .tape import Tape, backward

_current = threading.local()       # the tape being recorded on this thread, if any


def _start_tracing(single_use):
    if getattr(_current, "tape", None) is not None:
        raise NotImplementedError("dualbcast: nested grad/value_and_grad/vjp calls (higher-order "
                                  "derivatives) are not supported")
    tape = Tape(single_use)
    _current.tape = tape
    return tape


def _stop_tracing(tape):
    tape.closed = True
    _current.tape = None


@contextmanager
def _tracing(single_use):
    tape = _start_tracing(single_use)
    try:
        yield tape
    finally:
        _stop_tracing(tape)


def grad(f, argnums=0, *, out=None, replay=True):
    """The gradient of a scalar function ``f`` with respect to the ``argnums``
    arguments, like ``jax.grad``.  Each gradient has its argument's structure (nested
    tuples, lists, dicts), shapes and dtypes; ``argnums`` a tuple gives a tuple.
    ``out`` and ``replay``: see :func:`value_and_grad`.

    >>> import numpy as np, dualbcast as db
    >>> db.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    value_and_grad_f = value_and_grad(f, argnums, out=out, replay=replay)

    @functools.wraps(f)
    def grad_f(*args, **kwargs):
        return value_and_grad_f(*args, **kwargs)[1]
    return grad_f


def value_and_grad(f, argnums=0, *, out=None, replay=True):
    """``f(*args)`` and its gradient with respect to the ``argnums`` arguments, from
    one forward and one backward pass.  Arguments not in ``argnums`` (and keyword
    arguments) are passed through untouched and never traced.

    ``out``: arrays every call writes the gradient into and returns, instead of new
    ones; the gradient's structure with an array (its shape and dtype) or None
    (allocate as usual) for each leaf.  A gradient computed whole by a kernel's
    ``k.sum`` rule is written there directly: a repeated call allocates nothing of the
    gradient's size.

    ``replay``: the second call with a given signature (the differentiated arguments'
    structure, shapes and dtypes, the other arguments' values) records the operations
    ``f`` traced; later calls with that signature replay them on the new values
    without running ``f``'s Python code.  Control flow that depended on a traced
    value (``if x > 0``, ``bool(x)``, ``np.argmax(x)``) is checked again on every
    replay, and ``f`` is traced again when an outcome differs, so a replay computes
    exactly what a trace would.  As with ``jax.jit``, ``f`` must compute from its
    arguments; what a replay checks and what it cannot see is listed in
    :mod:`dualbcast.core.replay`.  ``replay=False`` traces every call.

    >>> import numpy as np, dualbcast as db
    >>> db.value_and_grad(lambda x, a: a * np.sum(x), argnums=(0, 1))(np.ones(2), 3.0)
    (np.float64(6.0), (array([3., 3.]), 2.0))
    """
    single, _ = _check_argnums(argnums, f)     # checked now; positions at each call
    # number of arguments -> (positions of the differentiated ones, a bool per argument,
    # each position's rank in argument order)
    positions_for = {}
    programs = Programs(f, Box) if replay else None
    short_replay = replay and out is None       # the short path of Programs.replay_short

    @functools.wraps(f)
    def value_and_grad_f(*args, **kwargs):
        known = positions_for.get(len(args))
        if known is None:
            positions = _positions(argnums, len(args), f)
            known = positions_for[len(args)] = (
                positions, tuple(i in positions for i in range(len(args))),
                tuple(sorted(positions).index(i) for i in positions))
        positions, differentiated, ranks = known
        if short_replay and not kwargs and getattr(_current, "tape", None) is None:
            replayed = programs.replay_short(args, differentiated, ranks, _SEED_FOR)
            if replayed is not None:
                value, grads, leaves, structures = replayed
                return value, _short_gradients(grads, leaves, structures, single)
        call = programs.lookup(args, kwargs, differentiated) if programs is not None else None
        if call is not None and call.program is not None:
            answer = _run(f, args, kwargs, positions, out, single, call, replay=True)
            if answer is not None:
                return answer
        return _run(f, args, kwargs, positions, out, single, call, replay=False)
    return value_and_grad_f


def _run(f, args, kwargs, positions, out, single, call, replay):
    """One value and gradient: by replaying ``call``'s program, or by tracing ``f``
    (and keeping its program in ``call``, if there is one).  Returns None when a
    replay's guard fails (it has written nothing to the caller's arrays that a trace
    will not overwrite)."""
    # _tracing() spelled out: a contextlib manager costs ~2 µs a call, a tenth of a
    # small gradient.
    tape = _start_tracing(single_use=True)
    try:
        traced_args, inputs = _trace_arguments(tape, args, positions, rebuild=not replay)
        if out is not None:
            targets = _gradient_targets(out, inputs, single)
            tape.gradient_buffers = {box.slot: target for box, target in targets
                                     if target is not None}
        if replay:
            try:
                result = call.run(tape)
            except GuardFailed:
                return None
        else:
            tape.for_replay = call is not None and call.wanted
            if tape.for_replay:
                before = call.tracing()
            result = f(*traced_args, **kwargs)
    finally:
        _stop_tracing(tape)
    value, seeds = _scalar_output(result, f, tape)
    if tape.for_replay:
        call.keep(tape, result, before)
    elif call is not None and not replay:
        call.traced()
    grads = call.gradients(tape, seeds) if replay else backward(tape, seeds)
    if out is not None:
        for box, target in targets:
            if target is not None and grads[box.slot] is not target:
                target[...] = 0 if grads[box.slot] is None else grads[box.slot]
                grads[box.slot] = target
    results = _gradients(grads, inputs, given={id(target) for _, target in targets}
                         if out is not None else ())
    return value, (results[0] if single else results)


def _short_gradients(grads, leaves, structures, single):
    """The gradients of a replay on the short path, rebuilt per argument."""
    if single and structures[0][0] is None:     # one array or float: the common case
        return _gradient_like(leaves[0], grads[0], set())
    gradients = _leaf_gradients(leaves, grads[:len(leaves)], set())
    results, start = [], 0
    for tree, count in structures:
        results.append(gradients[start] if tree is None
                       else unflatten(tree, gradients[start:start + count]))
        start += count
    return results[0] if single else tuple(results)


def _gradient_targets(out, inputs, single):
    """``(leaf box, array or None)`` pairs from ``out``, checked against the leaves."""
    structures = [tree for _, tree in inputs]
    try:
        leaves = flatten_like(out if not single else (out,), (tuple, None, tuple(structures)),
                              none_leaves=True)
    except ValueError:
        expected = describe(structures[0]) if single else describe((tuple, None,
                                                                    tuple(structures)))
        raise ValueError(f"value_and_grad: out must have the gradient's structure "
                         f"{expected} (an array or None per leaf)") from None
    boxes = [box for box_leaves, _ in inputs for box in box_leaves]
    for box, target in zip(boxes, leaves):
        if target is None:
            continue
        primal = box.value
        if type(target) is not np.ndarray or type(primal) is not np.ndarray \
                or target.shape != primal.shape or target.dtype != primal.dtype \
                or not target.flags.writeable:
            raise ValueError(f"value_and_grad: each out leaf must be a writeable array of "
                             f"its argument's shape and dtype ({np.shape(primal)}, "
                             f"{np.result_type(primal)}), or None; got a "
                             f"{type(target).__name__} of shape {np.shape(target)} and dtype "
                             f"{getattr(target, 'dtype', None)}")
        if np.may_share_memory(target, primal):
            raise ValueError("value_and_grad: an out array overlaps the argument it is the "
                             "gradient of")
    return list(zip(boxes, leaves))


def vjp(f, *primals):
    """``(f(*primals), pullback)``: ``pullback(cotangent)`` returns one cotangent per
    primal (a tuple), each with its primal's structure, shapes and dtypes.  ``f`` may
    return any nested structure of arrays; ``cotangent`` must have the same structure
    and shapes.  The pullback may be called many times.

    >>> import numpy as np, dualbcast as db
    >>> y, pullback = db.vjp(np.sin, np.array([0.0, 1.0]))
    >>> pullback(np.array([1.0, 2.0]))[0].round(4)
    array([1.    , 1.0806])
    """
    with _tracing(single_use=False) as tape:
        # The pullback may run later, after the caller has updated the primals in place
        # (an optimiser step): it must see them as they were.
        traced_args, inputs = _trace_arguments(tape, primals, range(len(primals)),
                                               copy_arrays=True)
        out = f(*traced_args)
    out_leaves, out_tree = flatten(out)
    # Outputs the pullback relies on are handed out read-only.
    out_values = [_read_only(leaf.value) if type(leaf) is Box else leaf for leaf in out_leaves]

    def pullback(cotangent):
        if getattr(_current, "tape", None) is not None:
            raise NotImplementedError("dualbcast: calling a vjp pullback inside grad/vjp "
                                      "(higher-order derivatives) is not supported")
        try:
            ct_leaves = flatten_like(cotangent, out_tree)
        except ValueError:
            raise ValueError(f"vjp pullback: the cotangent has structure "
                             f"{describe(flatten(cotangent)[1])} but {_name(f)} returned "
                             f"{describe(out_tree)}") from None
        seeds = []
        for out_leaf, value, ct in zip(out_leaves, out_values, ct_leaves):
            if np.iscomplexobj(ct):
                raise TypeError("vjp pullback: complex cotangents are not supported")
            if np.shape(ct) != np.shape(value):
                raise ValueError(f"vjp pullback: a cotangent of shape {np.shape(ct)} for an "
                                 f"output of shape {np.shape(value)}")
            if type(out_leaf) is Box:
                # A copy: the backward pass may add into a seed, and must not hand the
                # caller's own array back as a gradient.
                seeds.append((out_leaf.slot, np.array(ct, dtype=np.result_type(value))))
        return _gradients(backward(tape, seeds), inputs)
    return unflatten(out_tree, out_values), pullback


def _read_only(value):
    if isinstance(value, np.ndarray):
        value = value.view()
        value.flags.writeable = False
    return value


def stop_gradient(x):
    """``x`` as a constant: its value (read-only for arrays), no gradient flows back.
    Works on nested structures; outside a traced function it returns ``x`` unchanged."""
    leaves, tree = flatten(x)
    return unflatten(tree, [_constant(leaf) for leaf in leaves])


def _constant(leaf):
    # Read-only: the tape still needs the value unchanged.
    if type(leaf) is not Box:
        return leaf
    # A constant the tape does not see being computed: a replay could not redo it.
    leaf.tape.replayable = False
    return _read_only(leaf.value)


# ---------------------------------------------------------------------- helpers

def _name(f):
    return getattr(f, "__name__", repr(f))


def _check_argnums(argnums, f):
    """``(single, ints)``: whether ``argnums`` is one int, and the ints as a tuple."""
    return argument_positions(argnums, None, "argnums", _name(f))


def _positions(argnums, nargs, f):
    """``argnums`` as positions among ``nargs`` arguments."""
    return argument_positions(argnums, nargs, "argnums",
                              f"{_name(f)} (called with {nargs} positional arguments)")[1]


def _trace_arguments(tape, args, positions, copy_arrays=False, rebuild=True):
    """Box every leaf of the differentiated arguments; the others pass through.
    ``rebuild=False``: the boxed arguments are not needed (a replay does not call
    ``f``), only the leaves' boxes in ``inputs``."""
    traced = list(args)
    inputs = []
    for i in positions:
        if type(args[i]) is np.ndarray and not copy_arrays or type(args[i]) is float:
            box = traced[i] = _new_leaf(tape, args[i], i)     # a leaf: no tree to walk
            inputs.append(((box,), LEAF))
            continue
        leaves, tree = flatten(args[i])
        if copy_arrays:
            leaves = [snapshot(leaf) for leaf in leaves]
        boxes = _new_leaves(tape, leaves, i)
        if rebuild:
            traced[i] = unflatten(tree, boxes)
        inputs.append((boxes, tree))
    return traced, inputs


def _new_leaf(tape, leaf, position):
    if type(leaf) is not float and (type(leaf) is not np.ndarray or leaf.dtype.kind != "f"):
        _check_leaf(leaf, position)
    slot = len(tape.values)
    tape.values.append(leaf)
    return Box(leaf, slot, tape)


def _new_leaves(tape, leaves, position):
    """``[_new_leaf(tape, leaf, position) for leaf in leaves]``, without a call per
    leaf when they are all Python floats (a tuple of scalars)."""
    if not _FLOAT.issuperset(map(type, leaves)):
        return [_new_leaf(tape, leaf, position) for leaf in leaves]
    values = tape.values
    start = len(values)
    values.extend(leaves)
    boxes = []
    new = object.__new__
    for slot, leaf in enumerate(leaves, start):
        box = new(Box)              # (no __init__ frame: a fifth of a leaf)
        box.value, box.slot, box.tape = leaf, slot, tape
        boxes.append(box)
    return boxes


def _check_leaf(leaf, position):
    if type(leaf) is Box:
        raise NotImplementedError("dualbcast: differentiating with respect to a value that is "
                                  "already traced (nested differentiation) is not supported")
    if not isinstance(leaf, (float, np.floating, np.ndarray)) or isinstance(leaf, np.ndarray) \
            and leaf.dtype.kind != "f":
        dtype = getattr(leaf, "dtype", type(leaf).__name__)
        raise TypeError(f"cannot differentiate with respect to argument {position}: it holds "
                        f"a value of type {dtype}; only float scalars and float arrays are "
                        f"differentiated (integer and bool values never are)")


def _scalar_output(out, f, tape):
    """The value of ``f``'s output and the backward seeds; ``TypeError`` unless it is a
    real scalar."""
    if type(out) is Box and type(out.value) in _SEED_FOR:      # the common case
        return out.value, ((out.slot, _SEED_FOR[type(out.value)]),)
    value = out.value if type(out) is Box else out
    if not isinstance(value, (int, float, np.number, np.ndarray, np.bool_)) \
            or isinstance(value, complex):
        raise TypeError(f"grad requires {_name(f)} to return a scalar; it returned a "
                        f"{type(value).__name__}")
    if np.ndim(value) != 0:
        raise TypeError(f"grad requires {_name(f)} to return a scalar; it returned an array "
                        f"of shape {np.shape(value)} (sum it, or use vjp)")
    if np.result_type(value).kind == "c":
        raise TypeError(f"grad requires a real output; {_name(f)} returned a complex value")
    if type(out) is not Box:
        return value, ()
    return value, ((out.slot, np.result_type(value).type(1.0)),)


# The backward pass of a Python-float output runs on Python floats (the same IEEE
# products, a few times cheaper than NumPy scalars: the hot path of scalar code).
_SEED_FOR = {float: 1.0, np.float64: np.float64(1.0), np.float32: np.float32(1.0)}


def _gradients(grads, inputs, given=()):
    """The gradient of each differentiated argument, rebuilt in its structure.
    ``given``: ids of the caller's out arrays, handed back as they are."""
    handed_out = set()
    results = []
    for boxes, tree in inputs:
        if tree == LEAF:            # a lone array or float: no lists
            box = boxes[0]
            ct = grads[box.slot]
            results.append(ct if id(ct) in given else
                           _gradient_like(box.value, ct, handed_out))
            continue
        leaves = _leaf_gradients([box.value for box in boxes],
                                 [grads[box.slot] for box in boxes], handed_out, given)
        results.append(unflatten(tree, leaves))
    return tuple(results)


def _leaf_gradients(primals, cotangents, handed_out, given=()):
    """Each cotangent as the gradient of its primal (:func:`_gradient_like`); the
    caller's out arrays (ids in ``given``) as they are."""
    # Python floats are their own gradients (the common case of a tuple of scalars:
    # checked without a call per leaf).
    if _FLOAT.issuperset(map(type, cotangents)) and _FLOAT.issuperset(map(type, primals)):
        return cotangents
    return [ct if id(ct) in given else _gradient_like(primal, ct, handed_out)
            for primal, ct in zip(primals, cotangents)]


_FLOAT = frozenset({float})


def _gradient_like(primal, ct, handed_out):
    """``ct`` as a gradient of ``primal``: same type, shape and dtype, never a view of
    a buffer the caller might see twice (each array is handed out once)."""
    if type(primal) is float:
        return 0.0 if ct is None else float(ct)
    dtype = primal.dtype
    if not isinstance(primal, np.ndarray):
        return dtype.type(0 if ct is None else ct)
    if ct is None:
        return np.zeros(primal.shape, dtype)
    is_array = type(ct) is np.ndarray
    if (ct.shape if is_array else np.shape(ct)) != primal.shape:
        raise RuntimeError(f"dualbcast internal error: a gradient of shape {np.shape(ct)} "
                           f"for an argument of shape {primal.shape}; please report it")
    if is_array and ct.dtype == dtype and id(ct) not in handed_out:
        flags = ct.flags
        if flags.owndata and flags.writeable:
            handed_out.add(id(ct))
            return ct
    return np.array(ct, dtype=dtype)
