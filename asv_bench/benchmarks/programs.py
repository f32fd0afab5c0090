"""Realistic programs, written as a user would write them from the README (issue 29):
a pair + three-body potential over neighbour lists with the geometry in NumPy, a
negative-binomial regression with a design-matrix argument, a 2-d phase-field energy
with stencils by slicing (gradient and Hessian-vector product), an MLP with a learnable
activation kernel, the Lennard-Jones energy over all pairs written ``X[i] - X[j]``, and
a robust (Huber) regression with a sign constraint, all masks: ``np.where``, ``np.abs``,
``np.maximum``.

``make_program(name, system)`` returns ``(call, check)``: ``call()`` runs the value
and gradient (or the HVP) once, ``check()`` returns what it gives as NumPy arrays, for
comparing systems.  Systems: ``dualbcast`` (eager), ``dualbcast_jit`` (``db.jit``),
``jax`` (``jit``), ``torch`` (eager autograd), ``numpy`` (by hand, the LJ energy only).
Peers raise ``NotImplementedError`` (asv's skip) when they are not installed.
"""
import math

import numpy as np

import dualbcast as db

from .bench_indexing import jittered_lattice, pair_energy_numpy
from .gradients import _peer

PROGRAMS = ("potential", "regression", "robust_regression", "phase_field", "phase_field_hvp",
            "mlp", "lj_all_pairs")
SYSTEMS = ("dualbcast", "dualbcast_jit", "jax", "torch", "numpy")


# ---------------------------------------------------------------- the kernels

@db.fast_broadcast
def morse(r2, depth, width, r0):
    r = math.sqrt(r2)
    e = math.exp(-width * (r - r0))
    return depth * (e * e - 2.0 * e)


@db.fast_broadcast
def bond_angle(cosine, strength):
    shifted = cosine + 1.0 / 3.0            # tetrahedral: cos = -1/3
    return strength * shifted * shifted


@db.fast_broadcast
def negative_binomial(eta, y, alpha):
    # -log p(y | mu = exp(eta), alpha) without the terms free of eta
    r = 1.0 / alpha
    return (y + r) * math.log(r + math.exp(eta)) - y * eta


@db.fast_broadcast
def mixing(u, chi):
    # Flory-Huggins free energy of mixing
    return u * math.log(u) + (1.0 - u) * math.log(1.0 - u) + chi * u * (1.0 - u)


@db.fast_broadcast
def swish(h, beta):
    return h / (1.0 + math.exp(-beta * h))


# ---------------------------------------------------------------- the programs (NumPy)

def potential(X, i, j, ti, tj, tk, strength):
    d = X[j] - X[i]
    pair = 0.5 * morse.sum(np.sum(d * d, axis=1), 1.0, 1.5, 1.1)
    a = X[tj] - X[ti]
    b = X[tk] - X[ti]
    cosine = np.sum(a * b, axis=1) / np.sqrt(np.sum(a * a, axis=1) * np.sum(b * b, axis=1))
    return pair + bond_angle.sum(cosine, strength)


def regression(w, X, y, alpha, ridge):
    return negative_binomial.sum(X @ w, y, alpha) + 0.5 * ridge * np.sum(w * w)


def robust_regression(w, X, y, delta):
    r = X @ w - y
    a = np.abs(r)
    huber = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return np.mean(huber) + np.sum(np.maximum(-w, 0.0) ** 2)     # (w >= 0, softly)


def phase_field(u, kappa, chi):
    gx = u[1:, :] - u[:-1, :]
    gy = u[:, 1:] - u[:, :-1]
    return mixing.sum(u, chi) + 0.5 * kappa * (np.sum(gx * gx) + np.sum(gy * gy))


def mlp(params, X, y):
    h = swish(X @ params["W1"] + params["b1"], params["beta"])
    h = swish(h @ params["W2"] + params["b2"], params["beta"])
    out = h @ params["W3"] + params["b3"]
    return np.mean((out[:, 0] - y) ** 2)


def lj(X, i, j):
    d = X[i] - X[j]
    r = np.sqrt(np.sum(d * d, axis=1))
    return np.sum(4 * (r ** -12 - r ** -6))


