"""dualbcast.jax (issue 17, item 2): a custom activation's sum and its gradient under
``jax.jit``, through ``dualbcast.jax.wrap`` (one kernel loop, ``sum_and_partials``, in
a ``jax.pure_callback``) beside the same activation written in ``jax.numpy``.

``JaxAdapterTimes`` times each system alone; ``JaxAdapterRatio`` reports ours over
jax.numpy's, both timed in turns in the same process (the number to read on a noisy
machine).  Skipped where JAX is not installed.
"""
import math

import numpy as np

import dualbcast as db

from .bench_kernels import best_in_turns
from .gradients import _peer

SIZES = [10 ** 4, 10 ** 6]
SYSTEMS = ["dualbcast.jax", "jax.numpy"]


@db.fast_broadcast
def smooth_leaky(x, alpha):
    # A leaky ReLU with an exponential knee: at 0 the value is 0 and the slope 1 on
    # both sides.
    if x > 0.0:
        return x
    return alpha * x + (1.0 - alpha) * math.expm1(x)


def smooth_leaky_jnp(x, alpha, jnp):
    return jnp.where(x > 0.0, x, alpha * x + (1.0 - alpha) * jnp.expm1(x))


def make_call(system, n):
    """``jit(value_and_grad(sum of the activation))`` at ``n`` float64 elements, called
    once (compiled), as a call that waits for its result."""
    jax = _peer("jax")          # NotImplementedError (asv skips) without JAX; float64
    import dualbcast.jax
    jnp = jax.numpy
    x = jnp.asarray(np.random.default_rng(0).normal(size=n))
    if system == "dualbcast.jax":
        op = dualbcast.jax.wrap(smooth_leaky)
        loss = lambda x: op.sum(x, 0.1)
    else:
        loss = lambda x: jnp.sum(smooth_leaky_jnp(x, 0.1, jnp))
    value_and_grad = jax.jit(jax.value_and_grad(loss))
    call = lambda: jax.block_until_ready(value_and_grad(x))
    call()
    return call


class JaxAdapterTimes:
    params = (SYSTEMS, SIZES)
    param_names = ["system", "n"]

    def setup(self, system, n):
        self.call = make_call(system, n)

    def time_value_and_grad(self, system, n):
        self.call()


class JaxAdapterRatio:
    """dualbcast.jax over jax.numpy, both under jax.jit, timed in turns."""
    params = SIZES
    param_names = ["n"]

    def setup(self, n):
        self.ours, self.jnp = make_call("dualbcast.jax", n), make_call("jax.numpy", n)
        (value, grad), (want_value, want_grad) = self.ours(), self.jnp()
        np.testing.assert_allclose(value, want_value, rtol=1e-9)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12)

    def track_ratio(self, n):
        ours, theirs = best_in_turns(self.ours, self.jnp)
        return ours / theirs

    track_ratio.unit = "dualbcast.jax/jax.numpy"
