"""The EAM energy and its gradient over 10^8 pair distances in chunks, on a
distributed.LocalCluster of two single-threaded worker processes (issue 17), beside the
same code on an in-memory NumPy array.  The density's decay ``beta`` is the parameter
differentiated (fitting a potential to a data set larger than memory), two ways: the
kernel's ``rho.sum_and_partials`` with the chain rule by hand, and ``db.value_and_grad``
of the energy written as a program.  Either way one loop per block gives the block's
density sum and its derivative, Dask adds them up by a tree, and the embedding's chain
rule runs on the two totals.  Skipped when Dask is not installed."""
import importlib
import logging
import math

import numpy as np

import dualbcast as db

from .bench_kernels import best_in_turns
from .machine_load import QUICK

# (CI's quick run checks that these run, not what they measure: a tenth of the data, so
# that its six cluster start-ups and ten passes over the data take seconds, not minutes.)
N = 10 ** 7 if QUICK else 10 ** 8
CHUNK = N // 10          # 80 MB a chunk (8 MB under QUICK)


def _density():
    # Defined outside asv's benchmark modules, which the workers cannot import (asv
    # loads them under a name of its own): it travels to them by value.
    namespace = {"math": math, "__name__": "dask_eam_density"}
    exec("def rho(r, beta):\n    return math.exp(-beta * (r + 1.0))\n", namespace)
    return db.fast_broadcast(namespace["rho"])


rho = _density()


def embed(p):
    return p ** 2 + p ** 3 + 0.25 * p ** 4


def embed_slope(p):
    return 2.0 * p + 3.0 * p ** 2 + p ** 3


def energy_and_gradient(r, beta=3.0):
    """E(beta) = F(sum rho(r, beta)) and dE/dbeta: lazy Dask scalars when ``r`` is a
    Dask array, NumPy scalars for a NumPy array (the same code)."""
    p, dp = rho.sum_and_partials(r, beta, wrt=1)
    return embed(p), embed_slope(p) * dp


def energy(beta, r):
    return embed(rho.sum(r, beta))


# The same through the reverse-mode core: lazy over Dask arrays, computed over NumPy.
energy_value_and_grad = db.value_and_grad(energy)


# Run on the workers by client.run: defined outside asv's benchmark modules, which the
# workers cannot import (asv loads them under a name of its own), so they travel by value.
_ON_WORKERS = {"__name__": "dask_eam_workers"}
exec('''
def status(field):
    """A memory figure of this process from /proc/self/status, in bytes."""
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise NotImplementedError("no " + field + " in /proc/self/status")

def reset_peak_memory():
    """Resets this process's peak resident size (Linux: clear_refs 5); its resident
    size now."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return status("VmRSS")

def peak_memory():
    return status("VmHWM")
''', _ON_WORKERS)
_reset_peak_memory, _peak_memory = _ON_WORKERS["reset_peak_memory"], _ON_WORKERS["peak_memory"]


def _cluster():
    try:
        dask = importlib.import_module("dask")
        da = importlib.import_module("dask.array")
        distributed = importlib.import_module("distributed")
    except ImportError:
        raise NotImplementedError("dask[array] and distributed are not installed") from None
    # (The kernel travels to the worker processes by value, since they cannot import
    # asv's benchmark modules: each worker compiles it once, at the warm-up.)
    # Closing a cluster logs its closed comms with tracebacks at INFO level
    # (distributed.batched): noise, which CI's check of asv's output would take for a
    # failure.  Warnings and errors still show.
    logging.getLogger("distributed").setLevel(logging.WARNING)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    # Generated on the workers chunk by chunk: no process ever holds all of it.
    lazy = da.random.default_rng(0).uniform(-0.5, 1.0, N, chunks=CHUNK)
    return dask, distributed, cluster, client, lazy


class DaskEam:
    timeout = 600
    params = ([N],)
    param_names = ["n"]

    def setup(self, n):
        self.dask, distributed, self.cluster, self.client, lazy = _cluster()
        self.persisted = self.client.persist(lazy)
        distributed.wait(self.persisted)
        self.in_memory = self.persisted.compute()
        self.dask_call = lambda: self.dask.compute(*energy_and_gradient(self.persisted))
        self.numpy_call = lambda: energy_and_gradient(self.in_memory)
        self.dask_program = lambda: self.dask.compute(*energy_value_and_grad(3.0, self.persisted))
        self.numpy_program = lambda: energy_value_and_grad(3.0, self.in_memory)
        expected = self.numpy_call()
        for got in (self.dask_call(), self.numpy_program(), self.dask_program()):
            assert np.allclose(got, expected, rtol=1e-9), (got, expected)

    def teardown(self, n):
        self.client.close()
        self.cluster.close()

    def time_dask_local_cluster(self, n):
        self.dask_call()

    def time_dask_value_and_grad(self, n):
        self.dask_program()

    def time_in_memory(self, n):
        self.numpy_call()

    def time_in_memory_value_and_grad(self, n):
        self.numpy_program()

    def track_dask_over_in_memory(self, n):
        """Dask on two worker processes (one thread each) over the in-memory call (two
        threads), timed in turns."""
        ours, in_memory = best_in_turns(self.dask_call, self.numpy_call, rounds=3)
        return ours / in_memory

    track_dask_over_in_memory.unit = "ratio"

    def track_dask_value_and_grad_over_in_memory(self, n):
        """db.value_and_grad of the energy over the Dask array (lazy, one compute) over
        the same over the in-memory array, timed in turns."""
        ours, in_memory = best_in_turns(self.dask_program, self.numpy_program, rounds=3)
        return ours / in_memory

    track_dask_value_and_grad_over_in_memory.unit = "ratio"


class DaskEamMemory:
    """How far a worker's memory grows while it computes the energy and gradient of
    data generated chunk by chunk (10 chunks of 80 MB over two workers)."""
    timeout = 600
    params = ([N],)
    param_names = ["n"]

    def setup(self, n):
        self.dask, _, self.cluster, self.client, self.lazy = _cluster()
        warm = self.lazy[: 4 * 10 ** 4].rechunk(10 ** 4)      # loops compiled on each worker
        self.dask.compute(*energy_value_and_grad(3.0, warm))

    def teardown(self, n):
        self.client.close()
        self.cluster.close()

    def track_worker_peak_growth_in_chunks(self, n):
        """The largest growth of a worker's peak resident size, in chunks."""
        before = self.client.run(_reset_peak_memory)
        self.dask.compute(*energy_value_and_grad(3.0, self.lazy))
        after = self.client.run(_peak_memory)
        return max(after[worker] - before[worker] for worker in before) / (CHUNK * 8)

    track_worker_peak_growth_in_chunks.unit = "chunks"
