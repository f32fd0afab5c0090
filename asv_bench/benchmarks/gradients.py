"""The gradient workloads of the reverse-core issue, written for every system:
dualbcast, a hand-written ``numba.njit`` gradient, JAX (``jit(value_and_grad)``),
PyTorch eager and autograd.  Peers are imported lazily and are optional:
``make_call`` raises ``NotImplementedError`` (asv's "skip") when one is not installed
or has no meaningful version of a workload.

Each case builds a zero-argument callable returning the value and the gradient, so
that the asv benchmarks and ``asv_bench/report.py`` time exactly the same code.
"""
import importlib
import math

import numba
import numpy as np

import dualbcast as db

SYSTEMS = ("dualbcast", "numba", "jax", "torch", "autograd")
PEERS = SYSTEMS[1:]


def _peer(name):
    try:
        module = importlib.import_module(name)
    except ImportError:
        raise NotImplementedError(f"{name} is not installed") from None
    if name == "jax":
        module.config.update("jax_enable_x64", True)    # float64, like everyone else
    return module


def _inputs(n, seed=0):
    return np.random.default_rng(seed).uniform(-0.5, 1.0, n)


# --- EAM: E = p^2 + p^3 + p^4/4, p = sum(exp(-3 (x + 1))) --------------------------------

@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


def embed(p):
    return p ** 2 + p ** 3 + 0.25 * p ** 4


@numba.njit
def eam_numba(x):
    grad = np.empty_like(x)
    p = 0.0
    for i in range(x.size):
        e = math.exp(-3.0 * (x[i] + 1.0))
        p += e
        grad[i] = -3.0 * e
    de = 2.0 * p + 3.0 * p ** 2 + p ** 3
    for i in range(x.size):
        grad[i] *= de
    return p ** 2 + p ** 3 + 0.25 * p ** 4, grad


def eam(system, n):
    x = _inputs(n)
    if system == "dualbcast":
        f = db.value_and_grad(lambda x: embed(rho.sum(x)))
        return lambda: f(x)
    if system == "numba":
        return lambda: eam_numba(x)
    if system == "jax":
        jax = _peer("jax")
        jnp = jax.numpy
        f = jax.jit(jax.value_and_grad(lambda x: embed(jnp.sum(jnp.exp(-3.0 * (x + 1.0))))))
        xj = jax.numpy.asarray(x)
        return lambda: jax.block_until_ready(f(xj))
    if system == "torch":
        torch = _peer("torch")
        xt = torch.from_numpy(x)

        def call():
            x = xt.detach().requires_grad_(True)
            e = embed(torch.exp(-3.0 * (x + 1.0)).sum())
            e.backward()
            return e, x.grad
        return call
    if system == "autograd":
        autograd = _peer("autograd")
        anp = importlib.import_module("autograd.numpy")
        f = autograd.value_and_grad(lambda x: embed(anp.sum(anp.exp(-3.0 * (x + 1.0)))))
        return lambda: f(x)
    raise NotImplementedError(system)


# --- the 9th-order polynomial, one coefficient of ten differentiated ---------------------

