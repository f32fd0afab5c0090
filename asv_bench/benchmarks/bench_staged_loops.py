"""What the elementwise loops of staged ``db.jit`` programs cost to compile (issue 29:
"compile time stays bounded"), beside a hand-written ``numba.njit`` loop doing the same
arithmetic, compiled in the same process.

``track_loop_seconds``: the seconds the call that compiles a program's loop takes over
a replay's (a program of ``records`` elementwise operations over 4096 elements: one
loop), with an empty disk cache; ``track_njit_seconds``: the first call of the same
chain written by hand as one ``numba.njit`` loop.  A fresh structure each time (the
operations' order depends on a counter), so nothing is found compiled.
"""
import tempfile
import time

import numba
import numpy as np

import dualbcast as db

RECORDS = (2, 8, 32)
_OPS = ("+", "*", "-")


def _chain(records, salt):
    """``f(x, a)`` applying ``records`` operations, their order set by ``salt``."""
    ops = [_OPS[(salt + k * (salt % 3 + 1)) % 3] for k in range(records)]

    def f(x, a):
        v = x
        for op in ops:
            v = v + a if op == "+" else v * a if op == "*" else v - x
        return v
    return f, ops


def _handwritten(ops):
    lines = ["def loop(x, a, out):", "    for i in range(x.size):", "        v = x[i]"]
    lines += [f"        v = v {'+ a' if op == '+' else '* a' if op == '*' else '- x[i]'}"
              for op in ops]
    lines.append("        out[i] = v")
    namespace = {}
    exec("\n".join(lines), namespace)
    return numba.njit(namespace["loop"])


class StagedLoopCompile:
    params = [RECORDS]
    param_names = ["records"]
    number, repeat, timeout = 1, 1, 300
    _salt = [int(time.time()) % 1000]

    def setup(self, records):
        self._directory = tempfile.mkdtemp(prefix="dualbcast-loop-bench-")
        self._previous = db.config.cache_dir
        db.config.cache_dir = self._directory
        # (Numba's first compile in a process pays its own start-up: paid here)
        _handwritten(["+"])(np.ones(4), 1.0, np.empty(4))

    def teardown(self, records):
        db.config.cache_dir = self._previous

    def _fresh(self, records):
        self._salt[0] += 1
        return _chain(records, self._salt[0])

    def track_loop_seconds(self, records):
        f, _ = self._fresh(records)
        jitted = db.jit(f)
        x, a = np.random.default_rng(0).uniform(1, 2, 4096), 1.0001
        jitted(x, a)                        # traces
        start = time.perf_counter()
        jitted(x, a)                        # replays: writes the code, compiles the loop
        compiling = time.perf_counter() - start
        start = time.perf_counter()
        jitted(x, a)
        return compiling - (time.perf_counter() - start)

    def track_njit_seconds(self, records):
        _, ops = self._fresh(records)
        loop = _handwritten(ops)
        x = np.random.default_rng(0).uniform(1, 2, 4096)
        start = time.perf_counter()
        loop(x, 1.0001, np.empty_like(x))
        return time.perf_counter() - start

    track_loop_seconds.unit = track_njit_seconds.unit = "seconds"


if __name__ == "__main__":
    bench = StagedLoopCompile()
    for n in RECORDS:
        bench.setup(n)
        print(f"{n} records: loop {bench.track_loop_seconds(n):.3f} s, "
              f"njit {bench.track_njit_seconds(n):.3f} s")
        bench.teardown(n)
