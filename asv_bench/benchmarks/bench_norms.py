"""``np.linalg.norm`` in a pair potential: the Lennard-Jones energy over all pairs with
``r = np.linalg.norm(X[i] - X[j], axis=1)`` against the same energy written with
``r = np.sqrt(np.sum(d * d, axis=1))`` (the norm's rule against the elementwise rules
it replaces), against the hand-written NumPy value and gradient, and against JAX's
``jit(value_and_grad)`` of the norm form when JAX is installed.  Each ratio is timed
in turns in one process (the number to read on a noisy machine)."""
import numpy as np

import dualbcast as db

from .bench_indexing import best_in_turns, jittered_lattice, pair_energy, pair_energy_numpy
from .gradients import _jax_value_and_grad, _peer, warmed_up


def pair_energy_norm(X, i, j, xp=np):
    r = xp.linalg.norm(X[i] - X[j], axis=1)
    return xp.sum(4 * (r ** -12 - r ** -6))


class PairEnergyNorm:
    params = [100, 1000]
    param_names = ["n_atoms"]

    def setup(self, n_atoms):
        X = jittered_lattice(n_atoms)
        i, j = np.triu_indices(n_atoms, 1)
        norm = db.value_and_grad(lambda X: pair_energy_norm(X, i, j))
        explicit = db.value_and_grad(lambda X: pair_energy(X, i, j))
        self.norm = warmed_up(lambda: norm(X), "dualbcast")
        self.explicit = warmed_up(lambda: explicit(X), "dualbcast")
        self.numpy = lambda: pair_energy_numpy(X, i, j)
        (value, grad), (expected_value, expected_grad) = self.norm(), self.numpy()
        np.testing.assert_allclose(value, expected_value, rtol=1e-10)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-8,
                                   atol=1e-10 * np.abs(expected_grad).max())

    def track_norm_over_explicit(self, n_atoms):
        norm, explicit = best_in_turns(self.norm, self.explicit, seconds=1.0)
        return norm / explicit

    def track_norm_over_numpy(self, n_atoms):
        norm, numpy = best_in_turns(self.norm, self.numpy, seconds=1.0)
        return norm / numpy

    track_norm_over_explicit.unit = "norm/explicit"
    track_norm_over_numpy.unit = "dualbcast/numpy"


class PairEnergyNormJax:
    params = [100, 1000]
    param_names = ["n_atoms"]

    def setup(self, n_atoms):
        jax = _peer("jax")              # NotImplementedError (skipped) when not installed
        X = jittered_lattice(n_atoms)
        i, j = np.triu_indices(n_atoms, 1)
        norm = db.value_and_grad(lambda X: pair_energy_norm(X, i, j))
        self.norm = warmed_up(lambda: norm(X), "dualbcast")
        ji, jj = jax.numpy.asarray(i), jax.numpy.asarray(j)
        self.jax = warmed_up(_jax_value_and_grad(
            jax, lambda X: pair_energy_norm(X, ji, jj, jax.numpy), jax.numpy.asarray(X)), "jax")

    def track_norm_over_jax(self, n_atoms):
        norm, jax = best_in_turns(self.norm, self.jax, seconds=1.0)
        return norm / jax

    track_norm_over_jax.unit = "dualbcast/jax"
