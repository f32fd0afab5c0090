"""VJPs of contractions: ``einsum`` (explicit and implicit subscripts, ``...``, the
sublist form, any number of operands) and ``tensordot``.  Each operand's cotangent is
itself an ``einsum`` (a ``tensordot`` and a transpose): differentiable again.  Both are
linear in each operand: the tangent is the sum over the operands of the contraction
with that operand replaced by its tangent."""
import functools
import string

import numpy as np

from ..core.box import apply, constant, unbox
from ..core.registry import define
from .common import constant_dtype, no_out
from .linalg import multilinear

try:                                    # NumPy's own parser: '...', implicit output,
    from numpy._core.einsumfunc import _parse_einsum_input     # sublists -> letters
except ImportError:                     # pragma: no cover  (NumPy < 2)
    from numpy.core.einsumfunc import _parse_einsum_input


def _einsum_rule(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    no_out("einsum", out)
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], operands[1:]
    else:
        # The sublist form einsum(a, [0, 1], b, [1, 2], [0, 2]): as the explicit string.
        arrays = operands[0:2 * (len(operands) // 2):2]
        inputs, output = _parsed_sublists(operands)
        subscripts = f"{','.join(inputs)}->{output}"
    kwargs = {"subscripts": subscripts, "optimize": optimize, "order": order,
              "casting": casting}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if constant_dtype("einsum", dtype):
        return constant(_einsum, arrays, kwargs)
    return apply(_einsum, _einsum_vjps(len(arrays)), arrays, kwargs)


def _einsum(*arrays, subscripts, **kwargs):
    return np.einsum(subscripts, *arrays, **kwargs)


def _placeholder(shape):
    return np.broadcast_to(np.zeros((), np.float64), shape)    # no memory: shapes only


def _parsed_sublists(operands):
    values = [_placeholder(np.shape(unbox(x))) if i % 2 == 0 and i < len(operands) - 1
              else x for i, x in enumerate(operands)]
    inputs, output, _ = _parse_einsum_input(values)
    return inputs.split(","), output


@functools.lru_cache(maxsize=1024)
def _parsed(subscripts, shapes):
    """``(input subscripts per operand, output subscripts)``, with '...' as letters and
    the implicit output made explicit."""
    inputs, output, _ = _parse_einsum_input([subscripts] + [_placeholder(s) for s in shapes])
    return inputs.split(","), output


@functools.lru_cache(maxsize=None)
def _einsum_vjps(n):
    return tuple(functools.partial(_einsum_vjp, k) for k in range(n))


def _einsum_vjp(k, g, ans, *arrays, subscripts, optimize=False, order="K", casting="safe",
                dtype=None):
    """The cotangent of operand ``k``: ``g`` contracted with the other operands onto
    ``k``'s subscripts.  A letter repeated in ``k`` (a diagonal, 'ii->i') gets a fresh
    letter and an identity matrix joining the two; a letter only ``k`` has (summed in
    ``k`` alone, 'ij->i') a vector of ones; axes that ``k`` broadcast (a length 1
    against n) are summed back."""
    shapes = tuple(np.shape(a) for a in arrays)
    inputs, output = _parsed(subscripts, shapes)
    sizes = {}
    for subs, shape in zip(inputs, shapes):
        for letter, n in zip(subs, shape):
            sizes[letter] = max(sizes.get(letter, 1), n)
    fresh = iter(sorted(set(string.ascii_letters) - set(sizes)))
    kind = np.result_type(g, *arrays)
    operands, subs_list = [g], [output]
    for i, (subs, a) in enumerate(zip(inputs, arrays)):
        if i != k:
            operands.append(a)
            subs_list.append(subs)
    target = ""
    for letter in inputs[k]:
        if letter in target:            # a repeated letter: a diagonal of k
            new = next(fresh)
            operands.append(np.eye(sizes[letter], dtype=kind))
            subs_list.append(letter + new)
            letter = new
        target += letter
    present = set("".join(subs_list))
    for letter in target:
        if letter not in present:       # summed within k alone: broadcast back
            operands.append(np.ones(shapes[k][inputs[k].index(letter)], dtype=kind))
            subs_list.append(letter)
    ct = np.einsum(f"{','.join(subs_list)}->{target}", *operands,
                   optimize=len(operands) > 2)
    stretched = tuple(i for i, (m, n) in enumerate(zip(shapes[k], np.shape(ct))) if m != n)
    if stretched:                       # k had a length-1 axis broadcast against n
        ct = np.sum(ct, axis=stretched, keepdims=True)
    return ct


# ------------------------------------------------------------------ tensordot

def _tensordot_axes(axes, ndim_a, ndim_b):
    """``(axes of a, axes of b)`` contracted, as non-negative lists."""
    try:
        axes_a, axes_b = axes
    except TypeError:
        n = int(axes)
        axes_a, axes_b = list(range(ndim_a - n, ndim_a)), list(range(n))
    axes_a = [axes_a] if np.ndim(axes_a) == 0 else list(axes_a)
    axes_b = [axes_b] if np.ndim(axes_b) == 0 else list(axes_b)
    return [int(i) % ndim_a for i in axes_a], [int(i) % ndim_b for i in axes_b]


def _tensordot_vjp_a(g, ans, a, b, axes=2):
    axes_a, axes_b = _tensordot_axes(axes, np.ndim(a), np.ndim(b))
    free_a = [i for i in range(np.ndim(a)) if i not in axes_a]
    free_b = [i for i in range(np.ndim(b)) if i not in axes_b]
    # g (free_a..., free_b...) . b over free_b: (free_a..., b's contracted axes in order)
    ct = np.tensordot(g, b, axes=(list(range(len(free_a), np.ndim(g))), free_b))
    order = free_a + [axes_a[axes_b.index(i)] for i in sorted(axes_b)]
    return np.transpose(ct, np.argsort(order))


def _tensordot_vjp_b(g, ans, a, b, axes=2):
    axes_a, axes_b = _tensordot_axes(axes, np.ndim(a), np.ndim(b))
    free_a = [i for i in range(np.ndim(a)) if i not in axes_a]
    free_b = [i for i in range(np.ndim(b)) if i not in axes_b]
    # a . g over free_a: (a's contracted axes in order, free_b...)
    ct = np.tensordot(a, g, axes=(free_a, list(range(len(free_a)))))
    order = [axes_b[axes_a.index(i)] for i in sorted(axes_a)] + free_b
    return np.transpose(ct, np.argsort(order))


def _tensordot_rule(a, b, axes=2):
    if not isinstance(axes, int):       # lists of axes: kept as tuples (a record's kwargs)
        try:
            axes = tuple(tuple(x) if np.ndim(x) else int(x) for x in axes)
        except TypeError:
            axes = int(axes)
    return apply(np.tensordot, (_tensordot_vjp_a, _tensordot_vjp_b), (a, b), {"axes": axes})


define(np.einsum, trace=_einsum_rule)
define(np.tensordot, trace=_tensordot_rule, jvp=multilinear(np.tensordot))
define(_einsum, jvp=multilinear(_einsum))
