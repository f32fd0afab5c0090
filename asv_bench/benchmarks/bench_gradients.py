"""Gradients of whole programs (issue: reverse-mode core) beside JAX, PyTorch eager,
autograd and a hand-written ``numba.njit`` gradient.

``GradientTimes`` times each system alone; ``GradientRatios`` reports dualbcast's time
over a peer's, both measured in the same process (the number to read on a noisy
machine).  Peers that are not installed are skipped.  ``ConstantTouch`` checks that a
large closed-over constant costs nothing; the tape's cost per operation is
``bench_performance.FoldPerOp``.
"""
from .bench_kernels import best_time
from .gradients import CASES, PEERS, SYSTEMS, make_call


class GradientTimes:
    params = (list(CASES), list(SYSTEMS))
    param_names = ["case", "system"]

    def setup(self, case, system):
        self.call = make_call(case, system)

    def time_value_and_grad(self, case, system):
        self.call()


class GradientRatios:
    params = (list(CASES), list(PEERS))
    param_names = ["case", "peer"]

    def setup(self, case, peer):
        self.peer = make_call(case, peer)
        self.ours = make_call(case, "dualbcast")

    def track_ratio(self, case, peer):
        return best_time(self.ours) / best_time(self.peer)

    track_ratio.unit = "dualbcast/peer"


class ConstantTouch:
    def setup(self):
        self.small = make_call("constant_touch_1e3", "dualbcast")
        self.large = make_call("constant_touch_1e7", "dualbcast")

    def track_cost_1e7_over_1e3(self):
        return best_time(self.large) / best_time(self.small)

    track_cost_1e7_over_1e3.unit = "ratio"
