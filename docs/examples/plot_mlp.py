"""
A small MLP with a custom activation, in NumPy, PyTorch and JAX
===============================================================

A custom activation written once, as a scalar ``@db.fast_broadcast`` kernel with a
branch and a learnable parameter, drives a small multilayer perceptron fitted to a toy
1-D regression with ``db.value_and_grad``.  The same kernel then runs inside PyTorch
(``dualbcast.torch``) and inside JAX (``dualbcast.jax``); every gradient is checked
against ``torch.autograd`` and ``jax.grad`` of the activation written natively.
"""

import math

import matplotlib.pyplot as plt
import numpy as np

import dualbcast as db

# %%
# The activation
# --------------
#
# A smooth leaky ELU: the identity for :math:`x > 0`, and
# :math:`s\,x + (1 - s)(e^x - 1)` below, which joins it with a continuous first
# derivative whatever the slope :math:`s` of the left tail.  The slope is a
# parameter of the network, learned with the weights; the kernel's loop gives the
# partials with respect to both ``x`` and ``slope`` in one pass.


@db.fast_broadcast
def smooth_leaky(x, slope):
    if x > 0.0:
        return x
    return slope * x + (1.0 - slope) * math.expm1(x)


def predict(params, x):
    h = smooth_leaky(x @ params["w1"] + params["b1"], params["slope"])
    h = smooth_leaky(h @ params["w2"] + params["b2"], params["slope"])
    return h @ params["w3"] + params["b3"]


def loss(params, x, y):
    return np.mean((predict(params, x) - y) ** 2)


rng = np.random.default_rng(0)
x_train = rng.uniform(-2.0, 2.0, (128, 1))
y_train = np.sin(2.5 * x_train) + 0.3 * x_train ** 2 + 0.05 * rng.standard_normal((128, 1))

width = 32
params = {"w1": rng.normal(0.0, 1.0, (1, width)), "b1": np.zeros(width),
          "w2": rng.normal(0.0, width ** -0.5, (width, width)), "b2": np.zeros(width),
          "w3": rng.normal(0.0, width ** -0.5, (width, 1)), "b3": np.zeros(1),
          "slope": 0.1}

# %%
# Training
# --------
#
# Plain Adam, written out: ``db.value_and_grad`` returns the gradient as a dict
# shaped like ``params`` (the slope's gradient a float).

value_and_grad = db.value_and_grad(loss)
moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
rate, beta1, beta2 = 0.01, 0.9, 0.999
losses = []
for step in range(1, 401):
    value, grads = value_and_grad(params, x_train, y_train)
    losses.append(value)
    for k, g in grads.items():
        m, v = moments[k]
        m, v = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g * g
        moments[k] = m, v
        m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
        params[k] = params[k] - rate * m_hat / (np.sqrt(v_hat) + 1e-8)

print(f"loss {losses[0]:.3f} -> {losses[-1]:.4f}; learned slope {params['slope']:.3f}")
assert losses[-1] < 0.05 * losses[0]

# %%
# The gradient at the trained weights, against central differences of the loss
# along a few random directions in parameter space.

value, grads = value_and_grad(params, x_train, y_train)
eps = 1e-6
for _ in range(3):
    direction = {k: rng.standard_normal(np.shape(v)) for k, v in params.items()}
    shifted = [{k: params[k] + s * eps * direction[k] for k in params} for s in (1, -1)]
    fd = (loss(shifted[0], x_train, y_train)
          - loss(shifted[1], x_train, y_train)) / (2 * eps)
    np.testing.assert_allclose(sum(np.sum(grads[k] * direction[k]) for k in params), fd,
                               rtol=1e-6)

# %%
# The same kernel in PyTorch
# --------------------------
#
# ``dualbcast.torch.wrap`` makes the kernel a ``torch.autograd.Function``.  The
# network is rebuilt from the trained weights twice: with the wrapped kernel, and with
# the activation written in ``torch`` operations; ``torch.autograd`` of both must give
# dualbcast's gradient.

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    import dualbcast.torch

    torch_leaky = dualbcast.torch.wrap(smooth_leaky)

    def native_leaky(z, slope):
        return torch.where(z > 0, z, slope * z + (1 - slope) * torch.expm1(z))

    def torch_gradients(activation):
        p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
             for k, v in params.items()}
        x, y = torch.from_numpy(x_train), torch.from_numpy(y_train)
        h = activation(x @ p["w1"] + p["b1"], p["slope"])
        h = activation(h @ p["w2"] + p["b2"], p["slope"])
        torch.mean((h @ p["w3"] + p["b3"] - y) ** 2).backward()
        return {k: t.grad.numpy() for k, t in p.items()}

    for activation in (torch_leaky, native_leaky):
        torch_grads = torch_gradients(activation)
        for k in params:
            np.testing.assert_allclose(torch_grads[k], grads[k], rtol=1e-10, atol=1e-14)
    print("PyTorch (wrapped kernel and native activation) agrees with dualbcast")

# %%
# The same kernel in JAX
# ----------------------
#
# ``dualbcast.jax.wrap`` makes it a JAX function, usable under ``jax.jit`` and
# ``jax.grad`` (it runs on the host through a callback).  Float64 needs JAX's x64 mode.

try:
    import jax
except ImportError:
    jax = None

if jax is not None:
    import jax.numpy as jnp

    import dualbcast.jax

    jax.config.update("jax_enable_x64", True)
    jax_leaky = dualbcast.jax.wrap(smooth_leaky)

    def native_jax_leaky(z, slope):
        return jnp.where(z > 0, z, slope * z + (1 - slope) * jnp.expm1(z))

    def jax_loss(p, x, y, activation):
        h = activation(x @ p["w1"] + p["b1"], p["slope"])
        h = activation(h @ p["w2"] + p["b2"], p["slope"])
        return jnp.mean((h @ p["w3"] + p["b3"] - y) ** 2)

    for activation in (jax_leaky, native_jax_leaky):
        jax_grad = jax.jit(jax.grad(jax_loss), static_argnums=3)
        jax_grads = jax_grad(params, x_train, y_train, activation)
        for k in params:
            np.testing.assert_allclose(jax_grads[k], grads[k], rtol=1e-10, atol=1e-14)
    print("JAX (wrapped kernel and native activation) agrees with dualbcast")

# %%
# The loss curve and the fit, with the learned activation.

fig, (ax_loss, ax_fit, ax_act) = plt.subplots(1, 3, figsize=(12, 3.5),
                                              constrained_layout=True)
ax_loss.semilogy(losses)
ax_loss.set(xlabel="Adam step", ylabel="mean squared error", title="training loss")

grid = np.linspace(-2.2, 2.2, 200)[:, None]
ax_fit.plot(x_train, y_train, ".", color="0.6", label="data")
ax_fit.plot(grid, np.sin(2.5 * grid) + 0.3 * grid ** 2, "k--", label="truth")
ax_fit.plot(grid, predict(params, grid), label="MLP")
ax_fit.set(xlabel="x", title="fit")
ax_fit.legend()

z = np.linspace(-4.0, 2.0, 200)
ax_act.plot(z, smooth_leaky(z, params["slope"]))
ax_act.set(xlabel="z", title=f"activation, learned slope {params['slope']:.2f}")
