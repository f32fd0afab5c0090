"""The gradient workloads of the reverse-core issue, written for every system:
dualbcast, a hand-written ``numba.njit`` gradient, JAX (``jit(value_and_grad)``),
PyTorch eager and autograd.  Peers are imported lazily and are optional:
``make_call`` raises ``NotImplementedError`` (asv's "skip") when one is not installed
or has no meaningful version of a workload.

Each case builds a zero-argument callable returning the value and the gradient, so
that the asv benchmarks and ``asv_bench/report.py`` time exactly the same code.
"""
import importlib
import os

import numba
import numpy as np

import dualbcast as db
from dualbcast.jit import policy
from dualbcast.vmath.explog import exp as vexp

# The kernels, coefficients and fused Numba loops of the kernel benchmarks.
from .workloads import (COEFFS, LIVE, chain, chain_generic, graph_energy, make_graph, poly9,
                        poly9_sum_and_partials_numba, rho, rho_sum_and_partials_numba)

# dualbcast: value_and_grad, eager (f traced on every call); dualbcast_jit: the same
# under db.jit (recorded once, replayed).
SYSTEMS = ("dualbcast", "dualbcast_jit", "numba", "numba_limit", "jax", "torch", "autograd")
PEERS = SYSTEMS[1:]
OURS = ("dualbcast", "dualbcast_jit")


def _value_and_grad(system, f, **options):
    value_and_grad = db.value_and_grad(f, **options)
    return db.jit(value_and_grad) if system == "dualbcast_jit" else value_and_grad


def _peer(name):
    try:
        module = importlib.import_module(name)
    except ImportError:
        raise NotImplementedError(f"{name} is not installed") from None
    if name == "jax":
        module.config.update("jax_enable_x64", True)    # float64, like everyone else
    return module


def _jax_value_and_grad(jax, f, *args):
    """``jit(value_and_grad(f))`` called on ``args``, waiting for the result."""
    f = jax.jit(jax.value_and_grad(f))
    return lambda: jax.block_until_ready(f(*args))


def _torch_value_and_grad(torch, f, leaf):
    """PyTorch eager: a fresh leaf tensor requiring grad, ``f`` on it, backward."""
    def call():
        x = leaf.detach().requires_grad_(True)
        value = f(x)
        value.backward()
        return value, x.grad
    return call


def _inputs(n, seed=0):
    return np.random.default_rng(seed).uniform(-0.5, 1.0, n)


# --- EAM: E = p^2 + p^3 + p^4/4, p = sum(exp(-3 (x + 1))) --------------------------------

def embed(p):
    return p ** 2 + p ** 3 + 0.25 * p ** 4


@numba.njit
def eam_numba(x):
    p, grad = rho_sum_and_partials_numba(x)
    de = 2.0 * p + 3.0 * p ** 2 + p ** 3
    for i in range(x.size):
        grad[i] *= de
    return p ** 2 + p ** 3 + 0.25 * p ** 4, grad


@numba.njit(parallel=True, fastmath={"reassoc"})
def _eam_limit_p(x, grad):
    p = 0.0
    for i in numba.prange(x.size):
        e = vexp(-3.0 * (x[i] + 1.0))
        p += e
        grad[i] = -3.0 * e
    return p


@numba.njit(parallel=True)
def _scale(grad, factor):
    for i in numba.prange(grad.size):
        grad[i] *= factor


def eam_limit(x, grad):
    """The fused EAM gradient by hand with dualbcast's vectorised exp and both cores:
    the practical limit the issue measures against."""
    p = _eam_limit_p(x, grad)
    _scale(grad, 2.0 * p + 3.0 * p ** 2 + p ** 3)
    return p ** 2 + p ** 3 + 0.25 * p ** 4, grad


def eam(system, n):
    x = _inputs(n)
    if system == "numba_limit":
        grad = np.empty_like(x)
        return lambda: eam_limit(x, grad)
    if system in OURS:
        f = _value_and_grad(system, lambda x: embed(rho.sum(x)))
        return lambda: f(x)
    if system == "numba":
        return lambda: eam_numba(x)
    if system == "jax":
        jax = _peer("jax")
        jnp = jax.numpy
        return _jax_value_and_grad(jax, lambda x: embed(jnp.sum(jnp.exp(-3.0 * (x + 1.0)))),
                                   jnp.asarray(x))
    if system == "torch":
        torch = _peer("torch")
        return _torch_value_and_grad(
            torch, lambda x: embed(torch.exp(-3.0 * (x + 1.0)).sum()), torch.from_numpy(x))
    if system == "autograd":
        autograd = _peer("autograd")
        anp = importlib.import_module("autograd.numpy")
        f = autograd.value_and_grad(lambda x: embed(anp.sum(anp.exp(-3.0 * (x + 1.0)))))
        return lambda: f(x)
    raise NotImplementedError(system)


