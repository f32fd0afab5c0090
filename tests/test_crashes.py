"""Programs that once crashed the interpreter, each run in a subprocess so that a
segfault or heap corruption fails its test instead of killing the suite."""
import os
import subprocess
import sys
import textwrap

import pytest


def _run(code, timeout=300, **environment):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=dict(os.environ, **environment), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_fused_replay_over_more_than_64_chunks_with_a_nan():
    # exact_sum kept 64 partials and wrote past them: "double free or corruption".
    out = _run('''
        import math
        import numpy as np
        import dualbcast as db
        from dualbcast.kernel.prepared import CHUNK_ELEMENTS

        db.config.parallel_threshold = 10 ** 9     # one thread: the fused path
        k = db.fast_broadcast(lambda x, a: a * math.exp(-x * x))
        step = db.jit(db.value_and_grad(lambda x: 2.0 * k.sum(x, 1.5) + 1.0))
        rng = np.random.default_rng(0)
        x = rng.uniform(-1e3, 1e3, 70 * CHUNK_ELEMENTS)
        for call in range(6):
            x[rng.integers(x.size)] = np.nan if call >= 3 else 0.5
            value, grad = step(x)
            eager = db.value_and_grad(lambda x: 2.0 * k.sum(x, 1.5) + 1.0)(x)
            assert np.array_equal([value], [eager[0]], equal_nan=True)
            assert np.array_equal(grad, eager[1], equal_nan=True)
        print("ok")
    ''')
    assert out.strip() == "ok"


@pytest.mark.parametrize("subclass", ["np.memmap", "Sub"])
def test_a_replay_on_a_smaller_ndarray_subclass(subclass, tmp_path):
    # A differentiated subclass was keyed by its type without its shape: the program of
    # a long array replayed on 3 elements read past their end (SIGSEGV).
    out = _run(f'''
        import numpy as np
        import dualbcast as db

        class Sub(np.ndarray):
            pass

        def make(n):
            if {subclass!r} == "np.memmap":
                m = np.memmap({str(tmp_path / "data")!r} + str(n), np.float64, "w+",
                              shape=(n,))
                m[:] = np.linspace(0.5, 1.5, n)
                return m
            return np.linspace(0.5, 1.5, n).view(Sub)

        k = db.fast_broadcast(lambda x, a: a * x * x)
        f = lambda x: np.sum(np.sin(x) * x) + k.sum(x, 0.5)
        step = db.jit(db.value_and_grad(f))
        for n in (10 ** 6, 3, 10 ** 6, 3, 5, 3):
            x = make(n)
            value, grad = step(x)
            plain = np.asarray(x).copy()
            want = db.value_and_grad(f)(plain)
            assert value == want[0] and type(grad) is np.ndarray
            assert np.array_equal(grad, want[1]), n
            assert np.allclose(grad, np.sin(plain) + plain * np.cos(plain) + plain,
                               rtol=1e-15, atol=0)
        print("ok")
    ''')
    assert out.strip() == "ok"


def test_soak_ten_thousand_calls_with_changing_shapes_keep_memory_bounded():
    # Each kernel signature's plan once held its first call's arrays (up to 256 per
    # kernel and mode): a loop whose length changes each step grew by ~7 MB a step.
    out = _run('''
        import math, os
        import numpy as np
        import dualbcast as db

        def rss_mb():
            with open("/proc/self/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

        k = db.fast_broadcast(lambda x, a: a * math.exp(-x * x))
        data = np.linspace(0.0, 1.0, 1000)              # constant data, every call
        loss = lambda x, data: k.sum(x, 1.5) + np.sum(k(x, 2.0) * data[:x.size])
        eager = db.value_and_grad(loss)
        jitted = db.jit(db.value_and_grad(loss))
        rng = np.random.default_rng(0)
        for call in range(10000):
            if call == 1000:
                start = rss_mb()
            n = 100 + (call * 37) % 900
            x = rng.uniform(-1.0, 1.0, n) * (1 + 1e3 * (call % 2))
            s, g = k.sum_and_partials(x, 1.5)
            v, gx = (jitted if call % 3 else eager)(x, data)
            assert np.isfinite(s) and g.shape == gx.shape == (n,)
        small = rss_mb() - start
        start = rss_mb()
        for call in range(60):                          # 8 MB arrays, a new length each
            x = rng.uniform(-1.0, 1.0, 10 ** 6 + call)
            k(x, 2.0), k.sum_and_partials(x, 1.5), eager(x, x[::-1].copy())
        print(round(small, 1), round(rss_mb() - start, 1))
    ''', timeout=600, DUALBCAST_MALLOC_TUNING="0")
    # (what dualbcast holds, not what glibc's malloc keeps for the next call when
    # dualbcast tunes it: up to its trim threshold more, tests/test_memory.py)
    small, large = map(float, out.split())
    assert small < 40.0 and large < 100.0, (small, large)
