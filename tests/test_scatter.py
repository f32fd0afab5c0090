"""``scatter_add`` (the backward pass of integer-array indexing) against ``np.add.at``:
bit for bit on float64 and float32 buffers (-0.0 included), the same errors, every
other index form handed to ``np.add.at``; and a Lennard-Jones gradient over all pairs
(``X[i] - X[j]``) against autograd's."""
import contextlib
import math
from unittest import mock

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import dualbcast as db
from dualbcast.core import scatter
from dualbcast.core.scatter import scatter_add

# NaN and infinite values: np.add.at warns about them, the compiled loop does not.
pytestmark = pytest.mark.filterwarnings("ignore:.* encountered in:RuntimeWarning")


@contextlib.contextmanager
def fast_path_always():
    """The compiled path for inputs of any size (tiny ones go to np.add.at)."""
    with mock.patch.multiple(scatter, MIN_VALUES=0):
        yield


def add_at(buffer, index, values):
    """np.add.at, given values of the shape of ``buffer[index]``: NumPy 2.4's reads past
    the end of 1-d values broadcast over a 2-d index (``test_numpy_broadcast_bug``)."""
    out = buffer.copy()
    np.add.at(out, index, np.broadcast_to(values, buffer[index].shape))
    return out


def scattered(buffer, index, values):
    out = buffer.copy()
    scatter_add(out, index, values)
    return out


def took_fast_path(buffer, index, values):
    """Whether scatter_add(buffer, index, values) adds with the compiled loop (on a
    copy)."""
    done = []
    add_rows = scatter._add_rows

    def spy(*args):
        done.append(True)
        return add_rows(*args)

    with mock.patch.object(scatter, "_add_rows", spy):
        scatter_add(buffer.copy(), index, values)
    return done == [True]


def assert_bits_equal(got, expected):
    """Equal bits, -0.0 and 0.0 told apart; a nan equals a nan whatever its sign and
    payload (IEEE gives them no meaning, and NumPy's loops differ in them)."""
    assert got.dtype == expected.dtype
    both_nan = np.isnan(got) & np.isnan(expected)
    np.testing.assert_array_equal(np.where(both_nan, 0, got).view(np.uint8),
                                  np.where(both_nan, 0, expected).view(np.uint8))


def assert_matches_add_at(buffer, index, values):
    assert_bits_equal(scattered(buffer, index, values), add_at(buffer, index, values))


# ---------------------------------------------------------------- hypothesis

def elements(dtype):
    """Every float of the dtype: the same additions in the same order on both sides
    (overflow included)."""
    return st.floats(width=64 if dtype == np.float64 else 32)


