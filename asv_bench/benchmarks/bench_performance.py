"""The performance issue's own measurements, each beside its reference:

- ``FoldPerOp``: the tape's marginal cost per recorded op, forward + backward, traced
  every call ("eager") and under ``db.jit`` ("jit"): per extra term of a fold (a 64-term fold minus a
  16-term fold: one op and one argument leaf per term) and per extra op on the same 16
  leaves (the fold run four times over them, minus once);
- ``Replay``: a gradient under ``db.jit`` over the same gradient traced every call;
- ``Fused``: a replay fused into one Numba function over the same replay as
  generated Python;
- ``FirstGradient``: seconds to the first EAM gradient in a fresh process, with an
  empty and with a warm on-disk cache (import included), beside JAX's when installed;
- ``Memory``: bytes allocated by ``value_and_grad`` of a sum-of-map over 10^7 elements,
  over the gradient's own size (tracemalloc), with and without ``out=``;
- ``Threads``: EAM at 10^6 on two threads over one (idle machine; under load and
  beside other libraries: bench_threads.py), and the EAM kernel's
  sum-and-gradient loop on two threads over one by size (where
  ``config.parallel_threshold`` belongs);
- ``VectorMath``: ns per element of each vectorised function in a Numba loop, and the
  same loop calling libm.
"""
import importlib.util
import math
import os
import subprocess
import sys
import tempfile
import tracemalloc

import numba
import numpy as np

import dualbcast as db
from dualbcast.jit import policy
from dualbcast.vmath import explog, trig

from .bench_kernels import best_time
from .gradients import (FOLD_TERMS, embed, fold_minus, fold_minus_passes, make_call,
                        warmed_up)
from .workloads import rho


class FoldPerOp:
    params = ["eager", "jit"]
    param_names = ["tape"]

    def setup(self, tape):
        self.calls, self.passes = {}, {}
        system = "dualbcast_jit" if tape == "jit" else "dualbcast"
        for terms in (FOLD_TERMS, 4 * FOLD_TERMS):
            xs = tuple(float(i) for i in range(1, terms + 1))
            f = db.value_and_grad(fold_minus)
            f = db.jit(f) if tape == "jit" else f
            # jit: warmed up to its steady state (generated, then fused)
            self.calls[terms] = warmed_up(lambda f=f, xs=xs: f(xs), system)
        xs = tuple(float(i) for i in range(1, FOLD_TERMS + 1))
        for passes in (1, 4):
            f = db.value_and_grad(fold_minus_passes)
            f = db.jit(f) if tape == "jit" else f
            self.passes[passes] = warmed_up(lambda f=f, p=passes: f(xs, p), system)

    def track_marginal_microseconds_per_op(self, tape):
        small, large = _best_in_turns(self.calls[FOLD_TERMS], self.calls[4 * FOLD_TERMS])
        return (large - small) / (3 * FOLD_TERMS) * 1e6

    track_marginal_microseconds_per_op.unit = "µs per op"

    def track_marginal_microseconds_per_op_same_leaves(self, tape):
        once, four = _best_in_turns(self.passes[1], self.passes[4])
        return (four - once) / (3 * (FOLD_TERMS - 1)) * 1e6

    track_marginal_microseconds_per_op_same_leaves.unit = "µs per op"

    def track_whole_gradient_microseconds_per_op(self, tape):
        return _best_in_turns(self.calls[FOLD_TERMS])[0] / (FOLD_TERMS - 1) * 1e6

    track_whole_gradient_microseconds_per_op.unit = "µs per op"


def _best_in_turns(*calls, rounds=150):
    """Each call's best time, the calls timed in turns, in many short batches (a
    difference of two times is only as good as their noise: this machine's speed
    drifts between seconds, and the best of many short batches drifts least)."""
    best = [math.inf] * len(calls)
    for _ in range(rounds):
        best = [min(b, best_time(call, repeat=1, budget=0.002))
                for b, call in zip(best, calls)]
    return best


class Replay:
    params = ["eam_1e2", "eam_1e4", "poly9_one_live_1e3", "fold16", "qux"]
    param_names = ["case"]

    def setup(self, case):
        self.replayed = make_call(case, "dualbcast_jit")
        self.eager = make_call(case, "dualbcast")

    def track_replayed_over_eager(self, case):
        return best_time(self.replayed) / best_time(self.eager)

    track_replayed_over_eager.unit = "ratio"


