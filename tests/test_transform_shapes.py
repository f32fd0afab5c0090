"""Shapes and values of every derivative transform (issue 27): ``grad``,
``value_and_grad``, ``vjp``, ``jvp``, ``jacobian`` in each mode and ``hessian``, over
empty, 0-d and N-d inputs and outputs, Python floats, NumPy scalars and 0-d arrays,
every ``argnums`` form (int, negative int, tuple, list, negative and mixed tuples;
repeated, out of range and not ints refused, the same way by every transform), nested
arguments and outputs (tuples, lists, dicts, OrderedDicts, defaultdicts, namedtuples,
None), and a ``vjp`` pullback differentiated with respect to its cotangent and its
primal -- against JAX in float64 (x64 for this module only) and closed forms.

The functions differentiated are built so that every block of every derivative is
distinct and known in closed form: ``f(*xs) = cos(0.5 + sum_i W_i vec(g_i(x_i)))``
reshaped to the output's shape (or summed against weights of that shape: a scalar),
``g_i`` sin and square in turn, ``W_i`` random (empty where a size is 0).  Property
tests take shapes from JAX's own rules (``jax.eval_shape``: no compilation) and values
from the closed forms; a fixed set of problems takes values from JAX itself (compiling
JAX's derivatives for every drawn shape would cost seconds an example)."""
import collections
import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbcast as db

from profiles import examples

SHAPES = [(), (0,), (3,), (2, 0), (2, 3), (1, 2, 2)]
# What a 0-d argument is given as: each keeps its kind through every transform.
SCALAR_KINDS = [float, np.float64, np.asarray]
MODES = ("auto", "forward", "reverse")
Pair = collections.namedtuple("Pair", "a b")


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


# ------------------------------------------------------------------ the functions

class Problem:
    """Arguments of the given shapes and kinds; ``of(xp)``, the function of them in the
    array namespace ``xp`` (NumPy, traced by dualbcast; or jax.numpy); and its
    derivatives in closed form."""

    def __init__(self, shapes, kinds, out_shape, seed, scalar):
        rng = np.random.default_rng(seed)
        self.args = [kind(rng.uniform(-1.5, 1.5)) if shape == ()
                     else rng.uniform(-1.5, 1.5, shape) for shape, kind in zip(shapes, kinds)]
        self.shape = out_shape
        self.out_shape = () if scalar else out_shape
        rows = int(np.prod(out_shape))
        self.weights = [rng.standard_normal((rows, int(np.prod(shape)))) for shape in shapes]
        # a scalar problem sums the output against these
        self.c = rng.standard_normal(out_shape).reshape(-1) if scalar else None

    def of(self, xp):
        def f(*xs):
            z = 0.5
            for i, (w, x) in enumerate(zip(self.weights, xs)):
                z = z + w @ xp.reshape(xp.sin(x) if i % 2 == 0 else x * x, -1)
            if self.c is None:
                return xp.reshape(xp.cos(z), self.shape)
            return xp.sum(self.c * xp.cos(z))
        return f

    def random_like(self, seed):
        """Values of each argument's shape and kind (tangents)."""
        rng = np.random.default_rng(seed)
        return [type(x)(rng.standard_normal()) if type(x) is not np.ndarray
                else np.asarray(rng.standard_normal(x.shape)) for x in self.args]

    # closed forms: z = 0.5 + sum_i W_i g_i(x_i), g' and g'' elementwise
    def _parts(self):
        flat = [np.reshape(x, -1) for x in self.args]
        g1 = [np.cos(x) if i % 2 == 0 else 2 * x for i, x in enumerate(flat)]
        g2 = [-np.sin(x) if i % 2 == 0 else np.full_like(x, 2.0) for i, x in enumerate(flat)]
        z = 0.5 + sum((w @ (np.sin(x) if i % 2 == 0 else x * x)
                       for i, (w, x) in enumerate(zip(self.weights, flat))),
                      np.zeros(len(self.weights[0])))
        return z, g1, g2

    def matrices(self):
        """d out / d x_i as matrices (flattened out by flattened x_i)."""
        z, g1, _ = self._parts()
        return [-np.sin(z)[:, None] * w * d[None, :] for w, d in zip(self.weights, g1)]

    def jacobians(self):
        """d out / d x_i, of shape ``out.shape + x_i.shape``, for every argument."""
        return [m.reshape(self.out_shape + np.shape(x))
                for m, x in zip(self.matrices(), self.args)]

    def gradients(self):
        z, g1, _ = self._parts()
        back = -self.c * np.sin(z)
        return [(d * (w.T @ back)).reshape(np.shape(x))
                for w, d, x in zip(self.weights, g1, self.args)]

    def hessian(self, i, j):
        z, g1, g2 = self._parts()
        a, b = self.weights[i] * g1[i][None, :], self.weights[j] * g1[j][None, :]
        block = a.T @ ((-self.c * np.cos(z))[:, None] * b)
        if i == j:
            block = block + np.diag(g2[i] * (self.weights[i].T @ (-self.c * np.sin(z))))
        return block.reshape(np.shape(self.args[i]) + np.shape(self.args[j]))


