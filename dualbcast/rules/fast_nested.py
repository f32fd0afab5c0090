"""Kernels in forward mode and at second order: the fast rules when a kernel's
arguments are traced by more than one trace, or by a forward-mode one.

- **Forward mode** (``jvp``, the innermost trace is forward, the values plain): the
  kernel's tangent loop gives the value and its tangent in one pass.
- **Second order** (the innermost trace's values are themselves traced by an
  enclosing trace: ``jvp(grad(f))``, ``grad(grad(f))``): the value and the partials
  the inner rule needs are computed as *outputs* recorded on the enclosing trace
  (nested duals).  Under a forward-mode trace (``jvp(grad(f))``) one second-order loop
  gives the value, the partials and all their tangents (Hessian-vector products);
  under a reverse-mode one (``grad(grad(f))``) each is recorded as a
  :class:`KernelOutput`, whose cotangent a partial sends back is a Hessian-vector
  product too (the Hessian is symmetric).

Orders are counted in the kernel's arguments, not in the nesting: a tangent or a
cotangent enters every output linearly, so differentiating with respect to one (``grad``
of ``jvp(k.sum, x; t)`` in ``t``: the gradient; ``jvp(grad(k.sum), x; v)`` in ``v``: the
Hessian) needs no derivative the loops do not give (:func:`run_loop`).

Inside ``dualbcast.jit`` of such a function, the outermost trace only records the
program (a staging trace, :mod:`dualbcast.core.staging`): each loop above is recorded
there as one staged call (:func:`run_loop`).  Any other third trace of the arguments
would need third derivatives of the kernel: refused with a clear error.
"""
import numpy as np

from ..core.batching import Batched
from ..core.box import Box, inner_foreign, keep, record, trace_inputs
from ..core.tape import Traced
from .fast_batched import batched_loop
from ..core.forward import ForwardTape, forward_result
from ..core.registry import Primitive
from ..core.staging import staged_call, staging_only
from .common import nan_safe, shape_of, unbroadcast


def forward_call(kernel, mode, tape, values, active, parents):
    """``k(*values)`` (``mode`` "map") or ``k.sum(*values)`` ("sum") on a forward-mode
    trace ``tape`` whose boxes are at ``active`` (slots ``parents``): the value and its
    tangent from one loop, as a box of ``tape``."""
    positions, tangents = [], []
    for i, slot in zip(active, parents):
        t = tape.tangents.get(slot)
        if t is not None:
            positions.append(i)
            tangents.append(t)
    if not positions:
        return forward_result(tape, run_loop(kernel, mode, None, values), None)
    loop = "tangent" if mode == "map" else "sum_tangent"
    ans, tangent = run_loop(kernel, loop, tuple(positions), values, tangents)
    return forward_result(tape, ans, tangent)


def nested_outputs(kernel, mode, values, active):
    """``(value, partials)`` of the kernel call on ``values`` (some traced by enclosing
    traces) with respect to the ``active`` positions, each recorded on the enclosing
    traces: "map" gives partials at the broadcast shape, "sum" the gradients at each
    argument's own shape."""
    if inner_foreign(values) is not None:
        # The innermost enclosing trace is a vmap: its loops, over the batch.
        return _first_order(kernel, mode, values, tuple(active))
    enclosing = _enclosing_forward_trace(values)
    if enclosing is not None:
        return _forward_outputs(kernel, mode, values, active, enclosing)
    if staging_only(values):
        # The enclosing trace only records the program (dualbcast.jit): the first-order
        # loop, staged as one record.
        return _first_order(kernel, mode, values, tuple(active))
    # The enclosing trace is reverse mode (grad(grad(f))): one first-order loop, each
    # output recorded with its own vjps.
    tape, plain_values, parents, argnums, others = trace_inputs(values)
    active = tuple(active)
    value, partials = _first_order(kernel, mode, plain_values, active)
    saved = tuple(v if type(arg) is Box else keep(tape, v)
                  for arg, v in zip(values, plain_values))
    outputs = tuple(
        record(tape, output, parents, argnums, _vjps(kernel, mode, active, which, len(values)),
               saved, {}, KernelOutput(kernel, mode, active, which), others)
        for which, output in [(None, value)] + list(enumerate(partials)))
    return outputs[0], outputs[1:]


