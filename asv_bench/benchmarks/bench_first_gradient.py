"""The first gradient a user waits for (issue 16), each in a fresh Python process:

- the ten-kernel chain ``h = k_i(h, a)`` (``workloads.chain``) and the EAM energy,
  ``db.value_and_grad`` at 10^3 elements, with an empty compile cache and with the
  cache the previous run left (warm);
- the EAM gradient at 10^6 elements on two threads: its loop (the loop's threaded
  driver, a Numba parallel function, is compiled once the loop has run
  ``DRIVER_AFTER`` seconds on one thread);
- beside Numba's floor (a trivial ``numba.njit`` function's first call), the EAM
  gradient written by hand with ``numba.njit``, and JAX's first ``jit(value_and_grad)``
  call of the same chain.

Seconds of the first call only (imports excluded), the median of a few processes.
Peers that are not installed are skipped (``NotImplementedError``)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

from .machine_load import QUICK

BENCHMARKS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PRELUDE = """
import json, sys, time
sys.path.insert(0, {root!r})
import numpy as np
"""
# dualbcast as a user meets it (benchmarks/__init__.py changes one setting)
_DUALBCAST_DEFAULTS = """
import benchmarks
from dualbcast.kernel import prepared
prepared.DRIVER_AFTER = benchmarks.LIBRARY_DRIVER_AFTER
"""

SCRIPTS = {
    "numba_floor": """
        import numba

        @numba.njit
        def trivial(x):
            return x + 1.0

        start = time.perf_counter()
        trivial(1.0)
    """,
    "numba_eam": """
        import numba
        from benchmarks.gradients import eam_numba
        x = np.random.default_rng(0).uniform(-0.5, 1.0, 1000)
        start = time.perf_counter()
        eam_numba(x)
    """,
    "dualbcast_eam": """
        import dualbcast as db
        from benchmarks.gradients import embed
        from benchmarks.workloads import rho
        x = np.random.default_rng(0).uniform(-0.5, 1.0, 1000)
        gradient = db.value_and_grad(lambda x: embed(rho.sum(x)))
        start = time.perf_counter()
        gradient(x)
    """,
    "dualbcast_eam_threads": """
        import dualbcast as db
        from benchmarks.gradients import embed
        from benchmarks.workloads import rho
        db.config.threads = 2
        x = np.random.default_rng(0).uniform(-0.5, 1.0, 10 ** 6)
        gradient = db.value_and_grad(lambda x: embed(rho.sum(x)))
        start = time.perf_counter()
        gradient(x)
    """,
    "dualbcast_chain": """
        import dualbcast as db
        from benchmarks.workloads import chain
        x = np.random.default_rng(0).uniform(-0.5, 1.0, 1000)
        gradient = db.value_and_grad(chain, argnums=(0, 1))
        start = time.perf_counter()
        gradient(x, 0.7)
    """,
    "jax_chain": """
        try:
            import jax
        except ImportError:
            print(json.dumps(None))
            raise SystemExit
        jax.config.update("jax_enable_x64", True)
        from benchmarks.workloads import chain_generic
        x = jax.numpy.asarray(np.random.default_rng(0).uniform(-0.5, 1.0, 1000))
        gradient = jax.jit(jax.value_and_grad(
            lambda x, a: chain_generic(x, a, jax.numpy, jax.numpy.sum), argnums=(0, 1)))
        start = time.perf_counter()
        jax.block_until_ready(gradient(x, 0.7))
    """,
}


def first_call_seconds(name, cache_dir):
    """Seconds of the first call of ``SCRIPTS[name]`` in a fresh process whose
    dualbcast cache is ``cache_dir``; None when its peer is not installed."""
    script = _PRELUDE.format(root=BENCHMARKS_DIR) + \
        (_DUALBCAST_DEFAULTS if name.startswith("dualbcast") else "") + \
        textwrap.dedent(SCRIPTS[name]) + \
        "\nprint(json.dumps(time.perf_counter() - start))\n"
    # (Numba's own cache is left as it is: dualbcast's helpers compiled with
    # cache=True are compiled once per installation, not per user program.)
    env = dict(os.environ, DUALBCAST_CACHE_DIR=cache_dir, DUALBCAST_COMPILE_NOTICE="off")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_seconds(name, warm, runs=3):
    """The median over ``runs`` fresh processes: each with an empty cache, or (``warm``)
    each after a first process filled it.  (CI's quick run: one process.)"""
    runs = 1 if QUICK else runs
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="dualbcast-first-") as cache_dir:
            if warm:
                first_call_seconds(name, cache_dir)
            seconds = first_call_seconds(name, cache_dir)
        if seconds is None:
            raise NotImplementedError(f"{name}: its peer is not installed")
        times.append(seconds)
    return statistics.median(times)


class FirstGradient:
    """Seconds to the first gradient, empty and warm cache, and the peers' first calls.
    (``numba_floor``: a trivial ``njit`` function; ``numba_eam``: the EAM gradient by
    hand; both compiled afresh in every process, as Numba does without ``cache=True``.)"""
    params = [["dualbcast_chain", "dualbcast_eam", "dualbcast_eam_threads", "numba_floor",
               "numba_eam", "jax_chain"],
              ["empty", "warm"]]
    param_names = ["system", "cache"]
    timeout = 900

    def setup(self, system, cache):
        if cache == "warm" and not system.startswith("dualbcast"):
            raise NotImplementedError("no dualbcast cache to warm")

    def track_seconds(self, system, cache):
        return median_seconds(system, cache == "warm")

    track_seconds.unit = "seconds"
