"""Batches of derivatives beside JAX's, in one process, medians of calls timed in turns
(issue 30), dualbcast on one thread:

- per-example gradients of a small MLP with a custom activation (a kernel), batch 256:
  ``db.vmap(db.grad(loss), in_axes=(None, 0, 0))``, eager and under ``db.jit``, against
  ``jax.jit(jax.vmap(jax.grad(loss), ...))``;
- the 9 x 9 Hessian of a logistic regression's likelihood over 10^5 rows, written two
  ways: with a design matrix (``k.sum(b0 + X @ b, y)``) and with the nine coefficients
  as arguments of one kernel (``k.sum(y, x1, ..., x8, b0, ..., b8)``), eager and under
  ``db.jit``, against ``jax.jit(jax.hessian(...))``; and its first call in a fresh process with an empty
  compile cache, beside JAX's;
- the N x 6 Jacobian of a kernel model's residuals over 10^5 points (what
  ``scipy.optimize.least_squares`` asks for), ``db.jacfwd`` against
  ``jax.jit(jax.jacfwd(...))``.

The Lennard-Jones Hessian is in ``bench_higher_order``.  JAX not installed: skipped
(``NotImplementedError``)."""
import math

import numpy as np

import dualbcast as db

from .bench_first_gradient import SCRIPTS, median_seconds
from .gradients import _peer, warmed_up
from .machine_load import medians_in_turns


class _OneThread:
    """dualbcast on one thread during the timing (JAX's own threads as they come)."""

    def _one_thread(self):
        self._threads = db.config.threads
        db.config.threads = 1

    def teardown(self, *params):
        db.config.threads = getattr(self, "_threads", db.config.threads)


# --- per-example gradients -------------------------------------------------------------

@db.fast_broadcast
def swish(x):
    return x / (1.0 + math.exp(-x))


def mlp_loss(params, x, y, act, xp):
    hidden = act(x @ params["w1"] + params["b1"])
    return xp.sum((hidden @ params["w2"] - y) ** 2)


def per_example_gradients(system, batch):
    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(8, 32)) / 3, "b1": np.zeros(32),
              "w2": rng.normal(size=(32, 4)) / 6}
    X, Y = rng.normal(size=(batch, 8)), rng.normal(size=(batch, 4))
    if system in ("dualbcast", "dualbcast_jit"):
        grads = db.vmap(db.grad(lambda p, x, y: mlp_loss(p, x, y, swish, np)),
                        in_axes=(None, 0, 0))
        if system == "dualbcast_jit":
            grads = db.jit(grads)
        return lambda: grads(params, X, Y)
    jax = _peer("jax")
    jnp = jax.numpy
    grads = jax.jit(jax.vmap(jax.grad(lambda p, x, y: mlp_loss(p, x, y, jax.nn.silu, jnp)),
                             in_axes=(None, 0, 0)))
    args = jax.tree_util.tree_map(jnp.asarray, (params, X, Y))
    return lambda: jax.block_until_ready(grads(*args))


class PerExampleGradientsJax(_OneThread):
    params = [[256], ["dualbcast", "dualbcast_jit"]]
    param_names = ["batch", "system"]

    def setup(self, batch, system):
        self._one_thread()
        self.theirs = per_example_gradients("jax", batch)
        self.ours = warmed_up(per_example_gradients(system, batch), system)
        ours, theirs = self.ours(), self.theirs()
        for key in ours:
            np.testing.assert_allclose(ours[key], np.asarray(theirs[key]), rtol=1e-8,
                                       atol=1e-10)

    def track_ratio(self, batch, system):
        ours, theirs = medians_in_turns(self.ours, self.theirs)
        return ours / theirs

    track_ratio.unit = "dualbcast/jax"


# --- a regression Hessian ---------------------------------------------------------------

@db.fast_broadcast
def logistic(eta, y):
    return math.log1p(math.exp(eta)) - y * eta


@db.fast_broadcast
def logistic_nine(y, x1, x2, x3, x4, x5, x6, x7, x8, b0, b1, b2, b3, b4, b5, b6, b7, b8):
    eta = (b0 + b1 * x1 + b2 * x2 + b3 * x3 + b4 * x4 + b5 * x5 + b6 * x6 + b7 * x7
           + b8 * x8)
    return math.log1p(math.exp(eta)) - y * eta


def regression_data(rows=10 ** 5):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 8))
    y = (rng.uniform(size=rows) < 0.5).astype(float)
    return X, y, rng.normal(size=9) * 0.3


