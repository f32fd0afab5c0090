"""Gradients of whole programs (issue: reverse-mode core) beside JAX, PyTorch eager,
autograd and a hand-written ``numba.njit`` gradient.

``GradientTimes`` times each system alone; ``GradientRatios`` reports dualbcast's time
(eager, and under ``db.jit``) over a peer's, both measured in turns in the same
process (the number to read on a noisy machine).  Peers that are not installed are skipped.  ``ConstantTouch`` checks that a
large closed-over constant costs nothing; the tape's cost per operation is
``bench_performance.FoldPerOp``.
"""
from .bench_kernels import best_in_turns, best_time
from .gradients import CASES, OURS, PEERS, SYSTEMS, make_call
from .machine_load import QUICK

# The peers GradientRatios times under CI's quick run (DUALBCAST_BENCH_QUICK).
_QUICK_PEERS = ("numba", "jax")


class GradientTimes:
    timeout = 300       # (a first db.jit call fuses: a chain of kernels compiles for seconds)
    # (CI's quick run: the systems GradientRatios' quick run does not time, so that
    # each runs once: not ours, which it times against every peer it takes)
    params = (list(CASES), [s for s in SYSTEMS
                            if not QUICK or s not in _QUICK_PEERS + OURS])
    param_names = ["case", "system"]

    def setup(self, case, system):
        self.call = make_call(case, system)

    def time_value_and_grad(self, case, system):
        self.call()


class GradientRatios:
    """dualbcast eager and under db.jit over each peer, timed in turns (five rounds,
    each system its best)."""
    timeout = 300
    # (CI's quick run: two peers of the five, each case still run against both of ours)
    params = (list(CASES), list(OURS), [p for p in PEERS if p not in OURS
                                        and (not QUICK or p in _QUICK_PEERS)])
    param_names = ["case", "ours", "peer"]

    def setup(self, case, ours, peer):
        self.peer = make_call(case, peer)
        self.ours = make_call(case, ours)

    def track_ratio(self, case, ours, peer):
        ours_time, peer_time = best_in_turns(self.ours, self.peer)
        return ours_time / peer_time

    track_ratio.unit = "dualbcast/peer"


class ConstantTouch:
    def setup(self):
        self.small = make_call("constant_touch_1e3", "dualbcast")
        self.large = make_call("constant_touch_1e7", "dualbcast")

    def track_cost_1e7_over_1e3(self):
        return best_time(self.large) / best_time(self.small)

    track_cost_1e7_over_1e3.unit = "ratio"
