"""Gradients written into the caller's arrays: ``k.sum_and_partials(..., out=)`` and
``value_and_grad(f, out=)``; same values as without, nothing of the gradient's size
allocated, bad buffers refused before any work."""
import math
import tracemalloc

import numpy as np
import pytest

import dualbcast as db
from dualbcast.kernel.prepared import CHUNK_ELEMENTS


@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


@db.fast_broadcast
def scaled(x, a):
    return a * x * x


def energy(x):
    p = rho.sum(x)
    return p ** 2 + p ** 3 + 0.25 * p ** 4


def _peak_bytes(call):
    call()                                  # compiled, warm (the second call
    call()                                  # compiles the parallel driver)
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_kernel_gradients_go_into_out():
    x = np.linspace(0.0, 1.0, 1000)
    a = np.linspace(1.0, 2.0, 1000)
    g = np.full_like(x, np.nan)
    total, got = rho.sum_and_partials(x, out=g)
    assert got is g
    np.testing.assert_array_equal(g, rho.sum_and_partials(x)[1])
    ga = np.empty(1000)
    total, (gx, g_a) = scaled.sum_and_partials(x, a, wrt=(0, 1), out=(None, ga))
    assert g_a is ga and gx is not None
    np.testing.assert_allclose(ga, x * x, rtol=1e-15)
    # a broadcast argument's gradient (accumulated in the loop) is copied in
    row = np.empty(3)
    _, g_row = scaled.sum_and_partials(np.ones((4, 3)), np.arange(3.0), wrt=1, out=row)
    assert g_row is row
    np.testing.assert_array_equal(row, [4.0, 4.0, 4.0])


@pytest.mark.parametrize("out, match", [
    (np.empty(5), "shape"), (np.empty(10, np.float32), "dtype"),
    (np.empty(20)[::2], "C-contiguous"), ((np.empty(10),), "tuple of 1|shape"),
])
def test_kernel_out_is_checked(out, match):
    with pytest.raises((ValueError, TypeError), match=match):
        rho.sum_and_partials(np.ones(10), out=out)


def test_value_and_grad_writes_into_out_and_allocates_nothing_of_its_size():
    x = np.linspace(0.0, 1.0, 10 ** 6)
    g = np.empty_like(x)
    value_and_grad = db.value_and_grad(energy, out=g)
    value, got = value_and_grad(x)
    assert got is g
    want_value, want = db.value_and_grad(energy)(x)
    assert value == want_value
    np.testing.assert_array_equal(g, want)
    # O(1): a chunk of scratch per thread for the sums, and small objects
    constant = db.config.threads * CHUNK_ELEMENTS * 8 + 64 * 1024
    assert _peak_bytes(lambda: value_and_grad(x)) < constant
    # without out: the gradient itself and O(1)
    plain = db.value_and_grad(energy)
    assert _peak_bytes(lambda: plain(x)) < x.nbytes + constant


def test_value_and_grad_out_with_an_argument_used_twice_and_tuples():
    x = np.linspace(0.0, 1.0, 100)

    def twice(x, y):
        return rho.sum(x) * rho.sum(2.0 * x) * y

    gx = np.empty_like(x)
    value, (got_x, got_y) = db.value_and_grad(twice, argnums=(0, 1), out=(gx, None))(x, 3.0)
    want = db.grad(twice, argnums=(0, 1))(x, 3.0)
    assert got_x is gx
    np.testing.assert_allclose(gx, want[0], rtol=1e-14)
    assert got_y == want[1]


def test_value_and_grad_out_on_unused_argument_is_zeroed():
    g = np.full(3, np.nan)
    _, got = db.value_and_grad(lambda x, y: y * 2.0, argnums=0, out=g)(np.ones(3), 1.0)
    assert got is g
    np.testing.assert_array_equal(g, 0.0)


@pytest.mark.parametrize("out, match", [
    (np.empty(4), "shape and dtype"), (np.empty(3, np.float32), "shape and dtype"),
    ((np.empty(3),), "structure"), ("x", "structure|shape and dtype"),
])
def test_value_and_grad_out_is_checked_before_running(out, match):
    calls = []

    def f(x):
        calls.append(1)
        return rho.sum(x)
    with pytest.raises(ValueError, match=match):
        db.value_and_grad(f, out=out)(np.ones(3))
    assert calls == []