@st.composite
def problems(draw, scalar=False):
    count = draw(st.integers(1, 3))
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(count)]
    kinds = [draw(st.sampled_from(SCALAR_KINDS)) for _ in range(count)]
    return Problem(shapes, kinds, draw(st.sampled_from(SHAPES)), draw(st.integers(0, 2 ** 16)),
                   scalar)


@st.composite
def argnums_for(draw, count):
    """``(argnums, positions, single)``: a valid argnums of a ``count``-argument
    function in one of its forms, the positions it names (non-negative, in its
    order), and whether it is a single int."""
    form = draw(st.sampled_from(["int", "negative int", "tuple", "list", "negative tuple",
                                 "mixed tuple"]))
    order = draw(st.permutations(range(count)))
    if form in ("int", "negative int"):
        return (order[0] - count if form == "negative int" else order[0]), (order[0],), True
    positions = tuple(order[:draw(st.integers(1, count))])
    signs = {"tuple": [False] * count, "list": [False] * count, "negative tuple": [True] * count,
             "mixed tuple": draw(st.lists(st.booleans(), min_size=count, max_size=count))}[form]
    argnums = tuple(i - count if negative else i for i, negative in zip(positions, signs))
    return (list(argnums) if form == "list" else argnums), positions, False


def check_kind(got, like):
    """A gradient, tangent or cotangent is of its primal's kind: a Python float's is a
    float, a NumPy scalar's a NumPy scalar, an array's an array (0-d too)."""
    assert type(got) is type(like), (type(got), type(like))
    assert np.shape(got) == np.shape(like)
    assert np.result_type(got) == np.float64


def jax_shapes(jax, f, *args):
    """The shapes of ``f(*args)``'s leaves, by JAX's own rules (no compilation)."""
    return [leaf.shape for leaf in jax.tree_util.tree_leaves(jax.eval_shape(f, *args))]


def shapes_of(*trees):
    return [np.shape(leaf) for tree in trees for leaf in
            (tree if type(tree) is tuple else (tree,))]


# ------------------------------------------------------------------ jacobian, every mode

@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_jacobian_in_every_mode(jax, data):
    """Blocks of shape ``out.shape + x.shape`` (empty ones too: an empty input lost
    the output's shape in forward and auto modes), in argnums' order, as
    ``jax.jacobian``'s, with the closed form's values."""
    problem = data.draw(problems())
    argnums, positions, single = data.draw(argnums_for(len(problem.args)))
    want_shapes = jax_shapes(jax, jax.jacobian(problem.of(jax.numpy), argnums),
                             *problem.args)
    want = problem.jacobians()
    for mode in MODES:
        got = db.jacobian(problem.of(np), argnums, mode=mode)(*problem.args)
        assert type(got) is (np.ndarray if single else tuple)
        assert shapes_of(got) == want_shapes
        for block, i in zip((got,) if single else got, positions):
            assert type(block) is np.ndarray and block.dtype == np.float64
            assert block.shape == problem.out_shape + np.shape(problem.args[i])
            close(block, want[i])


