"""Tracing one call: a tape for this thread, the differentiated arguments boxed as
its leaves, the output checked, and the gradients handed back in the arguments'
structures.  :func:`value_and_gradient` is one whole call of a ``value_and_grad``
function; the public drivers (:mod:`.api`) and ``dualbcast.jit`` are built on it."""
import numpy as np

from ..buffers import refuse_overlapping_out
from ..foreign import is_dask_array
from ..positions import argument_positions
from .box import SCALARS, Box, as_kind, kind_of, snapshot
from .pytree import LEAF, describe, flatten, flatten_like, unflatten
from .stack import current_trace, enter_trace, exit_trace, tracing_state  # noqa: F401
from .tape import Tape, Traced, backward

current_tape = current_trace      # (the name the jit layer knows)


def start_tracing(single_use, recorder=None, kind=Tape):
    """A new trace of ``kind`` (a :class:`.tape.Tape`, or a subclass: a forward-mode
    :class:`.forward.ForwardTape`, a staging :class:`.staging.StagingTape`) for this
    thread, nested in those it is already recording on."""
    tape = kind(single_use, recorder)
    enter_trace(tape)
    return tape


stop_tracing = exit_trace


def name_of(f):
    return getattr(f, "__name__", repr(f))


def require_callable(f, transform):
    """A transform's function, checked when the transform is made (not at its call)."""
    if not callable(f):
        raise TypeError(f"dualbcast.{transform} takes a function, not {f!r}")


class ArgumentPositions:
    """``argnums`` of a function ``f``, checked once, resolved per number of
    arguments: ``(positions, differentiated, ranks)``, the differentiated positions in
    argnums' order, a bool per argument, and each position's rank in argument order."""

    __slots__ = ("argnums", "f", "single", "by_count")

    def __init__(self, argnums, f):
        self.argnums, self.f = argnums, f
        self.single = argument_positions(argnums, None, "argnums", name_of(f))[0]
        self.by_count = {}

    def __call__(self, count):
        known = self.by_count.get(count)
        if known is None:
            positions = argument_positions(
                self.argnums, count, "argnums",
                f"{name_of(self.f)} (called with {count} positional arguments)")[1]
            known = self.by_count[count] = (
                positions, tuple(i in positions for i in range(count)),
                tuple(sorted(positions).index(i) for i in positions))
        return known


def trace_value(f, kwargs):
    """The forward pass of :func:`value_and_gradient` that runs ``f`` itself."""
    if kwargs:
        return lambda tape, traced_args: f(*traced_args, **kwargs)
    return lambda tape, traced_args: f(*traced_args)


def value_and_gradient(f, args, positions, out, single, forward, gradients_of=backward,
                       recorder=None, rebuild=True):
    """``(value, gradient)`` of one call of a ``value_and_grad`` function of ``f``.

    ``forward(tape, traced_args)`` fills a fresh tape, whose leaves are the
    differentiated arguments (``positions``), and returns the output (it calls ``f``:
    :func:`trace_value`; a replay fills the tape itself, ``rebuild=False``: the boxed
    arguments are not needed); ``gradients_of(tape, seeds)`` is the backward pass;
    ``recorder``: the tape's (:class:`.tape.Recorder`); ``out``: see
    :func:`.api.value_and_grad`."""
    if out is not None and current_trace() is not None:
        raise TypeError(_out_under_transform(current_trace()))
    # (tracing spelled out: a contextlib manager costs ~2 µs a call, a tenth of a
    # small gradient)
    tape = start_tracing(True, recorder)
    try:
        traced_args, inputs = trace_arguments(tape, args, positions, rebuild=rebuild)
        if out is not None:
            targets = gradient_targets(out, inputs, single, args)
            # Handed to the rules that can write into them (a kernel's loop stores
            # C-ordered); any other is filled at the end.
            tape.gradient_buffers = {box.slot: target for box, target in targets
                                     if target is not None and target.flags.c_contiguous}
        result = forward(tape, traced_args)
    finally:
        stop_tracing(tape)
    value, seeds = scalar_output(result, f, tape)
    grads = gradients_of(tape, seeds)
    if out is None:
        results = gradients(grads, inputs)
    else:
        for box, target in targets:
            if target is not None and grads[box.slot] is not target:
                target[...] = 0 if grads[box.slot] is None else grads[box.slot]
                grads[box.slot] = target
        results = gradients(grads, inputs, {id(target) for _, target in targets})
    return value, (results[0] if single else results)


