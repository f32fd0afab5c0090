"""Realistic programs (issue 29; programs.py): dualbcast eager and under ``db.jit``
beside JAX jit and PyTorch eager, and the LJ energy over all pairs beside its value
and gradient by hand in NumPy -- medians of interleaved rounds, with one dualbcast
thread and with the default threads.

``ProgramRatios.track_ratio`` reads one ratio of one program at one thread setting:
``jit/jax``, ``eager/jax``, ``jit/eager``, ``jit/torch``, ``jit/numpy``.  All of them
are measured once, in ``setup_cache`` (every system of a program timed in turns), and
each system's answer is checked against dualbcast eager's first.

Targets (the issue): ``db.jit`` at most 1.0x JAX jit on each program (one thread) and
at most 0.8x dualbcast eager; the LJ energy under ``db.jit`` at most 1.0x NumPy by
hand.
"""
import numpy as np

import dualbcast as db

from .machine_load import medians_in_turns
from .programs import PROGRAMS, make_program, results

RATIOS = ("jit/jax", "eager/jax", "jit/eager", "jit/torch", "jit/numpy")
THREADS = ("one", "default")


def _checked(name, calls):
    """Each system's answer against dualbcast eager's (the same math, to rounding)."""
    want = results(calls["dualbcast"])
    for system, call in calls.items():
        got = results(call)
        for a, b in zip(_leaves(got), _leaves(want)):
            scale = max(np.max(np.abs(b)), 1e-300)
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * scale,
                                       err_msg=f"{name}: {system}")


def _leaves(x):
    if isinstance(x, dict):
        return [leaf for key in sorted(x) for leaf in _leaves(x[key])]
    if isinstance(x, list):
        return [leaf for item in x for leaf in _leaves(item)]
    return [np.asarray(x, float)]


def measure(seconds=1.5):
    """``{(program, threads, ratio): value}`` for every program, both thread settings
    and the ratios whose peer is installed."""
    default = db.config.threads
    found = {}
    try:
        for name in PROGRAMS:
            calls = {}
            for system in ("dualbcast", "dualbcast_jit", "jax", "torch", "numpy"):
                try:
                    calls[system] = make_program(name, system)
                except NotImplementedError:
                    continue
            for call in calls.values():         # compiles, traces, fuses
                for _ in range(4):
                    call()
            _checked(name, calls)
            for threads in THREADS:
                db.config.threads = 1 if threads == "one" else default
                systems = list(calls)
                times = dict(zip(systems, medians_in_turns(*calls.values(), seconds=seconds)))
                jit = times["dualbcast_jit"]
                for ratio in RATIOS:
                    ours, peer = ratio.split("/")
                    peer = {"eager": "dualbcast"}.get(peer, peer)
                    if peer in times:
                        ours = jit if ours == "jit" else times["dualbcast"]
                        found[name, threads, ratio] = ours / times[peer]
    finally:
        db.config.threads = default
    return found


class ProgramRatios:
    timeout = 900
    params = (list(PROGRAMS), list(THREADS), list(RATIOS))
    param_names = ["program", "threads", "ratio"]

    def setup_cache(self):
        return measure()

    def setup(self, found, program, threads, ratio):
        if (program, threads, ratio) not in found:
            raise NotImplementedError("that peer is not installed or has no version")

    def track_ratio(self, found, program, threads, ratio):
        return found[program, threads, ratio]

    track_ratio.unit = "ratio"