# ------------------------------------------------------------------ grad, hessian

@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_grad_value_and_grad_and_hessian(jax, data):
    """A gradient per named argument, of its kind and shape; Hessian blocks of shape
    ``x_i.shape + x_j.shape``, a tuple of tuples for a tuple argnums; as JAX's shapes,
    with the closed forms' values."""
    problem = data.draw(problems(scalar=True))
    argnums, positions, single = data.draw(argnums_for(len(problem.args)))
    f, jf, args = problem.of(np), problem.of(jax.numpy), problem.args
    value, got = db.value_and_grad(f, argnums)(*args)
    close(value, f(*args))
    want = problem.gradients()
    for grads in (got, db.grad(f, argnums)(*args)):
        assert shapes_of(grads) == jax_shapes(jax, jax.grad(jf, argnums), *args)
        if single:
            grads = (grads,)
        assert type(grads) is tuple and len(grads) == len(positions)
        for g, i in zip(grads, positions):
            check_kind(g, args[i])
            close(g, want[i])
    hessian = db.hessian(f, argnums)(*args)
    want_shapes = jax_shapes(jax, jax.hessian(jf, argnums), *args)
    if single:
        hessian = ((hessian,),)
    assert type(hessian) is tuple and len(hessian) == len(positions)
    assert [np.shape(block) for row in hessian for block in row] == want_shapes
    for row, i in zip(hessian, positions):
        assert type(row) is tuple and len(row) == len(positions)
        for block, j in zip(row, positions):
            assert type(block) is np.ndarray and block.dtype == np.float64
            assert block.shape == np.shape(args[i]) + np.shape(args[j])
            close(block, problem.hessian(i, j))


# ------------------------------------------------------------------ jvp, vjp

@settings(max_examples=examples(40), deadline=None)
@given(problem=problems(), seed=st.integers(0, 2 ** 16))
def test_jvp_and_vjp(jax, problem, seed):
    """The output tangent has the output's shape; the pullback gives a cotangent per
    primal, of its kind and shape; as JAX's shapes, with the closed forms' values."""
    f, jf, args = problem.of(np), problem.of(jax.numpy), problem.args
    tangents = problem.random_like(seed)
    matrices = problem.matrices()
    value, tangent = db.jvp(f, tuple(args), tuple(tangents))
    assert shapes_of(value, tangent) == jax_shapes(
        jax, lambda *ts: jax.jvp(jf, tuple(args), ts), *tangents) == [problem.out_shape] * 2
    close(value, f(*args))
    close(tangent, sum((m @ np.reshape(t, -1) for m, t in zip(matrices, tangents)),
                       np.zeros(np.size(value))).reshape(problem.out_shape))
    ct = np.random.default_rng(seed + 1).standard_normal(problem.out_shape)
    out, pullback = db.vjp(f, *args)
    assert np.shape(out) == problem.out_shape
    cotangents = pullback(ct)
    assert type(cotangents) is tuple
    assert shapes_of(cotangents) == jax_shapes(jax, lambda ct: jax.vjp(jf, *args)[1](ct), ct)
    for got, m, x in zip(cotangents, matrices, args):
        check_kind(got, x)
        close(got, (np.reshape(ct, -1) @ m).reshape(np.shape(x)))


# ------------------------------------------------------------------ values, against JAX

JAX_PROBLEMS = [          # (shapes, kinds, output shape, argnums)
    ([(2, 3)], [float], (2,), 0),
    ([(), (0,)], [float, float], (2,), (1, -2)),
    ([(3,), ()], [float, np.asarray], (), -1),
    ([(1, 2, 2), (), (3,)], [float, np.float64, float], (2, 1), (2, 0)),
    ([(2, 0)], [float], (3, 0), [0]),
]


