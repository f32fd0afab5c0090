"""
Phase-field energy minimised with Hessian-vector products
=========================================================

A Ginzburg-Landau energy on a periodic 2-D grid: a gradient term written with finite
differences in NumPy, plus a double-well potential written as a ``@db.fast_broadcast``
kernel.  dualbcast gives its gradient and its Hessian-vector products (forward mode
over reverse mode), which is what SciPy's Newton-CG minimisers need.  Both are
checked against finite differences before the minimisation.
"""

import matplotlib.pyplot as plt
import numpy as np
import scipy.optimize

import dualbcast as db
import dualbcast.scipy

# %%
# The energy
# ----------
#
# For a field :math:`u` on an :math:`n \times n` periodic grid (unit spacing),
#
# .. math::
#
#    E(u) = \sum_{ij} \frac{\kappa}{2}\left[(u_{i+1,j} - u_{ij})^2
#           + (u_{i,j+1} - u_{ij})^2\right] + W(u_{ij}),
#    \qquad W(u) = \tfrac14 (1 - u^2)^2 .
#
# The double well :math:`W` is a scalar kernel: dualbcast compiles it into one loop
# that gives the sum, its gradient and, for a Hessian-vector product, its second
# derivative along a direction, without storing anything per element.
#
# Minimised freely, :math:`E` is smallest at :math:`u \equiv 1`.  To see two phases
# coexist, the mean of the field is held at ``MEAN`` (as in a Cahn-Hilliard
# model): the optimiser moves an unconstrained field ``w`` and the energy sees ``w``
# with its mean replaced by ``MEAN``.


@db.fast_broadcast
def double_well(u):
    return 0.25 * (1.0 - u * u) ** 2


KAPPA = 1.0      # interface stiffness: interfaces are a few cells wide
MEAN = 0.3       # the conserved mean: about 35% of the grid ends up near u = -1


def energy(u):
    dx = np.roll(u, -1, axis=0) - u
    dy = np.roll(u, -1, axis=1) - u
    return 0.5 * KAPPA * np.sum(dx * dx + dy * dy) + double_well.sum(u)


def field(w):
    return MEAN + (w - np.mean(w))


def conserved_energy(w):
    return energy(field(w))


n = 64
rng = np.random.default_rng(0)
w0 = 0.5 * rng.standard_normal((n, n))

# %%
# Checking the derivatives
# ------------------------
#
# The gradient against central differences of the energy, along a few random
# directions and at a few single grid points; the Hessian-vector product (a
# ``db.jvp`` of ``db.grad``) against central differences of the gradient.

grad_energy = db.grad(conserved_energy)


def hvp(w, v):
    return db.jvp(grad_energy, (w,), (v,))[1]


w = rng.standard_normal((n, n))
g = grad_energy(w)
eps = 1e-5
for _ in range(3):
    v = rng.standard_normal((n, n))
    fd = (conserved_energy(w + eps * v) - conserved_energy(w - eps * v)) / (2 * eps)
    np.testing.assert_allclose(np.sum(g * v), fd, rtol=1e-7)
for i, j in rng.integers(0, n, size=(5, 2)):
    e = np.zeros((n, n))
    e[i, j] = 1.0
    fd = (conserved_energy(w + eps * e) - conserved_energy(w - eps * e)) / (2 * eps)
    np.testing.assert_allclose(g[i, j], fd, rtol=1e-6, atol=1e-8)

v = rng.standard_normal((n, n))
hv = hvp(w, v)
fd = (grad_energy(w + eps * v) - grad_energy(w - eps * v)) / (2 * eps)
np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-6)
print("gradient and Hessian-vector product agree with central differences")

# %%
# Minimising with trust-region Newton-CG
# --------------------------------------
#
# ``dualbcast.scipy.objective`` wraps the energy as ``minimize(..., jac=True)`` wants
# it (SciPy works on flat vectors); its ``hessp`` is the same forward-over-reverse
# product as ``hvp`` above.  ``trust-ncg`` runs conjugate gradients on the Newton
# equations inside a trust region, which copes with the Hessian's negative curvature
# away from the minimum (the double well is concave near :math:`u = 0`) and with its
# zero eigenvalue along a constant shift of ``w``, which the energy does not see.

objective = dualbcast.scipy.objective(conserved_energy, shape=(n, n))
np.testing.assert_allclose(objective.hessp(w.ravel(), v.ravel()), hv.ravel(), rtol=1e-12)

result = scipy.optimize.minimize(objective, w0.ravel(), jac=True, hessp=objective.hessp,
                                 method="trust-ncg")
u0, u_min = field(w0), field(result.x.reshape(n, n))
print(result.message)
print(f"energy {energy(u0):.2f} -> {energy(u_min):.2f} in {result.nit} Newton steps, "
      f"{result.nhev} Hessian-vector products")
print(f"largest gradient entry at the minimum: {np.abs(result.jac).max():.1e}")
print(f"fraction of the grid in the u < 0 phase: {np.mean(u_min < 0):.3f}")
assert result.success

# %%
# The field separates from noise into its two phases, :math:`u \approx \pm 1`: the
# minority phase gathers into one disc, whose circular interface is the shortest
# that encloses its area.

fig, axes = plt.subplots(1, 2, figsize=(8, 4), constrained_layout=True)
for ax, u, title in zip(axes, (u0, u_min), ("initial field", "minimiser")):
    image = ax.imshow(u, cmap="RdBu_r", vmin=-1.2, vmax=1.2)
    ax.set_title(title)
    ax.set_axis_off()
fig.colorbar(image, ax=axes, shrink=0.8, label="u")
