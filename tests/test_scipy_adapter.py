"""``dualbcast.scipy.objective`` (issue 17): ``scipy.optimize.minimize`` with ``jac=True``
and ``hessp`` on dualbcast gradients, against autograd's gradients and Hessian-vector
products (an independent oracle) and central differences.

The trap it exists for: ``db.value_and_grad(f, out=buf)`` returns ``buf`` on every call,
BFGS keeps the previous gradient to difference it with the next, and gets zero.  The
runs below are deterministic (SciPy's optimisers draw no random numbers; the arithmetic
is the same on every run), so iteration counts are asserted exactly where the
gradients agree to the last bit (first-order methods on Rosenbrock's function: the
same NumPy operations both ways) and to a few iterations where only rounding agrees (a
kernel's sum, the Hessian-vector products)."""
import math

import numpy as np
import pytest

scipy = pytest.importorskip("scipy")
autograd = pytest.importorskip("autograd")

import autograd.numpy as anp                    # noqa: E402
from scipy.optimize import check_grad, minimize  # noqa: E402

import dualbcast as db                          # noqa: E402
import dualbcast.scipy as dbs                   # noqa: E402

FIRST_ORDER = ["BFGS", "L-BFGS-B", "CG"]
SECOND_ORDER = ["trust-ncg", "trust-krylov", "Newton-CG"]


def rosen(x, np=np):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


@db.fast_broadcast
def well(x, c):
    d = x - c
    if d > 0.0:                                 # steeper on one side (C1, not C2)
        return d * d * (1.0 + d)
    return d * d * (1.0 + 0.5 * d * d)


def energy(x, c, w, np=np, sum_of_well=well.sum):
    """A kernel with a branch, summed by ``k.sum``, and NumPy coupling neighbours."""
    return sum_of_well(x, c) + w * np.sum((x[1:] - x[:-1]) ** 2)


def well_autograd(x, c):
    d = x - c
    return anp.sum(anp.where(d > 0.0, d * d * (1.0 + d), d * d * (1.0 + 0.5 * d * d)))


def energy_autograd(x, c, w):
    return energy(x, c, w, anp, well_autograd)


N_ROSEN, N_ENERGY = 30, 100
X0_ROSEN = np.linspace(-1.5, 1.5, N_ROSEN)
C = np.random.default_rng(17).uniform(-2.0, 2.0, N_ENERGY)
ARGS = (C, 5.0)
X0_ENERGY = np.zeros(N_ENERGY)

PROBLEMS = {    # name: (dualbcast's f, autograd's f, x0, args)
    "rosen": (rosen, lambda x: rosen(x, anp), X0_ROSEN, ()),
    "energy": (energy, energy_autograd, X0_ENERGY, ARGS),
}

_autograd_runs = {}


def autograd_run(problem, method):
    """The same minimisation on autograd's value_and_grad and hvp (computed once)."""
    key = (problem, method)
    if key not in _autograd_runs:
        _, f, x0, args = PROBLEMS[problem]
        hvp = autograd.hessian_vector_product(f)        # hvp(x, *args, p)
        extra = {} if method in FIRST_ORDER else \
            {"hessp": lambda x, p, *args: hvp(x, *args, p)}
        _autograd_runs[key] = minimize(autograd.value_and_grad(f), x0, args=args,
                                       jac=True, method=method, **extra)
    return _autograd_runs[key]


_our_runs = {}


def our_run(problem, method, jit):
    """The minimisation through ``dualbcast.scipy.objective`` (computed once)."""
    key = (problem, method, jit)
    if key not in _our_runs:
        f, _, x0, args = PROBLEMS[problem]
        obj = dbs.objective(f, jit=jit)
        extra = {} if method in FIRST_ORDER else {"hessp": obj.hessp}
        _our_runs[key] = minimize(obj, x0, args=args, jac=True, method=method, **extra)
    return _our_runs[key]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("problem, method", [
    ("rosen", "BFGS"), ("rosen", "CG"),     # (L-BFGS-B: the energy's, below)
    *[("rosen", m) for m in SECOND_ORDER],
    *[("energy", m) for m in FIRST_ORDER + SECOND_ORDER]])
