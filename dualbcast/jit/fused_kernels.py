"""How a fused function (:mod:`.fusion`) computes a program's kernel sums and
segments: each writes its forward pass into the writer ``w`` (a
:class:`.fusion.Writer`) and a function that writes its backward pass."""
import numpy as np

from ..config import config
from ..kernel.loops import REGISTER, STORE
from ..rules.fast import SUM_COTANGENT_FORM, kernel_sum_loop
from .fused_function import Constant
from .fused_source import NotFusable, branch_free, require
from .segments import SegmentSource

_FLOAT64 = np.dtype(np.float64)


def write_kernel_sum(w, k, record):
    """Kernel sum ``k.sum(...)`` (``record``, the ``k``-th): its loop called in the
    forward pass, its vjp written in the backward pass."""
    out, parents, argnums = record.out, record.parents, record.argnums
    prepared = kernel_sum_loop(record.func)
    require(prepared is not None and not record.kwargs and not record.others
            and prepared.dtype == _FLOAT64)
    if not prepared.source.endswith(".py"):
        w.cacheable = False      # (its loop's code is not named by a file)
    operands = _operands(w, k, record, prepared)
    buffers, registers = _gradients(w, k, zip(parents, argnums), prepared)
    w.kernels.append(prepared)
    sums = _loop(w, k, out, prepared, operands, buffers, len(registers))
    if buffers:
        w.stores = True

    def write():
        # The sum rule's vjp, from its form (beside the rule): each gradient element
        # times the cotangent, 0 for a zero cotangent; a cotangent of 1 leaves a
        # stored gradient as it is.
        g, live = w.cotangent[out], w.reached[out]
        column = 0
        stored = iter(buffers)
        for slot in parents:
            if slot in registers:
                column += 1
                ct = w.emit(w.fresh("ct"), branch_free(
                    SUM_COTANGENT_FORM.format(x=sums[column], g=g)))
                w.add_scalar(slot, ct, live)
                continue
            buffer = next(stored)
            reached, bad = w.fresh("a"), w.fresh("bad")
            if w.array_reached[slot] == "False" and buffer == w.accumulator[slot]:
                call = f"_first_gradient({live}, {buffer}, {g}, {w.bad})"
            else:
                call = (f"_add_gradient({live}, {w.array_reached[slot]}, "
                        f"{w.accumulator[slot]}, {buffer}, {g}, {w.bad})")
            w.lines.append(f"{reached}, {bad} = {call}")
            w.array_reached[slot], w.bad = reached, bad
    w.backward.append(write)


def _operands(w, k, record, prepared):
    """The names of kernel sum ``k``'s loop's operands.

    Each operand as the loop takes it (found for this run's values, and true of
    every later run's, whose leaves have the signature's types, shapes and strides
    and whose constants are the same objects): a leaf or a constant as it is is one
    parameter for every loop (a number: a constant of the source); another is
    computed per call.  (A parameter per loop's operand made the function's Python
    wrapper, which unboxes each and on failure releases all those before it, grow
    as the square of their number.)"""
    traced = dict(zip(record.argnums, record.parents))
    inputs = []                     # per argument: a leaf slot, or a constant
    for i, value in enumerate(record.args):
        if i in traced:
            require(traced[i] < w.leaves)     # kernels of the arguments only
            inputs.append(traced[i])
        else:
            inputs.append(Constant(value))
    given = [w.values[item] if type(item) is int else item.value for item in inputs]
    try:
        bound = prepared.operands_for(given)
    except Exception:               # (operands its loop cannot take: not fused)
        raise NotFusable from None
    operands, transformed = [], []
    for m, (item, value, operand) in enumerate(zip(inputs, given, bound)):
        if operand is not value:
            transformed.append(m)
            operands.append(f"o{k}_{m}")
            w.operand_params.append(operands[-1])
        elif type(item) is int:
            operands.append(f"x{item}" if type(value) is np.ndarray else f"v{item}")
        elif type(value) is int:
            operands.append(w.int_name(value))
        elif type(value) in (float, np.float64):
            operands.append(w.float_name(f"k{k}_{m}", value))
        else:
            operands.append(w.shared.setdefault(id(value), (f"s{len(w.shared)}", value))[0])
    if transformed:
        w.transformed.append((inputs, prepared, transformed))
    return operands


