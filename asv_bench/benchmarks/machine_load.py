"""Other work on the machine, started and stopped by a benchmark, and the median time
of calls timed in turns: what a user meets on a machine that is not idle.

A best-of time hides the stalls that other work causes (a thread descheduled at the
end of a parallel region); a median over interleaved rounds shows them, and reaches
every system timed alike.

Loads (:data:`LOADS`), each a set of processes:

``none``         nothing else
``busy1``        one Python busy loop (a browser tab, an IDE's indexer)
``busy3``        three of them (more work than cores)
``dualbcast1``   one other process computing the EAM gradient at 10^6 with dualbcast's
                 default threads, over and over (a second experiment)
``dualbcast2``   two of them
``blas``         one process multiplying 600 x 600 matrices with NumPy's BLAS threads
"""
import contextlib
import os
import statistics
import subprocess
import sys
import time

_BUSY = "while True: pass"

# The other dualbcast experiment: the benchmark's EAM gradient at 10^6, in a loop.
_DUALBCAST = """
import sys
sys.path.insert(0, {root!r})
import numpy as np
import dualbcast as db
from benchmarks.workloads import rho       # (threaded drivers at once: see __init__)
x = np.random.default_rng(1).uniform(-0.5, 1.0, 10 ** 6)
f = db.value_and_grad(lambda x: rho.sum(x))
f(x)
print("ready", flush=True)
while True:
    f(x)
"""

_BLAS = """
import numpy as np
a = np.random.default_rng(0).normal(size=(600, 600))
a @ a
print("ready", flush=True)
while True:
    a @ a
"""

LOADS = {
    "none": (),
    "busy1": (_BUSY,),
    "busy3": (_BUSY,) * 3,
    "dualbcast1": (_DUALBCAST,),
    "dualbcast2": (_DUALBCAST,) * 2,
    "blas": (_BLAS,),
}

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def machine_load(name, ready_timeout=120.0):
    """The processes of load ``name`` running (each ready: compiled, computing) while
    the ``with`` block runs; killed after it."""
    processes = []
    try:
        for source in LOADS[name]:
            code = source.format(root=_ROOT)
            waits = "ready" in code
            processes.append((subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE if waits else None,
                stderr=subprocess.DEVNULL, text=True), waits))
        for process, waits in processes:
            if waits:       # (its first call compiles: wait until it computes)
                line = process.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"load {name!r}: a process did not start")
        time.sleep(0.3)     # (running before the timing starts)
        yield
    finally:
        for process, _ in processes:
            process.kill()
        for process, _ in processes:
            process.wait()


# CI's quick run (DUALBCAST_BENCH_QUICK=1, set by .ci/run): every benchmark once, to
# see that it runs, in a fraction of the time; the numbers are not the ones to read.
QUICK = os.environ.get("DUALBCAST_BENCH_QUICK") == "1"


def medians_in_turns(*calls, seconds=3.0, rounds=7, batch=0.02):
    """Each call's median time per call, the calls timed in turns: in each round, each
    call runs for ~``batch`` seconds and every one of its times is kept; at least
    ``rounds`` rounds and ``seconds`` in all.  The order turns round by round: what
    one call leaves behind (another library's threads spinning for a while after its
    work) then slows each of the others alike.  (:data:`QUICK`: 0.3 s, 2 rounds.)"""
    if QUICK:
        seconds, rounds = min(seconds, 0.3), min(rounds, 2)
    times = [[] for _ in calls]
    end = time.perf_counter() + seconds
    done = 0
    while done < rounds or time.perf_counter() < end:
        first = done % len(calls)
        for kept, call in list(zip(times, calls))[first:] + list(zip(times, calls))[:first]:
            stop = time.perf_counter() + batch
            while True:
                start = time.perf_counter()
                call()
                now = time.perf_counter()
                kept.append(now - start)
                if now >= stop:
                    break
        done += 1
    return [statistics.median(kept) for kept in times]