def _enclosing_forward_trace(values):
    """The innermost trace of the boxes among ``values`` when it is a forward-mode
    trace (``jvp(grad(f))``: the common second order), else None."""
    tapes = [value.tape for value in values if type(value) is Box]
    if not tapes:
        return None
    tape = max(tapes, key=lambda tape: tape.level)
    return tape if type(tape) is ForwardTape and not tape.closed else None


def _forward_outputs(kernel, mode, values, active, tape):
    """:func:`nested_outputs` when the enclosing trace is a forward-mode ``tape``: the
    value, the partials and all their tangents from one second-order loop, as boxes of
    ``tape`` (nothing recorded: a forward trace keeps no records)."""
    plain_values, positions, tangents = list(values), [], []
    for i, value in enumerate(values):
        if type(value) is Box and value.tape is tape:
            plain_values[i] = value.value
            t = tape.tangents.get(value.slot)
            if t is not None:
                positions.append(i)
                tangents.append(t)
    if not positions:
        value, partials = _first_order(kernel, mode, plain_values, tuple(active))
        return forward_result(tape, value, None), tuple(
            forward_result(tape, p, None) for p in partials)
    loop = "partials_tangent" if mode == "map" else "sum_partials_tangent"
    outputs = run_loop(kernel, loop, (tuple(active), tuple(positions)), plain_values, tangents)
    count = len(active)
    value, value_tangent = outputs[:2]
    partials, partial_tangents = outputs[2:2 + count], outputs[2 + count:]
    return forward_result(tape, value, value_tangent), tuple(
        forward_result(tape, p, t) for p, t in zip(partials, partial_tangents))


class NestedKernelRule(Primitive):
    """The primitive the inner trace records for a kernel call whose value and
    partials (``local``, per ``active`` position) an enclosing trace records: its vjps
    are the cotangent times a partial (NaN-safe, as traced operations), summed to the
    argument's shape; its jvp (the inner trace a forward-mode one) the tangents times
    the partials."""

    def __init__(self, kernel, mode, active, local):
        super().__init__()
        self.kernel, self.mode, self.active, self.local = kernel, mode, active, local

    @property
    def __name__(self):
        return f"{self.kernel.__name__} ({self.mode}, second order)"

    def vjps_of(self, nargs):
        vjps = [None] * nargs
        for i, partial in zip(self.active, self.local):
            vjps[i] = self._vjp(i, partial)
        return vjps

    def _vjp(self, i, partial):
        if self.mode == "map":
            return lambda g, ans, *args: unbroadcast(nan_safe(g, partial), shape_of(args[i]))
        return lambda g, ans, *args: nan_safe(g, partial)

    def jvp(self, tangents, ans, *values):
        total = None
        for i, partial in zip(self.active, self.local):
            t = tangents[i]
            if t is None:
                continue
            term = nan_safe(t, partial)
            if self.mode == "sum":
                term = np.sum(term)
            total = term if total is None else total + term
        return total


def _first_order(kernel, mode, values, wrt):
    """``(value, partials w.r.t. wrt)`` from the kernel's first-order loop."""
    outputs = run_loop(kernel, "partials" if mode == "map" else "sum_partials", wrt, values)
    return outputs[0], outputs[1:]


def _hessian_times(kernel, mode, values, j, i, t):
    """The partial (map) or gradient (sum) of argument ``j``, differentiated along the
    tangent ``t`` of argument ``i``: one second-order loop."""
    loop = "partials_tangent" if mode == "map" else "sum_partials_tangent"
    return run_loop(kernel, loop, ((j,), (i,)), values, (t,))[3]


