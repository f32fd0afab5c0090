"""``scipy.optimize.minimize(obj, x0, jac=True)`` through ``dualbcast.scipy.objective``
(issue 17), beside the same minimisation on autograd's ``value_and_grad`` and on a
hand-written NumPy gradient (the floor: what SciPy's own iterations cost with a cheap
gradient).

The objective, at n = 10^4 parameters: a kernel with a branch (a well steeper on one
side) summed by ``k.sum``, plus a kernel of neighbours' differences (log cosh), each
``k.sum`` a single loop giving the value and the gradient.  L-BFGS-B (about 40
iterations) and nonlinear CG (about 70); every system takes the same iterations.
BFGS is not timed: at 10^4 parameters it keeps a 10^4 x 10^4 inverse Hessian.

``MinimizeTimes`` times each system alone; ``MinimizeRatios`` reports dualbcast (eager,
and ``jit=True``) over autograd, timed in turns in one process (the number to read on a
noisy machine); ``ObjectiveOverhead`` what the helper adds to a bare
``db.value_and_grad`` call (its checks, the float, the 1-d view).  L-BFGS-B's own step
calls OpenBLAS, whose threads spin on a busy machine: its times include that, for every
system alike.  ``cd asv_bench && python -m benchmarks.bench_scipy_adapter`` prints the
numbers (one process).
"""
import importlib
import math

import numpy as np

import dualbcast as db
import dualbcast.scipy

from .bench_kernels import best_in_turns, best_time

N = 10 ** 4
COUPLING = 100.0
METHODS = ["L-BFGS-B", "CG"]
SYSTEMS = ["dualbcast", "dualbcast_jit", "autograd", "numpy"]


@db.fast_broadcast
def well(x, c):
    d = x - c
    if d > 0.0:
        return d * d * (1.0 + d)
    return d * d * (1.0 + 0.5 * d * d)


@db.fast_broadcast
def spring(u):
    return math.log(math.cosh(u))


def energy(x, c):
    return well.sum(x, c) + COUPLING * spring.sum(x[1:] - x[:-1])


def energy_autograd(x, c, anp):
    d = x - c
    u = x[1:] - x[:-1]
    wells = anp.where(d > 0.0, d * d * (1.0 + d), d * d * (1.0 + 0.5 * d * d))
    return anp.sum(wells) + COUPLING * anp.sum(anp.log(anp.cosh(u)))


def energy_numpy(x, c):
    """The value and the gradient by hand."""
    d = x - c
    u = x[1:] - x[:-1]
    above = d > 0.0
    d2 = d * d
    value = np.sum(np.where(above, d2 * (1.0 + d), d2 * (1.0 + 0.5 * d2))) \
        + COUPLING * np.sum(np.log(np.cosh(u)))
    g = np.where(above, d * (2.0 + 3.0 * d), d * (2.0 + 2.0 * d2))
    t = COUPLING * np.tanh(u)
    g[1:] += t
    g[:-1] -= t
    return value, g


def inputs():
    return np.zeros(N), np.random.default_rng(17).uniform(-2.0, 2.0, N)


def _module(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        raise NotImplementedError(f"{name} is not installed") from None


def objective_of(system):
    """``(x, c) -> (value, gradient)`` as SciPy's ``jac=True`` wants it."""
    if system == "dualbcast":
        return dualbcast.scipy.objective(energy)
    if system == "dualbcast_jit":
        return dualbcast.scipy.objective(energy, jit=True)
    if system == "autograd":
        autograd = _module("autograd")
        anp = _module("autograd.numpy")
        return autograd.value_and_grad(lambda x, c: energy_autograd(x, c, anp))
    if system == "numpy":
        return energy_numpy
    raise NotImplementedError(system)


def make_minimize(method, system):
    """A call running the whole minimisation; run once here (kernels compiled, a jitted
    objective traced and fused) and checked to converge."""
    minimize = _module("scipy.optimize").minimize
    fun = objective_of(system)
    x0, c = inputs()

    def run():
        return minimize(fun, x0, args=(c,), jac=True, method=method)
    result = run()
    if not result.success:
        raise RuntimeError(f"{system} {method}: {result.message}")
    run.nit = result.nit
    return run


class MinimizeTimes:
    timeout = 120
    params = (METHODS, SYSTEMS)
    param_names = ["method", "system"]

    def setup(self, method, system):
        self.run = make_minimize(method, system)

    def time_minimize(self, method, system):
        self.run()


class MinimizeRatios:
    """dualbcast's whole minimisation over autograd's, timed in turns."""
    timeout = 120
    params = (METHODS, ["dualbcast", "dualbcast_jit"])
    param_names = ["method", "ours"]

    def setup(self, method, ours):
        self.ours = make_minimize(method, ours)
        self.peer = make_minimize(method, "autograd")
        if self.ours.nit != self.peer.nit:      # (the same gradients to rounding)
            raise RuntimeError(f"{ours} took {self.ours.nit} iterations, autograd "
                               f"{self.peer.nit}")

    def track_ratio(self, method, ours):
        ours_time, peer_time = best_in_turns(self.ours, self.peer)
        return ours_time / peer_time

    track_ratio.unit = "dualbcast/autograd"


class ObjectiveOverhead:
    """One call of the helper's objective over the bare ``db.value_and_grad`` it wraps
    (timed in turns): its price, ~1 at n = 10^4."""

    def setup(self):
        x, c = inputs()
        x = x + 0.1
        helper, bare = dualbcast.scipy.objective(energy), db.value_and_grad(energy)
        self.helper = lambda: helper(x, c)
        self.bare = lambda: bare(x, c)
        self.helper()

    def track_helper_over_bare(self):
        helper, bare = best_in_turns(self.helper, self.bare)
        return helper / bare

    track_helper_over_bare.unit = "helper/bare"

    def time_helper_call(self):
        self.helper()


if __name__ == "__main__":
    for method in METHODS:
        runs = {system: make_minimize(method, system) for system in SYSTEMS}
        best = dict(zip(runs, best_in_turns(*runs.values())))
        print(f"{method} at n = {N}, {runs['dualbcast'].nit} iterations: " + ", ".join(
            f"{system} {best[system] * 1e3:.1f} ms" for system in SYSTEMS))
        print(f"  dualbcast/autograd {best['dualbcast'] / best['autograd']:.2f}, "
              f"jit/autograd {best['dualbcast_jit'] / best['autograd']:.2f}")
    bench = ObjectiveOverhead()
    bench.setup()
    print(f"one objective call {best_time(bench.helper) * 1e6:.0f} us, helper/bare "
          f"{bench.track_helper_over_bare():.3f}")
