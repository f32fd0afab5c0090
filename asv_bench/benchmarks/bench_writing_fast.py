"""The same program written two ways, the slower way a user writes first and the faster
way the guide's "Writing fast programs" page suggests, timed in turns (medians of
interleaved rounds, one dualbcast thread), each pair's answers compared first:

- ``geometry_in_kernel``: a Morse pair energy over a neighbour list (512 atoms), the
  distance computed in NumPy (``np.sum(d * d, axis=1)``) or inside the kernel from the
  three components of ``d = X[j] - X[i]``;
- ``kernel_sum``: ``np.sum(k(x, a))`` against ``k.sum(x, a)`` (10^6 elements);
- ``design_matrix``: a nine-parameter logistic regression's Hessian (10^5 rows), the
  coefficients as nine kernel arguments or the linear predictor ``b[0] + X @ b[1:]``;
- ``jit``: a robust (Huber) regression's value and gradient (10^5 rows), eager against
  ``db.jit``;
- ``vmap``: per-example gradients of a small MLP with a Swish kernel (64 examples), a
  Python loop of ``db.grad`` against ``db.vmap(db.grad(loss))``.

``WritingFast.track_speedup`` is before / after (above 1: the suggested way is faster);
``track_before_us`` and ``track_after_us`` are the two medians.  The guide's table is
made from these (``docs/_ext/asv_pages.py``).
"""
import math

import numpy as np

import dualbcast as db

from .bench_batching import regression_hessian, swish
from .bench_indexing import jittered_lattice
from .machine_load import medians_in_turns
from .programs import _neighbours, data, morse, robust_regression


@db.fast_broadcast
def morse_xyz(dx, dy, dz, depth, width, r0):
    r = math.sqrt(dx * dx + dy * dy + dz * dz)
    e = math.exp(-width * (r - r0))
    return depth * (e * e - 2.0 * e)


@db.fast_broadcast
def rho(x, beta):
    return math.exp(-beta * (x + 1.0))


def _geometry():
    X = jittered_lattice(512, spacing=1.2)
    i, j = _neighbours(X, 2.5)

    def numpy_geometry(X):
        d = X[j] - X[i]
        return morse.sum(np.sum(d * d, axis=1), 1.0, 1.5, 1.1)

    def kernel_geometry(X):
        d = X[j] - X[i]
        return morse_xyz.sum(d[:, 0], d[:, 1], d[:, 2], 1.0, 1.5, 1.1)

    before, after = db.value_and_grad(numpy_geometry), db.value_and_grad(kernel_geometry)
    return (lambda: before(X)), (lambda: after(X))


def _kernel_sum():
    x = np.random.default_rng(0).uniform(-0.5, 1.0, 10 ** 6)
    before = db.value_and_grad(lambda x: np.sum(rho(x, 3.0)))
    after = db.value_and_grad(lambda x: rho.sum(x, 3.0))
    return (lambda: before(x)), (lambda: after(x))


def _design_matrix():
    return regression_hessian("dualbcast", "nine_arguments"), \
        regression_hessian("dualbcast", "design_matrix")


def _jit():
    args = data("robust_regression")
    eager = db.value_and_grad(robust_regression)
    jitted = db.jit(db.value_and_grad(robust_regression))
    return (lambda: eager(*args)), (lambda: jitted(*args))


def _mlp_loss(params, x, y):
    hidden = swish(x @ params["w1"] + params["b1"])
    return np.sum((hidden @ params["w2"] - y) ** 2)


def _vmap():
    rng = np.random.default_rng(1)
    params = {"w1": rng.normal(size=(8, 32)) / 3, "b1": np.zeros(32),
              "w2": rng.normal(size=(32, 4)) / 6}
    X, Y = rng.normal(size=(64, 8)), rng.normal(size=(64, 4))
    grad = db.grad(_mlp_loss)
    batched = db.vmap(grad, in_axes=(None, 0, 0))

    def loop():
        grads = [grad(params, x, y) for x, y in zip(X, Y)]
        return {k: np.stack([g[k] for g in grads]) for k in params}
    return loop, (lambda: batched(params, X, Y))


CASES = {"geometry_in_kernel": _geometry, "kernel_sum": _kernel_sum,
         "design_matrix": _design_matrix, "jit": _jit, "vmap": _vmap}


def _leaves(result):
    if isinstance(result, dict):
        return [leaf for key in sorted(result) for leaf in _leaves(result[key])]
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in _leaves(item)]
    return [np.asarray(result, float)]


def measure(seconds=2.0):
    """``{case: (before seconds, after seconds)}``, each pair timed in turns."""
    threads = db.config.threads
    db.config.threads = 1
    found = {}
    try:
        for case, make in CASES.items():
            before, after = make()
            for _ in range(4):              # compiled, traced, fused
                want, got = before(), after()
            for a, b in zip(_leaves(got), _leaves(want)):
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=case)
            found[case] = tuple(medians_in_turns(before, after, seconds=seconds))
    finally:
        db.config.threads = threads
    return found


class WritingFast:
    timeout = 600
    params = list(CASES)
    param_names = ["case"]

    def setup_cache(self):
        return measure()

    def track_speedup(self, found, case):
        before, after = found[case]
        return before / after

    track_speedup.unit = "before/after"

    def track_before_us(self, found, case):
        return found[case][0] * 1e6

    track_before_us.unit = "µs"

    def track_after_us(self, found, case):
        return found[case][1] * 1e6

    track_after_us.unit = "µs"