class KernelLoop:
    """One of a kernel's loops as a function of its operands, the arguments then the
    tangents (see :mod:`dualbcast.kernel.tangents`), giving its outputs as one flat
    tuple: the value, the value's tangent (tangent modes), the partials, their tangents
    (second order) -- or, for "map" and "sum", the value alone.  ``spec``: the loop's
    ``wrt`` / tangent positions.  What a staging trace records (a replay calls it)."""

    __slots__ = ("kernel", "loop", "spec", "nargs", "prepared")

    def __init__(self, kernel, loop, spec, nargs):
        self.kernel, self.loop, self.spec, self.nargs = kernel, loop, spec, nargs
        # Kept for a replay (as a gradient program's kernel rule keeps it): its
        # operands have the trace's signature, so the kernel's lookup is skipped.
        self.prepared = None

    @property
    def __name__(self):
        return f"{self.kernel.__name__} ({self.loop} loop)"

    @property
    def outputs(self):
        """How many values the loop gives (None: one, not in a tuple)."""
        loop, spec = self.loop, self.spec
        if loop in ("map", "sum"):
            return None
        if loop in ("partials", "sum_partials"):
            return 1 + len(spec)
        if loop in ("tangent", "sum_tangent"):
            return 2
        return (1 + self.width) * (1 + len(spec[0]))

    @property
    def width(self):
        """The tangent directions a second-order sum loop carries (see
        :func:`_linear_in_tangents`): ``spec`` ``(wrt, positions, width)``, else 1."""
        second = self.loop in ("partials_tangent", "sum_partials_tangent")
        return self.spec[2] if second and len(self.spec) == 3 else 1

    def __call__(self, *operands):
        values, tangents = operands[:self.nargs], operands[self.nargs:]
        loop, prepared = self.loop, self.prepared
        if prepared is None:
            prepared = self.prepared = self.kernel._prepare(loop, values, self.spec)
        if loop == "map":
            return prepared.map(values)
        if loop == "sum":
            return prepared.sum(values)
        if loop in ("partials", "sum_partials"):
            value, partials = prepared.value_and_partials(values) if loop == "partials" \
                else prepared.sum_and_partials(values)
            return (value, *(partials if type(partials) is tuple else (partials,)))
        outputs = getattr(prepared, loop)(values, tuple(tangents))
        if loop in ("tangent", "sum_tangent"):
            return outputs
        value, value_tangent, partials, partial_tangents = outputs
        if self.width > 1:              # several directions: each a tuple of them
            return (value, *value_tangent, *partials,
                    *(t for direction in partial_tangents for t in direction))
        return (value, value_tangent, *partials, *partial_tangents)


def run_loop(kernel, loop, spec, values, tangents=()):
    """What :class:`KernelLoop` gives on ``values`` and ``tangents``: computed, or, if
    boxes of a staging trace are among them (dualbcast.jit), recorded there as one
    staged call.  Orders are counted in the values: traced tangents (a derivative with
    respect to a tangent or a cotangent) ask for nothing the loop does not compute
    (:func:`_linear_in_tangents`), while values traced by any other trace would need a
    derivative of the loop's own: third order, refused."""
    call = KernelLoop(kernel, loop, spec, len(values))
    operands = (*values, *tangents)
    if plain(operands):
        return call(*operands)
    foreign = inner_foreign(operands)
    if foreign is not None:         # a vmap's values are the innermost
        trace = foreign.trace
        if any(trace.unbatched(value) is not value for value in values):
            return batched_loop(run_loop, kernel, loop, spec, values, tangents, trace)
        return _linear_in_tangents(kernel, loop, spec, values, tangents)
    if not staging_only(values):
        raise NotImplementedError(
            f"{kernel.__name__}: derivatives of third order or higher through a "
            f"fast_broadcast kernel are not supported (kernels give value, partials and "
            f"Hessian-vector products); write that part with NumPy operations")
    if not staging_only(tangents):
        return _linear_in_tangents(kernel, loop, spec, values, tangents)
    return staged_call(call, operands, call.outputs)


