"""Fused segments (dualbcast/jit/segments.py): a chain of kernel maps, ``x ** 2`` and
``np.sum`` over arrays of one shape, compiled under ``db.jit`` into two loops over the
elements, gives the bits the traced program gives — values, gradients, their types —
across shapes, chunk and block edges, threads, special values, warnings and errors."""
import math
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import dualbcast as db
from dualbcast.jit.fused_runtime import numpy_sum
from dualbcast.jit.segments import BLOCK
from dualbcast.kernel.products import CHUNK
from test_fused import _agree, _program, _same

pytestmark = pytest.mark.usefixtures("fuse_at_once")

RNG = np.random.default_rng(23)


@db.fast_broadcast
def soft(h, a):
    return h * math.exp(-a * h * h)


@db.fast_broadcast
def wave(h, a):             # (vmath's sin reads a table: a gather in the loop)
    return h + a * math.sin(h)


@db.fast_broadcast
def ratio(h, x, c):
    return h / (1.0 + abs(x)) + c * h


@db.fast_broadcast
def poly(h):
    return 0.5 * h * h - h


def chain(x, a):
    """The benchmark's shape: kernels chained, a sum of squares, a kernel sum."""
    h = soft(x, a)
    h = wave(h, a)
    h = poly(h)
    return np.sum(h ** 2) + soft.sum(x, a)


def mixed(x, y, a):
    """Argument arrays read by several kernels, a constant array, numbers, a scalar
    argument in two positions, an array read twice, a map nothing reads, two sums,
    and scalar code around them."""
    c = np.linspace(0.0, 1.0, x.size).reshape(x.shape)
    h1 = ratio(x, y, 0.25)
    h2 = wave(h1, a)
    h3 = ratio(h2, c, a)
    h4 = soft(h1, 0.5)
    poly(h2)                                # (read by nothing)
    p = np.sum(h3 ** 2)
    q = np.sum(h4)
    return p * q + soft.sum(y, a) - p ** 2 * a


def _fusion(vg):
    return _program(vg).fusion


@pytest.mark.parametrize("shape", [(2,), (BLOCK + 1,), (CHUNK + 3,), (3, 70)])
def test_a_chain_of_kernels_is_one_segment_with_the_traced_bits(shape, fused_runs):
    argsets = [(RNG.uniform(-0.5, 1.0, shape), RNG.uniform(0.2, 1.5)) for _ in range(5)]
    vg = _agree(chain, argsets, argnums=(0, 1))
    fusion = _fusion(vg)
    assert fusion.function is not None and "def _s0_forward" in fusion.source
    assert len(fused_runs) == 3


def test_the_chain_against_autograd():
    x, a = RNG.uniform(-0.5, 1.0, 300), 0.8

    def reference(x, a):
        h = x * anp.exp(-a * x * x)
        h = h + a * anp.sin(h)
        h = 0.5 * h * h - h
        return anp.sum(h ** 2) + anp.sum(x * anp.exp(-a * x * x))
    vg = db.jit(db.value_and_grad(chain, argnums=(0, 1)))
    for _ in range(3):
        value, (gx, ga) = vg(x, a)
    want_value, (want_x, want_a) = autograd.value_and_grad(reference, argnum=(0, 1))(x, a)
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(gx, want_x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ga, want_a, rtol=1e-12)


@pytest.mark.parametrize("shape, argnums", [((300,), (0, 1, 2)), ((2, 3, 45), (0, 1, 2)),
                                            ((300,), 0), ((300,), (1, 2))])
def test_operands_of_every_kind_add_their_cotangents_up_in_the_replay_order(
        shape, argnums, fused_runs):
    fixed = (RNG.uniform(-1.0, 1.0, shape), RNG.uniform(-1.0, 1.0, shape), 0.75)
    differentiated = (argnums,) if type(argnums) is int else argnums
    # (operands not differentiated are closed over: constants of the program, the same
    # each call; as arguments they would be inputs, and the gradient staged)
    constants = {i: value for i, value in enumerate(fixed) if i not in differentiated}

    def live(*operands):
        operands = list(operands)
        for i in sorted(constants):
            operands.insert(i, constants[i])
        return mixed(*operands)
    argsets = [tuple(RNG.uniform(-1.0, 1.0, np.shape(fixed[i])) + (i == 2)
                     for i in differentiated) for _ in range(4)]
    argsets = [tuple(float(v) if np.ndim(v) == 0 else v for v in args) for args in argsets]
    vg = _agree(live, argsets, argnums=tuple(range(len(differentiated))))
    assert "def _s0_forward" in _fusion(vg).source
    assert len(fused_runs) == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_share_the_chunks_and_change_no_bit(threads, monkeypatch, fused_runs):
    monkeypatch.setattr(db.config, "parallel_threshold", 2 * CHUNK)
    monkeypatch.setattr(db.config, "threads", threads)
    argsets = [(RNG.uniform(-0.5, 1.0, 3 * CHUNK + 7), RNG.uniform(0.2, 1.5)) for _ in range(4)]
    vg = _agree(chain, argsets, argnums=(0, 1))
    assert _fusion(vg).threaded and len(fused_runs) == 2


def test_special_values_give_the_traced_bits():
    x = RNG.uniform(-0.5, 1.0, 600)
    x[:12] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310, -1e-310, 1e300, -1e300, 5e-324,
              np.finfo(float).max, np.finfo(float).tiny]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _agree(chain, [(x, 0.7), (x, 0.0), (x, -0.0), (np.full(600, np.nan), 0.7),
                       (x, np.inf), (x, 0.7)], argnums=(0, 1))