def eam_into_buffer(system, n):
    """EAM with the gradient written into a buffer every call (value_and_grad(out=))."""
    x = _inputs(n)
    grad = np.empty_like(x)
    if system in OURS:
        f = _value_and_grad(system, lambda x: embed(rho.sum(x)), out=grad)
        return lambda: f(x)
    if system == "numba_limit":
        return lambda: eam_limit(x, grad)
    raise NotImplementedError(system)


# --- the 9th-order polynomial, one coefficient of ten differentiated ---------------------

def poly9_generic(x, live, np):
    c = COEFFS[:LIVE] + (live,) + COEFFS[LIVE + 1:]
    return np.sum(c[0] + c[1] * x + c[2] * x ** 2 + c[3] * x ** 3 + c[4] * x ** 4
                  + c[5] * x ** 5 + c[6] * x ** 6 + c[7] * x ** 7 + c[8] * x ** 8
                  + c[9] * x ** 9)


def poly9_one_live(system, n):
    x = _inputs(n)
    live = COEFFS[LIVE]
    if system in OURS:
        f = _value_and_grad(system,
                            lambda c: poly9.sum(x, *COEFFS[:LIVE], c, *COEFFS[LIVE + 1:]))
        return lambda: f(live)
    if system == "numba":
        c = np.array(COEFFS)
        return lambda: poly9_sum_and_partials_numba(x, c)
    if system == "jax":
        jax = _peer("jax")
        return _jax_value_and_grad(jax, lambda c, x: poly9_generic(x, c, jax.numpy), live,
                                   jax.numpy.asarray(x))
    if system == "torch":
        torch = _peer("torch")
        xt = torch.from_numpy(x)
        return _torch_value_and_grad(torch, lambda c: poly9_generic(xt, c, torch),
                                     torch.tensor(live, dtype=torch.float64))
    if system == "autograd":
        autograd = _peer("autograd")
        anp = importlib.import_module("autograd.numpy")
        f = autograd.value_and_grad(lambda c: poly9_generic(x, c, anp))
        return lambda: f(live)
    raise NotImplementedError(system)


# --- a large constant touched once: grad(p -> c[1] * p) ----------------------------------

@numba.njit
def touch_numba(c, p):
    return c[1] * p, c[1]


def constant_touch(system, n):
    c = np.linspace(1.0, 2.0, n)
    p = 0.7
    if system in OURS:
        f = _value_and_grad(system, lambda p: c[1] * p)
        return lambda: f(p)
    if system == "numba":
        return lambda: touch_numba(c, p)
    if system == "jax":
        jax = _peer("jax")
        return _jax_value_and_grad(jax, lambda p, c: c[1] * p, p, jax.numpy.asarray(c))
    if system == "torch":
        torch = _peer("torch")
        ct = torch.from_numpy(c)
        return _torch_value_and_grad(torch, lambda p: ct[1] * p,
                                     torch.tensor(p, dtype=torch.float64))
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


def fold_minus_passes(xs, passes):
    """``fold_minus`` run ``passes`` times over the same terms: more recorded ops on as
    many leaves (so their difference is the cost of ops alone)."""
    total = xs[0]
    for _ in range(passes):
        for x in xs[1:]:
            total = total - x
    return total


def fold16(system, n=FOLD_TERMS):
    xs = tuple(float(i) for i in range(1, n + 1))
    if system in OURS:
        f = _value_and_grad(system, fold_minus)
        return lambda: f(xs)
    if system == "jax":
        jax = _peer("jax")
        return _jax_value_and_grad(jax, fold_minus, xs)
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


# --- the branchy qux of the control-flow seed (two bool arguments, not differentiated) ---

def qux_generic(a, b, x, np):
    aa = np.sin(x) if a else np.cos(x)
    return 1.0 / np.cosh(aa) if b else np.tanh(aa)


