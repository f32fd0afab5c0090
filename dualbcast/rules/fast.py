"""The fast rules: ``@fast_broadcast`` kernels called on traced values.

``k(*args)`` runs one fused dual-number loop giving the values and the partials with
respect to the traced arguments only; its backward multiplies by the cotangent and sums
over broadcast axes.  ``k.sum(*args)`` runs the sum-of-map loop, which already reduced
each gradient to its argument's shape (a broadcast coefficient's gradient accumulates
in the loop), so its backward only scales by the cotangent, in place when it may.
"""
import numpy as np

from ..core.box import Box, record, trace_inputs
from ..kernel.threads import multiply_in_place
from ..kernel.tracing import hook
from .common import nan_safe, shape_of, unbroadcast


def traced_call(kernel, args):
    tape, values, parents, active = trace_inputs(args)
    ans, partials = kernel.value_and_partials(*values, wrt=active)
    vjps = [None] * len(args)
    for i, partial in zip(active, partials):
        vjps[i] = _map_vjp(partial, i, tape.single_use)
    return record(tape, ans, parents, active, vjps, tuple(values))


def traced_sum(kernel, args):
    tape, values, parents, active = trace_inputs(args)
    out = None
    if tape.gradient_buffers:
        # value_and_grad(out=...): the loop writes the gradient of an argument straight
        # into the caller's array (once: a second use of the argument adds to it later).
        out = tuple(tape.gradient_buffers.pop(slot, None) for slot in parents)
    total, gradients = kernel.sum_and_partials(*values, wrt=active, out=out)
    vjps = [None] * len(args)
    for i, gradient in zip(active, gradients):
        vjps[i] = _sum_vjp(gradient, tape.single_use)
    return record(tape, total, parents, active, vjps, tuple(values))


def _map_vjp(partial, position, single_use):
    def vjp(g, ans, *args):
        # Backward runs once on a single-use tape: the partials buffer becomes the
        # cotangent.  NaN-safe like every rule: a zero cotangent gives 0 even where the
        # partial is infinite.
        reuse = single_use and type(partial) is np.ndarray and partial.shape == shape_of(g)
        ct = nan_safe(g, partial, out=partial if reuse else None)
        return unbroadcast(ct, shape_of(args[position]))
    return vjp


def _sum_vjp(gradient, single_use):
    # gradient is d(sum)/d(argument) at the argument's shape; g is a scalar.
    def vjp(g, ans, *args):
        if g == 0:                      # NaN-safe: no influence, no gradient
            return np.zeros(shape_of(gradient), np.result_type(gradient))[()]
        if not single_use or type(gradient) is not np.ndarray:
            return gradient * g         # a pullback may run again: keep the buffer intact
        if g != 1:
            multiply_in_place(gradient, g)
        return gradient
    return vjp


hook.box_type = Box
hook.call = traced_call
hook.sum = traced_sum
