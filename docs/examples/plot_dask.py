"""
An embedded-atom energy over Dask arrays
========================================

An embedded-atom method (EAM) energy, written with ``@db.fast_broadcast`` kernels and
NumPy, evaluated and differentiated over a Dask array of neighbour distances on a
``distributed`` cluster: ``db.value_and_grad`` builds lazy Dask work, and one
``dask.compute`` passes over the data once, each block running the kernels' fused
value-and-partials loops.  The result is checked against the same code on an in-memory
NumPy array, against the energy in plain NumPy and its finite differences, and against
the gradient derived by hand.
"""

import math

import dask
import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster

import dualbcast as db
import dualbcast.dask  # noqa: F401  (Dask support for kernels)

# %%
# The energy
# ----------
#
# Each atom :math:`i` has 12 neighbours at distances :math:`r_{ij}`.  Its energy is an
# embedding function of the electron density its neighbours give it, plus half of
# its pair repulsions (a Finnis-Sinclair form):
#
# .. math::
#
#    E = \sum_i \Big[ F(\rho_i) + \tfrac12 \sum_j \phi(r_{ij}) \Big], \qquad
#    \rho_i = \sum_j f(r_{ij}), \quad F(\rho) = -\sqrt{\rho},
#
# with :math:`f(r) = e^{-\beta(r/r_0 - 1)}` and :math:`\phi(r) = A\,e^{-\alpha(r/r_0 - 1)}`.

R0 = 2.55           # the nearest-neighbour distance of copper, in angstrom


@db.fast_broadcast
def density(r, beta):
    return math.exp(-beta * (r / R0 - 1.0))


@db.fast_broadcast
def repulsion(r, alpha, amplitude):
    return amplitude * math.exp(-alpha * (r / R0 - 1.0))


@db.fast_broadcast
def embedding(rho):
    return -math.sqrt(rho)


def eam_energy(beta, alpha, amplitude, r):
    rho = np.sum(density(r, beta), axis=1)                  # one density per atom
    return embedding.sum(rho) + 0.5 * repulsion.sum(r, alpha, amplitude)


params = (3.0, 6.0, 0.15)       # beta, alpha, A: in equilibrium near r = R0

# %%
# A strained crystal, in Dask blocks
# ----------------------------------
#
# A small local cluster: two workers of one thread each, in this process.  Since every
# worker thread has a core, dualbcast's own loops are kept on one thread.  The same
# code runs on a real cluster (``Client("tcp://scheduler:8786")``).
#
# The distances are generated on the workers, block by block: 200 000 atoms whose
# lattice is strained from -4% to +4% along the array, with thermal noise.

db.config.threads = 1
cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                       dashboard_address=None)
client = Client(cluster)

n_atoms, block = 200_000, 20_000
strain = da.linspace(-0.04, 0.04, n_atoms, chunks=block)
noise = da.random.default_rng(0).normal(0.0, 0.03, (n_atoms, 12), chunks=(block, 12))
r = R0 * (1.0 + strain[:, None]) + noise
print(r)

# %%
# Energy and gradient, lazily
# ---------------------------
#
# ``db.value_and_grad`` traces ``eam_energy`` without computing anything: the energy
# and the gradients come back as Dask arrays (the gradient with respect to ``r`` in
# ``r``'s blocks).  Dask code can go on from them: here each atom's virial
# :math:`w_i = \sum_j r_{ij}\,\partial E / \partial r_{ij}`, the derivative of its
# energy when its bonds are all stretched by the same factor, averaged per block.
# One ``dask.compute`` then runs it all.

argnums = (0, 1, 2, 3)
energy, gradients = db.value_and_grad(eam_energy, argnums=argnums)(*params, r)
virial = np.sum(r * gradients[3], axis=1).reshape(-1, block).mean(axis=1)
spacing = r.mean(axis=1).reshape(-1, block).mean(axis=1)

energy, gradients, virial, spacing = dask.compute(energy, gradients, virial, spacing)
d_beta, d_alpha, d_amplitude, d_r = gradients
print(f"E = {energy:.3f} eV  ({energy / n_atoms:.4f} eV per atom)")
print(f"dE/dbeta = {d_beta:.3f}, dE/dalpha = {d_alpha:.3f}, dE/dA = {d_amplitude:.3f}")

# %%
# Checking
# --------
#
# The same function on the in-memory array gives the same numbers, to rounding (Dask
# adds the blocks' sums up in another order).

r_np = r.compute()
client.close()
cluster.close()

np_energy, np_gradients = db.value_and_grad(eam_energy, argnums=argnums)(*params, r_np)
np.testing.assert_allclose(energy, np_energy, rtol=1e-12)
for lazy, eager in zip(gradients, np_gradients):
    np.testing.assert_allclose(lazy, eager, rtol=1e-12)

# %%
# Against independent oracles: the energy written in plain NumPy, its derivatives
# with respect to the three parameters by central differences, and the gradient with
# respect to the distances derived by hand,
# :math:`\partial E / \partial r_{ij} = F'(\rho_i) f'(r_{ij}) + \tfrac12 \phi'(r_{ij})`.


def numpy_energies(beta, alpha, amplitude, r):
    """Each atom's energy."""
    rho = np.sum(np.exp(-beta * (r / R0 - 1.0)), axis=1)
    return -np.sqrt(rho) + 0.5 * np.sum(amplitude * np.exp(-alpha * (r / R0 - 1.0)), axis=1)


def numpy_energy(beta, alpha, amplitude, r):
    return np.sum(numpy_energies(beta, alpha, amplitude, r))


np.testing.assert_allclose(energy, numpy_energy(*params, r_np), rtol=1e-12)
for k, derivative in enumerate((d_beta, d_alpha, d_amplitude)):
    h = 1e-6 * params[k]
    up = [p + h * (i == k) for i, p in enumerate(params)]
    down = [p - h * (i == k) for i, p in enumerate(params)]
    fd = (numpy_energy(*up, r_np) - numpy_energy(*down, r_np)) / (2 * h)
    np.testing.assert_allclose(derivative, fd, rtol=1e-6)

beta, alpha, amplitude = params
f = np.exp(-beta * (r_np / R0 - 1.0))
phi = amplitude * np.exp(-alpha * (r_np / R0 - 1.0))
rho = f.sum(axis=1, keepdims=True)
by_hand = (-0.5 / np.sqrt(rho)) * (-beta / R0) * f + 0.5 * (-alpha / R0) * phi
np.testing.assert_allclose(d_r, by_hand, rtol=1e-10, atol=1e-14)
print("Dask gradients agree with NumPy, central differences and the derivation by hand")

# %%
# Each block holds atoms of one strain.  Their mean energy against the block's mean
# neighbour distance is the crystal's equation of state; the virial from the Dask
# gradient is its slope under stretching, which changes sign at the minimum.

per_block = numpy_energies(*params, r_np).reshape(-1, block).mean(axis=1)
fig, (ax_energy, ax_virial) = plt.subplots(1, 2, figsize=(10, 4), sharex=True,
                                           constrained_layout=True)
ax_energy.plot(spacing, per_block, "o-")
ax_energy.set(xlabel="mean neighbour distance (Å)", ylabel="eV",
              title="energy per atom in each block")
ax_virial.plot(spacing, virial, "o-", color="tab:orange")
ax_virial.axhline(0.0, color="0.7", lw=1)
ax_virial.set(xlabel="mean neighbour distance (Å)", ylabel="eV",
              title=r"virial per atom, $\sum_j r_{ij}\,\partial E/\partial r_{ij}$")
