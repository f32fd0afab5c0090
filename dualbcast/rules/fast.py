"""The fast rules: ``@fast_broadcast`` kernels called on traced values.

``k(*args)`` runs one fused dual-number loop giving the values and the partials with
respect to the traced arguments only; its backward multiplies by the cotangent and sums
over broadcast axes.  ``k.sum(*args)`` runs the sum-of-map loop, which already reduced
each gradient to its argument's shape (a broadcast coefficient's gradient accumulates
in the loop), so its backward only scales by the cotangent, in place when it may.
"""
import numpy as np

from ..core.batching import Batched, BatchTrace
from ..core.box import Box, record, trace_inputs
from ..core.tape import SCALARS, RuleRecord, Tape, Traced, raised
from ..kernel.products import nan_safe_dot
from ..kernel.threads import multiply_in_place
from ..kernel.tracing import hook
from .common import is_lazy, nan_safe, shape_of, unbroadcast
from ..core.forward import ForwardTape
from ..core.stack import current_trace
from ..core.staging import StagingTape, staging_only
from .fast_nested import NestedKernelRule, forward_call, nested_outputs, plain, run_loop


def traced_call(kernel, args):
    return _traced(_CallRule, kernel, args)


def traced_sum(kernel, args):
    return _traced(_SumRule, kernel, args)


def _traced(rule_type, kernel, args):
    trace, values, parents, active, _ = trace_inputs(args)
    mode = "map" if rule_type is _CallRule else "sum"
    return trace.kernel_rule(rule_type, kernel, mode, args, values, parents, active)


def _batched_kernel_call(trace, rule_type, kernel, mode, args, values, parents, active):
    """A kernel call with a vmap's values the innermost: one loop over the batch (the
    boxes of enclosing tapes among its arguments record it as they do any call)."""
    return run_loop(kernel, mode, None, args)


def _staged_kernel_call(tape, rule_type, kernel, mode, args, values, parents, active):
    """A kernel call on a staging trace (dualbcast.jit records the program): the value
    only, its loop one record."""
    return run_loop(kernel, mode, None, args)


def _forward_kernel_call(tape, rule_type, kernel, mode, args, values, parents, active):
    """A kernel call on a forward-mode trace: the tangent loop (staged inside
    dualbcast.jit); with values traced by an enclosing reverse trace, as a tape does."""
    if staging_only(values):
        return forward_call(kernel, mode, tape, values, active, parents)
    return _reverse_kernel_call(tape, rule_type, kernel, mode, args, values, parents, active)


def _reverse_kernel_call(tape, rule_type, kernel, mode, args, values, parents, active):
    """A kernel call on a reverse-mode tape: the value and the partials from one loop,
    recorded with vjps that multiply them by the cotangent."""
    if not plain(values):           # traced by enclosing traces too: second order
        value, partials = nested_outputs(kernel, mode, values, active)
        rule = NestedKernelRule(kernel, mode, active, partials)
        return record(tape, value, parents, active, rule.vjps_of(len(values)), tuple(values),
                      _NO_KWARGS, rule)
    rule = rule_type(kernel, active)
    try:
        ans, vjps = rule(tape, values, parents)
    except Exception:
        raised(tape)
        raise
    recorder = tape.recorder
    if recorder is not None:
        # The backward pass needs no constant (no snapshot); a recorder may want them.
        values = [value if type(arg) is Box else recorder.constant(value, value)
                  for arg, value in zip(args, values)]
    return record(tape, ans, parents, active, vjps, tuple(values), _NO_KWARGS, rule,
                  kind=RuleRecord)


class _KernelRule:
    """A fast rule as a record's ``func`` (a :class:`RuleRecord`): ``rule(tape,
    values, parents) -> (ans, vjps)``, so that running it again runs the kernel's loop
    again and gives fresh vjps."""

    __slots__ = ("kernel", "active", "prepared")

    def __init__(self, kernel, active):
        self.kernel = kernel
        self.active = active        # positions of the traced arguments
        self.prepared = None

    def _prepared(self, mode, values):
        # Kept from the trace for the replays: a replay's arguments have the trace's
        # signature, so the kernel's own lookup (a key over every argument) is skipped.
        prepared = self.prepared
        if prepared is None:
            prepared = self.prepared = self.kernel._prepare(mode, values, self.active)
        return prepared


class _CallRule(_KernelRule):
    __slots__ = ()

    def __call__(self, tape, values, parents):
        ans, partials = self._prepared("partials", values).value_and_partials(values)
        vjps = [None] * len(values)
        for i, partial in zip(self.active, partials):
            vjps[i] = _map_vjp(partial, i, tape.single_use)
        return ans, vjps