@pytest.mark.parametrize("shapes, kinds, out_shape, argnums", JAX_PROBLEMS)
def test_every_transform_against_jax(jax, shapes, kinds, out_shape, argnums):
    """The values of every transform, from JAX itself (compiled: a few problems)."""
    single = isinstance(argnums, int)
    leaves = jax.tree_util.tree_leaves

    def same(got, want):
        assert [np.shape(leaf) for leaf in leaves(got)] == [leaf.shape for leaf in leaves(want)]
        for g, w in zip(leaves(got), leaves(want)):
            close(g, w)
    problem = Problem(shapes, kinds, out_shape, 5, scalar=False)
    f, jf, args = problem.of(np), problem.of(jax.numpy), problem.args
    want = jax.jit(jax.jacobian(jf, argnums if single else tuple(argnums)))(*args)
    for mode in MODES:
        same(db.jacobian(f, argnums, mode=mode)(*args), want)
    tangents = tuple(problem.random_like(6))
    same(db.jvp(f, tuple(args), tangents), jax.jit(lambda *a: jax.jvp(jf, a, tangents))(*args))
    ct = np.random.default_rng(7).standard_normal(out_shape)
    same(db.vjp(f, *args)[1](ct), jax.jit(lambda ct: jax.vjp(jf, *args)[1](ct))(ct))
    problem = Problem(shapes, kinds, out_shape, 5, scalar=True)
    f, jf, args = problem.of(np), problem.of(jax.numpy), problem.args
    jax_argnums = argnums if single else tuple(argnums)
    same(db.value_and_grad(f, argnums)(*args),
         jax.jit(jax.value_and_grad(jf, jax_argnums))(*args))
    same(db.hessian(f, argnums)(*args), jax.jit(jax.hessian(jf, jax_argnums))(*args))


# ------------------------------------------------------------------ argnums refused

TRANSFORMS = {"grad": db.grad, "value_and_grad": db.value_and_grad, "hessian": db.hessian,
              **{f"jacobian {mode}": (lambda mode: lambda f, argnums: db.jacobian(
                  f, argnums, mode=mode))(mode) for mode in MODES}}


@st.composite
def bad_argnums(draw, count):
    """``(argnums, error, message)``: an argnums of a ``count``-argument function that
    every transform refuses, at its creation or its call."""
    i = draw(st.integers(0, count - 1))
    kind = draw(st.sampled_from(["repeated", "repeated negative", "out of range",
                                 "negative out of range", "not an int"]))
    if kind == "not an int":
        bad = draw(st.sampled_from([1.0, True, "0", None, np.float64(0.0)]))
        if draw(st.booleans()):
            return (i, bad), TypeError, "argnums must be an int or a tuple of ints"
        return bad, TypeError, "argnums must be an int or a tuple of ints"
    if kind.startswith("repeated"):
        twice = i - count if kind == "repeated negative" else i
        argnums = draw(st.permutations([i, twice] + [j for j in range(count) if j != i]))
        return tuple(argnums), ValueError, "repeats an argument"
    far = -count - 1 - draw(st.integers(0, 2)) if kind.startswith("negative") else \
        count + draw(st.integers(0, 2))
    return draw(st.sampled_from([far, (i, far)])), ValueError, "is out of range for"


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_every_transform_refuses_the_same_argnums_the_same_way(data):
    count = data.draw(st.integers(1, 3))
    argnums, error, message = data.draw(bad_argnums(count))
    args = [1.0] * count
    for name, transform in TRANSFORMS.items():
        with pytest.raises(error, match=message):
            transform(lambda *xs: sum(xs) * xs[0], argnums)(*args)


