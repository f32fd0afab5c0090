r"""
The EAM energy of a copper cluster and its forces
=================================================

An embedded-atom method (EAM) energy is a pair term plus, for every atom, an
embedding function of the electron density its neighbours give it:

.. math::

    E = \frac12 \sum_{i \ne j} \phi(r_{ij}) + \sum_i F(\rho_i), \qquad
    \rho_i = \sum_{j \ne i} f(r_{ij}).

This example writes the Sutton-Chen form of it for copper (a Finnis-Sinclair
potential, :math:`F(\rho) = -\varepsilon c \sqrt{\rho}`) as three small kernels and
plain NumPy, gets the forces :math:`-\nabla E` from ``db.value_and_grad``, checks them
against central differences of the energy, and differentiates the energy along a
uniform strain of the cluster.  (``python -m dualbcast`` times a one-dimensional toy
of this energy, :math:`F(\sum_i \rho(x_i))`; here it has real geometry around it.)
"""
import math
import time

import matplotlib.pyplot as plt
import numpy as np

import dualbcast as db

# Sutton-Chen parameters for Cu (Sutton & Chen, Phil. Mag. Lett. 61, 139 (1990)):
# phi(r) = EPS (A / r)^9, f(r) = (A / r)^6, F(rho) = -EPS C sqrt(rho).
A, EPS, C = 3.61, 1.2382e-2, 39.432         # Å, eV, dimensionless


# %%
# The kernels
# -----------
# Each kernel is a scalar function; ``db.fast_broadcast`` compiles it into loops over
# arrays that also give its derivatives.  They take the squared distance, so that no
# square root is needed: :math:`(A/r)^n = (A^2/r^2)^{n/2}`.

@db.fast_broadcast
def repulsion(r2):
    return EPS * (A * A / r2) ** 4.5         # (A / r)^9


@db.fast_broadcast
def density(r2):
    s = A * A / r2
    return s * s * s                        # (A / r)^6


@db.fast_broadcast
def embedding(rho):
    return -EPS * C * math.sqrt(rho)


def energy(positions):
    """The Sutton-Chen energy (eV) of an (n, 3) array of positions (Å)."""
    n = len(positions)
    d = positions[I] - positions[J]
    r2 = np.sum(d * d, axis=1)
    # Row i of the ordered pairs holds atom i's n - 1 neighbours: its density is a row sum.
    rho = density(r2).reshape(n, n - 1).sum(axis=1)
    return 0.5 * repulsion.sum(r2) + embedding.sum(rho)


# %%
# A cluster cut from the fcc crystal
# ----------------------------------
# All the atoms of the copper lattice within 2.2 lattice constants of a centre,
# slightly shaken.  ``I, J`` lists every ordered pair of different atoms; the energy
# reads them as constants.

cell = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
grid = np.stack(np.meshgrid(*[np.arange(-3, 4)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
sites = (grid[:, None, :] + cell[None, :, :]).reshape(-1, 3) * A
sites = sites[np.linalg.norm(sites, axis=1) <= 2.2 * A]
rng = np.random.default_rng(0)
X0 = sites + rng.normal(0.0, 0.03, sites.shape)
n_atoms = len(X0)
I, J = np.nonzero(~np.eye(n_atoms, dtype=bool))

start = time.perf_counter()
E, grad = db.value_and_grad(energy)(X0)
first = time.perf_counter() - start
forces = -grad
print(f"{n_atoms} atoms, {len(I)} ordered pairs")
print(f"E = {E:.6f} eV ({E / n_atoms:.4f} eV/atom); first call, compile included: "
      f"{first:.2f} s")

# %%
# The forces against central differences
# --------------------------------------
# The energy runs untraced on plain arrays too, so central differences need nothing but
# the same function: every coordinate of 20 atoms, and the whole gradient along random
# directions.

h = 1e-5
for atom in rng.choice(n_atoms, 20, replace=False):
    for axis in range(3):
        step = np.zeros_like(X0)
        step[atom, axis] = h
        fd = (energy(X0 + step) - energy(X0 - step)) / (2 * h)
        np.testing.assert_allclose(grad[atom, axis], fd, rtol=1e-6, atol=1e-8)
for _ in range(3):
    v = rng.normal(size=X0.shape)
    fd = (energy(X0 + h * v) - energy(X0 - h * v)) / (2 * h)
    np.testing.assert_allclose(np.sum(grad * v), fd, rtol=1e-6)
np.testing.assert_allclose(forces.sum(axis=0), 0.0, atol=1e-10)   # no net force
print(f"largest |force| {np.abs(forces).max():.4f} eV/Å, net force "
      f"{np.abs(forces.sum(axis=0)).max():.1e} eV/Å")

# %%
# The energy along a strain
# -------------------------
# Scaling the cluster by :math:`s` gives :math:`E(s) = E(s X_0)`.  Its derivative comes
# from ``db.grad`` with respect to the scalar :math:`s`, and, by the chain rule, must be
# :math:`\nabla E \cdot X_0` at :math:`s = 1`.

def strained(s):
    return energy(s * X0)


strains = np.linspace(0.96, 1.06, 21)
energies = np.array([strained(s) for s in strains])
slopes = np.array([db.grad(strained)(s) for s in strains])
assert np.isclose(db.grad(strained)(1.0), np.sum(grad * X0), rtol=1e-12)
np.testing.assert_allclose(slopes, [(strained(s + h) - strained(s - h)) / (2 * h)
                                    for s in strains], rtol=1e-6, atol=1e-6)
best = strains[np.argmin(energies)]
print(f"dE/ds at s = 1: {db.grad(strained)(1.0):.5f} eV; "
      f"lowest energy on the grid at s = {best:.3f}")

# %%
# The picture: the atoms coloured by the force on them, the force's radial component
# against the distance from the centre (the outermost shell, with fewer neighbours, is
# pulled inwards, the shell under it pushed out), and the energy along the strain with
# its tangents from ``db.grad``.

radius = np.linalg.norm(X0, axis=1)
radial = np.sum(forces * X0, axis=1) / radius

fig = plt.figure(figsize=(13, 4))
ax = fig.add_subplot(1, 3, 1, projection="3d")
points = ax.scatter(*X0.T, c=np.linalg.norm(forces, axis=1), cmap="viridis", s=50,
                    depthshade=False)
fig.colorbar(points, ax=ax, shrink=0.6, pad=0.0, label="|force| (eV/Å)")
ax.set_title(f"Cu$_{{{n_atoms}}}$, Sutton-Chen EAM")
ax.set_axis_off()

ax = fig.add_subplot(1, 3, 2)
ax.scatter(radius, radial, s=12)
ax.axhline(0.0, color="grey", linewidth=0.8)
ax.set_xlabel("distance from the centre (Å)")
ax.set_ylabel("radial force (eV/Å)")

ax = fig.add_subplot(1, 3, 3)
ax.plot(strains, energies, "o-", color="C0", markersize=3, label="E(s)")
for s, e, slope in zip(strains[::4], energies[::4], slopes[::4]):
    ds = np.array([-0.006, 0.006])
    ax.plot(s + ds, e + slope * ds, color="C3", linewidth=2)
ax.plot([], [], color="C3", linewidth=2, label="tangent from db.grad")
ax.set_xlabel("scale factor s")
ax.set_ylabel("E (eV)")
ax.legend()
fig.tight_layout()
plt.show()
