"""
A pair potential over a neighbour list
======================================

Molecular simulations sum a short-ranged pair potential over the pairs of atoms closer
than a cutoff, found once with a neighbour list and reused while the atoms move.  This
example builds the list for 2048 atoms in a periodic box with
``scipy.spatial.cKDTree``, writes a Morse potential with a smooth cutoff as a kernel
that takes the two atoms' coordinates and computes the minimum-image distance itself,
and gets the energy and the forces in one fused loop.  The forces are checked against
central differences of the energy, and against the same energy written with the
geometry in NumPy.
"""
import math
import time

import matplotlib.pyplot as plt
import numpy as np
from scipy.spatial import cKDTree

import dualbcast as db

R0, DEPTH, WIDTH = 1.0, 1.0, 4.0      # Morse: equilibrium distance, well depth, stiffness
R_ON, R_CUT = 1.6, 2.0                # switched smoothly to zero between R_ON and R_CUT


# %%
# The kernels
# -----------
# ``morse`` is the potential of a distance, with a switching function that takes it
# and its first two derivatives to zero at the cutoff (so that the energy stays
# smooth when a pair crosses it).  ``morse_pair`` takes the coordinates of both atoms
# and the box length: the differences, the minimum image and the distance are
# computed inside the loop, so no array of differences or distances is ever stored,
# and its derivatives with respect to the six coordinates come out of the same loop.

@db.fast_broadcast
def morse(r):
    if r >= R_CUT:
        return 0.0
    e = math.exp(-WIDTH * (r - R0))
    v = DEPTH * (e * e - 2.0 * e)
    if r > R_ON:
        t = (r - R_ON) / (R_CUT - R_ON)
        v *= 1.0 - t * t * t * (10.0 - 15.0 * t + 6.0 * t * t)
    return v


@db.fast_broadcast
def morse_pair(xi, yi, zi, xj, yj, zj, box):
    dx = xi - xj
    dy = yi - yj
    dz = zi - zj
    dx -= box * math.floor(dx / box + 0.5)      # minimum image (floor's derivative is 0)
    dy -= box * math.floor(dy / box + 0.5)
    dz -= box * math.floor(dz / box + 0.5)
    return morse(math.sqrt(dx * dx + dy * dy + dz * dz))


def energy(positions, pairs, box):
    """The Morse energy of (n, 3) positions over the (m, 2) pairs of a neighbour list."""
    i, j = pairs[:, 0], pairs[:, 1]
    x, y, z = positions[:, 0], positions[:, 1], positions[:, 2]
    return morse_pair.sum(x[i], y[i], z[i], x[j], y[j], z[j], box)


# %%
# Atoms and their neighbour list
# ------------------------------
# A hot fcc crystal: 8 x 8 x 8 cells of 4 atoms at the Morse minimum's spacing, each
# atom displaced at random.  ``query_pairs`` with ``boxsize`` finds the pairs i < j
# across the periodic boundary too; the list reaches a *skin* beyond the cutoff so
# that it stays valid while no atom moves more than half of it.

