r"""
Poisson regression by Newton's method, with standard errors
===========================================================

Daily counts (say, hospital admissions) over three years, with a trend and a yearly
season, modelled as Poisson with a log link:
:math:`y_t \sim \mathrm{Poisson}(\mu_t)`, :math:`\log \mu_t = x_t^\top \beta`.
The negative log-likelihood is a kernel summed over the rows of the linear predictor
``X @ beta``; Newton's method takes its gradient and Hessian from ``db.value_and_grad``
and ``db.hessian``, and the inverse Hessian at the optimum gives the standard errors.
Both derivatives are checked against the closed forms a statistician would write, and
the standard errors against the spread of fits to data simulated from the model (all
the fits at once, with ``db.vmap``).
"""
import math

import matplotlib.pyplot as plt
import numpy as np

import dualbcast as db


@db.fast_broadcast
def poisson_nll(eta, y):
    # -log p(y | mu = exp(eta)), without the constant log(y!)
    return math.exp(eta) - y * eta


def nll(beta, X, y):
    return poisson_nll.sum(X @ beta, y)


# %%
# Data
# ----
# The design matrix: an intercept, a linear trend (per year) and the sine and cosine of
# the day of the year.

days = np.arange(3 * 365)
years = days / 365.0
X = np.column_stack([np.ones_like(years), years - 1.5,
                     np.sin(2 * np.pi * years), np.cos(2 * np.pi * years)])
names = ["intercept", "trend", "sin", "cos"]
beta_true = np.array([2.0, 0.15, 0.3, -0.2])
rng = np.random.default_rng(42)
y = rng.poisson(np.exp(X @ beta_true)).astype(float)

# %%
# Newton's method
# ---------------
# Each step solves :math:`H \, \delta = g`.  The log-likelihood of a log-link Poisson
# model is concave, so from the mean's logarithm as intercept it converges in a few
# steps.

value_and_grad = db.value_and_grad(nll)
hessian = db.hessian(nll)

beta = np.array([np.log(y.mean()), 0.0, 0.0, 0.0])
for iteration in range(1, 21):
    value, g = value_and_grad(beta, X, y)
    step = np.linalg.solve(hessian(beta, X, y), g)
    beta = beta - step
    print(f"iteration {iteration}: nll = {value:.6f}, |step| = {np.abs(step).max():.1e}")
    if np.abs(step).max() < 1e-10:
        break

# %%
# Checks against the closed forms
# -------------------------------
# With :math:`\mu = \exp(X\beta)`, the gradient is :math:`X^\top(\mu - y)` and the
# Hessian :math:`X^\top \mathrm{diag}(\mu) X`: compared at the optimum and at a point
# away from it.

for point in (beta, beta + rng.normal(0.0, 0.1, beta.shape)):
    mu = np.exp(X @ point)
    np.testing.assert_allclose(db.grad(nll)(point, X, y), X.T @ (mu - y),
                               rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(hessian(point, X, y), X.T @ (mu[:, None] * X), rtol=1e-10)
value, g = value_and_grad(beta, X, y)
assert np.abs(g).max() < 1e-8                  # a stationary point...
H = hessian(beta, X, y)
assert np.all(np.linalg.eigvalsh(H) > 0)       # ...and a minimum

# %%
# Standard errors
# ---------------
# The inverse of the Hessian of the negative log-likelihood (the observed Fisher
# information) is the estimate's asymptotic covariance.

covariance = np.linalg.inv(H)
se = np.sqrt(np.diag(covariance))
print(f"{'':>10} {'estimate':>9} {'SE':>7} {'truth':>6}")
for name, b, s, t in zip(names, beta, se, beta_true):
    print(f"{name:>10} {b:9.4f} {s:7.4f} {t:6.2f}")
assert np.all(np.abs(beta - beta_true) < 3 * se)

# %%
# Do they hold? Refit 200 data sets simulated from the fitted model: the estimates'
# spread should match the standard errors.  ``db.vmap`` runs the Newton step written
# for one data set over all of them in one pass (a batch of 200 Hessians and solves).

def newton_step(b, y):
    return b - np.linalg.solve(db.hessian(nll)(b, X, y), db.grad(nll)(b, X, y))


batch_step = db.vmap(newton_step)
simulated = rng.poisson(np.exp(X @ beta), size=(200, len(y))).astype(float)
refits = np.tile(beta, (200, 1))
for _ in range(8):
    refits = batch_step(refits, simulated)
np.testing.assert_allclose(batch_step(refits, simulated), refits, atol=1e-9)   # converged
np.testing.assert_allclose(newton_step(refits[7], simulated[7]), refits[7], atol=1e-9)
spread = refits.std(axis=0, ddof=1)
print("spread of the refits / SE:", np.round(spread / se, 3))
np.testing.assert_allclose(spread, se, rtol=0.2)

# %%
# The fitted rate with a 95% band over the counts,
# :math:`\exp(x_t^\top\hat\beta \pm 1.96\,s_t)` with :math:`s_t^2 = x_t^\top \Sigma\, x_t`
# (:math:`\Sigma` the inverse Hessian); and the coefficients' :math:`\pm 1.96`
# standard errors beside the refits and the values that generated the data.

eta = X @ beta
eta_se = np.sqrt(np.einsum("ij,jk,ik->i", X, covariance, X))
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2),
                                  gridspec_kw={"width_ratios": [2.2, 1]})
left.plot(days, y, ".", color="grey", markersize=2, label="counts")
left.plot(days, np.exp(eta), color="C0", label="fitted rate")
left.fill_between(days, np.exp(eta - 1.96 * eta_se), np.exp(eta + 1.96 * eta_se),
                  color="C0", alpha=0.3, label="95% band")
left.plot(days, np.exp(X @ beta_true), "--", color="C3", linewidth=1, label="true rate")
left.set_xlabel("day")
left.set_ylabel("count per day")
left.legend(loc="upper left", ncol=2)

position = np.arange(len(names))
jitter = rng.uniform(-0.15, 0.15, refits.shape)
right.plot((refits - beta).ravel(), (position + jitter).ravel(), ".", color="grey",
           markersize=2, label="refits to simulated data")
right.errorbar(np.zeros(len(names)), position, xerr=1.96 * se, fmt="o", capsize=5,
               label=r"$\pm 1.96$ SE")
right.plot(beta_true - beta, position, "x", color="C3", markersize=9, label="truth")
right.set_yticks(position, names)
right.invert_yaxis()
right.set_xlabel(r"coefficient minus $\hat\beta$")
right.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize="small")
fig.tight_layout()
plt.show()
