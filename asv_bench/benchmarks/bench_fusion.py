"""The fused compile (issue 14, item 12): seconds and peak memory of Numba's compile of
a fused program (db.jit's third call) by the program's size in records, each in a
fresh process with an empty dualbcast cache.

- ``polynomial``: one kernel sum and scalar products and sums of it (a Horner
  polynomial's shape);
- ``sums``: half the records kernel sums of the same array, folded.

The compile grew as the square of the program (a degree-40 Horner polynomial, 81
records: 4.7 s; 40 sums folded, 120 records: 19 s and 650 MB); it is now linear
(~10-20 ms a record on top of ~0.5 s), which ``track_marginal_seconds_per_record``
shows as a flat line over the sizes.  policy.FUSE_UP_TO (100 records) is the cap beyond which nothing is fused.

All the processes run once, in ``setup_cache`` (~30 s in all): each ``track_``
reads its number.
"""
import json
import os
import subprocess
import sys
import tempfile

SIZES = [5, 10, 20, 40]
BELOW = dict(zip(SIZES, [2] + SIZES))       # the size each marginal cost is taken from
KINDS = ["polynomial", "sums"]

SCRIPT = """
import json, math, resource, sys, time
import numpy as np
import dualbcast as db

kind, n = sys.argv[1], int(sys.argv[2])

@db.fast_broadcast
def k(x, a):
    return a * math.exp(-x * x)

def f(x):
    kernels = (n + 1) // 2 if kind == "sums" else 1
    p = k.sum(x, 1.0)
    for i in range(1, kernels):
        p = p + k.sum(x, 1.0 + i)
    s = p
    for i in range(n - 2 * kernels + 1):
        p = p * 0.75 if i % 2 == 0 else p + s
    return p

vg = db.jit(db.value_and_grad(f))
x = np.linspace(0.0, 1.0, 100)
vg(x)
vg(x)                       # recorded, then written out as Python and planned
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.process_time()
vg(x)                       # fused: compiled
compiled = time.process_time() - start
start = time.process_time()
vg(x)                       # the fused call alone
compiled -= time.process_time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": compiled, "peak_mb": peak / 1024,
                  "compile_mb": (peak - before) / 1024}))
"""


def _measure(kind, n):
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "fusion_compile.py")
        with open(path, "w") as file:
            file.write(SCRIPT)
        env = dict(os.environ, DUALBCAST_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, path, kind, str(n)], env=env,
                              capture_output=True, text=True, check=True, timeout=300)
    return json.loads(done.stdout.strip().splitlines()[-1])


class FusionCompile:
    params = [KINDS, SIZES]
    param_names = ["program", "records"]
    timeout = 300

    def setup_cache(self):
        return {f"{kind} {n}": _measure(kind, n) for kind in KINDS for n in [2] + SIZES}

    def track_seconds(self, results, kind, n):
        """CPU seconds of the compile (the fused call's own time taken off)."""
        return results[f"{kind} {n}"]["seconds"]

    def track_marginal_seconds_per_record(self, results, kind, n):
        """Seconds a record adds to the compile: from the next smaller size (2 below
        5) to this one.  Flat over the sizes: the compile is linear."""
        below = BELOW[n]
        return ((results[f"{kind} {n}"]["seconds"] - results[f"{kind} {below}"]["seconds"])
                / (n - below))

    def track_peak_rss_mb(self, results, kind, n):
        """The process's peak RSS after the compile (import, kernels and all)."""
        return results[f"{kind} {n}"]["peak_mb"]

    def track_compile_rss_growth_mb(self, results, kind, n):
        """How far the compile raised the process's peak RSS."""
        return results[f"{kind} {n}"]["compile_mb"]

    track_seconds.unit = "s"
    track_marginal_seconds_per_record.unit = "s per record"
    track_peak_rss_mb.unit = track_compile_rss_growth_mb.unit = "MB"