def test_a_square_that_overflows_warns_as_traced(fused_runs):
    def f(x, a):                            # a square read by a kernel: checked
        return np.sum(poly(wave(x, a) ** 2))
    small = RNG.uniform(-1.0, 1.0, 64)
    vg = _agree(f, [(small, 0.5)] * 3, argnums=(0, 1))
    assert len(fused_runs) == 1
    huge = small.copy()
    huge[5] = 1e200
    for function in (vg, db.value_and_grad(f, (0, 1))):
        with pytest.warns(RuntimeWarning, match="overflow"):
            function(huge, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(vg(huge, 0.5), db.value_and_grad(f, (0, 1))(huge, 0.5))


@db.fast_broadcast
def refuses_large(h):
    if h > 100.0:
        raise ValueError("refuses_large: h > 100")
    return h * 0.5


def test_a_kernel_that_raises_raises_as_traced(fused_runs):
    def f(x, a):
        return np.sum(refuses_large(wave(x, a)))
    x = RNG.uniform(-1.0, 1.0, 64)
    vg = _agree(f, [(x, 0.5)] * 3, argnums=(0, 1))
    assert len(fused_runs) == 1
    for function in (vg, db.value_and_grad(f, (0, 1))):
        with pytest.raises(ValueError, match="h > 100"):
            function(x + 1000.0, 0.5)
    _same(vg(x, 0.5), db.value_and_grad(f, (0, 1))(x, 0.5))


def test_an_array_read_after_its_segment_is_not_fused_into_it_and_still_right():
    def f(x, a):
        h = wave(x, a)
        return np.sum(h ** 2) * np.max(h)
    vg = _agree(f, [(RNG.uniform(-1.0, 1.0, 50), 0.5)] * 3, argnums=(0, 1))
    fusion = _fusion(vg)
    assert fusion is None or "_s0_forward" not in fusion.source


def test_a_segment_allocates_no_array_of_its_size_between_kernels():
    vg = _agree(chain, [(RNG.uniform(-0.5, 1.0, 3000), 0.5)] * 3, argnums=(0, 1))
    source = _fusion(vg).source
    segment = source[source.index("def _s0_values"):source.index("def fused")]
    sizes = [text.split(")")[0] for text in segment.split("_empty(")[1:]]
    # the blocks, the rows of a chunk's products, per chunk its checks and dots, and
    # the terms of the one sum (np.sum adds them up whole); sizes are arguments
    assert sizes.count("size") == 1, sizes       # the one sum's terms
    assert set(sizes) == {"BLOCK", "size", "nchunks", "(nchunks, 2", f"(2, {CHUNK}"}, sizes


@given(st.integers(0, 3 * CHUNK), st.integers(0, 2 ** 32 - 1),
       st.sampled_from([1.0, 1e-300, 1e300, np.nan, np.inf]))
def test_numpy_sum_adds_up_as_numpy_does(n, seed, special):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20, n)
    if n:
        values[rng.integers(0, n)] = special
    got, want = numpy_sum(values), np.add.reduce(values, axis=None)
    assert np.float64(got).tobytes() == np.float64(want).tobytes() or \
        (math.isnan(got) and math.isnan(want))


def test_a_chain_longer_than_the_cap_is_not_fused_and_still_right(monkeypatch):
    from dualbcast.jit import segments
    monkeypatch.setattr(segments, "MAX_KERNELS", 2)
    vg = _agree(chain, [(RNG.uniform(-0.5, 1.0, 40), 0.5)] * 3, argnums=(0, 1))
    fusion = _fusion(vg)
    assert fusion is None or "_s0_forward" not in fusion.source


def test_a_leaf_a_kernel_sum_also_differentiates_gets_one_gradient_buffer():
    vg = _agree(chain, [(RNG.uniform(-0.5, 1.0, 500), 0.5)] * 3, argnums=(0, 1))
    fusion = _fusion(vg)
    # x's cotangent: the kernel sum's buffer, into which the segment adds; no other
    # array of x's size is allocated per call for it
    assert fusion.accumulators == [(500,)] and fusion.blocks == []


def test_a_chain_behind_a_branch_follows_the_branch_with_the_traced_bits():
    # a guard (a branch on a traced value): such a program is replayed, not fused, and
    # a call taking the other branch traces again
    def f(x, a):
        h = wave(soft(x, a), a)
        return np.sum(h ** 2) if np.sum(h) > 0 else np.sum(poly(h))
    x = RNG.uniform(0.1, 1.0, 300)
    _agree(f, [(x, 0.5), (-x, 0.5), (x, 0.7), (-x, 0.9), (x, 0.5)], argnums=(0, 1))


def test_read_only_arguments_compile_nothing_new_and_are_left_alone(fused_runs):
    x = RNG.uniform(-0.5, 1.0, 700)
    vg = _agree(chain, [(x, 0.5)] * 3, argnums=(0, 1))
    soft(x, 0.5), soft.sum_and_partials(x, 0.5, wrt=(0, 1))     # (their loops compiled)
    fused = _fusion(vg).function
    counts = (len(fused.signatures), sum(len(loop.signatures) for loop in soft._loops.values()))
    frozen = x.copy()
    frozen.flags.writeable = False
    kept = frozen.copy()
    _same(vg(frozen, 0.5), db.value_and_grad(chain, (0, 1))(frozen, 0.5))
    _same(soft(frozen, 0.5), soft(x, 0.5))
    _same(soft.sum_and_partials(frozen, 0.5, wrt=(0, 1)), soft.sum_and_partials(x, 0.5, wrt=(0, 1)))
    assert (len(fused.signatures),
            sum(len(loop.signatures) for loop in soft._loops.values())) == counts
    assert frozen.tobytes() == kept.tobytes() and not frozen.flags.writeable