cells = 8
spacing = R0 * np.sqrt(2.0)                           # fcc lattice constant
box = cells * spacing
basis = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
grid = np.stack(np.meshgrid(*[np.arange(cells)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
positions = ((grid[:, None, :] + basis).reshape(-1, 3) * spacing
             + np.random.default_rng(0).normal(0.0, 0.06, (4 * cells ** 3, 3))) % box

skin = 0.3
pairs = cKDTree(positions, boxsize=box).query_pairs(R_CUT + skin, output_type="ndarray")
print(f"{len(positions)} atoms in a box of side {box:.3f}, {len(pairs)} pairs in the list")

t0 = time.perf_counter()
E, grad = db.value_and_grad(energy)(positions, pairs, box)
forces = -grad
print(f"E = {E:.6f} ({E / len(positions):.4f} per atom); first call, compile included: "
      f"{time.perf_counter() - t0:.2f} s")

# %%
# The forces, checked
# -------------------
# Central differences of the energy along a few coordinates, and along random
# directions in all 6144 at once; the forces sum to zero (every pair pushes its two
# atoms apart or together equally).

h = 1e-6
rng = np.random.default_rng(1)
for k in rng.choice(positions.size, 12, replace=False):
    step = np.zeros(positions.size)
    step[k] = h
    step = step.reshape(positions.shape)
    fd = (energy(positions + step, pairs, box)
          - energy(positions - step, pairs, box)) / (2 * h)
    np.testing.assert_allclose(grad.flat[k], fd, rtol=1e-6, atol=1e-7)
for _ in range(3):
    v = rng.normal(size=positions.shape)
    fd = (energy(positions + h * v, pairs, box)
          - energy(positions - h * v, pairs, box)) / (2 * h)
    np.testing.assert_allclose(np.sum(grad * v), fd, rtol=1e-6)
np.testing.assert_allclose(forces.sum(axis=0), 0.0, atol=1e-9)

# %%
# The same energy with the geometry written in NumPy: the differences of the gathered
# rows, their minimum images and the distances are whole (m, 3) and (m,) arrays, each
# recorded on the tape and gone through again by the backward pass.  The same numbers;
# the kernel version stores none of those arrays, and eagerly it is the faster of the
# two (under ``db.jit``, which fuses NumPy's elementwise steps into compiled loops,
# they come out about even).

def energy_numpy_geometry(positions, pairs, box):
    d = positions[pairs[:, 0]] - positions[pairs[:, 1]]
    d = d - box * np.floor(d / box + 0.5)
    return morse.sum(np.sqrt(np.sum(d * d, axis=1)))


E2, grad2 = db.value_and_grad(energy_numpy_geometry)(positions, pairs, box)
np.testing.assert_allclose(E2, E, rtol=1e-12)
np.testing.assert_allclose(grad2, grad, rtol=1e-9, atol=1e-12)

# Best of interleaved rounds: the two are timed in turns on a noisy machine.
versions = {"geometry in the kernel": db.value_and_grad(energy),
            "geometry in NumPy": db.value_and_grad(energy_numpy_geometry)}
times = {name: [] for name in versions}
for _ in range(10):
    for name, value_and_grad in versions.items():
        t0 = time.perf_counter()
        value_and_grad(positions, pairs, box)
        times[name].append(time.perf_counter() - t0)
print("energy and forces: " + ", ".join(f"{name} {min(t) * 1e3:.1f} ms"
                                        for name, t in times.items()))

# %%
# The distances in the neighbour list beside the potential (the first neighbour shell
# sits in the well, the second on its tail, the third in the switching region), and
# the forces on the atoms of one lattice plane.

i, j = pairs[:, 0], pairs[:, 1]
d = positions[i] - positions[j]
d -= box * np.floor(d / box + 0.5)
r = np.linalg.norm(d, axis=1)

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
left.hist(r, bins=80, color="C0", alpha=0.7)
left.set_xlabel("pair distance r")
left.set_ylabel("pairs in the list")
curve = left.twinx()
rr = np.linspace(0.75, R_CUT + skin, 400)
curve.plot(rr, morse(rr), color="C3", label="Morse, switched")
curve.axvspan(R_ON, R_CUT, color="grey", alpha=0.15, label="switching region")
curve.set_ylabel("V(r)")
curve.set_ylim(-1.1, 1.0)
curve.legend(loc="upper right")

layer = np.abs(positions[:, 2] - 2 * spacing) < 0.2     # one (001) plane of atoms
right.scatter(positions[layer, 0], positions[layer, 1], s=8, color="grey")
arrows = right.quiver(positions[layer, 0], positions[layer, 1], forces[layer, 0],
                      forces[layer, 1], np.linalg.norm(forces[layer], axis=1),
                      cmap="viridis", angles="xy")
fig.colorbar(arrows, ax=right, label="|force|")
right.set_aspect("equal")
right.set_title("forces in one (001) plane (x and y components)")
right.set_xlabel("x")
right.set_ylabel("y")
fig.tight_layout()
plt.show()