def _out_under_transform(outer):
    """Why ``out=`` is refused inside another trace: what that trace computes on is
    traced (the gradient too, whenever it depends on the trace's values), and a plain
    array cannot hold a traced value.  Refused whatever the gradient depends on, before
    ``f`` runs: whether ``out=`` works must not depend on the data flow."""
    what = outer.describe
    return (f"value_and_grad: out= cannot be used inside another transform (here an "
            f"enclosing {what}): the gradient is traced there, and out= holds plain "
            f"arrays; call value_and_grad without out= inside it")


def trace_arguments(tape, args, positions, copy_arrays=False, rebuild=True):
    """Box every leaf of the differentiated arguments; the others pass through.
    ``(traced arguments, inputs)``, ``inputs`` a ``(leaf boxes, treedef)`` pair per
    differentiated argument.  ``rebuild=False``: the boxed arguments are not needed,
    only the leaves' boxes."""
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


def traced_leaf(tape, value):
    """``value`` (a float or float array) boxed as a new leaf of ``tape``."""
    return _new_leaf(tape, value, 0)


def _new_leaf(tape, leaf, position):
    if type(leaf) is not float and (type(leaf) is not np.ndarray or leaf.dtype.kind != "f"):
        leaf = _checked_leaf(leaf, position, tape)
    slot = len(tape.values)
    tape.values.append(leaf)
    box = _new(Box)                 # (no __init__ frame: a fifth of a leaf)
    box.value, box.slot, box.tape = leaf, slot, tape
    return box


_new = object.__new__


def _new_leaves(tape, leaves, position):
    """``[_new_leaf(tape, leaf, position) for leaf in leaves]``, without a call per
    leaf when they are all Python floats (a tuple of scalars)."""
    if not _FLOAT.issuperset(map(type, leaves)):
        return [_new_leaf(tape, leaf, position) for leaf in leaves]
    values = tape.values
    start = len(values)
    values.extend(leaves)
    boxes = []
    for slot, leaf in enumerate(leaves, start):
        box = _new(Box)
        box.value, box.slot, box.tape = leaf, slot, tape
        boxes.append(box)
    return boxes


def _checked_leaf(leaf, position, tape):
    """``leaf`` as it is differentiated (an ndarray subclass, np.memmap or a user's, as
    a plain view of its data: its gradient is a plain array, as NumPy's functions on it
    would compute), or an error saying why it cannot be."""
    if isinstance(leaf, Traced):    # traced by an enclosing trace: a nested derivative
        if leaf.dtype.kind != "f":
            raise TypeError(_NOT_DIFFERENTIABLE.format(position=position, dtype=leaf.dtype))
        return leaf
    if tape.takes_index_inputs and type(leaf) is np.ndarray and leaf.dtype.kind in "iu":
        return leaf                 # an index input of a staged program (never differentiated)
    if is_dask_array(leaf):
        return _checked_dask_leaf(leaf, position, tape)
    if not isinstance(leaf, (float, np.floating, np.ndarray)) or isinstance(leaf, np.ndarray) \
            and leaf.dtype.kind != "f":
        dtype = getattr(leaf, "dtype", type(leaf).__name__)
        raise TypeError(_NOT_DIFFERENTIABLE.format(position=position, dtype=dtype))
    if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray:
        return leaf.view(np.ndarray)
    return leaf


_NOT_DIFFERENTIABLE = ("cannot differentiate with respect to argument {position}: it holds "
                       "a value of type {dtype}; only float scalars and float arrays are "
                       "differentiated (integer and bool values never are)")


def _checked_dask_leaf(leaf, position, tape):
    """A Dask array as a leaf: differentiated lazily by a first-order reverse trace
    (grad, value_and_grad, vjp), its gradient a Dask graph; refused elsewhere."""
    where = f"cannot differentiate with respect to argument {position}, a Dask array"
    if not tape.takes_lazy_arrays():
        raise TypeError(f"{where}, here: Dask arrays are differentiated by grad, "
                        f"value_and_grad and vjp (first order), not by jvp, nested "
                        f"derivatives or dualbcast.jit; compute a NumPy array first "
                        f"(x.compute()) for those")
    if leaf.dtype.kind != "f":
        raise TypeError(f"{where} of dtype {leaf.dtype}: only float arrays are "
                        f"differentiated (integer and bool values never are)")
    if any(n != n for n in leaf.shape):
        raise ValueError(f"{where} with unknown chunk sizes (shape {leaf.shape}): compute "
                         f"them first with x.compute_chunk_sizes()")
    return leaf


