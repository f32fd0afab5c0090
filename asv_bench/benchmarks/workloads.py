"""The workloads of the seeds, each written three ways: as a dualbcast kernel, as the
hand-written ``numba.njit`` loop doing the same math, and in NumPy.

Shared by the asv benchmarks and by ``asv_bench/report.py`` (the README table), so
both time exactly the same code.
"""
import math

import numba
import numpy as np

import dualbcast as db

# --- EAM density rho(r) = exp(-3 (r + 1)) (zygote-performance-eam seed) -----------------


@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


@numba.njit
def rho_value_numba(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = math.exp(-3.0 * (x[i] + 1.0))
    return out


@numba.njit
def rho_value_and_partials_numba(x):
    out = np.empty_like(x)
    d = np.empty_like(x)
    for i in range(x.size):
        e = math.exp(-3.0 * (x[i] + 1.0))
        out[i] = e
        d[i] = -3.0 * e
    return out, d


@numba.njit
def rho_sum_and_partials_numba(x):
    d = np.empty_like(x)
    total = 0.0
    for i in range(x.size):
        e = math.exp(-3.0 * (x[i] + 1.0))
        total += e
        d[i] = -3.0 * e
    return total, d


def rho_value_numpy(x):
    return np.exp(-3.0 * (x + 1.0))


def rho_value_and_partials_numpy(x):
    e = np.exp(-3.0 * (x + 1.0))
    return e, -3.0 * e


def rho_sum_and_partials_numpy(x):
    e = np.exp(-3.0 * (x + 1.0))
    return e.sum(), -3.0 * e


# --- 9th-order polynomial, one of ten coefficients live (slow-backward seed) ------------


@db.fast_broadcast
def poly9(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
    return (c0 + c1 * x + c2 * x ** 2 + c3 * x ** 3 + c4 * x ** 4 + c5 * x ** 5
            + c6 * x ** 6 + c7 * x ** 7 + c8 * x ** 8 + c9 * x ** 9)


COEFFS = tuple(float(c) for c in np.linspace(0.3, 1.2, 10))
LIVE = 2   # d/dc2, as in the seed


@numba.njit
def _poly9(x, c):
    return (c[0] + c[1] * x + c[2] * x ** 2 + c[3] * x ** 3 + c[4] * x ** 4 + c[5] * x ** 5
            + c[6] * x ** 6 + c[7] * x ** 7 + c[8] * x ** 8 + c[9] * x ** 9)


@numba.njit
def poly9_value_numba(x, c):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = _poly9(x[i], c)
    return out


@numba.njit
def poly9_value_and_partials_numba(x, c):
    out = np.empty_like(x)
    d = np.empty_like(x)
    for i in range(x.size):
        out[i] = _poly9(x[i], c)
        d[i] = x[i] ** 2
    return out, d


@numba.njit
def poly9_sum_and_partials_numba(x, c):
    total = 0.0
    d = 0.0
    for i in range(x.size):
        total += _poly9(x[i], c)
        d += x[i] ** 2
    return total, d


def poly9_value_numpy(x, c):
    return sum(ck * x ** k for k, ck in enumerate(c))


def poly9_value_and_partials_numpy(x, c):
    return poly9_value_numpy(x, c), x ** 2


def poly9_sum_and_partials_numpy(x, c):
    return poly9_value_numpy(x, c).sum(), (x ** 2).sum()


def inputs(n, seed=0):
    return np.random.default_rng(seed).random(n)


# name -> {system: (function, argument builder)} for each mode
def rho_calls(x):
    return {
        "value": {"dualbcast": lambda: rho(x), "numba": lambda: rho_value_numba(x),
                  "numpy": lambda: rho_value_numpy(x)},
        "value_and_partials": {
            "dualbcast": lambda: rho.value_and_partials(x, wrt=0),
            "numba": lambda: rho_value_and_partials_numba(x),
            "numpy": lambda: rho_value_and_partials_numpy(x)},
        "sum_and_partials": {
            "dualbcast": lambda: rho.sum_and_partials(x, wrt=0),
            "numba": lambda: rho_sum_and_partials_numba(x),
            "numpy": lambda: rho_sum_and_partials_numpy(x)},
    }


def poly9_calls(x):
    c = np.array(COEFFS)
    return {
        "value": {"dualbcast": lambda: poly9(x, *COEFFS), "numba": lambda: poly9_value_numba(x, c),
                  "numpy": lambda: poly9_value_numpy(x, COEFFS)},
        "value_and_partials": {
            "dualbcast": lambda: poly9.value_and_partials(x, *COEFFS, wrt=1 + LIVE),
            "numba": lambda: poly9_value_and_partials_numba(x, c),
            "numpy": lambda: poly9_value_and_partials_numpy(x, COEFFS)},
        "sum_and_partials": {
            "dualbcast": lambda: poly9.sum_and_partials(x, *COEFFS, wrt=1 + LIVE),
            "numba": lambda: poly9_sum_and_partials_numba(x, c),
            "numpy": lambda: poly9_sum_and_partials_numpy(x, COEFFS)},
    }


WORKLOADS = {"eam_rho": rho_calls, "poly9_one_live": poly9_calls}
SIZES = (10 ** 2, 10 ** 4, 10 ** 6)


# --- a chain of ten different elementwise kernels (issue: eager by default) ----------------
# h = k_i(h, a) for i = 0..9, then sum(h ** 2) + k_0.sum(x, a); the gradient with respect
# to x (an array) and a (a scalar).  The kernels, then the same steps for an array
# namespace ``m`` (numpy, jax.numpy, torch, autograd.numpy), side by side.


@db.fast_broadcast
def chain0(h, a):
    return a * math.tanh(h)


@db.fast_broadcast
def chain1(h, a):
    return h + a * math.sin(h)


@db.fast_broadcast
def chain2(h, a):
    return math.log1p(h * h) + a


@db.fast_broadcast
def chain3(h, a):
    return h * math.exp(-a * h * h)


@db.fast_broadcast
def chain4(h, a):
    return math.sqrt(h * h + a * a)


@db.fast_broadcast
def chain5(h, a):
    return h / (1.0 + abs(h)) * a


@db.fast_broadcast
def chain6(h, a):
    return math.cos(a * h)


@db.fast_broadcast
def chain7(h, a):
    return h - 0.1 * a * h ** 3


@db.fast_broadcast
def chain8(h, a):
    return math.atan(h) + a * h


@db.fast_broadcast
def chain9(h, a):
    return math.expm1(-abs(h)) * a + h


CHAIN_KERNELS = (chain0, chain1, chain2, chain3, chain4, chain5, chain6, chain7, chain8,
                 chain9)
CHAIN_STEPS = (
    lambda h, a, m: a * m.tanh(h),
    lambda h, a, m: h + a * m.sin(h),
    lambda h, a, m: m.log1p(h * h) + a,
    lambda h, a, m: h * m.exp(-a * h * h),
    lambda h, a, m: m.sqrt(h * h + a * a),
    lambda h, a, m: h / (1.0 + abs(h)) * a,
    lambda h, a, m: m.cos(a * h),
    lambda h, a, m: h - 0.1 * a * h ** 3,
    lambda h, a, m: m.arctan(h) + a * h,
    lambda h, a, m: m.expm1(-abs(h)) * a + h,
)


def chain(x, a):
    """The chain with dualbcast kernels."""
    h = x
    for kernel in CHAIN_KERNELS:
        h = kernel(h, a)
    return np.sum(h ** 2) + chain0.sum(x, a)


def chain_generic(x, a, m, total):
    """The chain written with array namespace ``m`` (``total``: its sum)."""
    h = x
    for step in CHAIN_STEPS:
        h = step(h, a, m)
    return total(h ** 2) + total(CHAIN_STEPS[0](x, a, m))


# --- a computation graph of 200 vertices evaluated through a memo dict (the
# computation-graph seed, written as a new user would) ----------------------------------
# Vertex 0 is the input x; each later vertex applies one of the kernels below to the
# vertex before it (every fourth also to one of the eight before it) and the parameter a; the energy is the sum of
# the last vertex squared.  The same steps for an array namespace ``m``, side by side.


@db.fast_broadcast
def blend(u, v, a):
    return u * math.tanh(v) + a * v


@db.fast_broadcast
def squash(u, a):
    return u / (1.0 + a * abs(u))


GRAPH_VERTICES = 200
GRAPH_OPS = (
    (lambda u, v, a: blend(u, v, a), lambda u, v, a, m: u * m.tanh(v) + a * v),
    (lambda u, v, a: squash(u, a), lambda u, v, a, m: u / (1.0 + a * abs(u))),
    (lambda u, v, a: chain1(u, a), lambda u, v, a, m: u + a * m.sin(u)),
)


def make_graph(vertices=GRAPH_VERTICES, seed=0):
    """Per vertex after the input: ``(op, first input, second input)``."""
    rng = np.random.default_rng(seed)
    graph = []
    for vertex in range(1, vertices):
        # every fourth vertex also reads one of the eight before it (a skip connection)
        first = vertex - 1
        second = int(rng.integers(max(0, vertex - 8), vertex)) if vertex % 4 == 0 else first
        graph.append((int(rng.integers(len(GRAPH_OPS))), first, second))
    return graph


def graph_energy(x, a, graph, generic=None, total=np.sum):
    """The graph's energy, each vertex's output computed once through a memo dict:
    with dualbcast kernels, or (``generic``: an array namespace) its steps."""
    memo = {0: x}

    def output(vertex):
        if vertex not in memo:
            op, first, second = graph[vertex - 1]
            u, v = output(first), output(second)
            kernel_op, generic_op = GRAPH_OPS[op]
            memo[vertex] = kernel_op(u, v, a) if generic is None else generic_op(u, v, a, generic)
        return memo[vertex]
    return total(output(len(graph)) ** 2)
