"""Integer-array indexing with repeats: a Lennard-Jones energy over all pairs, written
with ``d = X[i] - X[j]``, whose backward pass adds one cotangent row per pair into
``X``'s gradient (``dualbcast.core.scatter.scatter_add``).

``PairEnergyIndexing`` reports dualbcast's ``value_and_grad`` time over a hand-written
NumPy value and gradient (per-pair forces summed per atom with ``np.bincount``), both
timed in turns in the same process (the number to read on a noisy machine).
"""
import math
import time

import numpy as np

import dualbcast as db

from .bench_kernels import best_time
from .gradients import warmed_up


def jittered_lattice(n_atoms, spacing=1.1, seed=0):
    """A relaxed-ish cluster: a cubic lattice near the LJ minimum (2^(1/6) = 1.12),
    each atom moved by up to 0.05."""
    side = math.ceil(n_atoms ** (1 / 3))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    jitter = np.random.default_rng(seed).uniform(-0.05, 0.05, (n_atoms, 3))
    return spacing * grid[:n_atoms] + jitter


def pair_energy(X, i, j):
    d = X[i] - X[j]
    r = np.sqrt(np.sum(d * d, axis=1))
    return np.sum(4 * (r ** -12 - r ** -6))


def pair_energy_numpy(X, i, j):
    """The value and gradient by hand: dE/dd per pair, added to atom i and taken from
    atom j, column by column with bincount."""
    d = X[i] - X[j]
    r2 = np.einsum("pk,pk->p", d, d)
    inv6 = r2 ** -3
    energy = np.sum(4 * (inv6 * inv6 - inv6))
    dd = (4 * (6 * inv6 - 12 * inv6 * inv6) / r2)[:, None] * d
    grad = np.empty_like(X)
    for k in range(3):
        grad[:, k] = (np.bincount(i, dd[:, k], minlength=len(X))
                      - np.bincount(j, dd[:, k], minlength=len(X)))
    return energy, grad


def best_in_turns(*calls, seconds=2.0, rounds=5):
    """Each call's best time, the calls timed in turns (one short batch each) for at
    least ``rounds`` rounds and ``seconds``: a drift in the machine's speed then reaches
    both alike."""
    best = [math.inf] * len(calls)
    end = time.perf_counter() + seconds
    while rounds > 0 or time.perf_counter() < end:
        best = [min(b, best_time(call, repeat=1, budget=0.005))
                for b, call in zip(best, calls)]
        rounds -= 1
    return best


class PairEnergyIndexing:
    params = [100, 1000]
    param_names = ["n_atoms"]

    def setup(self, n_atoms):
        X = jittered_lattice(n_atoms)
        i, j = np.triu_indices(n_atoms, 1)
        value_and_grad = db.value_and_grad(lambda X: pair_energy(X, i, j))
        self.ours = warmed_up(lambda: value_and_grad(X), "dualbcast")
        self.numpy = lambda: pair_energy_numpy(X, i, j)
        (value, grad), (expected_value, expected_grad) = self.ours(), self.numpy()
        np.testing.assert_allclose(value, expected_value, rtol=1e-10)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-8,
                                   atol=1e-10 * np.abs(expected_grad).max())

    def track_ratio_to_numpy(self, n_atoms):
        ours, numpy = best_in_turns(self.ours, self.numpy)
        return ours / numpy

    track_ratio_to_numpy.unit = "dualbcast/numpy"
