"""Threads that never hurt: each place a large loop may split times its calls both ways
and runs the faster (kernel/threads.py); the threading layer is Numba's TBB when it is
installed; results never depend on either; no thread of ours keeps a core busy once
the loops are done."""
import math
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dualbcast as db
from dualbcast.kernel import threads as thread_module
from dualbcast.kernel.prepared import CHUNK_ELEMENTS
from dualbcast.kernel.threads import ThreadChoice


@pytest.fixture
def measured(monkeypatch):
    monkeypatch.setattr(db.config, "adaptive_threads", True)
    return db.config


def _drive(choice, calls, threaded_seconds, serial_seconds):
    """``calls`` calls through ``choice``; the seconds of call ``i`` on threads or one
    thread given by the two functions of ``i``.  Returns the way each call went."""
    ways = []
    for i in range(calls):
        way = choice.threaded()
        choice.record(way, threaded_seconds(i) if way else serial_seconds(i))
        ways.append(way)
    return ways


def _spent(ways, threaded_seconds, serial_seconds, start):
    return sum(threaded_seconds(i) if way else serial_seconds(i)
               for i, way in enumerate(ways) if i >= start)


def test_threads_that_pay_are_kept_and_one_thread_is_tried_ever_more_rarely(measured):
    ways = _drive(ThreadChoice(), 5000, lambda i: 1.0, lambda i: 2.0)
    assert not all(ways)                    # one thread was tried...
    assert ways[3000:].count(False) <= 2 * ThreadChoice.BURST       # ...ever more rarely
    assert _spent(ways, lambda i: 1.0, lambda i: 2.0, 3000) <= 1.02 * 2000


def test_threads_that_lose_are_left_and_tried_ever_more_rarely(measured):
    ways = _drive(ThreadChoice(), 5000, lambda i: 10.0, lambda i: 1.0)
    assert ways.count(True) <= 16           # a first try that loses by 2x ends its burst
    assert _spent(ways, lambda i: 10.0, lambda i: 1.0, 1000) <= 1.02 * 4000


@pytest.mark.parametrize("stalls", [0.02, 0.05, 0.1, 0.2])
def test_random_stalls_count_in_what_a_call_costs(measured, stalls):
    """Threads 3x faster but stalled now and then for 10-25 ms (a descheduled worker,
    as GNU OpenMP was seen to do under load), at random: one thread is cheaper on
    average, and the choice never costs 10% more than it (tries that went on while
    they were fast flip-flopped here at up to 2.6x)."""
    rng = random.Random(stalls)
    draws = [rng.uniform(10.0, 25.0) if rng.random() < stalls else 0.1
             for _ in range(20000)]
    ways = _drive(ThreadChoice(), 20000, draws.__getitem__, lambda i: 0.3)
    # (measured: 1.00, 1.03, 1.04 and 1.10 of one thread's time)
    assert _spent(ways, draws.__getitem__, lambda i: 0.3, 0) <= 1.12 * 0.3 * 20000


def test_a_load_that_goes_away_is_followed(measured):
    choice = ThreadChoice()
    ways = _drive(choice, 3000, lambda i: 10.0, lambda i: 1.0)
    assert not ways[-1]
    # threads faster again, and the way taken slower (the load is gone; one thread's
    # own calls also got faster: the change is seen at once)
    ways = _drive(choice, 3000, lambda i: 0.2, lambda i: 0.4)
    assert ways[:100].count(False) <= 3 * ThreadChoice.BURST       # (the change, once)
    assert ways[100:].count(False) <= 3 * ThreadChoice.BURST
    ways = _drive(choice, 3000, lambda i: 10.0, lambda i: 1.0)
    assert ways[100:].count(True) <= 3 * ThreadChoice.BURST


def test_a_try_refused_by_another_region_is_made_at_the_next_call(measured):
    choice = ThreadChoice()
    _drive(choice, 100, lambda i: 10.0, lambda i: 1.0)
    while not choice.threaded():            # until the next try of threads
        choice.record(False, 1.0)
    choice.record(False, 1.0)               # (refused: ran on one thread)
    assert choice.threaded()