class _SumRule(_KernelRule):
    __slots__ = ()

    def __call__(self, tape, values, parents):
        out = None
        if tape.gradient_buffers:
            # value_and_grad(out=...): the loop writes the gradient of an argument
            # straight into the caller's array (once: a second use of the argument adds
            # to it later).
            out = tuple(tape.gradient_buffers.pop(slot, None) for slot in parents)
            # (one the kernel also reads, a view of it passed in by f, is filled at the
            # end instead: the loop would overwrite what it reads)
            out = tuple(None if buffer is not None and _overlaps_any(buffer, values)
                        else buffer for buffer in out)
        total, gradients = self._prepared("sum_partials", values).sum_and_partials(values, out)
        vjps = [None] * len(values)
        for i, gradient in zip(self.active, gradients):
            vjps[i] = _sum_vjp(gradient, tape.single_use)
        return total, vjps


def _overlaps_any(buffer, values):
    return any(type(value) is np.ndarray and np.may_share_memory(buffer, value)
               for value in values)


def kernel_sum_loop(func):
    """The loop of a kernel sum's rule (a record's ``func``, as ``k.sum`` on traced
    values made it) as a :class:`~dualbcast.kernel.prepared.SumLoop`, or None for any
    other function.  Its vjp, for code that calls the loop itself, is
    :data:`SUM_COTANGENT_FORM` per element of each gradient."""
    if type(func) is not _SumRule or func.prepared is None:
        return None
    return func.prepared.sum_loop()


def kernel_map_rule(func):
    """``(kernel, prepared call)`` of a kernel map's rule (a record's ``func``, as
    ``k(...)`` on traced values made it: values and partials from the partials loop,
    its vjps :func:`_map_vjp`), or None for any other function."""
    if type(func) is not _CallRule or func.prepared is None:
        return None
    return func.kernel, func.prepared


def kernel_prepared(func):
    """The prepared call (a :class:`~dualbcast.kernel.prepared.PreparedCall`) of a
    kernel's rule (a record's ``func``), or None for any other function."""
    return func.prepared if isinstance(func, _KernelRule) else None


def _map_vjp(partial, position, single_use):
    def vjp(g, ans, *args):
        # Backward runs once on a single-use tape: the partials buffer becomes the
        # cotangent.  NaN-safe like every rule: a zero cotangent gives 0 even where the
        # partial is infinite.  One compiled pass where it can (float64, one shape).
        shape = shape_of(args[position])
        if not shape:
            ct = nan_safe_dot(g, partial)       # a scalar argument (a coefficient)
            if ct is not None:
                return _FLOAT64(ct)             # (the type NumPy's sum would give)
        reuse = single_use and type(partial) is np.ndarray and partial.shape == shape_of(g) \
            and (type(g) is np.ndarray or type(g) in SCALARS)    # (not a Dask array's)
        ct = nan_safe(g, partial, out=partial if reuse else None)
        return unbroadcast(ct, shape)
    return vjp


_FLOAT64 = np.float64


# _sum_vjp as a form, for code that compiles it (dualbcast.jit's fusion): the cotangent
# of one element ``{x}`` of a gradient the loop computed, given the sum's cotangent
# ``{g}`` — the IEEE operation _sum_vjp performs: 0 wherever ``{g}`` is 0, or where
# ``{x}`` is 0 and ``{g}`` not finite; else the product (-0.0 where it is).
SUM_COTANGENT_FORM = "(0.0 if {g} == 0.0 or ({x} == 0.0 and {g} - {g} != 0.0) else {x} * {g})"


def _sum_vjp(gradient, single_use):
    # gradient is d(sum)/d(argument) at the argument's shape; g is a scalar.
    lazy = is_lazy(gradient)

    def vjp(g, ans, *args):
        if lazy or type(g) not in SCALARS and (is_lazy(g) or isinstance(g, Traced)):
            # Dask: lazy ("g == 0?" would compute g now); a traced cotangent (a gradient
            # differentiated with respect to what scales it): a product its trace
            # records, never written into the buffer
            return nan_safe(g, gradient)
        if g == 0:                      # NaN-safe: no influence, no gradient
            return np.zeros(shape_of(gradient), np.result_type(gradient))[()]
        if g - g != 0:                  # g infinite or nan: a zero partial stays 0
            return nan_safe(g, gradient)
        if not single_use or type(gradient) is not np.ndarray:
            return gradient * g         # a pullback may run again: keep the buffer intact
        if g != 1:
            multiply_in_place(gradient, g)
        return gradient
    return vjp


_NO_KWARGS = {}
Tape.kernel_rule = _reverse_kernel_call
ForwardTape.kernel_rule = _forward_kernel_call
StagingTape.kernel_rule = _staged_kernel_call
BatchTrace.kernel_rule = _batched_kernel_call
hook.box_type = Box
hook.takes_lazy_arrays = lambda: current_trace() is None or current_trace().takes_lazy_arrays()
hook.batched_type = Batched
hook.call = traced_call
hook.sum = traced_sum