def test_value_and_grad_out_must_not_overlap_its_argument():
    x = np.ones(3)
    with pytest.raises(ValueError, match="overlaps"):
        db.value_and_grad(lambda x: rho.sum(x), out=x)(x)


def test_numba_allocates_only_array_headers_whatever_the_size(monkeypatch):
    # Numba's own allocations (its runtime's statistics) per call: a fixed number of
    # small headers for the arrays passed in (per thread), none of the data's size.
    from numba.core.runtime import _nrt_python, rtsys
    _nrt_python.memsys_enable_stats()
    monkeypatch.setattr(db.config, "threads", 1)
    counts = []
    for n in (10 ** 3, 10 ** 6):
        x = np.linspace(0.0, 1.0, n)
        value_and_grad = db.value_and_grad(energy)
        value_and_grad(x)
        before = rtsys.get_allocation_stats()
        value_and_grad(x)
        after = rtsys.get_allocation_stats()
        counts.append(after.alloc - before.alloc)
        assert after.alloc - after.free == before.alloc - before.free      # no leak
    assert counts[0] == counts[1] <= 8


def _kernel_sum(r, c):
    return _WEIGHTED.sum(r, c)


@db.fast_broadcast
def _WEIGHTED(r, c):
    return c * r * r + math.exp(-r)


def test_out_overlapping_another_argument_is_refused_before_any_work():
    # The loop stores the gradient while it reads the arguments: out=c, c an input,
    # once computed 5.79 for 27.12 and left c overwritten.
    r, c = np.linspace(1.0, 2.0, 10), np.linspace(3.0, 4.0, 10)
    kept = c.copy()
    with pytest.raises(ValueError, match="overlaps argument 1"):
        db.value_and_grad(_kernel_sum, out=c)(r, c)
    with pytest.raises(ValueError, match="overlaps argument 1"):
        db.value_and_grad(_kernel_sum, out=c[::-1])(r, c)
    with pytest.raises(ValueError, match="overlaps argument 1"):
        _WEIGHTED.sum_and_partials(r, c, out=c)
    np.testing.assert_array_equal(c, kept)


def test_out_arrays_overlapping_each_other_are_refused():
    r, c = np.linspace(1.0, 2.0, 10), np.linspace(3.0, 4.0, 10)
    g = np.empty(10)
    with pytest.raises(ValueError, match="two out arrays overlap"):
        db.value_and_grad(_kernel_sum, argnums=(0, 1), out=(g, g))(r, c)
    with pytest.raises(ValueError, match="two out arrays overlap"):
        _WEIGHTED.sum_and_partials(r, c, wrt=(0, 1), out=(g, g))
    with pytest.raises(ValueError, match="two out arrays overlap"):
        db.value_and_grad(_kernel_sum, argnums=(0, 1), out=(g, g[:]))(r, c)


def test_an_f_ordered_out_is_filled_like_any_other():
    # (It once reached the kernel's loop, whose error blamed sum_and_partials.)
    r, c = np.linspace(1.0, 2.0, 12).reshape(3, 4), np.linspace(3.0, 4.0, 12).reshape(3, 4)
    g = np.empty((3, 4), order="F")
    value, got = db.value_and_grad(_kernel_sum, out=g)(r, c)
    assert got is g
    np.testing.assert_allclose(g, 2 * c * r - np.exp(-r), rtol=1e-15)
    assert value == pytest.approx(np.sum(c * r * r + np.exp(-r)), rel=1e-14)


def test_an_out_array_the_function_hands_a_kernel_is_filled_at_the_end():
    # f passes a view of its own out array to the kernel: the loop must not write the
    # gradient into what it reads (it once raised, naming sum_and_partials).
    r = np.linspace(1.0, 2.0, 6)
    buf = np.linspace(3.0, 4.0, 6)
    f = lambda r: _WEIGHTED.sum(r, buf[::-1])
    weights = buf[::-1].copy()
    want = db.value_and_grad(lambda r: _WEIGHTED.sum(r, weights))(r)
    value, grad = db.value_and_grad(f, out=buf)(r)
    assert grad is buf
    assert value == pytest.approx(want[0], rel=1e-15)
    np.testing.assert_allclose(grad, want[1], rtol=1e-15)