def test_without_measuring_every_large_loop_splits(monkeypatch):
    monkeypatch.setattr(db.config, "adaptive_threads", False)
    assert all(_drive(ThreadChoice(), 100, lambda i: 10.0, lambda i: 1.0))


@pytest.mark.parametrize("value", [0, 1, "yes", None])
def test_the_setting_is_validated(value):
    with pytest.raises(TypeError, match="adaptive_threads"):
        db.config.adaptive_threads = value


@db.fast_broadcast
def damped(x, a):
    return a * x * x * (1.0 - 0.1 * x)


def test_a_kernel_whose_threads_are_slow_runs_on_one_thread_with_the_same_bits(
        measured, monkeypatch):
    """Threads made slow (a sleep, as a worker descheduled by a busy machine): the
    kernel's calls go to one thread, bit for bit what threads give."""
    import time
    from dualbcast.kernel import prepared
    monkeypatch.setattr(prepared, "DRIVER_AFTER", 0.0)
    monkeypatch.setattr(measured, "threads", 2)
    monkeypatch.setattr(measured, "parallel_threshold", 0)
    x = np.linspace(-1.0, 2.0, 8 * CHUNK_ELEMENTS)
    want = damped.sum_and_partials(x, 1.5, wrt=(0, 1))    # compiles, one thread
    split = []
    real = prepared.PreparedCall._run_parallel

    def slow(self, *args):
        split.append(1)
        time.sleep(0.01)
        return real(self, *args)
    monkeypatch.setattr(prepared.PreparedCall, "_run_parallel", slow)
    for _ in range(200):
        total, (gx, ga) = damped.sum_and_partials(x, 1.5, wrt=(0, 1))
        assert total == want[0]
        np.testing.assert_array_equal(gx, want[1][0])
        assert ga == want[1][1]
    assert 1 <= len(split) <= 12


def _run(code, *args, **environment):
    env = dict(os.environ, **environment)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _layers():
    """The threading layers Numba can load here (tbb only where it is installed)."""
    layers = ["omp", "workqueue"]
    try:
        import importlib.metadata
        importlib.metadata.distribution("tbb")
        layers.insert(0, "tbb")
    except importlib.metadata.PackageNotFoundError:
        pass
    return layers


_MODES = """
import hashlib, math, sys
import numpy as np
import dualbcast as db
db.config.threads, db.config.parallel_threshold = int(sys.argv[1]), 0
db.config.adaptive_threads = False

@db.fast_broadcast
def wave(x, a, b):
    return a * math.sin(x) * math.exp(-b * x * x) if x > -1.5 else a * x

rng = np.random.default_rng(7)
x = rng.uniform(-2, 2, (300, 1000))
a = rng.uniform(0.5, 1.5, 1000)
digest = hashlib.sha256()
for _ in range(2):          # (the first call compiles on one thread)
    results = [wave(x, a, 0.3), wave.sum(x, a, 0.3)]
    value, partials = wave.value_and_partials(x, a, 0.3, wrt=(0, 1, 2))
    total, grads = wave.sum_and_partials(x, a, 0.3, wrt=(0, 1, 2))
    results += [value, *partials, total, *grads]
    vg = db.value_and_grad(lambda x, a: np.sum(wave(x, a, 0.3) ** 2), argnums=(0, 1))
    v, (gx, ga) = vg(x, a)
    results += [v, gx, ga]
for r in results:
    digest.update(np.ascontiguousarray(r, np.float64).tobytes())
import numba
print(numba.threading_layer() if int(sys.argv[1]) > 1 else "serial", digest.hexdigest())
"""


@pytest.mark.parametrize("layer", _layers())
def test_every_threading_layer_gives_the_bits_of_one_thread(tmp_path, layer):
    serial = _run(_MODES, "1", DUALBCAST_CACHE_DIR=str(tmp_path)).split()
    threaded = _run(_MODES, "2", DUALBCAST_CACHE_DIR=str(tmp_path),
                    NUMBA_THREADING_LAYER=layer).split()
    assert threaded == [layer, serial[1]]


