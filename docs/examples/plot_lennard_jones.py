"""
Relaxing a Lennard-Jones cluster and its normal modes
=====================================================

The 38-atom Lennard-Jones cluster's lowest minimum is a piece of the fcc crystal, a
truncated octahedron.  This example starts from a shaken copy of it, relaxes it with
SciPy's trust-region Newton-CG method, which asks for the gradient and for
Hessian-vector products (``dualbcast.scipy.objective`` gives both), and then computes
the cluster's normal modes from its Hessian: six zero modes (three translations, three
rotations) and 108 vibrations.  The Hessian is checked against central differences of
the gradient, the energy against the known value of the minimum.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
import scipy.optimize

import dualbcast as db
import dualbcast.scipy


@db.fast_broadcast
def lennard_jones(r2):
    inv6 = 1.0 / (r2 * r2 * r2)             # (sigma / r)^6 with sigma = 1
    return 4.0 * (inv6 * inv6 - inv6)       # epsilon = 1


def cluster_energy(x):
    """The energy of an (n, 3) array of positions, all pairs."""
    i, j = np.triu_indices(len(x), k=1)
    d = x[i] - x[j]
    return lennard_jones.sum(np.sum(d * d, axis=1))


# %%
# The starting point
# ------------------
# The truncated octahedron: the points of an fcc lattice (integer coordinates with an
# odd sum) at L1 distance 1 or 3 from an octahedral hole, without the six corners at
# distance 3 along the axes.  Scaled to a nearest-neighbour distance a little under the
# pair potential's minimum :math:`2^{1/6}`, and shaken.

grid = np.stack(np.meshgrid(*[np.arange(-3, 4)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
l1 = np.abs(grid).sum(axis=1)
octahedron = grid[((l1 == 1) | (l1 == 3)) & (np.abs(grid).max(axis=1) <= 2)]
assert len(octahedron) == 38
start = octahedron * (1.10 / np.sqrt(2.0))
start = start + np.random.default_rng(3).normal(0.0, 0.05, start.shape)

# %%
# Relaxation with trust-region Newton-CG
# --------------------------------------
# ``objective`` hands SciPy a Python float and a fresh 1-d gradient on every call, and
# ``hessp`` is one forward-over-reverse pass (``db.jvp`` of ``db.grad``), never the
# whole Hessian.

objective = dualbcast.scipy.objective(cluster_energy, shape=start.shape)

# First the gradient at the start, against central differences of the energy.
h = 1e-6
_, g_start = objective(start.ravel())
for k in range(start.size):
    step = np.zeros(start.size)
    step[k] = h
    fd = (objective.fun(start.ravel() + step) - objective.fun(start.ravel() - step)) / (2 * h)
    np.testing.assert_allclose(g_start[k], fd, rtol=1e-6, atol=1e-6)

t0 = time.perf_counter()
result = scipy.optimize.minimize(objective, start.ravel(), jac=True, hessp=objective.hessp,
                                 method="trust-ncg", options={"gtol": 1e-8})
print(f"{result.message} {result.nit} iterations, {result.nhev} Hessian-vector products, "
      f"{time.perf_counter() - t0:.2f} s (the second-order loop's compile included)")
x_min = result.x.reshape(start.shape)
energy, gradient = objective(result.x)
print(f"E = {energy:.6f} (lowest known LJ38 energy: -173.928427), "
      f"|gradient| = {np.linalg.norm(gradient):.1e}")
assert result.success and np.linalg.norm(gradient) < 1e-8
assert abs(energy - (-173.928427)) < 1e-5

# %%
# The Hessian, checked
# --------------------
# ``db.hessian`` builds the Hessian in one batched forward-over-reverse pass, as a
# (38, 3, 38, 3) array: the 114 x 114 matrix once reshaped.
# An independent check: each column is also a central difference of the gradient, and
# a Hessian-vector product must be the matrix times the vector.

hessian = db.hessian(cluster_energy)(x_min).reshape(x_min.size, x_min.size)
columns = []
for k in range(x_min.size):
    step = np.zeros(x_min.size)
    step[k] = h
    columns.append((objective.jac(result.x + step) - objective.jac(result.x - step))
                   / (2 * h))
np.testing.assert_allclose(hessian, np.array(columns).T, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(hessian, hessian.T, rtol=1e-12, atol=1e-12)
v = np.random.default_rng(0).normal(size=x_min.size)
np.testing.assert_allclose(objective.hessp(result.x, v), hessian @ v,
                           rtol=1e-10, atol=1e-10)

# %%
# Normal modes
# ------------
# At a minimum the Hessian is positive semi-definite: its six zero eigenvalues move the
# cluster as a rigid body, the others are squared vibrational frequencies (unit masses).
# The eigenvector of a translation moves every atom alike, which the first six span.

eigenvalues, modes = np.linalg.eigh(hessian)
zero = np.abs(eigenvalues) < 1e-6
print(f"{zero.sum()} zero modes (largest |lambda| {np.abs(eigenvalues[zero]).max():.1e}); "
      f"vibrations from {eigenvalues[6]:.3f} to {eigenvalues[-1]:.2f}")
assert zero.sum() == 6 and np.all(eigenvalues[6:] > 1.0)
translation = np.tile([1.0, 0.0, 0.0], len(x_min)) / np.sqrt(len(x_min))
assert np.linalg.norm(modes[:, :6].T @ translation) > 1 - 1e-8

# %%
# The relaxed cluster (the six core atoms in blue) and its normal modes' frequencies,
# :math:`\omega = \sqrt{\lambda}` in Lennard-Jones units.

core = np.linalg.norm(x_min - x_min.mean(axis=0), axis=1) < 1.0
fig = plt.figure(figsize=(11, 4.5))
ax = fig.add_subplot(1, 2, 1, projection="3d")
i, j = np.triu_indices(len(x_min), k=1)
bonds = np.linalg.norm(x_min[i] - x_min[j], axis=1) < 1.3
for a, b in zip(i[bonds], j[bonds]):
    ax.plot(*x_min[[a, b]].T, color="grey", linewidth=0.6)
ax.scatter(*x_min[~core].T, s=120, color="C1", depthshade=False, label="surface")
ax.scatter(*x_min[core].T, s=120, color="C0", depthshade=False, label="core")
ax.set_title(f"LJ$_{{38}}$ at E = {energy:.4f}")
ax.legend(loc="lower left")
ax.set_axis_off()

ax = fig.add_subplot(1, 2, 2)
omega = np.sqrt(np.clip(eigenvalues, 0.0, None))
ax.plot(np.arange(6), omega[:6], "o", color="C3", label="rigid-body modes")
ax.plot(np.arange(6, len(omega)), omega[6:], "o", color="C2", markersize=4,
        label="vibrations")
ax.set_xlabel("mode (eigenvalues in increasing order)")
ax.set_ylabel(r"frequency $\omega = \sqrt{\lambda}$")
ax.set_title("the spectrum: symmetry makes most modes degenerate")
ax.legend()
fig.tight_layout()
plt.show()