def _linear_in_tangents(kernel, loop, spec, values, tangents):
    """:func:`run_loop` of a tangent loop whose tangents are traced (``grad`` of
    ``jvp(k.sum, x; t)`` with respect to ``t``; the Hessian as ``jvp(grad(f), x; v)``
    differentiated in ``v``) and whose values are not.  Every output of the loop is
    linear in the tangents: the loops here compute its coefficients (the partials along
    each tangent's argument; for second order the second partials, one loop per
    tangent with a unit tangent), at the broadcast shape, and the tangents enter by
    NaN-safe products that their own traces record.  So the tangents can be
    differentiated to any order, and the kernel only ever to second."""
    if loop in ("tangent", "sum_tangent"):
        outputs = run_loop(kernel, "partials", tuple(spec), values)
        value, tangent = outputs[0], _combination(tangents, outputs[1:])
        if loop == "tangent":
            return value, tangent
        return run_loop(kernel, "sum", None, values), np.sum(tangent)
    wrt, positions = spec
    count = len(wrt)
    summed = loop == "sum_partials_tangent"
    # Per tangent: the loop's coefficients of the value's tangent and of each partial's
    # for its unit tangent (the others 0).  Where the argument is a scalar of a sum (its
    # tangent factors out of the sum), the sum loop's reduced coefficients, a chunk of
    # unit tangents per loop; else the map's, one loop per tangent.
    coefficients = [None] * len(positions)
    reduced = [k for k, j in enumerate(positions) if summed and not shape_of(values[j])]
    for chunk in _chunks(reduced):
        width = len(chunk)
        # (direction d of the loop the unit tangent of positions[chunk[d]]: per
        # position, its tangent in each direction)
        unit = tuple(1.0 if chunk[d] == m else 0.0
                     for m in range(len(positions)) for d in range(width))
        outputs = run_loop(kernel, loop, (wrt, positions, width) if width > 1
                           else (wrt, positions), values, unit)
        for d, k in enumerate(chunk):
            if k is None:
                continue                                # (padding)
            first = 1 + width + count + d * count     # (its partials' tangents)
            coefficients[k] = outputs[1 + d], outputs[first:first + count]
    value = partials = None
    for k in range(len(positions)):
        if coefficients[k] is None:
            unit = tuple(1.0 if m == k else 0.0 for m in range(len(positions)))
            outputs = run_loop(kernel, "partials_tangent", (wrt, positions), values, unit)
            value, partials = outputs[0], outputs[2:2 + count]
            coefficients[k] = outputs[1], outputs[2 + count:]
    tangent, partial_tangents = None, [None] * count
    for k, t in enumerate(tangents):
        summed_here = summed and k not in reduced       # (a map's terms, summed)
        value_coefficient, partial_coefficients = coefficients[k]
        term = nan_safe(t, value_coefficient)
        tangent = _plus(tangent, np.sum(term) if summed_here else term)
        for i, coefficient in enumerate(partial_coefficients):
            term = nan_safe(t, coefficient)
            if summed_here:
                term = unbroadcast(term, shape_of(values[wrt[i]]))
            partial_tangents[i] = _plus(partial_tangents[i], term)
    if loop == "partials_tangent":
        return (value, tangent, *partials, *partial_tangents)
    outputs = run_loop(kernel, "sum_partials", wrt, values)    # the sum loop's bits
    return (outputs[0], tangent, *outputs[1:], *partial_tangents)


# Unit tangents a sum loop carries at once (the loop's width): measured on a nine-argument
# kernel's Hessian, three directions per loop took 0.65x the time of one at a time, and
# nine 0.75x (the nested duals then spill out of registers) at 2.2x the compile time.
CHUNK = 3