@st.composite
def scatters(draw):
    """(buffer, index, values): an integer array (0-d to 2-d, repeats, negative
    entries) indexing axis 0 of a 1-3-d buffer, in each of the forms the getitem rule
    hands over, and values of the indexed shape or broadcasting to it."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    buffer = draw(hnp.arrays(dtype, shape, elements=elements(dtype)))
    n0 = shape[0]
    index_dtype = draw(st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint64]))
    low = -n0 if np.dtype(index_dtype).kind == "i" else 0
    index_shape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=12))
    index = draw(hnp.arrays(index_dtype, index_shape, elements=st.integers(low, n0 - 1)))
    # Values of the shape of buffer[index], or of a shape broadcasting to it.
    target = index_shape + shape[1:]
    kept = draw(st.integers(0, len(target)))
    values_shape = tuple(draw(st.sampled_from([1, side]))
                         for side in target[len(target) - kept:])
    values_dtype = draw(st.sampled_from([dtype, np.float64]))
    values = draw(hnp.arrays(values_dtype, values_shape, elements=elements(dtype)))
    form = draw(st.sampled_from(["array", "tuple", "slices", "ellipsis"]))
    if form == "tuple":
        index = (index,)
    elif form == "slices":
        index = (index,) + (slice(None),) * draw(st.integers(0, len(shape) - 1))
    elif form == "ellipsis":
        index = (index, Ellipsis)
    return buffer, index, values


@settings(max_examples=300)
@given(scatters())
def test_same_as_add_at(case):
    buffer, index, values = case
    with fast_path_always():
        assert_matches_add_at(buffer, index, values)
        took = took_fast_path(buffer, index, values)
    # The compiled loop did it, unless there was nothing to add or the values have
    # another dtype (np.add.at's casting).
    added = np.size(index[0] if type(index) is tuple else index) * buffer[0].size
    assert took or added == 0 or values.dtype != buffer.dtype


@given(scatters())
def test_default_sizes_same_as_add_at(case):
    assert_matches_add_at(*case)        # small inputs: mostly np.add.at itself


# ---------------------------------------------------------------- the sizes it is for

def pair_scatter(n_atoms, dtype, seed=0):
    """The cotangent of X[i] in an all-pairs energy: buffer (n, 3), i (pairs,) with
    each atom repeated, values (pairs, 3)."""
    i, _ = np.triu_indices(n_atoms, 1)
    values = np.random.default_rng(seed).normal(size=(i.size, 3)).astype(dtype)
    return np.zeros((n_atoms, 3), dtype), i, values


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pairs_take_the_fast_path(dtype):
    buffer, i, values = pair_scatter(100, dtype)
    assert took_fast_path(buffer, i, values)
    assert_matches_add_at(buffer, i, values)
    # Into a buffer that already holds a gradient (X[i] - X[j]: the second scatter).
    buffer = add_at(buffer, i[::-1], values)
    assert_matches_add_at(buffer, i, values)
    assert_matches_add_at(buffer, i - 100, values)                  # negative indices


def test_negative_zero_kept():
    # -0.0 + -0.0 is -0.0: a sum started from +0.0 (bincount's) would lose it.
    buffer = np.full((8, 3), -0.0)
    index = np.repeat(np.arange(4), 3)
    with fast_path_always():
        assert_bits_equal(scattered(buffer, index, np.full((12, 3), -0.0)),
                          add_at(buffer, index, np.full((12, 3), -0.0)))
        assert_bits_equal(scattered(buffer, index, 1.0), add_at(buffer, index, 1.0))


# ---------------------------------------------------------------- errors, empty, others

@pytest.mark.parametrize("repeats", [1, 2000])       # np.add.at's sizes, the fast path's
@pytest.mark.parametrize("bad", [5, -6, 2 ** 62])
def test_out_of_range_raises_before_writing(repeats, bad):
    buffer = np.arange(15.0).reshape(5, 3)
    index = np.array([0, 1, bad, 2] * repeats)
    values = np.ones((index.size, 3))
    with pytest.raises(IndexError) as theirs:
        np.add.at(buffer.copy(), index, values)
    out = buffer.copy()
    with pytest.raises(IndexError) as ours:
        scatter_add(out, index, values)
    assert str(ours.value) == str(theirs.value)
    assert_bits_equal(out, buffer)


@pytest.mark.parametrize("bad", [2 ** 64 - 1, 2 ** 63])
def test_huge_unsigned_index(bad):
    # NumPy casts unsigned indices to intp: 2**64 - 1 is -1, 2**63 is out of range.
    buffer = np.arange(8.0).reshape(4, 2)
    index = np.array([0, bad] * 3000, np.uint64)        # the fast path's sizes
    values = np.ones((index.size, 2))
    out = buffer.copy()
    try:
        expected = add_at(buffer, index, values)
    except IndexError as error:
        with pytest.raises(IndexError, match=str(error)):
            scatter_add(out, index, values)
        assert_bits_equal(out, buffer)
    else:
        scatter_add(out, index, values)
        assert_bits_equal(out, expected)


def test_numpy_broadcast_bug():
    # np.add.at(buffer, i, values) with a 1-d buffer, a 2-d i and 1-d values: NumPy
    # 2.4 walks the values as if they had i's size (garbage, or NaN, at the end).
    buffer = np.zeros(3)
    index = np.array([[0, 1], [1, 2]])
    for fast in (contextlib.nullcontext(), fast_path_always()):
        out = buffer.copy()
        with fast:
            scatter_add(out, index, np.array([1.0, 10.0]))
        assert_bits_equal(out, np.array([1.0, 11.0, 10.0]))


@pytest.mark.parametrize("index_shape", [(0,), (0, 2), (3, 0)])
def test_empty_index(index_shape):
    buffer = np.arange(6.0).reshape(3, 2)
    index = np.zeros(index_shape, np.intp)
    with fast_path_always():
        for values in (np.ones(index_shape + (2,)), 1.0):
            assert_bits_equal(scattered(buffer, index, values), buffer)
        with pytest.raises(ValueError):
            scatter_add(buffer.copy(), index, np.ones(index_shape + (3,)))


RNG = np.random.default_rng(3)
INDEX = np.array([0, 2, 2, -1, 0, 1])


@pytest.mark.parametrize("index, values_shape", [
    ((INDEX, INDEX[::-1]), (6,)),               # two integer arrays
    ((slice(1, None), INDEX), (3, 6)),          # an array on axis 1
    ((Ellipsis, INDEX), (4, 6)),
    ((INDEX, 1), (6,)),                         # an int after the array
    ((INDEX, slice(0, 2)), (6, 2)),             # a partial slice
    ((INDEX, None), (6, 1, 4)),
    ((None, INDEX), (1, 6, 4)),
    ([0, 1, 1, -2], (4, 4)),                    # a list
    ([[0, 1], [1, 1]], (2, 2, 4)),
    (np.array([True, False, True, True]), (3, 4)),   # a mask
    (INDEX, ()),                                # values broadcast from a scalar
    (INDEX, (4,)),
    (INDEX, (6, 1)),
])
def test_other_index_forms(index, values_shape):
    buffer = RNG.normal(size=(4, 4))
    values = RNG.normal(size=values_shape)
    with fast_path_always():
        assert_bits_equal(scattered(buffer, index, values), add_at(buffer, index, values))


def test_values_that_do_not_broadcast():
    for fast in (contextlib.nullcontext(), fast_path_always()):
        with fast, pytest.raises(ValueError):
            # (a leading 1 too many)
            scatter_add(np.zeros((4, 3)), INDEX, np.ones((1, 6, 3)))


@pytest.mark.parametrize("dtype", [np.float16, np.longdouble, np.int64, np.complex128])
def test_other_buffer_dtypes(dtype):
    buffer = np.arange(12).reshape(4, 3).astype(dtype)
    values = np.arange(18).reshape(6, 3).astype(dtype)
    with fast_path_always():
        assert_bits_equal(scattered(buffer, INDEX, values), add_at(buffer, INDEX, values))


def test_strided_buffer_is_written_through():
    base = np.zeros((4, 6))
    view = base[:, ::2]
    with fast_path_always():
        scatter_add(view, INDEX, np.ones((6, 3)))
    expected = np.zeros((4, 6))
    np.add.at(expected[:, ::2], INDEX, np.ones((6, 3)))
    assert_bits_equal(base, expected)


# ---------------------------------------------------------------- end to end

def jittered_lattice(n_atoms, spacing=1.1, seed=0):
    side = math.ceil(n_atoms ** (1 / 3))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    jitter = np.random.default_rng(seed).uniform(-0.05, 0.05, (n_atoms, 3))
    return spacing * grid[:n_atoms] + jitter


def lennard_jones(X, i, j, np):
    d = X[i] - X[j]
    r = np.sqrt(np.sum(d * d, axis=1))
    return np.sum(4 * (r ** -12 - r ** -6))


def test_lennard_jones_gradient_against_autograd():
    n = 60                  # 1770 pairs x 3 values: the fast path's sizes
    X = jittered_lattice(n)
    i, j = np.triu_indices(n, 1)
    ours = db.grad(lambda X: lennard_jones(X, i, j, np))(X)
    theirs = autograd.grad(lambda X: lennard_jones(X, i, j, anp))(X)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_values_overlapping_the_buffer_add_as_np_add_at():
    # The loop would read values it had already added into: np.add.at does these.
    buffer = np.arange(60.0).reshape(20, 3)
    index = np.array([1, 0, 1, 2] * 10)
    with fast_path_always():
        got = buffer.copy()
        scatter_add(got, index, np.broadcast_to(got[0], (40, 3)))
    expected = buffer.copy()
    np.add.at(expected, index, np.broadcast_to(expected[0], (40, 3)))
    assert_bits_equal(got, expected)
