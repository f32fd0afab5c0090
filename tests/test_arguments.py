"""Argument planning: loop shapes after coalescing, views instead of copies, dtypes."""
import numpy as np
import pytest

from dualbcast.kernel.arguments import ARRAY, SCALAR, compute_dtype, plan_call


def test_contiguous_same_shape_arrays_walk_one_flat_loop_over_views():
    x, y = np.ones((3, 4, 5)), np.zeros((3, 4, 5))
    plan = plan_call("k", (x, 2.0, y))
    assert plan.loop_shape == (60,) and plan.kinds == (ARRAY, SCALAR, ARRAY)
    operands = plan.operands_for((x, 2.0, y))
    assert np.shares_memory(operands[0], x) and np.shares_memory(operands[2], y)
    assert operands[1] == 2.0 and type(operands[1]) is float     # Numba's float64


@pytest.mark.parametrize("shapes, loop_shape", [
    ([(3, 1), (1, 4)], (3, 4)),          # row and column broadcast: two loops
    ([(1, 5, 1), (5, 1)], (5,)),          # size-1 dims dropped
    ([(2, 3, 4), (4,)], (6, 4)),          # leading dims merge, the broadcast one cannot
    ([(2, 3, 4), (2, 1, 1)], (2, 12)),
])
def test_broadcast_loops_are_coalesced(shapes, loop_shape):
    arrays = [np.arange(np.prod(s), dtype=float).reshape(s) for s in shapes]
    plan = plan_call("k", arrays)
    assert plan.loop_shape == loop_shape
    for view, array in zip(plan.operands_for(arrays), arrays):
        assert np.shares_memory(view, array)
        # the view walks the same elements as the broadcast array, in C order
        np.testing.assert_array_equal(view.reshape(-1) if view.size == np.prod(plan.shape)
                                      else np.broadcast_to(view, loop_shape).reshape(-1),
                                      np.broadcast_to(array, plan.shape).reshape(-1))


@pytest.mark.parametrize("make", [lambda a: a.T, lambda a: a[::-1, ::2], np.asfortranarray])
def test_non_contiguous_inputs_are_viewed_not_copied(make):
    base = np.arange(48.0).reshape(6, 8)
    x = make(base)
    plan = plan_call("k", (x, 1.0))
    view = plan.operands_for((x, 1.0))[0]
    assert np.shares_memory(view, x)
    np.testing.assert_array_equal(np.broadcast_to(view, plan.loop_shape).reshape(-1),
                                  x.reshape(-1))


def test_size_one_arrays_become_scalars_but_keep_the_shape():
    plan = plan_call("k", (np.ones((1, 1)), np.arange(3.0)))
    assert plan.kinds == (SCALAR, ARRAY) and plan.shape == (1, 3)


@pytest.mark.parametrize("args, dtype", [
    ([np.ones(2, np.float32)], np.float32),
    ([np.ones(2, np.float32), np.ones(2)], np.float64),
    ([np.ones(2, np.float32), np.float64(1)], np.float64),
    ([np.ones(2, np.int32), np.ones(2, np.float32)], np.float64),
    ([np.ones(2, np.int8), np.ones(2, np.float32)], np.float32),
    ([np.ones(2, np.bool_)], np.float64),
    ([np.ones(2, np.float16)], np.float32),
    ([], np.float64),
])
def test_compute_dtype(args, dtype):
    assert compute_dtype(args) == dtype


def test_python_scalars_are_weak():
    assert plan_call("k", (np.ones(2, np.float32), 1.5, 2, True)).dtype == np.float32
    assert plan_call("k", (1.5, 2)).dtype == np.float64


def test_a_plan_keeps_no_array_of_the_call_it_was_made_for():
    # A plan is kept for later calls of its signature: holding the first call's arrays
    # kept them alive after the caller let go (issue 14 #13).
    import gc
    import weakref
    x, y = np.ones((3, 4)), np.ones(4)[::-1]
    refs = [weakref.ref(x), weakref.ref(y)]
    plan = plan_call("k", (x, y, 2.0))
    del x, y
    gc.collect()
    assert [ref() for ref in refs] == [None, None]
    assert plan.converted == (None, None, None)


@pytest.mark.parametrize("make", [list, lambda a: a.view(np.memmap), lambda a: a.view(np.matrix)])
def test_lists_and_subclasses_are_planned_from_their_data(make):
    a = np.arange(4.0).reshape(1, 4)
    arg = make(a.tolist()) if make is list else make(a)
    plan = plan_call("k", (arg, 1.0))
    assert plan.shape == (1, 4)
    operand = plan.operands_for((arg, 1.0))[0]
    assert type(operand) is np.ndarray
    np.testing.assert_array_equal(operand.reshape(-1), a.reshape(-1))


def test_array_likes_are_converted_and_other_array_libraries_named():
    class OnlyArray:                    # np.asarray's protocol only: taken as NumPy does
        def __array__(self, dtype=None, copy=None):
            return np.arange(3.0)

    class Library:                      # an array library of its own (as Dask's arrays)
        def __array__(self, dtype=None, copy=None):
            return np.arange(3.0)

        def __array_function__(self, func, types, args, kwargs):
            return NotImplemented

    plan = plan_call("k", (OnlyArray(), 1.0))
    assert plan.shape == (3,)
    with pytest.raises(TypeError, match=r"k: argument 1 is a .*Library; kernels take NumPy and Dask "
                                        r"arrays.*np.asarray"):
        plan_call("k", (1.0, Library()))