def regression_hessian(system, form, rows=10 ** 5):
    """A call computing the Hessian, with its data made once."""
    X, y, beta = regression_data(rows)
    if system in ("dualbcast", "dualbcast_jit"):
        if form == "design_matrix":
            hessian = db.hessian(lambda b: logistic.sum(b[0] + X @ b[1:], y))
        else:
            columns = tuple(np.ascontiguousarray(X.T))
            hessian = db.hessian(lambda b: logistic_nine.sum(y, *columns, *b))
        if system == "dualbcast_jit":
            hessian = db.jit(hessian)
        return lambda: hessian(beta)
    jax = _peer("jax")
    jnp = jax.numpy
    Xj, yj = jnp.asarray(X), jnp.asarray(y)

    def nll(b):
        eta = b[0] + Xj @ b[1:]
        return jnp.sum(jnp.log1p(jnp.exp(eta)) - yj * eta)
    hessian = jax.jit(jax.hessian(nll))
    bj = jnp.asarray(beta)
    return lambda: hessian(bj).block_until_ready()


class RegressionHessianJax(_OneThread):
    params = [["design_matrix", "nine_arguments"], ["dualbcast", "dualbcast_jit"]]
    param_names = ["form", "system"]

    def setup(self, form, system):
        self._one_thread()
        self.theirs = regression_hessian("jax", form)
        self.ours = warmed_up(regression_hessian(system, form), system)
        np.testing.assert_allclose(self.ours(), np.asarray(self.theirs()), rtol=1e-9)

    def track_ratio(self, form, system):
        ours, theirs = medians_in_turns(self.ours, self.theirs)
        return ours / theirs

    track_ratio.unit = "dualbcast/jax"


SCRIPTS.update({
    "dualbcast_regression_hessian": """
        import dualbcast as db
        db.config.threads = 1
        from benchmarks.bench_batching import regression_hessian
        hessian = regression_hessian("dualbcast", "nine_arguments")
        start = time.perf_counter()
        hessian()
    """,
    "dualbcast_regression_hessian_design": """
        import dualbcast as db
        db.config.threads = 1
        from benchmarks.bench_batching import regression_hessian
        hessian = regression_hessian("dualbcast", "design_matrix")
        start = time.perf_counter()
        hessian()
    """,
    "jax_regression_hessian": """
        try:
            import jax
        except ImportError:
            print(json.dumps(None))
            raise SystemExit
        from benchmarks.bench_batching import regression_hessian
        hessian = regression_hessian("jax", None)
        start = time.perf_counter()
        hessian()
    """,
})


class RegressionHessianFirstCall:
    """Seconds to the first Hessian in a fresh process with an empty compile cache (the
    median of three processes), dualbcast's two forms and JAX's jit."""
    params = [["dualbcast_regression_hessian", "dualbcast_regression_hessian_design",
               "jax_regression_hessian"]]
    param_names = ["system"]
    timeout = 600

    def track_seconds(self, system):
        return median_seconds(system, warm=False)

    track_seconds.unit = "seconds"


# --- a least-squares Jacobian -------------------------------------------------------------

@db.fast_broadcast
def damped_wave(t, amplitude, decay, frequency, phase, offset, slope):
    return amplitude * math.exp(-decay * t) * math.cos(frequency * t + phase) + offset \
        + slope * t


def _damped_wave_jax(jnp, t, p):
    amplitude, decay, frequency, phase, offset, slope = p
    return amplitude * jnp.exp(-decay * t) * jnp.cos(frequency * t + phase) + offset \
        + slope * t


def least_squares_jacobian(system, points=10 ** 5):
    t = np.linspace(0.0, 10.0, points)
    p = np.array([1.5, 0.3, 2.0, 0.1, -0.2, 0.05])
    data = damped_wave(t, *p) + np.random.default_rng(0).normal(scale=0.01, size=points)
    if system == "dualbcast":
        jacobian = db.jacfwd(lambda p: damped_wave(t, *p) - data)
        return lambda: jacobian(p)
    jax = _peer("jax")
    jnp = jax.numpy
    tj, dj = jnp.asarray(t), jnp.asarray(data)
    jacobian = jax.jit(jax.jacfwd(lambda p: _damped_wave_jax(jnp, tj, p) - dj))
    pj = jnp.asarray(p)
    return lambda: jacobian(pj).block_until_ready()


class LeastSquaresJacobianJax(_OneThread):
    params = [10 ** 5]
    param_names = ["points"]

    def setup(self, points):
        self._one_thread()
        self.theirs = least_squares_jacobian("jax", points)
        self.ours = least_squares_jacobian("dualbcast", points)
        np.testing.assert_allclose(self.ours(), np.asarray(self.theirs()), rtol=1e-9,
                                   atol=1e-12)

    def track_ratio(self, points):
        ours, theirs = medians_in_turns(self.ours, self.theirs)
        return ours / theirs

    track_ratio.unit = "dualbcast/jax"
