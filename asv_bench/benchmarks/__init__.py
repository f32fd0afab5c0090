"""dualbcast's benchmarks time the steady state: a loop's threaded driver is compiled at
its first call that may split, where dualbcast by default waits until the loop has run
``DRIVER_AFTER`` seconds on one thread (kernel/prepared.py).  The first-call benchmarks,
which measure what a user waits for, set the library's default back."""
from dualbcast.kernel import prepared

LIBRARY_DRIVER_AFTER = prepared.DRIVER_AFTER
prepared.DRIVER_AFTER = 0.0

# CI's quick run (DUALBCAST_BENCH_QUICK=1, --launch-method forkserver) forks every
# benchmark from one process that imported the suite.  Numba initialises its compiler
# target at the first function a process compiles or loads (~1 s here); done once
# here, every forked run inherits it, where each of ~500 runs paid it (a third of the
# quick run).  Only in the quick run: a full run's in-process first-call benchmarks
# (bench_kernels.FirstCall) measure what a new process pays.  (No thread is started:
# a trivial function compiles on this thread.)
import os

if os.environ.get("DUALBCAST_BENCH_QUICK") == "1":
    import numba

    numba.njit(lambda x: x + 1.0)(1.0)