def test_empty_argnums():
    """``()`` names no argument: grad gives an empty tuple (a tuple argnums gives a
    tuple); a Jacobian or Hessian of nothing is refused."""
    f = lambda x, y: x * y                  # noqa: E731
    assert db.value_and_grad(f, ())(2.0, 3.0) == (6.0, ())
    for transform in (db.hessian, db.jacobian):
        with pytest.raises(ValueError, match="at least one argument"):
            transform(f, ())


# ------------------------------------------------------------------ nested arguments

class Leaf:
    """What a leaf of a drawn tree is (:func:`fill` makes it a value)."""

    __slots__ = ("kind", "shape")

    def __init__(self, kind, shape):
        self.kind, self.shape = kind, shape

    def __repr__(self):
        return f"Leaf({self.kind!r}, {self.shape})"


def trees():
    """Nested structures of :class:`Leaf` specifications."""
    return st.recursive(
        st.one_of(st.sampled_from(SHAPES).map(lambda shape: Leaf("array", shape)),
                  st.sampled_from(["float", "numpy scalar"]).map(lambda kind: Leaf(kind, ()))),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.lists(st.one_of(children, st.none()), max_size=3).map(tuple),
            st.dictionaries(st.sampled_from("abc"), children, max_size=3),
            st.dictionaries(st.sampled_from("abc"), children, max_size=3).map(
                lambda d: collections.OrderedDict(reversed(d.items()))),
            st.tuples(st.sampled_from([list, float]),
                      st.dictionaries(st.sampled_from("xyz"), children, max_size=3)).map(
                lambda spec: collections.defaultdict(*spec)),
            st.tuples(children, children).map(lambda ab: Pair(*ab))),
        max_leaves=5)