def _chunks(indices):
    """``indices`` in consecutive chunks of one width, at most :data:`CHUNK`, as few as
    that allows, the last one padded with None (a direction whose tangent is 0): one
    compiled loop serves them all."""
    if not indices:
        return []
    count = -(-len(indices) // CHUNK)
    width = -(-len(indices) // count)
    padded = list(indices) + [None] * (count * width - len(indices))
    return [padded[c * width:(c + 1) * width] for c in range(count)]


def _plus(total, term):
    return term if total is None else total + term


def _combination(tangents, coefficients):
    """The sum of ``tangent * coefficient`` (NaN-safe) over the pairs, at the
    coefficients' (broadcast) shape."""
    if len(tangents) > 1 and _unit_tangents(tangents) and _float64_rows(coefficients):
        # jacfwd's tangents (example b: a 1 for argument b, 0 for the others): example
        # b's sum is coefficient b (NaN-safe, 0 times anything adds nothing), so the
        # batch is the coefficients as rows -- the loop's own block of partials where
        # they are its rows -- with no product and no pass over them.  (The one
        # difference from adding the products: a partial of -0.0 stays -0.0.)
        return Batched(_rows(coefficients), tangents[0].trace)
    if len(tangents) > 1 and _finite_scalars(tangents) and _finite_arrays(coefficients):
        # Scalar tangents (a vmap's batch of them: jacfwd of a kernel's parameters)
        # times finite coefficients: one matrix product, NaN-safe as it is (no factor is
        # infinite or nan), equal to the sum of products to rounding.
        shape = coefficients[0].shape
        stacked = np.stack([np.broadcast_to(c, shape).reshape(-1) for c in coefficients])
        return np.reshape(np.stack(tangents) @ stacked, shape)
    total = None
    for t, coefficient in zip(tangents, coefficients):
        term = nan_safe(t, coefficient)
        total = term if total is None else total + term
    return total


class KernelOutput:
    """The function an enclosing reverse-mode trace records for one output of a kernel
    call: the value (``which`` None) or the partial with respect to
    ``active[which]`` (map) / the gradient of that argument (sum), of ``values`` (a
    replay calls it)."""

    __slots__ = ("kernel", "mode", "active", "which")

    def __init__(self, kernel, mode, active, which):
        self.kernel, self.mode, self.active, self.which = kernel, mode, active, which

    @property
    def __name__(self):
        what = "value" if self.which is None else f"partial {self.active[self.which]}"
        return f"{self.kernel.__name__} ({self.mode} {what})"

    def __call__(self, *values):
        value, partials = _first_order(self.kernel, self.mode, values, self.active)
        return value if self.which is None else partials[self.which]


def _vjps(kernel, mode, active, which, nargs):
    """An output's vjp per argument: the value's sends back the cotangent times the
    argument's partial; a partial's, the Hessian times its cotangent (one second-order
    loop, with the cotangent as the tangent of the partial's argument: the Hessian is
    symmetric)."""
    def to_argument(ct, value):
        return unbroadcast(ct, shape_of(value)) if mode == "map" else ct

    def vjp_for(j):
        if which is None:
            def vjp(g, ans, *values):
                _, partials = _first_order(kernel, mode, values, (j,))
                return to_argument(nan_safe(g, partials[0]), values[j])
        else:
            def vjp(g, ans, *values):
                hv = _hessian_times(kernel, mode, values, j, active[which], g)
                return to_argument(hv, values[j])
        return vjp
    return tuple(vjp_for(j) for j in range(nargs))


def _finite_scalars(tangents):
    """Whether ``tangents`` are finite float scalars of one example each, batched by one
    vmap whose stacks are plain arrays."""
    return _float64_scalars(tangents) and all(np.isfinite(t.value).all() for t in tangents)


def _float64_scalars(tangents):
    """Whether ``tangents`` are float64 scalars of one example each, batched by one
    vmap whose stacks are plain arrays."""
    trace = getattr(tangents[0], "trace", None)
    return all(type(t) is Batched and t.trace is trace and not t.shape
               and type(t.value) is np.ndarray and t.value.dtype == np.float64
               for t in tangents)


def _unit_tangents(tangents):
    """Whether ``tangents`` are the unit tangents of one vmap (float64 scalars of one
    example each, example b's 1 for tangent b and 0 for the others), as ``jacfwd``
    makes them."""
    if not _float64_scalars(tangents):
        return False
    stacked = np.stack([t.value for t in tangents], axis=1)
    return stacked.shape[0] == len(tangents) and (stacked == np.eye(len(tangents))).all()


def _float64_rows(coefficients):
    shape = np.shape(coefficients[0])
    return all(type(c) in (np.ndarray, np.float64) and c.dtype == np.float64
               and c.shape == shape for c in coefficients)


def _rows(coefficients):
    """The float64 arrays ``coefficients`` (of one shape) as the rows of one array:
    the array they are the consecutive rows of, if they are (a loop's block of
    partials), else a copy."""
    first = coefficients[0]
    block = first.base
    if type(block) is np.ndarray and block.dtype == np.float64 and block.flags.c_contiguous \
            and block.shape == (len(coefficients),) + first.shape:
        start = block.__array_interface__["data"][0]
        if all(c.base is block and c.__array_interface__["data"][0] == start + i * block.strides[0]
               for i, c in enumerate(coefficients)):
            return block
    return np.stack(coefficients)


def _finite_arrays(coefficients):
    shape = getattr(coefficients[0], "shape", None)
    return all(type(c) is np.ndarray and c.dtype == np.float64 and c.shape == shape
               and c.ndim and np.isfinite(c).all() for c in coefficients)


def plain(values):
    """Whether none of ``values`` is traced (by a tape or a vmap)."""
    return not any(isinstance(value, Traced) for value in values)
