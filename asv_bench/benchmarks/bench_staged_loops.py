"""What the elementwise loops of staged ``db.jit`` programs cost to compile (issue 29:
"compile time stays bounded"), beside a hand-written ``numba.njit`` loop doing the same
arithmetic, compiled in the same process; and what they run at on geometry written as
users write it (``StagedGeometry``), beside NumPy and a hand-written ``numba.njit``.

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

from .machine_load import medians_in_turns

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


# ---------------------------------------------------------------- geometry in loops

def pair_terms(X, i, j, a):
    """Pair geometry over a neighbour list: rows gathered by index arrays."""
    d = X[j] - X[i]
    return d * d * a


def bond_terms(X, a):
    """Bond vectors of a chain: slices of whole rows."""
    d = X[1:] - X[:-1]
    return d * d * a + X[1:]


def pair_sums(X, i, j):
    """Squared pair distances and their total: sums added up in the loop."""
    d = X[j] - X[i]
    return np.sum(d * d, axis=1), np.sum(d * d)


@numba.njit(error_model="numpy")
def _pair_sums_by_hand(X, i, j, out):
    # (the total in order, not pairwise as NumPy's: the same to rounding)
    total = 0.0
    for p in range(i.size):
        r2 = 0.0
        for c in range(3):
            d = X[j[p], c] - X[i[p], c]
            r2 += d * d
        out[p] = r2
        total += r2
    return out, total


@numba.njit(error_model="numpy")
def _pair_terms_by_hand(X, i, j, a, out):
    for p in range(i.size):
        for c in range(3):
            d = X[j[p], c] - X[i[p], c]
            out[p, c] = d * d * a
    return out


@numba.njit(error_model="numpy")
def _bond_terms_by_hand(X, a, out):
    for p in range(X.shape[0] - 1):
        for c in range(3):
            d = X[p + 1, c] - X[p, c]
            out[p, c] = d * d * a + X[p + 1, c]
    return out


def _geometry(case):
    """``(db.jit call, NumPy call, numba.njit call)`` of ``case``."""
    rng = np.random.default_rng(1)
    if case == "pairs":
        X = rng.normal(size=(2000, 3))
        i, j = rng.integers(0, 2000, 30000), rng.integers(0, 2000, 30000)
        jitted, out = db.jit(pair_terms), np.empty((30000, 3))
        return (lambda: jitted(X, i, j, 0.5), lambda: pair_terms(X, i, j, 0.5),
                lambda: _pair_terms_by_hand(X, i, j, 0.5, out))
    if case == "pair sums":
        X = rng.normal(size=(2000, 3))
        i, j = rng.integers(0, 2000, 30000), rng.integers(0, 2000, 30000)
        jitted, out = db.jit(pair_sums), np.empty(30000)
        return (lambda: jitted(X, i, j), lambda: pair_sums(X, i, j),
                lambda: _pair_sums_by_hand(X, i, j, out))
    X = np.cumsum(rng.normal(size=(20000, 3)), axis=0)
    jitted, out = db.jit(bond_terms), np.empty((19999, 3))
    return (lambda: jitted(X, 0.5), lambda: bond_terms(X, 0.5),
            lambda: _bond_terms_by_hand(X, 0.5, out))


class StagedGeometry:
    """``db.jit`` of NumPy geometry (one loop per program, no copy per gather or
    slice, its sums added up in it) over NumPy and over a hand-written ``numba.njit`` loop, one dualbcast
    thread, medians of interleaved rounds: ``track_ratio`` (lower is better)."""
    params = [["pairs", "bonds", "pair sums"], ["jit/numpy", "jit/njit"]]
    param_names = ["case", "ratio"]
    number, repeat, timeout = 1, 1, 300

    def setup(self, case, ratio):
        self._threads = db.config.threads
        db.config.threads = 1
        self.calls = _geometry(case)
        for call in self.calls:
            for _ in range(3):
                call()                      # traces, compiles
        jit, numpy, by_hand = (call() for call in self.calls)
        np.testing.assert_array_equal(np.hstack(jit), np.hstack(numpy))    # (NumPy's bits)
        np.testing.assert_allclose(np.hstack(by_hand), np.hstack(numpy), rtol=1e-12)

    def teardown(self, case, ratio):
        db.config.threads = self._threads

    def track_ratio(self, case, ratio):
        jit, numpy, by_hand = medians_in_turns(*self.calls, seconds=1.5)
        return jit / (numpy if ratio == "jit/numpy" else by_hand)


if __name__ == "__main__":
    bench = StagedLoopCompile()
    for n in RECORDS:
        bench.setup(n)
        print(f"{n} records: loop {bench.track_loop_seconds(n):.3f} s, "
              f"njit {bench.track_njit_seconds(n):.3f} s")
        bench.teardown(n)
    bench = StagedGeometry()
    for case in StagedGeometry.params[0]:
        for ratio in ("jit/numpy", "jit/njit"):
            bench.setup(case, ratio)
            print(f"{case} {ratio}: {bench.track_ratio(case, ratio):.2f}")
            bench.teardown(case, ratio)