def qux(system, n=None):
    def f(a, b, x):
        return qux_generic(a, b, x, np)
    if system in OURS:
        f = _value_and_grad(system, f, argnums=2)
        return lambda: f(True, False, 0.7)
    if system == "jax":
        jax = _peer("jax")
        g = jax.jit(jax.value_and_grad(lambda a, b, x: qux_generic(a, b, x, jax.numpy),
                                       argnums=2), static_argnums=(0, 1))
        return lambda: jax.block_until_ready(g(True, False, 0.7))
    if system == "torch":
        torch = _peer("torch")
        return _torch_value_and_grad(torch, lambda x: qux_generic(True, False, x, torch),
                                     torch.tensor(0.7, dtype=torch.float64))
    if system == "autograd":
        autograd = _peer("autograd")
        anp = importlib.import_module("autograd.numpy")
        g = autograd.value_and_grad(lambda x: qux_generic(True, False, x, anp))
        return lambda: g(0.7)
    raise NotImplementedError(system)   # by hand: two lines of calculus, nothing to time


# --- a chain of ten different kernels, h = k_i(h, a), then sum(h^2) + k_0.sum(x, a) ------

def kernel_chain(system, n):
    return _of_x_and_a(system, n, chain, chain_generic)


# --- a 200-vertex computation graph evaluated through a memo dict ---------------------

def kernel_graph(system, n):
    graph = make_graph()
    if system == "jax" and not os.environ.get("DUALBCAST_BENCH_SLOW"):
        # XLA recomputes the chain in each fusion: its compile grows as the square of the
        # vertices (measured: 25, 50, 100, 200 vertices: 1.0, 3.3, 15, 78 s; 2.0, 5.6,
        # 22, 117 ms a call), beyond asv's timeout: run with DUALBCAST_BENCH_SLOW=1.
        raise NotImplementedError("JAX's jit of the 200-vertex graph compiles for ~80 s: "
                                  "set DUALBCAST_BENCH_SLOW=1 to time it")
    return _of_x_and_a(system, n, lambda x, a: graph_energy(x, a, graph),
                       lambda x, a, m, total: graph_energy(x, a, graph, m, total))


def _of_x_and_a(system, n, ours, generic):
    """The value and gradient of ``f(x, a)`` (x of ``n`` elements, a = 0.7) with
    respect to both: ``ours`` with dualbcast kernels, ``generic(x, a, m, total)`` with
    a peer's array namespace ``m`` and its sum.  (No version by hand.)"""
    x, a = _inputs(n), 0.7
    if system in OURS:
        f = _value_and_grad(system, ours, argnums=(0, 1))
        return lambda: f(x, a)
    if system == "jax":
        jax = _peer("jax")
        g = jax.jit(jax.value_and_grad(
            lambda x, a: generic(x, a, jax.numpy, jax.numpy.sum), argnums=(0, 1)))
        xj = jax.numpy.asarray(x)
        return lambda: jax.block_until_ready(g(xj, a))
    if system == "torch":
        torch = _peer("torch")
        xt = torch.from_numpy(x)

        def call():
            xs = xt.detach().requires_grad_(True)
            at = torch.tensor(a, dtype=torch.float64, requires_grad=True)
            value = generic(xs, at, torch, torch.sum)
            value.backward()
            return value, (xs.grad, at.grad)
        return call
    if system == "autograd":
        autograd = _peer("autograd")
        anp = importlib.import_module("autograd.numpy")
        g = autograd.value_and_grad(lambda xa: generic(xa[0], xa[1], anp, anp.sum))
        return lambda: g((x, a))
    raise NotImplementedError(system)   # by hand: not written


CASES = {
    "eam_1e2": (eam, 10 ** 2), "eam_1e4": (eam, 10 ** 4), "eam_1e6": (eam, 10 ** 6),
    "eam_out_1e6": (eam_into_buffer, 10 ** 6),
    "poly9_one_live_1e3": (poly9_one_live, 10 ** 3),
    "constant_touch_1e3": (constant_touch, 10 ** 3),
    "constant_touch_1e7": (constant_touch, 10 ** 7),
    "fold16": (fold16, FOLD_TERMS),
    "qux": (qux, 1),
    "chain10_1e3": (kernel_chain, 10 ** 3), "chain10_1e5": (kernel_chain, 10 ** 5),
    "graph200_1e3": (kernel_graph, 10 ** 3),
}


def make_call(case, system):
    """A zero-argument callable computing the case's value and gradient with
    ``system``, warmed up (:func:`warmed_up`).  ``NotImplementedError`` when
    unavailable."""
    build, n = CASES[case]
    return warmed_up(build(system, n), system)


def warmed_up(call, system):
    """``call`` called until it runs as it will from then on: compiled, and for
    dualbcast's jit replayed until its program is generated and, where it can be, fused."""
    calls = 1
    if system == "dualbcast_jit":
        calls = 2 + policy.GENERATE_AFTER + min(policy.FUSE_AFTER, 10 ** 4)
    for _ in range(calls):
        call()
    return call