def test_minimize_as_autograd_does(problem, method, jit):
    ours, theirs = our_run(problem, method, jit), autograd_run(problem, method)
    assert ours.success and theirs.success
    if problem == "rosen" and method in FIRST_ORDER:
        # NumPy operations both ways: the same gradients, bit for bit, the same run
        assert (ours.nit, ours.nfev) == (theirs.nit, theirs.nfev)
        np.testing.assert_array_equal(ours.x, theirs.x)
    else:   # a kernel's sum, Hessian-vector products: equal to rounding, nearly the same
        assert abs(ours.nit - theirs.nit) <= max(2, theirs.nit // 20)
        np.testing.assert_allclose(ours.x, theirs.x, rtol=0, atol=1e-6)
    if problem == "rosen" and method != "Newton-CG":    # (Newton-CG stops at xtol)
        np.testing.assert_allclose(ours.x, 1.0, atol=1e-4)
    if jit:     # db.jit gives the eager bits: the same steps
        eager = our_run(problem, method, False)
        assert (ours.nit, ours.nfev) == (eager.nit, eager.nfev)
        np.testing.assert_array_equal(ours.x, eager.x)


def test_the_trap_out_buffer_and_the_helper():
    """``out=buf`` hands BFGS the same array every call: it differences a gradient with
    itself and never converges (deterministically: the same wrong run every time);
    the helper takes exactly autograd's path."""
    buf = np.empty(N_ROSEN)
    raw = db.value_and_grad(rosen, out=buf)
    assert raw(X0_ROSEN)[1] is raw(X0_ROSEN + 1.0)[1] is buf        # as documented
    options = {"maxiter": 500}
    trapped = [minimize(raw, X0_ROSEN, jac=True, method="BFGS", options=options)
               for _ in range(2)]
    helped = minimize(dbs.objective(rosen), X0_ROSEN, jac=True, method="BFGS",
                      options=options)
    theirs = autograd_run("rosen", "BFGS")
    assert helped.success and helped.nit == theirs.nit < 500
    assert not trapped[0].success and trapped[0].nit == 500 and trapped[0].fun > 1.0
    assert trapped[0].nit == trapped[1].nit and trapped[0].fun == trapped[1].fun
    np.testing.assert_array_equal(trapped[0].x, trapped[1].x)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_each_call_hands_out_new_arrays(jit):
    obj = dbs.objective(energy, jit=jit)
    x = np.linspace(-1.0, 1.0, N_ENERGY)
    calls = [obj(x + 0.1 * i, *ARGS) for i in range(4)]    # (a jit traces, then replays)
    first = calls[0][1].copy()
    for value, g in calls:
        assert type(value) is float
        assert type(g) is np.ndarray and g.dtype == np.float64 and g.shape == (N_ENERGY,)
        assert g.flags.writeable and g.flags.c_contiguous
    gradients = [g for _, g in calls]
    assert not any(np.shares_memory(a, b) for i, a in enumerate(gradients)
                   for b in gradients[i + 1:])
    np.testing.assert_array_equal(calls[0][1], first)           # unchanged by later calls
    products = [obj.hessp(x, np.full(N_ENERGY, float(i)), *ARGS) for i in range(3)]
    assert not any(np.shares_memory(a, b) for i, a in enumerate(products)
                   for b in products[i + 1:])
    assert all(p.flags.writeable and p.shape == (N_ENERGY,) for p in products)
    jacs = [obj.jac(x, *ARGS) for _ in range(2)]
    assert not np.shares_memory(*jacs)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_hessp_against_autograd_and_central_differences(problem, jit):
    f, f_autograd, x0, args = PROBLEMS[problem]
    obj = dbs.objective(f, jit=jit)
    rng = np.random.default_rng(3)
    hvp_autograd = autograd.hessian_vector_product(f_autograd)
    h = 1e-6
    for _ in range(3):
        x = x0 + rng.uniform(-0.5, 0.5, x0.size)
        p = rng.standard_normal(x0.size)
        got = obj.hessp(x, p, *args)
        np.testing.assert_allclose(got, hvp_autograd(x, *args, p), rtol=1e-12, atol=1e-10)
        central = (obj(x + h * p, *args)[1] - obj(x - h * p, *args)[1]) / (2 * h)
        np.testing.assert_allclose(got, central, rtol=1e-5, atol=1e-4)
        value, g = obj(x, *args)
        value_autograd, g_autograd = autograd.value_and_grad(f_autograd)(x, *args)
        assert value == pytest.approx(value_autograd, rel=1e-14)
        np.testing.assert_allclose(g, g_autograd, rtol=1e-13, atol=1e-12)


def test_jit_gives_the_eager_bits():
    eager, jitted = dbs.objective(energy), dbs.objective(energy, jit=True)
    rng = np.random.default_rng(5)
    for _ in range(4):                  # trace, then replays (generated, fused)
        x, p = rng.uniform(-2.0, 2.0, N_ENERGY), rng.standard_normal(N_ENERGY)
        (v_e, g_e), (v_j, g_j) = eager(x, *ARGS), jitted(x, *ARGS)
        assert v_e == v_j
        np.testing.assert_array_equal(g_j, g_e)
        np.testing.assert_array_equal(jitted.jac(x, *ARGS), g_e)
        np.testing.assert_array_equal(jitted.hessp(x, p, *ARGS), eager.hessp(x, p, *ARGS))
        assert jitted.fun(x, *ARGS) == eager.fun(x, *ARGS) == v_e


def test_jit_records_once_and_replays():
    runs = []

    def counted(x, c, w):
        runs.append(1)                  # a side effect: it happens when f runs
        return energy(x, c, w)
    obj = dbs.objective(counted, jit=True)
    res = minimize(obj, X0_ENERGY, args=ARGS, jac=True, method="L-BFGS-B")
    assert res.success and res.nfev > 10
    assert len(runs) == 1               # traced once, the rest replayed
    # args are part of a replay's signature: new values (or an array changed in
    # place) give what the eager objective gives
    c2 = C.copy()
    c2[:10] += 1.0
    eager = dbs.objective(energy)
    assert obj(res.x, c2, 5.0)[0] == eager(res.x, c2, 5.0)[0]
    assert obj(res.x, C, 7.0)[0] == eager(res.x, C, 7.0)[0]
    c2[:10] -= 3.0
    assert obj(res.x, c2, 5.0)[0] == eager(res.x, c2, 5.0)[0]


def test_shape_and_args():
    """``f`` of a matrix; ``args`` passed through (never differentiated)."""
    a = np.random.default_rng(7).standard_normal((6, 4))
    target = np.linspace(-1.0, 1.0, 6 * 3).reshape(6, 3)

    def fit(w, a, target, np=np, sum_of_well=well.sum):    # w: (4, 3)
        r = a @ w - target
        return np.sum(r * r) + sum_of_well(w, 0.25)

    def fit_autograd(w, a, target):
        return fit(w, a, target, anp, lambda x, c: well_autograd(x, c))
    obj = dbs.objective(fit, shape=(4, 3))
    assert obj.shape == (4, 3)
    flat = np.zeros(12)
    value, g = obj(flat, a, target)
    value_autograd, g_autograd = autograd.value_and_grad(fit_autograd)(
        flat.reshape(4, 3), a, target)
    assert value == pytest.approx(value_autograd, rel=1e-14)
    np.testing.assert_allclose(g, g_autograd.ravel(), rtol=1e-13)
    ours = minimize(obj, flat, args=(a, target), jac=True, hessp=obj.hessp,
                    method="trust-krylov")
    theirs = minimize(autograd.value_and_grad(lambda w, *args: fit_autograd(
                          w.reshape(4, 3), *args)),
                      flat, args=(a, target), jac=True, method="BFGS", tol=1e-10)
    assert ours.success and theirs.success
    np.testing.assert_allclose(ours.x, theirs.x, atol=1e-6)
    assert check_grad(obj.fun, obj.jac, ours.x + 0.1, a, target) < 1e-5


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_hess_against_autograd(problem):
    f, f_autograd, x0, args = PROBLEMS[problem]
    obj = dbs.objective(f)
    x = x0 + 0.3
    h = obj.hess(x, *args)
    assert h.shape == (x0.size, x0.size) and h.dtype == np.float64
    np.testing.assert_allclose(h, autograd.hessian(f_autograd)(x, *args), rtol=1e-12,
                               atol=1e-10)
    if problem == "rosen":
        ours = minimize(obj, x0, jac=True, hess=obj.hess, method="trust-exact")
        theirs = minimize(autograd.value_and_grad(f_autograd), x0, jac=True,
                          hess=autograd.hessian(f_autograd), method="trust-exact")
        assert ours.success and abs(ours.nit - theirs.nit) <= 2
        np.testing.assert_allclose(ours.x, 1.0, atol=1e-6)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_bad_input_is_refused_clearly(jit):
    runs = []

    def f(x):
        runs.append(1)
        return np.sum(x * x)
    obj = dbs.objective(f, shape=(2, 3), jit=jit)
    with pytest.raises(ValueError, match=r"x has 5 elements .* takes shape \(2, 3\)"):
        obj(np.ones(5))
    with pytest.raises(ValueError, match=r"p has 7 elements"):
        obj.hessp(np.ones(6), np.ones(7))
    with pytest.raises(ValueError, match=r"x has 5 elements"):
        obj.fun(np.ones(5))
    with pytest.raises(TypeError, match="complex"):
        obj(np.ones(6, complex))
    assert runs == []                   # refused before f ran
    np.testing.assert_array_equal(obj(np.arange(6))[1], 2.0 * np.arange(6.0))  # ints: floats

    vector_valued = dbs.objective(lambda x: x * x, jit=jit)
    for call in (vector_valued, vector_valued.fun, vector_valued.jac):
        with pytest.raises(TypeError, match="scalar"):
            call(np.ones(3))
    with pytest.raises(TypeError, match="scalar"):
        vector_valued.hessp(np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match="function"):
        dbs.objective(np.ones(3))
    with pytest.raises(TypeError, match="tuple of ints"):
        dbs.objective(np.sum, shape=(2.5, 1))
    with pytest.raises(ValueError, match="negative"):
        dbs.objective(np.sum, shape=(-1, 3))
    assert dbs.objective(np.sum, shape=4).shape == (4,)


def test_the_helper_imports_no_scipy_optimize():
    """(Numba imports scipy.linalg when SciPy is installed; the helper nothing of it.)"""
    import subprocess
    import sys
    code = ("import sys, dualbcast.scipy, numpy as np; "
            "dualbcast.scipy.objective(lambda x: np.sum(x * x))(np.ones(2)); "
            "assert 'scipy.optimize' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float_value_of_a_python_scalar_function():
    value, g = dbs.objective(lambda x: 3)(np.ones(2))      # a constant: zero gradient
    assert type(value) is float and value == 3.0
    np.testing.assert_array_equal(g, [0.0, 0.0])
    assert math.isclose(dbs.objective(lambda x: x[0] * 2.0)(np.ones(1))[0], 2.0)