# ---------------------------------------------------------------- the data

def _neighbours(X, cutoff):
    """Ordered pairs (i, j) closer than ``cutoff``, both ways."""
    d = X[:, None, :] - X[None, :, :]
    close = np.sum(d * d, axis=2) < cutoff ** 2
    np.fill_diagonal(close, False)
    return np.nonzero(close)


def _triplets(X, cutoff):
    """(centre, j, k), j < k, both neighbours of the centre."""
    i, j = _neighbours(X, cutoff)
    centres, first, second = [], [], []
    for atom in range(len(X)):
        around = j[i == atom]
        a, b = np.triu_indices(len(around), 1)
        centres.append(np.full(len(a), atom))
        first.append(around[a])
        second.append(around[b])
    return np.concatenate(centres), np.concatenate(first), np.concatenate(second)


def data(name):
    """The arguments of program ``name`` (NumPy), seeded."""
    rng = np.random.default_rng(5)
    if name == "potential":
        X = jittered_lattice(512, spacing=1.2)
        i, j = _neighbours(X, 2.5)
        return (X, i, j, *_triplets(X, 1.3), 0.4)
    if name == "regression":
        n, p = 100_000, 10
        X = np.column_stack([np.ones(n), rng.normal(0.0, 0.5, (n, p - 1))])
        w = rng.normal(0.0, 0.2, p)
        y = rng.poisson(np.exp(X @ w)).astype(float)
        return (w * 0.5, X, y, 0.7, 1e-2)
    if name == "robust_regression":
        n, p = 100_000, 10
        X = rng.normal(0.0, 1.0, (n, p))
        w = np.abs(rng.normal(0.0, 1.0, p))
        y = X @ w + rng.standard_t(2.0, n)              # (heavy tails: outliers)
        return (rng.normal(0.0, 1.0, p), X, y, 1.0)
    if name in ("phase_field", "phase_field_hvp"):
        u = 0.5 + 0.1 * rng.uniform(-1.0, 1.0, (256, 256))
        return (u, 0.5, 2.2)
    if name == "mlp":
        X = rng.normal(size=(512, 2))
        y = np.sin(X[:, 0]) * np.cos(X[:, 1])
        params = {"W1": rng.normal(0, 0.7, (2, 64)), "b1": np.zeros(64),
                  "W2": rng.normal(0, 0.18, (64, 64)), "b2": np.zeros(64),
                  "W3": rng.normal(0, 0.18, (64, 1)), "b3": np.zeros(1), "beta": 1.0}
        return (params, X, y)
    if name == "lj_all_pairs":
        X = jittered_lattice(1000)
        i, j = np.triu_indices(1000, 1)
        return (X, i, j)
    raise ValueError(name)


# ---------------------------------------------------------------- per system

_FUNCTIONS = {"potential": potential, "regression": regression,
              "robust_regression": robust_regression, "phase_field": phase_field,
              "phase_field_hvp": phase_field, "mlp": mlp, "lj_all_pairs": lj}


def make_program(name, system):
    args = data(name)
    if system in ("dualbcast", "dualbcast_jit"):
        call = _dualbcast(name, args, system == "dualbcast_jit")
    elif system == "jax":
        call = _jax(name, args)
    elif system == "torch":
        call = _torch(name, args)
    elif system == "numpy":
        if name != "lj_all_pairs":
            raise NotImplementedError("by hand in NumPy: the LJ energy only")
        call = lambda: pair_energy_numpy(*args)
    else:
        raise ValueError(system)
    return call


def _dualbcast(name, args, jitted):
    f = _FUNCTIONS[name]
    if name == "phase_field_hvp":
        v = np.random.default_rng(6).normal(size=args[0].shape)
        hvp = lambda u, v, kappa, chi: db.jvp(db.grad(lambda u: f(u, kappa, chi)), (u,), (v,))[1]
        hvp = db.jit(hvp) if jitted else hvp
        return lambda: hvp(args[0], v, *args[1:])
    value_and_grad = db.value_and_grad(f)
    value_and_grad = db.jit(value_and_grad) if jitted else value_and_grad
    return lambda: value_and_grad(*args)


