"""Large loops split across threads: the same bits as one thread, whatever the count;
settings validated; errors raised in a worker thread reach the caller."""
import importlib
import math

import numpy as np
import pytest

import dualbcast as db
from dualbcast.kernel.prepared import CHUNK_ELEMENTS


@db.fast_broadcast
def wave(x, a, b):
    return a * math.sin(x) * math.exp(-b * x * x)


@db.fast_broadcast
def inverse_square(x):
    return x ** -2         # Numba raises ZeroDivisionError for 0.0 ** negative int


@pytest.fixture
def threads():
    """Run with the settings a test sets, then restore them."""
    saved = (db.config.threads, db.config.parallel_threshold)
    yield db.config
    db.config.threads, db.config.parallel_threshold = saved


def _all_modes(kernel, *args, wrt):
    value, partials = kernel.value_and_partials(*args, wrt=wrt)
    total, grads = kernel.sum_and_partials(*args, wrt=wrt)
    return [kernel(*args), kernel.sum(*args), value, *partials, total, *grads]


@pytest.mark.parametrize("shape_x, shape_a", [
    ((5 * CHUNK_ELEMENTS + 17,), ()),                 # one flat loop, several chunks
    ((300, 1000), (1000,)),                           # a broadcast row: accumulated
    ((1000, 300), (1000, 1)),                         # a broadcast column
])
def test_threads_give_the_same_bits_as_one_thread(threads, shape_x, shape_a):
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, shape_x)
    a = rng.uniform(0.5, 1.5, shape_a) if shape_a else 1.25
    threads.parallel_threshold = 0
    threads.threads = 1
    serial = _all_modes(wave, x, a, 0.3, wrt=(0, 1, 2))
    for count in (2, 3, 7):
        threads.threads = count
        parallel = _all_modes(wave, x, a, 0.3, wrt=(0, 1, 2))
        for got, want in zip(parallel, serial):
            np.testing.assert_array_equal(got, want)
    # and the chunked sums are right: against NumPy's pairwise sums
    total, (gx, ga, gb) = wave.sum_and_partials(x, a, 0.3, wrt=(0, 1, 2))
    values = a * np.sin(x) * np.exp(-0.3 * x * x)
    np.testing.assert_allclose(total, values.sum(), rtol=1e-12)
    np.testing.assert_allclose(ga, _sum_to_shape(values / a, np.shape(a)), rtol=1e-10)


def _sum_to_shape(values, shape):
    padded = (1,) * (values.ndim - len(shape)) + shape
    axes = tuple(i for i, n in enumerate(padded) if n == 1)
    return values.sum(axis=axes, keepdims=True).reshape(shape)


def test_below_the_threshold_one_thread_runs(threads, monkeypatch):
    prepared = importlib.import_module("dualbcast.kernel.prepared")
    split = []
    real = prepared.run_chunks
    monkeypatch.setattr(prepared, "run_chunks",
                        lambda call, n, count: split.append(count) or real(call, n, count))
    x = np.linspace(0, 1, 4 * CHUNK_ELEMENTS)
    threads.threads = 2
    wave.sum(x, 1.0, 1.0)                   # the first call compiles: one thread
    threads.parallel_threshold = x.size + 1
    wave.sum(x, 1.0, 1.0)
    assert split == []
    threads.parallel_threshold = x.size
    wave.sum(x, 1.0, 1.0)
    assert split == [2]


def test_an_error_in_a_worker_thread_reaches_the_caller(threads):
    threads.threads = 2
    threads.parallel_threshold = 0
    x = np.ones(4 * CHUNK_ELEMENTS)
    inverse_square(x)                   # compiled (the first call runs on one thread)
    x[-1] = 0.0                             # in the last chunk: the worker's
    with pytest.raises(ZeroDivisionError, match="inverse_square"):
        inverse_square(x)


@pytest.mark.parametrize("name, value, error", [
    ("threads", 0, ValueError), ("threads", 1.5, ValueError), ("threads", True, ValueError),
    ("parallel_threshold", -1, ValueError), ("cache_dir", 3, TypeError),
    ("no_such_setting", 1, AttributeError),
])
def test_settings_are_validated(name, value, error):
    with pytest.raises(error, match=name):
        setattr(db.config, name, value)


def test_the_sum_rules_backward_scaling_splits_across_threads_exactly(threads):
    from dualbcast.kernel.threads import multiply_in_place
    threads.parallel_threshold = 0
    for dtype in (np.float64, np.float32):
        for count in (1, 2, 3):
            threads.threads = count
            a = np.random.default_rng(count).uniform(-1, 1, 3 * CHUNK_ELEMENTS + 5).astype(dtype)
            want = a * np.float64(1.7)
            multiply_in_place(a, np.float64(1.7))
            np.testing.assert_array_equal(a, want.astype(dtype))