def tree_map(fn, tree):
    """``fn`` of every leaf, in a tree of ``tree``'s structure (the test's own walk:
    neither dualbcast's nor JAX's)."""
    if tree is None:
        return None
    if isinstance(tree, collections.defaultdict):
        return collections.defaultdict(tree.default_factory,
                                       {k: tree_map(fn, v) for k, v in tree.items()})
    if isinstance(tree, dict):          # (an OrderedDict too)
        return type(tree)((k, tree_map(fn, v)) for k, v in tree.items())
    if isinstance(tree, Pair):
        return Pair(*(tree_map(fn, v) for v in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(tree_map(fn, v) for v in tree)
    return fn(tree)


def fill(spec, rng):
    def leaf(item):
        value = rng.uniform(-1.5, 1.5, item.shape)
        return float(value) if item.kind == "float" else np.float64(value) \
            if item.kind == "numpy scalar" else value
    return tree_map(leaf, spec)


def assert_tree(got, want, like):
    """``got`` has ``like``'s structure (container types, keys, a defaultdict's
    factory, the leaves' kinds and shapes) and ``want``'s values (a tree of
    ``like``'s structure, or JAX's)."""
    assert type(got) is type(like)
    if like is None:
        return
    if isinstance(like, dict):
        assert set(got) == set(like)
        if isinstance(like, collections.defaultdict):
            assert got.default_factory is like.default_factory
        for key in like:
            assert_tree(got[key], want[key], like[key])
    elif isinstance(like, (tuple, list)):
        assert len(got) == len(like)
        for g, w, x in zip(got, want, like):
            assert_tree(g, w, x)
    else:
        check_kind(got, like)
        close(got, want)


def leaves(tree):
    found = []
    tree_map(found.append, tree)
    return found


def loss(xp):
    """A scalar function of two trees: L(a) L(b) + L(b), L the sum over leaves of
    sum(sin(leaf) * leaf); d L / d leaf = cos(leaf) leaf + sin(leaf)."""
    def tree_loss(tree):
        total = 0.0
        for leaf in leaves(tree):
            total = total + xp.sum(xp.sin(leaf) * leaf)
        return total
    return lambda a, b: tree_loss(a) * tree_loss(b) + tree_loss(b)


def leafwise(xp):
    """A tree of the argument's structure: sin(leaf) * leaf."""
    return lambda tree: tree_map(lambda leaf: xp.sin(leaf) * leaf, tree)


def slope(leaf):
    return np.cos(leaf) * leaf + np.sin(leaf)


def tangent_like(tree, rng):
    return fill(tree_map(lambda leaf: Leaf("float" if type(leaf) is float else "numpy scalar"
                                           if type(leaf) is np.float64 else "array",
                                           np.shape(leaf)), tree), rng)


def check_nested(a, b, rng, against_jax=None):
    """grad, value_and_grad, jvp and vjp of :func:`loss` and :func:`leafwise` at trees
    ``a`` and ``b``: structures and kinds as the arguments', values in closed form (and
    JAX's, given ``against_jax``); jacobian and hessian refuse a nested argument."""
    f = loss(np)
    value, grads = db.value_and_grad(f, (0, 1))(a, b)
    tree_loss = sum(float(np.sum(np.sin(leaf) * leaf)) for leaf in leaves(a)), \
        sum(float(np.sum(np.sin(leaf) * leaf)) for leaf in leaves(b))
    close(value, tree_loss[0] * tree_loss[1] + tree_loss[1])
    want = (tree_map(lambda leaf: tree_loss[1] * slope(leaf), a),
            tree_map(lambda leaf: (tree_loss[0] + 1.0) * slope(leaf), b))
    assert type(grads) is tuple and len(grads) == 2
    for got in (grads, db.grad(f, (-2, -1))(a, b)):
        assert_tree(got[0], want[0], a)
        assert_tree(got[1], want[1], b)
    tangent = tangent_like(a, rng)
    out, out_tangent = db.jvp(leafwise(np), (a,), (tangent,))
    like = leafwise(np)(a)              # the output's structure and leaves' kinds
    assert_tree(out, like, like)
    assert_tree(out_tangent, tree_map2(lambda x, t: slope(x) * t, a, tangent), like)
    (cotangent,) = db.vjp(leafwise(np), a)[1](tangent)     # (the output's structure)
    assert_tree(cotangent, tree_map2(lambda x, t: slope(x) * t, a, tangent), a)
    if against_jax is not None:
        jax = against_jax
        want_value, want = jax.value_and_grad(loss(jax.numpy), (0, 1))(a, b)
        close(value, want_value)
        assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(want)
        assert_tree(grads, want, (a, b))
        want_out, want_tangent = jax.jvp(leafwise(jax.numpy), (a,), (tangent,))
        assert_tree(out_tangent, want_tangent, like)
        want = jax.vjp(leafwise(jax.numpy), a)[1](tangent)[0]
        assert jax.tree_util.tree_structure(cotangent) == jax.tree_util.tree_structure(want)
        assert_tree(cotangent, want, a)
    if type(a) not in (float, np.float64, np.ndarray):
        for transform in (db.jacobian, db.hessian):
            with pytest.raises(TypeError, match="must be a float scalar or a float array"):
                transform(lambda t: loss(np)(t, 1.0))(a)


def tree_map2(fn, tree, other):
    """``fn(leaf, other's leaf)`` in a tree of ``tree``'s structure (``other``: one of
    the same structure, made by :func:`tree_map` of it: its leaves in the same order)."""
    others = iter(leaves(other))
    return tree_map(lambda leaf: fn(leaf, next(others)), tree)


@settings(max_examples=examples(40), deadline=None)
@given(spec=st.tuples(trees(), st.one_of(trees(), st.just(None))), seed=st.integers(0, 2 ** 16))
def test_nested_arguments_keep_their_structure_through_every_transform(spec, seed):
    """Each gradient, tangent and cotangent has its primal's structure: container
    types, keys, a defaultdict's factory (lost before), leaves' kinds and shapes."""
    rng = np.random.default_rng(seed)
    a, b = (fill(part, rng) if part is not None else 2.0 for part in spec)
    check_nested(a, b, rng)


def test_nested_arguments_against_jax(jax):
    """The same, one tree of every container JAX knows, against JAX's values and its
    tree structures (a defaultdict's gradient is a defaultdict of the same factory)."""
    rng = np.random.default_rng(11)
    a = {"d": collections.defaultdict(list, {"x": rng.standard_normal((2, 3)), "y": 0.5}),
         "p": Pair(np.float64(-0.3), [rng.standard_normal(0), (1.2, None)]),
         "e": collections.OrderedDict([("z", rng.standard_normal(()))])}
    b = [collections.defaultdict(float, {"w": rng.standard_normal(2)}), 0.7]
    check_nested(a, b, rng, against_jax=jax)


# ------------------------------------------------------------------ a pullback, differentiated

PULLED = {      # functions of the array namespace xp (NumPy or jax.numpy) and s
    "square": lambda xp, s: s * s,
    "gather with repeats": lambda xp, s: s[xp.asarray([0, 2, 2])] * xp.sin(s[1]),
    "slice": lambda xp, s: s[1:] ** 3,
    "outer product": lambda xp, s: xp.outer(s, s) @ s,
    "sum (a 0-d output)": lambda xp, s: xp.sum(xp.exp(s)),
    "where": lambda xp, s: xp.where(s > 2.0, s ** 2, s),
    "norm, reshape, transpose": lambda xp, s: xp.reshape(xp.linalg.norm(s) * s, (3, 1)).T,
    "two outputs": lambda xp, s: (s * s, xp.sum(s) * 2.0),
}


@pytest.mark.parametrize("name", list(PULLED))
def test_a_pullback_differentiated_by_every_transform_is_jaxs(jax, name):
    """grad and hessian with respect to the primal and the cotangent at once, jvp
    along both, jacobian in the cotangent in every mode (the pullback converted a
    traced cotangent: "would detach"; issue 27 item 9).  The cotangent's leaves are
    arguments of their own (jacobian and hessian take arrays)."""
    f, jf = (functools.partial(PULLED[name], xp) for xp in (np, jax.numpy))
    x = np.array([1.5, 2.5, 3.5])
    y = f(x)
    rng = np.random.default_rng(3)
    several = type(y) is tuple
    cts = [rng.standard_normal(np.shape(part)) for part in (y if several else (y,))]
    everything = tuple(range(1 + len(cts)))
    tangents = (np.ones(3),) + tuple(np.ones_like(ct) for ct in cts)
    weights = np.arange(1.0, 4.0)

    def of(vjp, xp):
        def pulled(x, *cts):
            return xp.sum(vjp(f if xp is np else jf, x)[1](tuple(cts) if several
                                                          else cts[0])[0] * weights)

        def pullback(*cts):
            return vjp(f if xp is np else jf, x)[1](tuple(cts) if several else cts[0])[0]
        return pulled, pullback
    pulled, pullback = of(db.vjp, np)
    jax_pulled, jax_pullback = of(jax.vjp, jax.numpy)

    @jax.jit
    def oracles(x, *cts):   # (compiled once: JAX's derivatives op by op cost seconds)
        return (jax.grad(jax_pulled, everything)(x, *cts),
                jax.jvp(jax_pulled, (x, *cts), tangents)[1],
                jax.jacobian(jax_pullback, everything[:-1])(*cts),
                jax.hessian(jax_pulled, everything)(x, *cts))

    def same(got, want):
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert np.shape(g) == w.shape
            close(g, w)
    grads, tangent, jacobian, hessian = oracles(x, *cts)
    same(db.grad(pulled, everything)(x, *cts), grads)
    close(db.jvp(pulled, (x, *cts), tangents)[1], tangent)
    for mode in MODES:
        same(db.jacobian(pullback, everything[:-1], mode=mode)(*cts), jacobian)
    same(db.hessian(pulled, everything)(x, *cts), hessian)
