"""Kernel loops (issue: dual-number kernels) beside hand-written Numba and NumPy.

``KernelModes.time_call`` times every system on its own; ``KernelRatios`` measures
dualbcast against the hand-written ``numba.njit`` loop (and NumPy) *in the same process*,
which is the number to read on a noisy machine.  ``FirstCall`` is the compile latency
a user meets on a new kernel.
"""
import math
import time

import numpy as np

import dualbcast as db

from .workloads import SIZES, WORKLOADS, inputs, rho

MODES = ["value", "value_and_partials", "sum_and_partials"]


def best_time(f, repeat=5, budget=0.01):
    """Best per-call time over ``repeat`` batches of calls lasting ~``budget`` seconds."""
    start = time.perf_counter()
    f()
    number = max(1, int(budget / max(time.perf_counter() - start, 1e-7)))
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            f()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def best_in_turns(*calls, rounds=5):
    """Each call's best time (:func:`best_time`), the calls timed in turns: a drift of
    the machine's speed between seconds reaches every system alike."""
    best = [math.inf] * len(calls)
    for _ in range(rounds):
        best = [min(b, best_time(call)) for b, call in zip(best, calls)]
    return best


class KernelModes:
    params = (list(WORKLOADS), MODES, ["dualbcast", "numba", "numpy"], list(SIZES))
    param_names = ["workload", "mode", "system", "n"]

    def setup(self, workload, mode, system, n):
        self.call = WORKLOADS[workload](inputs(n))[mode][system]
        self.call()   # compile outside the timing

    def time_call(self, workload, mode, system, n):
        self.call()


class KernelRatios:
    params = (list(WORKLOADS), MODES, list(SIZES))
    param_names = ["workload", "mode", "n"]

    def setup(self, workload, mode, n):
        self.calls = WORKLOADS[workload](inputs(n))[mode]
        for call in self.calls.values():
            call()

    def track_ratio_to_numba(self, workload, mode, n):
        return best_time(self.calls["dualbcast"]) / best_time(self.calls["numba"])

    track_ratio_to_numba.unit = "dualbcast/numba"

    def track_ratio_to_numpy(self, workload, mode, n):
        return best_time(self.calls["dualbcast"]) / best_time(self.calls["numpy"])

    track_ratio_to_numpy.unit = "dualbcast/numpy"


class FirstCall:
    """Seconds from defining a new kernel to its first result: Numba compiles the
    scalar kernel (with duals for the partials modes) and the loop around it."""
    params = MODES
    param_names = ["mode"]

    def setup(self, mode):
        self.x = inputs(1000)

    def track_compile_seconds(self, mode):
        @db.fast_broadcast
        def morse(r, d, a, r0):
            e = math.exp(-a * (r - r0))
            return d * (1.0 - e) ** 2

        start = time.perf_counter()
        if mode == "value":
            morse(self.x, 1.2, 1.5, 1.0)
        else:
            getattr(morse, mode)(self.x, 1.2, 1.5, 1.0, wrt=(0, 2))
        return time.perf_counter() - start

    track_compile_seconds.unit = "seconds"


class StridedInputs:
    """A strided 1-d argument (a column ``d[:, 0]``) against the same values contiguous,
    in turns, one process (issue 16: at most 1.5x)."""
    params = [["sum", "sum_and_partials", "value"], [10 ** 4, 10 ** 6]]
    param_names = ["mode", "n"]

    def setup(self, mode, n):
        x = inputs(n)
        table = np.stack([x, x[::-1], x * 2.0], axis=1)
        self.column, self.contiguous = table[:, 0], np.ascontiguousarray(table[:, 0])
        self.call = {"sum": rho.sum, "value": rho, "sum_and_partials": rho.sum_and_partials}[mode]
        self.call(self.column), self.call(self.contiguous)      # compiled for both layouts

    def track_strided_over_contiguous(self, mode, n):
        strided, contiguous = best_in_turns(lambda: self.call(self.column),
                                            lambda: self.call(self.contiguous))
        return strided / contiguous

    track_strided_over_contiguous.unit = "strided/contiguous"