class Fused:
    """A replay fused into one Numba function (kernel sums and scalar code) over the
    same program replayed as generated Python (fusion turned off)."""
    params = ["eam_1e2", "eam_1e4", "poly9_one_live_1e3"]
    param_names = ["case"]

    def setup(self, case):
        self.fused = make_call(case, "dualbcast_jit")
        self.saved = policy.FUSE_AFTER
        policy.FUSE_AFTER = 10 ** 9        # (make_call warms up 10^4 calls at most)
        self.generated = make_call(case, "dualbcast_jit")

    def teardown(self, case):
        policy.FUSE_AFTER = self.saved

    def track_fused_over_generated(self, case):
        return best_time(self.fused) / best_time(self.generated)

    track_fused_over_generated.unit = "ratio"


FIRST_GRADIENT = """
import time
start = time.perf_counter()
import math
import numpy as np
import dualbcast as db

@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))

def energy(x):
    p = rho.sum(x)
    return p ** 2 + p ** 3 + 0.25 * p ** 4

e, g = db.value_and_grad(energy)(np.linspace(0.0, 1.0, 100))
print(time.perf_counter() - start)
"""

# db.jit's one-off cost: the EAM gradient's first three calls (trace and record, then
# the program written out as Python, then fused into one Numba function), seconds from
# the start of the process, import included.
JIT_FINAL_FORM = FIRST_GRADIENT.replace(
    "e, g = db.value_and_grad(energy)(np.linspace(0.0, 1.0, 100))",
    "vg = db.jit(db.value_and_grad(energy))\n"
    "for _ in range(3):\n"
    "    e, g = vg(np.linspace(0.0, 1.0, 100))")

FIRST_GRADIENT_JAX = """
import time
start = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
f = jax.jit(jax.value_and_grad(lambda x: (lambda p: p ** 2 + p ** 3 + 0.25 * p ** 4)(
    jnp.sum(jnp.exp(-3.0 * (x + 1.0))))))
jax.block_until_ready(f(jnp.linspace(0.0, 1.0, 100)))
print(time.perf_counter() - start)
"""

# The floor Numba sets on this machine, beside the same measurement of dualbcast: the
# EAM value and gradient written by hand with numba.njit (libm exp; compiled in the
# fresh process, as a user's njit function is), and the first call of a trivial njit
# function (importing Numba, initialising its compiler, compiling next to nothing).
FIRST_GRADIENT_NUMBA = """
import time
start = time.perf_counter()
import math
import numpy as np
import numba

@numba.njit
def energy_and_gradient(x, gradient):
    p = 0.0
    for i in range(x.size):
        p += math.exp(-3.0 * (x[i] + 1.0))
    dE_dp = 2.0 * p + 3.0 * p ** 2 + p ** 3
    for i in range(x.size):
        gradient[i] = -3.0 * dE_dp * math.exp(-3.0 * (x[i] + 1.0))
    return p ** 2 + p ** 3 + 0.25 * p ** 4

x = np.linspace(0.0, 1.0, 100)
e = energy_and_gradient(x, np.empty_like(x))
print(time.perf_counter() - start)
"""

FIRST_CALL_TRIVIAL_NUMBA = """
import time
start = time.perf_counter()
import numba
numba.njit(lambda x: x + 1.0)(1.0)
print(time.perf_counter() - start)
"""


def _seconds(script, runs=1):
    """Seconds the last of ``runs`` fresh processes running ``script`` prints, all with
    one new, empty dualbcast cache (a second run finds the first one's cache warm)."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "first_gradient.py")   # a real file: Numba caches from it
        with open(path, "w") as file:
            file.write(script)
        env = dict(os.environ, DUALBCAST_CACHE_DIR=cache)
        for _ in range(runs):
            done = subprocess.run([sys.executable, path], env=env, capture_output=True,
                                  text=True, check=True, timeout=600)
    return float(done.stdout.strip().splitlines()[-1])


class FirstGradient:
    timeout = 600

    def track_seconds_empty_cache(self):
        return _seconds(FIRST_GRADIENT)

    def track_seconds_warm_cache(self):
        # (the same file twice: its cache entries are keyed by its path)
        return _seconds(FIRST_GRADIENT, runs=2)

    track_seconds_empty_cache.unit = track_seconds_warm_cache.unit = "s"


class JitFinalForm:
    """Seconds to db.jit's final form of the EAM gradient (three calls: recorded,
    generated, fused) in a fresh process, beside FirstGradient's one eager call."""
    timeout = 600

    def track_seconds_empty_cache(self):
        return _seconds(JIT_FINAL_FORM)

    def track_seconds_warm_cache(self):
        return _seconds(JIT_FINAL_FORM, runs=2)

    track_seconds_empty_cache.unit = track_seconds_warm_cache.unit = "s"


