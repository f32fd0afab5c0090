"""Large loops split across threads: the same bits as one thread, whatever the count;
settings validated; errors raised in a worker thread reach the caller."""
import importlib
import math
import os
import subprocess
import sys

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
    """Run with the settings a test sets, then restore them; every large loop split
    (not as measured: test_thread_choice.py tests that)."""
    saved = (db.config.threads, db.config.parallel_threshold, db.config.adaptive_threads)
    db.config.adaptive_threads = False
    yield db.config
    db.config.threads, db.config.parallel_threshold, db.config.adaptive_threads = saved


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
    real = prepared.PreparedCall._run_parallel
    monkeypatch.setattr(prepared.PreparedCall, "_run_parallel",
                        lambda self, workers, *args: split.append(workers)
                        or real(self, workers, *args))
    x = np.linspace(0, 1, 4 * CHUNK_ELEMENTS)
    threads.threads = 2
    wave.sum(x, 1.0, 1.0)                   # the first call compiles: one thread
    threads.parallel_threshold = x.size + 1
    wave.sum(x, 1.0, 1.0)
    assert split == []
    threads.parallel_threshold = x.size
    wave.sum(x, 1.0, 1.0)
    assert split == [2]
    threads.threads = 9                     # never more workers than chunks
    wave.sum(x, 1.0, 1.0)
    assert split == [2, 4]


def test_a_thread_finding_another_in_a_parallel_region_runs_alone(threads, monkeypatch):
    """Numba's workqueue layer cannot run two parallel regions at once."""
    thread_module = importlib.import_module("dualbcast.kernel.threads")
    prepared = importlib.import_module("dualbcast.kernel.prepared")
    threads.threads, threads.parallel_threshold = 2, 0
    x = np.linspace(-1, 1, 4 * CHUNK_ELEMENTS)
    want = wave.sum_and_partials(x, 1.5, 0.5, wrt=(0, 1))      # compiles
    split = []
    real = prepared.PreparedCall._run_parallel
    monkeypatch.setattr(prepared.PreparedCall, "_run_parallel",
                        lambda self, workers, *args: split.append(workers)
                        or real(self, workers, *args))
    assert thread_module.enter_parallel_region()        # as if another thread were in one
    try:
        got = wave.sum_and_partials(x, 1.5, 0.5, wrt=(0, 1))
    finally:
        thread_module.leave_parallel_region()
    assert split == []
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        np.testing.assert_array_equal(g, w)
    wave.sum_and_partials(x, 1.5, 0.5, wrt=(0, 1))
    assert split == [2]


_FORKED_CHILD = """
import os, sys
import numpy as np
import dualbcast as db
db.config.cache_dir = sys.argv[1]
db.config.threads, db.config.parallel_threshold = 2, 0
db.config.adaptive_threads = False          # (the second call splits)

@db.fast_broadcast
def kernel(x, a):
    return a * x * x

x = np.linspace(-1, 1, 1 << 16)
for _ in range(int(sys.argv[2])):
    # The first call compiles the loop and its threaded driver, which launches Numba's
    # threads (no region yet); a second runs a parallel region in the parent.
    total, gx = kernel.sum_and_partials(x, 2.0)
pid = os.fork()
if pid == 0:
    child_total, child_gx = kernel.sum_and_partials(x, 2.0)
    os._exit(0 if child_total == total and np.array_equal(child_gx, gx) else 3)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("layer", ["default", "omp"])
@pytest.mark.parametrize("calls_before_fork", [1, 2])
def test_a_child_forked_after_threads_were_launched_computes_on_one_thread(
        tmp_path, calls_before_fork, layer):
    """GNU OpenMP kills a forked child that starts a parallel region after its parent
    launched Numba's threads (multiprocessing forks by default on Linux), which the
    parent's first large call does when it compiles the threaded driver, before any
    region runs; dualbcast's child runs alone (under the default layer, TBB where it
    is installed, and under GNU OpenMP)."""
    environment = dict(os.environ)
    if layer != "default":
        environment["NUMBA_THREADING_LAYER"] = layer
    result = subprocess.run([sys.executable, "-c", _FORKED_CHILD, str(tmp_path),
                             str(calls_before_fork)],
                            capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr
    assert "child exit 0" in result.stdout, result.stdout + result.stderr


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
    """multiply_in_place gives np.multiply's bits: the product in NumPy's result dtype
    (a Python float is weak: float32 stays float32), stored in the array's dtype."""
    from dualbcast.kernel.threads import multiply_in_place
    threads.parallel_threshold = 0
    for dtype in (np.float64, np.float32):
        for factor in (np.float64(1.7), 1.7, np.float32(1.7), 3):
            for count in (1, 2, 3):
                threads.threads = count
                rng = np.random.default_rng(count)
                a = rng.uniform(-1, 1, 3 * CHUNK_ELEMENTS + 5).astype(dtype)
                want = np.multiply(a, factor, out=a.copy())
                multiply_in_place(a, factor)
                np.testing.assert_array_equal(a, want)
    b = np.arange(12.0).reshape(3, 4)[:, ::2]           # not contiguous: NumPy's own
    want = b * 2.5
    multiply_in_place(b, 2.5)
    np.testing.assert_array_equal(b, want)


@db.fast_broadcast
def many_arguments(y, x1, x2, x3, x4, x5, x6, x7, x8, b0, b1, b2, b3, b4, b5, b6, b7, b8):
    eta = b0 + b1 * x1 + b2 * x2 + b3 * x3 + b4 * x4 + b5 * x5 + b6 * x6 + b7 * x7 + b8 * x8
    return math.log1p(math.exp(eta)) - y * eta


def test_a_kernel_of_many_arguments_runs_on_threads(threads):
    # Its Hessian's loop has 45 operands: the threaded driver's call of the loop (in a
    # try block) once failed to compile for more than 30 arguments.
    rng = np.random.default_rng(3)
    rows = 3 * CHUNK_ELEMENTS + 5
    data = [(rng.uniform(size=rows) < 0.5).astype(float)] + list(rng.normal(size=(8, rows)))
    beta = rng.normal(size=9) * 0.3
    hessian = db.hessian(lambda b: many_arguments.sum(*data, *b))
    threads.parallel_threshold, threads.threads = 0, 1
    serial = hessian(beta)
    threads.threads = 2
    np.testing.assert_array_equal(hessian(beta), serial)
    X = np.column_stack([np.ones(rows)] + data[1:])
    p = 1.0 / (1.0 + np.exp(-(X @ beta)))
    np.testing.assert_allclose(serial, (X.T * (p * (1 - p))) @ X, rtol=1e-10)