def gradient_targets(out, inputs, single, args=()):
    """``(leaf box, array or None)`` pairs from ``out``, checked against the leaves,
    each other and every array among the call's ``args``: an out array is written while
    the arguments are still read (a kernel's loop stores gradients as it goes)."""
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
        if is_dask_array(primal):
            raise ValueError("value_and_grad: out= takes NumPy arrays; the gradient of a "
                             "Dask array is a lazy Dask array (no out leaf for it: None)")
        refuse_unfit_out(target, primal)
        if np.may_share_memory(target, primal):
            raise ValueError("value_and_grad: an out array overlaps the argument it is the "
                             "gradient of")
    refuse_overlapping_out("value_and_grad", leaves, argument_arrays(args))
    return list(zip(boxes, leaves))


def refuse_unfit_out(target, like):
    """``ValueError`` unless ``target``, an out leaf, is a writeable NumPy array of the
    shape and dtype of ``like`` (its argument, or the gradient it is to hold)."""
    if type(target) is not np.ndarray or type(like) is not np.ndarray \
            or target.shape != like.shape or target.dtype != like.dtype \
            or not target.flags.writeable:
        raise ValueError(f"value_and_grad: each out leaf must be a writeable array of "
                         f"its argument's shape and dtype ({np.shape(like)}, "
                         f"{np.result_type(like)}), or None; got a "
                         f"{type(target).__name__} of shape {np.shape(target)} and dtype "
                         f"{getattr(target, 'dtype', None)}")


def argument_arrays(args):
    """``(position, array)`` for every array in the arguments (in their trees too)."""
    for position, arg in enumerate(args):
        if type(arg) is np.ndarray:
            yield position, arg
        elif type(arg) is not float:
            for leaf in flatten(arg)[0]:
                if isinstance(leaf, np.ndarray):
                    yield position, leaf


def scalar_output(out, f, tape):
    """The value of ``f``'s output and the backward seeds; ``TypeError`` unless it is a
    real scalar."""
    if type(out) is Box and type(out.value) in SEED_FOR:      # the common case
        return out.value, ((out.slot, SEED_FOR[type(out.value)]),)
    own = type(out) is Box and out.tape is tape
    value = out.value if own else out
    if isinstance(value, Traced):   # traced by an enclosing trace (nested derivatives)
        shape, dtype = value.shape, value.dtype
        if shape != ():
            raise TypeError(f"grad requires {name_of(f)} to return a scalar; it returned "
                            f"an array of shape {shape} (sum it, or use vjp)")
        return value, (((out.slot, dtype.type(1.0)),) if own else ())
    if is_dask_array(value):
        return _lazy_output(value, f, out.slot if own else None)
    if not isinstance(value, (int, float, np.number, np.ndarray, np.bool_)) \
            or isinstance(value, complex):
        raise TypeError(f"grad requires {name_of(f)} to return a scalar; it returned a "
                        f"{type(value).__name__}")
    if np.ndim(value) != 0:
        raise TypeError(f"grad requires {name_of(f)} to return a scalar; it returned an array "
                        f"of shape {np.shape(value)} (sum it, or use vjp)")
    if np.result_type(value).kind == "c":
        raise TypeError(f"grad requires a real output; {name_of(f)} returned a complex value")
    if not own:
        return value, ()
    return value, ((out.slot, np.result_type(value).type(1.0)),)


def _lazy_output(value, f, slot):
    """:func:`scalar_output` for a Dask array: a 0-d real one, the value handed back
    lazy (``dask.compute`` of it and the gradients passes over the data once)."""
    if value.ndim != 0:
        raise TypeError(f"grad requires {name_of(f)} to return a scalar; it returned a Dask "
                        f"array of shape {value.shape} (sum it, or use vjp)")
    if value.dtype.kind == "c":
        raise TypeError(f"grad requires a real output; {name_of(f)} returned a complex value")
    return value, (() if slot is None else ((slot, value.dtype.type(1.0)),))


