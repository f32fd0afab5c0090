"""Second order from one kernel loop (issue 15 item 3): ``k.sum_and_partials(...,
tangents=...)`` -- the sum, its tangent, the gradient and the Hessian-vector product,
the ``sum_partials_tangent`` loop on nested duals -- beside, in the same process and
timed in turns:

- a hand-written ``numba.njit`` loop computing the same four results from closed-form
  first and second derivatives (what a hand-written hyper-dual loop could at best do);
- JAX ``jit(lambda x, v: jvp(grad(f), (x,), (v,)))`` (gradient and hvp; skipped when
  JAX is not importable);
- dualbcast's own first-order ``sum_and_partials`` (the price of the second order).

Workloads: the EAM density ``exp(-3 (r + 1))``, a two-argument Morse pair kernel
(Hessian-vector product in both arguments), and a branchy polynomial (Horner's rule, a
branch on the value).  ``cd asv_bench && python -m benchmarks.bench_second_order`` prints
the ratios (one process).
"""
import math
import time

import numba
import numpy as np

import dualbcast as db

from .bench_kernels import best_time
from .workloads import rho

try:
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
except ImportError:             # (the JAX columns are skipped)
    jax = None

SIZES = [10 ** 2, 10 ** 4, 10 ** 6]


def best_in_turns(calls, rounds=5):
    """Each call's best time, the calls timed in turns (a drift of the machine's speed
    reaches every system alike)."""
    best = {name: math.inf for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            best[name] = min(best[name], best_time(call))
    return best


# --- EAM density ------------------------------------------------------------------------

@numba.njit
def rho_hvp_numba(x, v):
    g = np.empty_like(x)
    hv = np.empty_like(x)
    total = tangent = 0.0
    for i in range(x.size):
        e = math.exp(-3.0 * (x[i] + 1.0))
        total += e
        tangent += -3.0 * e * v[i]
        g[i] = -3.0 * e
        hv[i] = 9.0 * e * v[i]
    return total, tangent, g, hv


def rho_jax(x):
    return jnp.sum(jnp.exp(-3.0 * (x + 1.0)))


# --- Morse pair kernel of r and a --------------------------------------------------------

@db.fast_broadcast
def morse(r, a):
    u = math.exp(-a * (r - 1.0))
    return u * u - 2.0 * u


@numba.njit
def morse_hvp_numba(r, a, vr, va):
    gr, ga = np.empty_like(r), np.empty_like(a)
    hr, ha = np.empty_like(r), np.empty_like(a)
    total = tangent = 0.0
    for i in range(r.size):
        s = r[i] - 1.0
        u = math.exp(-a[i] * s)
        f_r = -2.0 * a[i] * u * (u - 1.0)
        f_a = -2.0 * s * u * (u - 1.0)
        w = u * (2.0 * u - 1.0)
        f_rr = 2.0 * a[i] * a[i] * w
        f_ra = -2.0 * u * (u - 1.0) + 2.0 * a[i] * s * w
        f_aa = 2.0 * s * s * w
        total += u * u - 2.0 * u
        tangent += f_r * vr[i] + f_a * va[i]
        gr[i], ga[i] = f_r, f_a
        hr[i] = f_rr * vr[i] + f_ra * va[i]
        ha[i] = f_ra * vr[i] + f_aa * va[i]
    return total, tangent, (gr, ga), (hr, ha)


def morse_jax(r, a):
    u = jnp.exp(-a * (r - 1.0))
    return jnp.sum(u * u - 2.0 * u)


# --- a branchy polynomial ---------------------------------------------------------------

COEFFICIENTS = (0.3, -1.2, 0.5, 2.0, -0.7, 1.1)


@db.fast_broadcast
def poly(x):
    p = 0.0
    for c in COEFFICIENTS:
        p = p * x + c
    if p > 1.0:
        return p * p
    return p


@numba.njit
def poly_hvp_numba(x, v):
    g = np.empty_like(x)
    hv = np.empty_like(x)
    total = tangent = 0.0
    for i in range(x.size):
        p = d = dd = 0.0
        for c in (0.3, -1.2, 0.5, 2.0, -0.7, 1.1):
            dd = dd * x[i] + 2.0 * d
            d = d * x[i] + p
            p = p * x[i] + c
        if p > 1.0:
            dd = 2.0 * (d * d + p * dd)
            d = 2.0 * p * d
            p = p * p
        total += p
        tangent += d * v[i]
        g[i] = d
        hv[i] = dd * v[i]
    return total, tangent, g, hv


def poly_jax(x):
    p = jnp.zeros_like(x)
    for c in COEFFICIENTS:
        p = p * x + c
    return jnp.sum(jnp.where(p > 1.0, p * p, p))


def calls(workload, n, seed=0):
    """``{system: call}`` for a workload at ``n`` elements."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 2.0, n)
    v = rng.normal(size=n)
    if workload == "morse":
        a = rng.uniform(1.0, 2.0, n)
        va = rng.normal(size=n)
        out = {
            "dualbcast": lambda: morse.sum_and_partials(x, a, wrt=(0, 1),
                                                        tangents={0: v, 1: va}),
            "numba": lambda: morse_hvp_numba(x, a, v, va),
            "first_order": lambda: morse.sum_and_partials(x, a, wrt=(0, 1)),
        }
        if jax is not None:
            hvp = jax.jit(lambda r, a, vr, va: jax.jvp(jax.grad(morse_jax, (0, 1)), (r, a),
                                                       (vr, va)))
            args = [jnp.asarray(z) for z in (x, a, v, va)]
            out["jax"] = lambda: jax.block_until_ready(hvp(*args))
        return out
    kernel, numba_hvp, jax_f = {"rho": (rho, rho_hvp_numba, rho_jax),
                                "poly": (poly, poly_hvp_numba, poly_jax)}[workload]
    out = {
        "dualbcast": lambda: kernel.sum_and_partials(x, tangents={0: v}),
        "numba": lambda: numba_hvp(x, v),
        "first_order": lambda: kernel.sum_and_partials(x),
    }
    if jax is not None:
        hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(jax_f), (x,), (v,)))
        xj, vj = jnp.asarray(x), jnp.asarray(v)
        out["jax"] = lambda: jax.block_until_ready(hvp(xj, vj))
    return out


WORKLOADS = ["rho", "morse", "poly"]


class SecondOrderRatios:
    """dualbcast's one-loop hvp over each peer, measured in turns in one process."""
    params = (WORKLOADS, SIZES)
    param_names = ["workload", "n"]

    def setup(self, workload, n):
        self.calls = calls(workload, n)
        for call in self.calls.values():
            call()                                  # compile outside the timing
        self.best = best_in_turns(self.calls)

    def track_ratio_to_numba(self, workload, n):
        return self.best["dualbcast"] / self.best["numba"]

    track_ratio_to_numba.unit = "dualbcast/numba"

    def track_ratio_to_jax(self, workload, n):
        if "jax" not in self.best:
            raise NotImplementedError("JAX is not installed")
        return self.best["dualbcast"] / self.best["jax"]

    track_ratio_to_jax.unit = "dualbcast/jax"

    def track_ratio_to_first_order(self, workload, n):
        return self.best["dualbcast"] / self.best["first_order"]

    track_ratio_to_first_order.unit = "second/first order"


class SecondOrderFirstCall:
    """Seconds from defining a new kernel to its first hvp (nested duals compiled), and
    to its first gradient, for comparison."""
    params = ["sum_and_partials", "sum_and_partials tangents"]
    param_names = ["mode"]

    def track_compile_seconds(self, mode):
        @db.fast_broadcast
        def morse_new(r, a):
            u = math.exp(-a * (r - 1.0))
            return u * u - 2.0 * u

        x = np.linspace(0.5, 2.0, 1000)
        start = time.perf_counter()
        if mode == "sum_and_partials":
            morse_new.sum_and_partials(x, 1.5, wrt=(0, 1))
        else:
            morse_new.sum_and_partials(x, 1.5, wrt=(0, 1), tangents={0: x, 1: 1.0})
        return time.perf_counter() - start

    track_compile_seconds.unit = "seconds"


if __name__ == "__main__":
    print(f"{'workload':8} {'n':>8} {'ns/elt':>8} {'/numba':>7} {'/jax':>7} {'/1st order':>10}")
    for workload in WORKLOADS:
        for n in SIZES:
            bench = SecondOrderRatios()
            bench.setup(workload, n)
            best = bench.best
            jax_ratio = best["dualbcast"] / best["jax"] if "jax" in best else math.nan
            print(f"{workload:8} {n:8d} {best['dualbcast'] / n * 1e9:8.2f} "
                  f"{best['dualbcast'] / best['numba']:7.2f} {jax_ratio:7.2f} "
                  f"{best['dualbcast'] / best['first_order']:10.2f}")
    for mode in SecondOrderFirstCall.params:
        print(f"first call, {mode}: "
              f"{SecondOrderFirstCall().track_compile_seconds(mode):.2f} s")