_IDLE_AFTER_LOOPS = """
import os, time
import numpy as np
import dualbcast as db
db.config.threads, db.config.parallel_threshold = 2, 0
db.config.adaptive_threads = False

@db.fast_broadcast
def kernel(x, a):
    return a * x * x

x = np.linspace(-1, 1, 1 << 18)
for _ in range(50):
    kernel.sum_and_partials(x, 2.0)
start_cpu, start = time.process_time(), time.perf_counter()
time.sleep(0.1)                 # right after the last region
busy = (time.process_time() - start_cpu) / (time.perf_counter() - start)
import numba
print(numba.threading_layer(), busy)
"""


@pytest.mark.parametrize("layer", ["default", "omp"])
def test_no_thread_of_ours_keeps_a_core_busy_after_the_loops(tmp_path, layer):
    environment = {"DUALBCAST_CACHE_DIR": str(tmp_path)}
    if layer != "default":
        environment["NUMBA_THREADING_LAYER"] = layer
    used, busy = _run(_IDLE_AFTER_LOOPS, **environment).split()
    assert layer in ("default", used)
    # (GNU OpenMP's workers spinning as by default: 8% of a core over these 0.1 s;
    # asleep: 0.1%; TBB's: 1%)
    assert float(busy) < 0.04, f"{used}: {float(busy):.1%} of a core used while idle"


_LAYER = """
import numpy as np
import dualbcast as db
db.config.threads, db.config.parallel_threshold = 2, 0
db.config.adaptive_threads = False      # (every large loop split: threads launched)

@db.fast_broadcast
def kernel(x):
    return x * x

x = np.ones(1 << 16)
kernel.sum(x)
kernel.sum(x)
import numba
print(numba.threading_layer())
"""


def test_tbb_is_taken_where_installed_unless_the_user_chose_a_layer(tmp_path):
    if "tbb" not in _layers():
        pytest.skip("tbb is not installed (pip install dualbcast[tbb])")
    environment = {"DUALBCAST_CACHE_DIR": str(tmp_path)}
    environment.pop("NUMBA_THREADING_LAYER", None)
    assert _run(_LAYER, **environment).strip() == "tbb"
    assert _run(_LAYER, NUMBA_THREADING_LAYER="omp", **environment).strip() == "omp"


def test_the_library_is_loaded_only_while_numba_may_still_choose(monkeypatch):
    loaded = []
    monkeypatch.setattr(thread_module.ctypes, "CDLL", lambda *a, **k: loaded.append(a))
    monkeypatch.setattr(thread_module.numba_parallel, "_is_initialized", True)
    thread_module._load_tbb()
    assert loaded == []


@db.fast_broadcast
def softplus_like(x, a):
    return math.log(1.0 + math.exp(a * x)) if x < 30.0 else a * x


def test_threaded_drivers_are_compiled_only_for_a_call_that_may_split(monkeypatch):
    """A program on small arrays, or on one thread, never compiles a threaded driver
    (about as long as the loop's own compile); the first call that may split does."""
    from dualbcast.kernel import loops, prepared
    monkeypatch.setattr(prepared, "DRIVER_AFTER", 0.0)
    compiled = []
    real = loops._compile_parallel
    monkeypatch.setattr(loops, "_compile_parallel",
                        lambda *args: compiled.append(1) or real(*args))
    monkeypatch.setattr(db.config, "parallel_threshold", 4 * CHUNK_ELEMENTS)
    small, large = np.linspace(-1, 1, 1000), np.linspace(-1, 1, 8 * CHUNK_ELEMENTS)
    monkeypatch.setattr(db.config, "threads", 2)
    for _ in range(3):
        softplus_like.sum_and_partials(small, 0.7)
        db.grad(lambda x: np.sum(softplus_like(x, 0.7) ** 2))(small)
    assert compiled == []
    monkeypatch.setattr(db.config, "threads", 1)
    for _ in range(3):
        softplus_like.sum_and_partials(large, 0.7)
    assert compiled == []
    monkeypatch.setattr(db.config, "threads", 2)
    for _ in range(3):
        softplus_like.sum_and_partials(large, 0.7)
    assert compiled == [1]


