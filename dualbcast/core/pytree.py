"""Nested tuples, lists, dicts and namedtuples of leaves ("pytrees"), flattened and
rebuilt: how arguments, gradients and cotangents keep their user's structure (a
dict's type too: an OrderedDict, a defaultdict with its default_factory)."""

from collections import defaultdict
from itertools import islice

import numpy as np

LEAF = "leaf"


def flatten(tree):
    """``(leaves, treedef)``; ``treedef`` compares equal for trees of equal structure."""
    leaves = []
    return leaves, _flatten(tree, leaves)


# Types that are always leaves: a flat tuple of them (the common case) is flattened
# without a call per element.
_LEAF_TYPES = frozenset({float, int, bool, np.ndarray, np.float64, np.float32, np.float16})


def _flatten(node, leaves):
    kind = type(node)
    if kind is tuple or kind is list:
        if _LEAF_TYPES.issuperset(map(type, node)):        # flat: no call per element
            leaves.extend(node)
            return (kind, None, (LEAF,) * len(node))
        children = []
        for child in node:
            if type(child) in _LEAF_TYPES:
                leaves.append(child)
                children.append(LEAF)
            else:
                children.append(_flatten(child, leaves))
        return (kind, None, tuple(children))
    if isinstance(node, tuple) and hasattr(node, "_fields"):          # namedtuple
        return (kind, None, tuple(_flatten(child, leaves) for child in node))
    if isinstance(node, dict):
        keys = tuple(node)
        if isinstance(node, defaultdict):
            kind = DefaultDictOf(kind, node.default_factory)
        return (kind, keys, tuple(_flatten(node[k], leaves) for k in keys))
    if node is None:
        return (None, None, ())
    leaves.append(node)
    return LEAF


class DefaultDictOf:
    """The kind of a ``defaultdict`` node: its type and its ``default_factory``, which
    a rebuilt tree keeps (a gradient of a defaultdict is one with the same factory, as
    in JAX); trees whose factories differ differ in structure."""

    __slots__ = ("type", "factory")

    def __init__(self, type_, factory):
        self.type, self.factory = type_, factory

    def __call__(self, items):
        tree = self.type(self.factory)
        tree.update(items)
        return tree

    def __eq__(self, other):
        return type(other) is DefaultDictOf and self.type is other.type \
            and self.factory == other.factory

    def __hash__(self):
        return hash(self.type)          # (the factory need not be hashable)

    def __repr__(self):
        return f"{self.type.__name__}({self.factory!r})"


def flatten_like(tree, treedef, none_leaves=False):
    """The leaves of ``tree`` in ``treedef``'s order, dict entries matched by key (so
    a dict with the same keys in another order fits); ``ValueError`` if the
    structures differ.  ``none_leaves``: None may stand for a leaf."""
    leaves = []
    if not _flatten_like(tree, treedef, leaves, none_leaves):
        raise ValueError(f"structure {describe(flatten(tree)[1])} does not match "
                         f"{describe(treedef)}")
    return leaves


def _flatten_like(node, treedef, leaves, none_leaves):
    if treedef == LEAF:
        leaves.append(node)
        return not isinstance(node, (tuple, list, dict)) and (node is not None or none_leaves)
    kind, keys, children = treedef
    if kind is None:
        return node is None
    if keys is not None:
        if not isinstance(node, dict) or set(node) != set(keys):
            return False
        return all(_flatten_like(node[k], child, leaves, none_leaves)
                   for k, child in zip(keys, children))
    if type(node) is not kind or len(node) != len(children):
        return False
    return all(_flatten_like(n, child, leaves, none_leaves) for n, child in zip(node, children))


def unflatten(treedef, leaves):
    """Rebuild a tree of ``treedef``'s structure from ``leaves`` in flattening order."""
    leaves = iter(leaves)
    return _unflatten(treedef, leaves)


def _unflatten(treedef, leaves):
    if treedef == LEAF:
        return next(leaves)
    kind, keys, children = treedef
    if kind is None:
        return None
    if (kind is tuple or kind is list) and children.count(LEAF) == len(children):
        return kind(islice(leaves, len(children)))          # flat: no call per element
    rebuilt = [next(leaves) if child is LEAF else _unflatten(child, leaves)
               for child in children]
    if kind is tuple or kind is list:
        return kind(rebuilt)
    if keys is None:                                                    # namedtuple
        return kind(*rebuilt)
    try:
        return kind(zip(keys, rebuilt))
    except TypeError:               # a dict subclass with another constructor
        return dict(zip(keys, rebuilt))


def describe(treedef):
    """A short human description of a tree structure, for error messages."""
    if treedef == LEAF:
        return "*"
    kind, keys, children = treedef
    if kind is None:
        return "None"
    inner = [describe(c) for c in children]
    if keys is not None:
        return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(keys, inner)) + "}"
    brackets = "[]" if kind is list else "()"
    return brackets[0] + ", ".join(inner) + ("," if len(inner) == 1 and kind is not list
                                             else "") + brackets[1]