def _written_for(xp):
    """The programs in ``xp`` (``jax.numpy`` or ``torch``: both take NumPy's names and
    ``axis=``), the kernels written out as array expressions."""
    def potential(X, i, j, ti, tj, tk, strength):
        d = X[j] - X[i]
        e = xp.exp(-1.5 * (xp.sqrt(xp.sum(d * d, axis=1)) - 1.1))
        pair = 0.5 * xp.sum(e * e - 2.0 * e)
        a, b = X[tj] - X[ti], X[tk] - X[ti]
        c = xp.sum(a * b, axis=1) / xp.sqrt(xp.sum(a * a, axis=1) * xp.sum(b * b, axis=1))
        return pair + xp.sum(strength * (c + 1.0 / 3.0) ** 2)

    def regression(w, X, y, alpha, ridge):
        eta = X @ w
        r = 1.0 / alpha
        return xp.sum((y + r) * xp.log(r + xp.exp(eta)) - y * eta) \
            + 0.5 * ridge * xp.sum(w * w)

    def robust_regression(w, X, y, delta):
        r = X @ w - y
        a = xp.abs(r)
        huber = xp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
        return xp.mean(huber) + xp.sum(xp.where(w < 0.0, w * w, 0.0 * w))

    def phase_field(u, kappa, chi):
        gx, gy = u[1:, :] - u[:-1, :], u[:, 1:] - u[:, :-1]
        mix = u * xp.log(u) + (1.0 - u) * xp.log(1.0 - u) + chi * u * (1.0 - u)
        return xp.sum(mix) + 0.5 * kappa * (xp.sum(gx * gx) + xp.sum(gy * gy))

    def mlp(params, X, y):
        act = lambda h: h / (1.0 + xp.exp(-params["beta"] * h))
        h = act(X @ params["W1"] + params["b1"])
        h = act(h @ params["W2"] + params["b2"])
        return xp.mean(((h @ params["W3"] + params["b3"])[:, 0] - y) ** 2)

    def lj(X, i, j):
        d = X[i] - X[j]
        r = xp.sqrt(xp.sum(d * d, axis=1))
        return xp.sum(4 * (r ** -12 - r ** -6))

    return {"potential": potential, "regression": regression,
            "robust_regression": robust_regression, "phase_field": phase_field,
            "phase_field_hvp": phase_field, "mlp": mlp, "lj_all_pairs": lj}


def _jax(name, args):
    jax = _peer("jax")
    f = _written_for(jax.numpy)[name]
    jargs = jax.tree_util.tree_map(jax.numpy.asarray, args)
    if name == "phase_field_hvp":
        v = jax.numpy.asarray(np.random.default_rng(6).normal(size=args[0].shape))
        hvp = jax.jit(lambda u, v, kappa, chi: jax.jvp(
            jax.grad(lambda u: f(u, kappa, chi)), (u,), (v,))[1])
        return lambda: jax.block_until_ready(hvp(jargs[0], v, *jargs[1:]))
    value_and_grad = jax.jit(jax.value_and_grad(f))
    return lambda: jax.block_until_ready(value_and_grad(*jargs))


def _torch(name, args):
    torch = _peer("torch")
    if name == "phase_field_hvp":
        raise NotImplementedError("the HVP is compared with JAX")
    f = _written_for(torch)[name]
    as_tensor = lambda a: torch.as_tensor(a) if isinstance(a, np.ndarray) else a
    first, rest = args[0], [as_tensor(a) for a in args[1:]]

    def call():
        if isinstance(first, dict):
            leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
                      for k, v in first.items()}
            value = f(leaves, *rest)
            value.backward()
            return value, {k: v.grad for k, v in leaves.items()}
        x = torch.tensor(first, requires_grad=True)
        value = f(x, *rest)
        value.backward()
        return value, x.grad
    return call


def results(call):
    """What ``call()`` gives, as NumPy (for comparing systems)."""
    def plain(x):
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            return [plain(v) for v in x]
        if hasattr(x, "detach"):
            return x.detach().numpy()
        return np.asarray(x)
    return plain(call())
