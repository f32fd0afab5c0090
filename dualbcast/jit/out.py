"""``value_and_grad(f, out=...)`` for a gradient computed without it (a staged replay,
whose backward pass computes on traced values that no array can hold): the gradient
written into the caller's arrays afterwards, checked as the eager call checks them."""

from ..buffers import refuse_overlapping_out
from ..core.pytree import describe, flatten, flatten_like, unflatten
from ..core.trace import argument_arrays, refuse_unfit_out


def written_into(out, gradient, single, args):
    """``gradient`` (one per differentiated argument, a tuple unless ``single``) with
    each leaf that ``out`` gives an array for written there, and that array in its
    place; ``ValueError`` as the eager call raises for an ``out`` that does not fit."""
    leaves, tree = flatten((gradient,) if single else gradient)
    try:
        targets = flatten_like((out,) if single else out, tree, none_leaves=True)
    except ValueError:
        expected = describe(flatten(gradient)[1] if single else tree)
        raise ValueError(f"value_and_grad: out must have the gradient's structure "
                         f"{expected} (an array or None per leaf)") from None
    for leaf, target in zip(leaves, targets):
        if target is not None:
            refuse_unfit_out(target, leaf)
    refuse_overlapping_out("value_and_grad", targets, argument_arrays(args))
    written = []
    for leaf, target in zip(leaves, targets):
        if target is not None:
            target[...] = leaf
            leaf = target
        written.append(leaf)
    result = unflatten(tree, written)
    return result[0] if single else result