class FirstGradientNumba:
    timeout = 600

    def track_seconds_hand_written(self):
        return _seconds(FIRST_GRADIENT_NUMBA)

    def track_seconds_trivial_function(self):
        return _seconds(FIRST_CALL_TRIVIAL_NUMBA)

    track_seconds_hand_written.unit = track_seconds_trivial_function.unit = "s"


class FirstGradientJax:
    timeout = 600

    def setup(self):
        # asv skips a benchmark whose setup raises NotImplementedError
        if importlib.util.find_spec("jax") is None:
            raise NotImplementedError("jax is not installed")

    def track_seconds(self):
        return _seconds(FIRST_GRADIENT_JAX)

    track_seconds.unit = "s"


def _allocated_over_gradient(out):
    x = np.linspace(0.0, 1.0, 10 ** 7)
    grad = np.empty_like(x) if out else None
    f = db.value_and_grad(lambda x: embed(rho.sum(x)), out=grad)
    f(x)
    f(x)            # the loop compiled, then its parallel driver
    tracemalloc.start()
    try:
        f(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / x.nbytes


class Memory:
    def track_allocated_over_gradient_1e7(self):
        return _allocated_over_gradient(out=False)

    def track_allocated_over_gradient_1e7_into_out(self):
        return _allocated_over_gradient(out=True)

    track_allocated_over_gradient_1e7.unit = "bytes / gradient bytes"
    track_allocated_over_gradient_1e7_into_out.unit = "bytes / gradient bytes"


class Threads:
    def setup(self):
        self.call = make_call("eam_1e6", "dualbcast")
        self.saved = db.config.threads, db.config.parallel_threshold

    def teardown(self):
        db.config.threads, db.config.parallel_threshold = self.saved

    def track_two_threads_over_one_eam_1e6(self):
        db.config.threads = 1
        one = best_time(self.call)
        db.config.threads = 2
        return best_time(self.call) / one

    track_two_threads_over_one_eam_1e6.unit = "ratio"


class ThreadsBySize:
    """The kernel loop alone (rho.sum_and_partials into a buffer), split or not: the
    size from which splitting pays is where ``config.parallel_threshold`` belongs."""
    params = [8192, 16384, 32768, 131072]
    param_names = ["n"]

    def setup(self, n):
        x = np.random.default_rng(0).uniform(-0.5, 1.0, n)
        out = np.empty_like(x)
        self.call = lambda: rho.sum_and_partials(x, out=out)
        self.saved = db.config.threads, db.config.parallel_threshold, db.config.adaptive_threads
        db.config.parallel_threshold, db.config.adaptive_threads = 0, False    # always split
        for threads in (1, 2):          # compile both the loop and its parallel driver
            db.config.threads = threads
            self.call()
            self.call()

    def teardown(self, n):
        db.config.threads, db.config.parallel_threshold, db.config.adaptive_threads = self.saved

    def track_two_threads_over_one(self, n):
        db.config.threads = 1
        one = best_time(self.call)
        db.config.threads = 2
        return best_time(self.call) / one

    track_two_threads_over_one.unit = "ratio"


def _loop(fn):
    @numba.njit
    def loop(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])
    return loop


VECTORISED = {"exp": explog.exp, "expm1": explog.expm1, "log": explog.log,
              "log1p": explog.log1p, "tanh": explog.tanh, "sin": trig.sin, "cos": trig.cos}


class VectorMath:
    params = (list(VECTORISED), ["dualbcast", "libm"])
    param_names = ["function", "implementation"]

    def setup(self, function, implementation):
        fn = VECTORISED[function] if implementation == "dualbcast" else getattr(math, function)
        self.x = np.random.default_rng(0).uniform(0.1, 5.0, 10 ** 6)
        self.out = np.empty_like(self.x)
        self.loop = _loop(fn)
        self.loop(self.x, self.out)

    def track_ns_per_element(self, function, implementation):
        return best_time(lambda: self.loop(self.x, self.out)) / self.x.size * 1e9

    track_ns_per_element.unit = "ns"