@db.fast_broadcast
def poly9(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
    return (c0 + c1 * x + c2 * x ** 2 + c3 * x ** 3 + c4 * x ** 4 + c5 * x ** 5
            + c6 * x ** 6 + c7 * x ** 7 + c8 * x ** 8 + c9 * x ** 9)


COEFFS = tuple(float(c) for c in np.linspace(0.3, 1.2, 10))


def poly9_generic(x, c2, np):
    c = COEFFS[:2] + (c2,) + COEFFS[3:]
    return np.sum(c[0] + c[1] * x + c[2] * x ** 2 + c[3] * x ** 3 + c[4] * x ** 4
                  + c[5] * x ** 5 + c[6] * x ** 6 + c[7] * x ** 7 + c[8] * x ** 8
                  + c[9] * x ** 9)


@numba.njit
def poly9_numba(x, c):
    total = 0.0
    grad = 0.0
    for i in range(x.size):
        xi = x[i]
        total += (c[0] + c[1] * xi + c[2] * xi ** 2 + c[3] * xi ** 3 + c[4] * xi ** 4
                  + c[5] * xi ** 5 + c[6] * xi ** 6 + c[7] * xi ** 7 + c[8] * xi ** 8
                  + c[9] * xi ** 9)
        grad += xi ** 2
    return total, grad


def poly9_one_live(system, n):
    x = _inputs(n)
    c2 = COEFFS[2]
    if system == "dualbcast":
        f = db.value_and_grad(lambda c2: poly9.sum(x, *COEFFS[:2], c2, *COEFFS[3:]))
        return lambda: f(c2)
    if system == "numba":
        c = np.array(COEFFS)
        return lambda: poly9_numba(x, c)
    if system == "jax":
        jax = _peer("jax")
        f = jax.jit(jax.value_and_grad(lambda c2, x: poly9_generic(x, c2, jax.numpy)))
        xj = jax.numpy.asarray(x)
        return lambda: jax.block_until_ready(f(c2, xj))
    if system == "torch":
        torch = _peer("torch")
        xt = torch.from_numpy(x)

        def call():
            c = torch.tensor(c2, dtype=torch.float64, requires_grad=True)
            value = poly9_generic(xt, c, torch)
            value.backward()
            return value, c.grad
        return call
    if system == "autograd":
        autograd = _peer("autograd")
        anp = importlib.import_module("autograd.numpy")
        f = autograd.value_and_grad(lambda c2: poly9_generic(x, c2, anp))
        return lambda: f(c2)
    raise NotImplementedError(system)


# --- a large constant touched once: grad(p -> c[1] * p) ----------------------------------

@numba.njit
def touch_numba(c, p):
    return c[1] * p, c[1]


def constant_touch(system, n):
    c = np.linspace(1.0, 2.0, n)
    p = 0.7
    if system == "dualbcast":
        f = db.value_and_grad(lambda p: c[1] * p)
        return lambda: f(p)
    if system == "numba":
        return lambda: touch_numba(c, p)
    if system == "jax":
        jax = _peer("jax")
        f = jax.jit(jax.value_and_grad(lambda p, c: c[1] * p))
        cj = jax.numpy.asarray(c)
        return lambda: jax.block_until_ready(f(p, cj))
    if system == "torch":
        torch = _peer("torch")
        ct = torch.from_numpy(c)

        def call():
            pt = torch.tensor(p, dtype=torch.float64, requires_grad=True)
            value = ct[1] * pt
            value.backward()
            return value, pt.grad
        return call
    if system == "autograd":
        autograd = _peer("autograd")
        f = autograd.value_and_grad(lambda p: c[1] * p)
        return lambda: f(p)
    raise NotImplementedError(system)


# --- the 16-term fold of the control-flow seed: per-op overhead -----------------------------

FOLD_TERMS = 16


def fold_minus(xs):
    total = xs[0]
    for x in xs[1:]:
        total = total - x
    return total


def fold16(system, n=FOLD_TERMS):
    xs = tuple(float(i) for i in range(1, n + 1))
    if system == "dualbcast":
        f = db.value_and_grad(fold_minus)
        return lambda: f(xs)
    if system == "jax":
        jax = _peer("jax")
        f = jax.jit(jax.value_and_grad(fold_minus))
        return lambda: jax.block_until_ready(f(xs))
    if system == "torch":
        torch = _peer("torch")

        def call():
            ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
            value = fold_minus(ts)
            value.backward()
            return value, [t.grad for t in ts]
        return call
    if system == "autograd":
        autograd = _peer("autograd")
        f = autograd.value_and_grad(fold_minus)
        return lambda: f(xs)
    # A hand-written gradient of a fold is a constant tuple: nothing to time.
    raise NotImplementedError(system)


CASES = {
    "eam_1e2": (eam, 10 ** 2), "eam_1e4": (eam, 10 ** 4), "eam_1e6": (eam, 10 ** 6),
    "poly9_one_live_1e3": (poly9_one_live, 10 ** 3),
    "constant_touch_1e3": (constant_touch, 10 ** 3),
    "constant_touch_1e7": (constant_touch, 10 ** 7),
    "fold16": (fold16, FOLD_TERMS),
}


def make_call(case, system):
    """A zero-argument callable computing the case's value and gradient with
    ``system``, warmed up (compiled) once.  ``NotImplementedError`` when unavailable."""
    build, n = CASES[case]
    call = build(system, n)
    call()
    return call
