"""Kernels under ``vmap``: a kernel's loop over every example at once.

A kernel maps elementwise, so its loop over a batch is one loop over the broadcast of
the stacks of examples, each example's axes aligned to the right (as NumPy aligns one
example's arguments).  A map's outputs (values, partials, tangents) are then the
batched outputs themselves.  A sum's are sums per example: the map's loop, then each
example's total and each argument's gradient reduced to its own shape, by the batching
rules (the stack of maps is materialised; the sums are NumPy's, so they agree with the
unbatched loop's to rounding).
"""
import numpy as np

from .batching import _aligned, _ndim
from .common import shape_of, unbroadcast

_MAP_OF = {"sum": "map", "sum_partials": "partials", "sum_tangent": "tangent",
           "sum_partials_tangent": "partials_tangent"}


def batched_loop(run_loop, kernel, loop, spec, values, tangents, trace):
    """What ``run_loop(kernel, loop, spec, values, tangents)`` gives, for the values of
    the batch ``trace`` among ``values`` (and maybe ``tangents``)."""
    operands = (*values, *tangents)
    flags = [trace.unbatched(x) is not x for x in operands]
    stacks = [trace.unbatched(x) for x in operands]
    ndim = max(_ndim(v, b) for v, b in zip(stacks, flags))
    aligned = [_aligned(v, b, ndim) for v, b in zip(stacks, flags)]
    count = len(values)
    map_loop = _MAP_OF.get(loop, loop)
    if map_loop == "map":
        # (the kernel's own call: stacks traced by a tape get its fast rule)
        outputs = trace.wrap(kernel(*aligned[:count]))
    else:
        outputs = trace.wrap(run_loop(kernel, map_loop, spec, aligned[:count],
                                      aligned[count:]))
    if map_loop == loop:
        return outputs
    if loop == "sum":
        return np.sum(outputs)
    if loop == "sum_tangent":
        return np.sum(outputs[0]), np.sum(outputs[1])
    if loop == "sum_partials":
        wrt = (spec,) if type(spec) is int else spec
        return (np.sum(outputs[0]), *(unbroadcast(p, shape_of(values[i]))
                                      for i, p in zip(wrt, outputs[1:])))
    wrt = spec[0]
    partials, tangents_of = outputs[2:2 + len(wrt)], outputs[2 + len(wrt):]
    return (np.sum(outputs[0]), np.sum(outputs[1]),
            *(unbroadcast(p, shape_of(values[i])) for i, p in zip(wrt, partials)),
            *(unbroadcast(t, shape_of(values[i])) for i, t in zip(wrt, tangents_of)))