# The backward pass of a Python-float output runs on Python floats (the same IEEE
# products, a few times cheaper than NumPy scalars: the hot path of scalar code).
SEED_FOR = {float: 1.0, np.float64: np.float64(1.0), np.float32: np.float32(1.0)}


def gradients(grads, inputs, given=()):
    """The gradient of each differentiated argument, rebuilt in its structure.
    ``given``: ids of the caller's out arrays, handed back as they are."""
    handed_out = set()
    results = []
    for boxes, tree in inputs:
        if tree == LEAF:            # a lone array or float: no lists
            box = boxes[0]
            ct = grads[box.slot]
            results.append(ct if id(ct) in given else
                           gradient_like(box.value, ct, handed_out))
            continue
        leaves = leaf_gradients([box.value for box in boxes],
                                [grads[box.slot] for box in boxes], handed_out, given)
        results.append(unflatten(tree, leaves))
    return tuple(results)


def leaf_gradients(primals, cotangents, handed_out, given=()):
    """Each cotangent as the gradient of its primal (:func:`gradient_like`); the
    caller's out arrays (ids in ``given``) as they are."""
    # Python floats are their own gradients (the common case of a tuple of scalars:
    # checked without a call per leaf).
    if _FLOAT.issuperset(map(type, cotangents)) and _FLOAT.issuperset(map(type, primals)):
        return cotangents
    return [ct if id(ct) in given else gradient_like(primal, ct, handed_out)
            for primal, ct in zip(primals, cotangents)]


_FLOAT = frozenset({float})


def gradient_like(primal, ct, handed_out):
    """``ct`` as a gradient of ``primal``: same type, shape and dtype, never a view of
    a buffer the caller might see twice (each array is handed out once)."""
    if type(primal) is float:
        if ct is None or type(ct) in SCALARS:
            return 0.0 if ct is None else float(ct)
        if isinstance(ct, Traced):
            return as_kind(ct, "float")
    elif isinstance(primal, Traced) or isinstance(ct, Traced):
        return _traced_gradient_like(primal, ct)
    if type(ct) is not np.ndarray and type(ct) not in SCALARS and ct is not None \
            or type(primal) is not np.ndarray and type(primal) not in SCALARS:
        return _lazy_gradient_like(primal, ct)      # (a Dask array's: all else is plain)
    if type(primal) is float:
        return float(ct)                # (a 0-d array)
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


def _lazy_gradient_like(primal, ct):
    """:func:`gradient_like` where the primal or the cotangent is a Dask array: the
    gradient is a Dask array (0-d for a scalar), computed when the caller computes it."""
    shape = np.shape(primal)
    dtype = primal.dtype if hasattr(primal, "dtype") else np.dtype(np.float64)
    if ct is None:
        return np.zeros_like(primal)
    if not is_dask_array(ct):       # (a Dask primal's cotangent in NumPy: made lazy too)
        ct = np.zeros_like(primal) + ct
    if ct.shape != shape:
        raise RuntimeError(f"dualbcast internal error: a gradient of shape {ct.shape} for "
                           f"an argument of shape {shape}; please report it")
    if ct.dtype != dtype:
        ct = ct.astype(dtype)
    if is_dask_array(primal) and ct.chunks != primal.chunks:
        ct = ct.rechunk(primal.chunks)      # (a reshape on the way may have cut blocks)
    return ct


def _traced_gradient_like(primal, ct):
    """:func:`gradient_like` where the primal or the cotangent is traced by an
    enclosing trace (a derivative being differentiated)."""
    shape, dtype = _shape_and_dtype(primal)
    kind = kind_of(primal)
    if ct is None:
        return np.zeros(shape, dtype) if shape or kind == "array" else \
            0.0 if kind == "float" else dtype.type(0)
    ct_shape, ct_dtype = _shape_and_dtype(ct)
    if ct_shape != shape:
        raise RuntimeError(f"dualbcast internal error: a gradient of shape {ct_shape} "
                           f"for an argument of shape {shape}; please report it")
    if ct_dtype != dtype:
        ct = ct.astype(dtype)
    return as_kind(ct, kind)        # (an ndarray for a 0-d array, as untraced)


def _shape_and_dtype(x):
    if isinstance(x, Traced):
        return x.shape, x.dtype
    return np.shape(x), np.result_type(x)