def _gradients(w, k, differentiated, prepared):
    """Where kernel sum ``k``'s gradients go: ``(buffers, registers)``, the names
    of the buffers an array argument's are stored in, and the slots of the scalar
    arguments whose are summed in a register."""
    buffers, registers, stored_slots = [], [], {}
    for (slot, _), (kind, shape, dtype, is_array) in zip(differentiated,
                                                         prepared.gradients):
        require(dtype == _FLOAT64)
        if kind == STORE and is_array:
            buffers.append(f"b{k}_{len(buffers)}")
            stored_slots.setdefault(slot, []).append(buffers[-1])
            stored = w.array_gradients.setdefault(slot, [])
            require(not stored or stored[0][1] == shape)
            stored.append((buffers[-1], shape))
        else:
            require(kind == REGISTER and not is_array)
            registers.append(slot)
    for names in stored_slots.values():
        if len(names) > 1:
            # (k.sum(x, x): if x's accumulator -- its last buffer, which the backward
            # pass writes first -- is one of these, the buffer before it is met first)
            w.repeated_buffers.update(names)
    return buffers, registers


def _loop(w, k, out, prepared, operands, buffers, registers):
    """The forward pass's call of kernel sum ``k``'s loop, and the sums of its
    chunks: the names of the value and of the ``registers`` register gradients."""
    w.namespace[f"_loop{k}"] = prepared.loop
    width, chunks = prepared.totals_width, w.int_name(prepared.nchunks)
    shape = "".join(w.int_name(size) + ", " for size in prepared.loop_shape)
    # Row c of the totals: the sum and the register gradients of chunk c; the
    # scratch: the loop's own.  One of each shape for all the loops (each loop's
    # totals read as soon as it has run).
    totals = w.arrays.get(("t", prepared.nchunks, width))
    if totals is None:
        totals = w.arrays["t", prepared.nchunks, width] = f"t{len(w.arrays)}"
        w.forward.append(f"{totals} = _empty(({chunks}, {width}))")
    scratch = w.arrays.get(("r", prepared.scratch_row, width))
    if scratch is None:
        scratch = w.arrays["r", prepared.scratch_row, width] = f"r{len(w.arrays)}"
        w.forward.append(f"{scratch} = _empty(({width}, {w.int_name(prepared.scratch_row)}))")
    call = f"({shape}), 0, {chunks}, {w.int_name(prepared.rows)}, " \
           f"{', '.join(operands + buffers)}, {totals}"
    if prepared.threaded:
        # On the loop's own threaded driver (a check: nan when a thread failed)
        w.threaded = max(w.threaded, int(np.prod(prepared.loop_shape)))
        w.namespace[f"_threads{k}"] = prepared.loop.parallel.made()
        _threaded_sum(w, k, len(operands) + len(buffers), width)
        w.check(w.forward, f"_sum{k}(workers, {call}, {scratch})")
    else:
        w.forward.append(f"_loop{k}({call}, {scratch})")
    # The chunks' sums added up as the replay adds them: one chunk as it is,
    # several exactly.
    sums = []
    for column in range(1 + registers):
        sums.append(f"v{out}" if column == 0 else f"x{out}_{column}")
        w.forward.append(f"{sums[-1]} = _chunk_sum({totals}, {column})")
    w.check(w.forward, f"v{out}")
    return sums