def test_choices_by_size_forget_the_size_least_recently_met():
    choices = thread_module.ChoicesBySize(limit=4)
    first = choices[1]
    for size in (2, 3, 4):
        choices[size]
    assert choices[1] is first              # met again: now the most recent
    choices[5]                              # full: size 2 is forgotten, not all
    assert list(choices.table) == [3, 4, 1, 5]


def test_a_threaded_driver_waits_until_its_loop_has_run_as_long_on_one_thread(monkeypatch):
    """Measuring threads, a loop's driver is compiled once the loop has spent
    DRIVER_AFTER seconds on one thread in calls that may split (the first call, which
    compiles the loop, not counted); without measuring, at the first such call."""
    from dualbcast.kernel import loops, prepared
    compiled, split = [], []
    real_compile, real_run = loops._compile_parallel, prepared.PreparedCall._run_parallel
    monkeypatch.setattr(loops, "_compile_parallel",
                        lambda *args: compiled.append(1) or real_compile(*args))
    monkeypatch.setattr(prepared.PreparedCall, "_run_parallel",
                        lambda self, *args: split.append(1) or real_run(self, *args))
    monkeypatch.setattr(db.config, "threads", 2)
    monkeypatch.setattr(db.config, "parallel_threshold", 0)
    monkeypatch.setattr(db.config, "adaptive_threads", True)
    monkeypatch.setattr(prepared, "DRIVER_AFTER", 3.0)
    x = np.linspace(-1, 1, 8 * CHUNK_ELEMENTS)

    @db.fast_broadcast
    def wave(x, a):
        return a * np.sin(x) * x

    want = wave.sum_and_partials(x, 0.7)          # compiles the loop: not counted
    ticks = iter(range(10 ** 6))                  # each loop run: one "second"
    monkeypatch.setattr(prepared.time, "perf_counter", lambda: float(next(ticks)))
    for _ in range(2):
        wave.sum_and_partials(x, 0.7)              # 2 seconds on one thread
    assert compiled == [] and split == []
    wave.sum_and_partials(x, 0.7)                  # 3: the driver compiled
    assert compiled == [1] and split == []
    for _ in range(20):                            # threads, tried as measured
        got = wave.sum_and_partials(x, 0.7)
        assert got[0] == want[0]
        np.testing.assert_array_equal(got[1][0], want[1][0])
    assert split
    # without measuring, the first call that may split compiles it
    monkeypatch.setattr(db.config, "adaptive_threads", False)
    other = db.fast_broadcast(lambda x, a: a * np.cos(x) * x)
    other.sum_and_partials(x, 0.7)
    assert compiled == [1, 1]


def test_a_driver_that_cannot_be_compiled_leaves_the_call_on_one_thread(monkeypatch, caplog):
    """Not the user's error, and the loop works: a warning, and one thread."""
    import logging
    from dualbcast.kernel import loops, prepared

    class Broken:
        overloads, stats = {}, None

        def compile(self, signature):
            raise RuntimeError("no driver today")

        def __call__(self, *args):
            raise AssertionError("a call that could not compile its driver ran on threads")
    monkeypatch.setattr(loops, "_compile_parallel", lambda *args: Broken())
    monkeypatch.setattr(db.config, "threads", 2)
    monkeypatch.setattr(db.config, "parallel_threshold", 0)
    monkeypatch.setattr(db.config, "adaptive_threads", False)
    caplog.set_level(logging.INFO, logger="dualbcast")
    kernel = db.fast_broadcast(lambda x, a: a * np.tanh(x) * x)
    x = np.linspace(-1, 1, 8 * CHUNK_ELEMENTS)
    for _ in range(3):
        total, gx = kernel.sum_and_partials(x, 0.7, wrt=0)
        assert total == pytest.approx(np.sum(0.7 * np.tanh(x) * x), rel=1e-12)
        np.testing.assert_allclose(gx, 0.7 * (np.tanh(x) + x / np.cosh(x) ** 2), rtol=1e-12)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no driver today" in warnings[0], warnings
