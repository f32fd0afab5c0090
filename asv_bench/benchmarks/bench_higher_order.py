"""Second order, beside its peers in one process, timed in turns (issue 15):

- the Hessian-vector product of the EAM energy, ``db.jvp(db.grad(f), (x,), (v,))``
  (forward over reverse; the kernel's value, gradient and hvp from one nested-dual
  loop), eager and under ``db.jit``, against JAX's ``jit(lambda x, v: jvp(grad(f),
  (x,), (v,))[1])`` and a hand-written ``numba.njit`` hvp;
- the Hessian of a 38-atom Lennard-Jones energy (114 x 114), ``db.hessian`` with the
  pair potential as a kernel, against JAX's ``jit(hessian(f))`` and autograd's
  ``hessian``.

Peers that are not installed are skipped (``NotImplementedError``)."""
import importlib
import math

import numba
import numpy as np

import dualbcast as db

from .bench_indexing import best_in_turns, jittered_lattice
from .gradients import _inputs, _peer, embed, warmed_up
from .machine_load import medians_in_turns
from .workloads import rho

# --- EAM hvp -------------------------------------------------------------------------


def eam_energy(x):
    return embed(rho.sum(x))


@numba.njit(parallel=True)
def _eam_hvp_numba(x, v):
    p = 0.0
    pv = 0.0
    for i in numba.prange(x.size):
        e = math.exp(-3.0 * (x[i] + 1.0))
        p += e
        pv += -3.0 * e * v[i]
    d1 = 2.0 * p + 3.0 * p ** 2 + p ** 3              # E'(p)
    d2 = 2.0 + 6.0 * p + 3.0 * p ** 2                 # E''(p)
    out = np.empty_like(x)
    for i in numba.prange(x.size):
        e = math.exp(-3.0 * (x[i] + 1.0))
        out[i] = d2 * pv * (-3.0 * e) + d1 * 9.0 * e * v[i]
    return out


def eam_hvp(system, n):
    x = _inputs(n)
    v = np.random.default_rng(1).standard_normal(n)
    if system in ("dualbcast", "dualbcast_jit"):
        gradient = db.grad(eam_energy)
        hvp = lambda x, v: db.jvp(gradient, (x,), (v,))[1]      # noqa: E731
        if system == "dualbcast_jit":
            hvp = db.jit(hvp)
        return lambda: hvp(x, v)
    if system == "numba":
        return lambda: _eam_hvp_numba(x, v)
    if system == "jax":
        jax = _peer("jax")
        jnp = jax.numpy
        f = lambda x: embed(jnp.sum(jnp.exp(-3.0 * (x + 1.0))))      # noqa: E731
        hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])
        xj, vj = jnp.asarray(x), jnp.asarray(v)
        return lambda: hvp(xj, vj).block_until_ready()
    raise NotImplementedError(system)


class EamHvp:
    params = [10 ** 2, 10 ** 4, 10 ** 6]
    param_names = ["n"]

    def setup(self, n):
        self.ours = warmed_up(eam_hvp("dualbcast", n), "dualbcast")
        self.numba = warmed_up(eam_hvp("numba", n), "numba")
        np.testing.assert_allclose(self.ours(), self.numba(), rtol=1e-9)

    def track_over_numba(self, n):
        ours, numba_time = best_in_turns(self.ours, self.numba, seconds=1.0)
        return ours / numba_time

    track_over_numba.unit = "dualbcast/numba"


class EamHvpJax:
    """The hvp, eager (``dualbcast``) and under ``db.jit`` (``dualbcast_jit``: staged
    once, replayed), against JAX's jit."""
    params = [[10 ** 2, 10 ** 4, 10 ** 6], ["dualbcast", "dualbcast_jit"]]
    param_names = ["n", "system"]

    def setup(self, n, system):
        self.jax = warmed_up(eam_hvp("jax", n), "jax")   # skipped without JAX
        self.ours = warmed_up(eam_hvp(system, n), system)
        np.testing.assert_allclose(self.ours(), np.asarray(self.jax()), rtol=1e-9)

    def track_over_jax(self, n, system):
        ours, jax = best_in_turns(self.ours, self.jax, seconds=1.0)
        return ours / jax

    track_over_jax.unit = "dualbcast/jax"


# --- Lennard-Jones Hessian -------------------------------------------------------------

@db.fast_broadcast
def lennard_jones(r2):
    inv6 = 1.0 / (r2 * r2 * r2)
    return 4.0 * (inv6 * inv6 - inv6)


def cluster_energy(flat, i, j, xp=np, kernel=True):
    x = flat.reshape(-1, 3)
    d = x[i] - x[j]
    r2 = xp.sum(d * d, axis=1)
    if kernel:
        return lennard_jones.sum(r2)
    inv6 = 1.0 / (r2 * r2 * r2)
    return xp.sum(4.0 * (inv6 * inv6 - inv6))


def lj_hessian(system, n_atoms):
    flat = jittered_lattice(n_atoms).ravel()
    i, j = np.triu_indices(n_atoms, 1)
    if system in ("dualbcast", "dualbcast_jit"):
        hessian = db.hessian(lambda x: cluster_energy(x, i, j))
        if system == "dualbcast_jit":
            hessian = db.jit(hessian)
        return lambda: hessian(flat)
    if system == "jax":
        jax = _peer("jax")
        jnp = jax.numpy
        ji, jj = jnp.asarray(i), jnp.asarray(j)
        hessian = jax.jit(jax.hessian(lambda x: cluster_energy(x, ji, jj, jnp, False)))
        xj = jnp.asarray(flat)
        return lambda: hessian(xj).block_until_ready()
    if system == "autograd":
        autograd = _peer("autograd")
        anp = importlib.import_module("autograd.numpy")
        hessian = autograd.hessian(lambda x: cluster_energy(x, i, j, anp, False))
        return lambda: hessian(flat)
    raise NotImplementedError(system)


class _HessianOverPeer:
    """The Hessian against one peer (setup skips when it is not installed), eager and
    under ``db.jit``."""
    params = [[38], ["dualbcast", "dualbcast_jit"]]
    param_names = ["n_atoms", "system"]
    peer = None

    def setup(self, n_atoms, system):
        self._threads = db.config.threads           # (one dualbcast thread, as issue 30's
        db.config.threads = 1                       # targets are measured)
        self.theirs = warmed_up(lj_hessian(self.peer, n_atoms), self.peer)
        self.ours = warmed_up(lj_hessian(system, n_atoms), system)
        np.testing.assert_allclose(self.ours(), np.asarray(self.theirs()), rtol=1e-8,
                                   atol=1e-8)

    def track_ratio(self, n_atoms, system):
        ours, theirs = medians_in_turns(self.ours, self.theirs)
        return ours / theirs

    def teardown(self, n_atoms, system):
        db.config.threads = getattr(self, "_threads", db.config.threads)


class LennardJonesHessianJax(_HessianOverPeer):
    peer = "jax"


class LennardJonesHessianAutograd(_HessianOverPeer):
    peer = "autograd"
