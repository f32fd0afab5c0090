"""
Differentiating a computation graph evaluated through a memo dict
=================================================================

A computation graph as a graph library represents it: vertices that each hold an
operation and their input vertices, evaluated by a recursive function that remembers
each vertex's output in a dict.  Some operations are ``@db.fast_broadcast`` kernels,
with branches; others are NumPy.  ``db.grad`` differentiates the recursive evaluation
as it is written -- the dict, the recursion, the Python objects -- and the gradient is
checked against autograd's gradient of the same graph built from autograd's NumPy.
"""

import math
import time
from dataclasses import dataclass

import autograd
import autograd.numpy as anp
import matplotlib.pyplot as plt
import numpy as np

import dualbcast as db

# %%
# The graph
# ---------
#
# A vertex names its operation and its inputs.  ``eq=False`` makes vertices hashable
# by identity, so they can key the memo dict.


@dataclass(eq=False)
class Vertex:
    op: str
    inputs: tuple = ()


def output(memo, vertex, ops):
    """The value of ``vertex``, computing (once) what it depends on."""
    if vertex not in memo:
        args = [output(memo, v, ops) for v in vertex.inputs]
        memo[vertex] = ops[vertex.op](*args)
    return memo[vertex]


# %%
# Two source vertices, the data ``x`` and a scalar parameter ``a``; then a chain of
# vertices, each applying one of three operations to the vertex before it and ``a``,
# every fourth one also averaging in one of the eight vertices before it.

x_in, a_in = Vertex("x"), Vertex("a")
rng = np.random.default_rng(0)
chain = [x_in]
for i in range(1, 61):
    v = Vertex(("squash", "wave", "shrink")[i % 3], (chain[-1], a_in))
    if i % 4 == 0:
        v = Vertex("average", (v, chain[max(i - rng.integers(2, 9), 0)]))
    chain.append(v)
graph_output = Vertex("mean_square", (chain[-1],))

# %%
# The operations
# --------------
#
# Three kernels (``shrink`` has three branches, joined smoothly), and NumPy for the
# rest.


@db.fast_broadcast
def squash(h, a):
    return math.tanh(2.0 * a * h)


@db.fast_broadcast
def wave(h, a):
    return math.sin(2.0 * h) + 0.2 * a


@db.fast_broadcast
def shrink(h, a):
    if h > a:
        return 0.5 * h + 0.25 * a
    if h < -a:
        return 0.5 * h - 0.25 * a
    return h - 0.25 * h * abs(h) / a


ops = {"squash": squash, "wave": wave, "shrink": shrink,
       "average": lambda u, v: 0.5 * (u + v),
       "mean_square": lambda h: np.mean(h ** 2)}


def loss(x, a):
    return output({x_in: x, a_in: a}, graph_output, ops)


x = rng.uniform(-2.0, 2.0, 1000)
a = 0.8
value, (gx, ga) = db.value_and_grad(loss, argnums=(0, 1))(x, a)
print(f"loss {value:.6f}, d loss / d a = {ga:.6f}")

# %%
# Checking against autograd
# -------------------------
#
# The same graph, with each operation written with ``autograd.numpy`` (the kernels'
# branches as ``anp.where``), and the same recursive evaluation.

autograd_ops = {
    "squash": lambda h, a: anp.tanh(2.0 * a * h),
    "wave": lambda h, a: anp.sin(2.0 * h) + 0.2 * a,
    "shrink": lambda h, a: anp.where(h > a, 0.5 * h + 0.25 * a,
                                     anp.where(h < -a, 0.5 * h - 0.25 * a,
                                               h - 0.25 * h * anp.abs(h) / a)),
    "average": lambda u, v: 0.5 * (u + v),
    "mean_square": lambda h: anp.mean(h ** 2),
}


def autograd_loss(x, a):
    return output({x_in: x, a_in: a}, graph_output, autograd_ops)


ag_value = autograd_loss(x, a)
ag_gx, ag_ga = autograd.grad(autograd_loss, argnum=(0, 1))(x, a)
np.testing.assert_allclose(value, ag_value, rtol=1e-13)
np.testing.assert_allclose(gx, ag_gx, rtol=1e-10, atol=1e-15)
np.testing.assert_allclose(ga, ag_ga, rtol=1e-10)
print("dualbcast's gradient agrees with autograd's")

# %%
# Replaying the graph with ``db.jit``
# -----------------------------------
#
# Each eager call runs the recursion and the dict lookups again.  ``db.jit`` records
# the program at its first call and replays the recorded operations afterwards,
# without running the Python code.  ``loss`` reads the graph and ``ops`` from
# globals: ``db.jit`` checks on every call that those names still refer to the same
# objects, but not what is inside them, so a graph edited in place needs a new
# ``db.jit``.

eager = db.value_and_grad(loss, argnums=(0, 1))
jitted = db.jit(eager)
for _ in range(3):                                 # trace, then replays
    jitted(x, a)


def seconds_per_call(f, *args, repeat=20):
    start = time.perf_counter()
    for _ in range(repeat):
        f(*args)
    return (time.perf_counter() - start) / repeat


x2 = rng.uniform(-2.0, 2.0, 1000)
jit_value, (jit_gx, jit_ga) = jitted(x2, 1.1)      # new values: replayed, not retraced
ag_gx, ag_ga = autograd.grad(autograd_loss, argnum=(0, 1))(x2, 1.1)
np.testing.assert_allclose(jit_gx, ag_gx, rtol=1e-10, atol=1e-15)
np.testing.assert_allclose(jit_ga, ag_ga, rtol=1e-10)
for name, f in (("autograd", autograd.value_and_grad(autograd_loss, argnum=(0, 1))),
                ("dualbcast eager", eager), ("dualbcast jit", jitted)):
    print(f"{name:16s} {1e3 * seconds_per_call(f, x2, 1.1):6.2f} ms per value and gradient")

# %%
# The graph's values
# ------------------
#
# Each row is one vertex's output over the (sorted) inputs; the arcs on the left are
# the skip connections of the averaging vertices.

order = np.argsort(x)
memo = {x_in: x[order], a_in: a}
output(memo, graph_output, ops)
values = np.array([memo[v] for v in chain])

fig, (ax_graph, ax_values) = plt.subplots(
    1, 2, figsize=(9, 5), sharey=True, gridspec_kw={"width_ratios": [1, 4]},
    constrained_layout=True)
for i, v in enumerate(chain[1:], start=1):
    if v.op == "average":
        j = chain.index(v.inputs[1])
        t = np.linspace(0.0, np.pi, 30)
        ax_graph.plot(-(i - j) / 2 * np.sin(t), (i + j) / 2 + (i - j) / 2 * np.cos(t),
                      color="tab:blue", lw=1)
ax_graph.plot(np.zeros(len(chain)), np.arange(len(chain)), "k.", ms=3)
ax_graph.set(xticks=[], ylabel="vertex", title="skip edges")
image = ax_values.imshow(values, aspect="auto", cmap="viridis",
                         extent=(x.min(), x.max(), len(chain) - 0.5, -0.5))
ax_values.set(xlabel="input x", title="vertex outputs")
fig.colorbar(image, ax=ax_values)