def _threaded_sum(w, k, count, width):
    """The source of ``_sum{k}``: kernel sum ``k``'s loop on ``workers`` threads, or
    on this one; nan when a thread failed (the replay meets the exception)."""
    operands = ", ".join(f"o{m}" for m in range(count))
    source = (f"def _sum{k}(workers, shape, lo, hi, rows, {operands}, totals, scratch):\n"
              f"    if workers > 1:\n"
              f"        failed = _zeros(workers, _bool)\n"
              f"        _threads{k}(workers, failed, shape, hi, rows, {operands}, totals, "
              f"_empty((workers, {width}, scratch.shape[1])))\n"
              f"        for t in range(workers):\n"
              f"            if failed[t]:\n"
              f"                return _NAN\n"
              f"        return 0.0\n"
              f"    _loop{k}(shape, lo, hi, rows, {operands}, totals, scratch)\n"
              f"    return 0.0\n\n")
    w.helpers.append((source, [(f"_sum{k}", False)]))


def write_segment(w, segment):
    """A segment (see :mod:`.segments`): its values loop in the forward pass, its
    gradients loop where the backward pass has its sums' cotangents."""
    n = len(w.helpers)
    threaded = segment.size >= config.parallel_threshold
    if threaded:
        w.threaded = max(w.threaded, segment.size)
    source = SegmentSource(segment, n, w.namespace, threaded)
    for kernel in segment.kernels:
        if kernel._cache_key is None:
            w.cacheable = False
    w.helpers.append((source.source, source.functions()))
    w.kernel_sources += [kernel._cache_key for kernel in segment.kernels]
    workers = "workers" if threaded else "1"
    arrays = []
    for kind, item in source.array_params:
        if kind == "array":
            value = segment.arrays[item]
            arrays.append(w.shared.setdefault(id(value), (f"s{len(w.shared)}", value))[0])
        else:
            arrays.append(f"x{item}")
    scalars = [f"v{slot}" for slot in source.scalar_params] + \
        [w.float_name(f"q{n}_{j}", number) for j, number in enumerate(source.numbers)]
    size = w.int_name(segment.size)
    result = w.fresh("seg")
    w.forward.append(f"{result} = _s{n}_forward({', '.join([workers, size] + arrays + scalars)})")
    w.check(w.forward, f"{result}[0]")
    for j, slot in enumerate(segment.sums):
        w.forward.append(f"v{slot} = {result}[{j + 1}]")
        w.check(w.forward, f"v{slot}")
    names = {}
    for slot in source.leaf_gradients:
        names[slot] = f"b{n}s_{slot}"
        w.segment_buffers.add(names[slot])
        stored = w.array_gradients.setdefault(slot, [])
        require(not stored or stored[0][1] == segment.shape)
        stored.append((names[slot], segment.shape))

    def write():
        # Every sum's cotangent must have reached it (else the call is handed back:
        # the replay skips the records no cotangent reaches).
        live = w.emit(w.fresh("live"), " & ".join(
            f"({w.reached[slot]})" for slot in segment.sums))
        bad = w.fresh("bad")
        w.lines.append(f"{bad} = {w.bad} + _where({live}, 0.0, _NAN)")
        w.bad = bad
        gradients = []
        for slot in source.leaf_gradients:
            gradients += [w.accumulator[slot], f"({w.array_reached[slot]})"]
        out = w.fresh("seg")
        w.lines.append(f"{out} = _s{n}_backward(" + ", ".join(
            [workers, size] + [w.cotangent[slot] for slot in segment.sums] + arrays + scalars
            + gradients[0::2] + gradients[1::2]) + ")")
        bad = w.fresh("bad")
        w.lines.append(f"{bad} = {w.bad} + {out}[0]")
        w.bad = bad
        for slot in source.leaf_gradients:
            w.array_reached[slot] = "True"
        for j, slot in enumerate(source.dots):
            w.add_scalar(slot, w.emit(w.fresh("ct"), f"{out}[{j + 1}]"), live)
    w.backward.append(write)
