"""Orders counted in the primal (issue 27 item 10): a kernel's outputs are linear in a
tangent (``jvp``) or a cotangent (a gradient's seed), so differentiating with respect
to one asks nothing more of the kernel -- ``grad`` of ``jvp(k.sum, x; t)`` in ``t``
is the gradient (first order), ``d/dv jvp(grad(k.sum), x; v)`` the Hessian (second) --
and a third order in the primal is still refused.

Each program is run three ways: through the kernel (``k(...)``, ``k.sum(...)``),
through the same body written with NumPy operations (dualbcast's NumPy rules), and by
JAX in float64 (the independent oracle)."""
import math

import numpy as np
import pytest

import dualbcast as db


def _body(np_):
    def pair(r, a, b):
        return a * np_.exp(-b * r) - (r * a) ** 3
    return pair


pair = db.fast_broadcast(_body(math))

RNG = np.random.default_rng(2027)
R = RNG.uniform(0.3, 1.5, (3, 1))           # broadcast against A: the kernel's map is (3, 4)
A = RNG.uniform(0.3, 1.5, 4)
B = 1.3
VR, WR = RNG.standard_normal((3, 1)), RNG.standard_normal((3, 1))
VB, WB = 0.7, -0.4
WEIGHTS = RNG.standard_normal((3, 4))       # weights of the map's elements


class Namespace:
    """What a program differentiates with: dualbcast or JAX, the kernel (``k``, its
    sum ``s``) or the same body in NumPy / jax.numpy, and that array module."""

    def __init__(self, grad, jvp, jacobian, hessian, np_, k, s):
        self.grad, self.jvp, self.jacobian, self.hessian = grad, jvp, jacobian, hessian
        self.np, self.k, self.s = np_, k, s


def _namespaces(jax):
    jnp = jax.numpy
    numpy_body, jax_body = _body(np), _body(jnp)
    ours = dict(grad=db.grad, jvp=db.jvp, jacobian=db.jacobian, hessian=db.hessian, np_=np)
    return {
        "kernel": Namespace(**ours, k=pair, s=pair.sum),
        "numpy": Namespace(**ours, k=numpy_body, s=lambda *args: np.sum(numpy_body(*args))),
        "jax": Namespace(jax.grad, jax.jvp, jax.jacfwd, jax.hessian, jnp, jax_body,
                         lambda *args: jnp.sum(jax_body(*args))),
    }


# (name, program(ns)): first order in the primal unless said otherwise.
PROGRAMS = [
    ("grad in the tangent of jvp of a sum",
     lambda ns: ns.grad(lambda t: ns.jvp(lambda r: ns.s(r, A, B), (R,), (t,))[1])(VR)),
    ("grad in the tangent of jvp of a map",
     lambda ns: ns.grad(lambda t: ns.np.sum(
         ns.jvp(lambda r: ns.k(r, A, B), (R,), (t,))[1] * WEIGHTS))(VR)),
    ("grad in the tangents of two arguments, one constant",
     lambda ns: ns.grad(lambda tr, tb: ns.jvp(lambda r, b: ns.s(r, A, b), (R, B), (tr, tb))[1],
                        argnums=(0, 1))(VR, VB)),
    ("grad in the primal and the tangent (second order in the primal)",
     lambda ns: ns.grad(lambda r, t: ns.jvp(lambda r: ns.s(r, A, B), (r,), (t,))[1],
                        argnums=(0, 1))(R, VR)),
    ("grad in the primal and the tangent of a map (second order)",
     lambda ns: ns.grad(lambda r, t: ns.np.sum(
         ns.jvp(lambda r: ns.k(r, A, B), (r,), (t,))[1] * WEIGHTS), argnums=(0, 1))(R, VR)),
    ("Hessian times w: grad in v of jvp of grad (second order)",
     lambda ns: ns.grad(lambda v: ns.np.sum(
         ns.jvp(ns.grad(lambda r: ns.s(r, A, B)), (R,), (v,))[1] * WR))(VR)),
    ("the same through a map (second order)",
     lambda ns: ns.grad(lambda v: ns.np.sum(ns.jvp(
         ns.grad(lambda r: ns.np.sum(ns.k(r, A, B) * WEIGHTS)), (R,), (v,))[1] * WR))(VR)),
    ("grad in a cotangent of grad of grad (second order)",
     lambda ns: ns.grad(lambda u: ns.np.sum(ns.grad(lambda r: ns.np.sum(
         ns.grad(lambda r: ns.s(r, A, B))(r) * u))(R) * WR))(VR)),
    ("jvp in the cotangent of grad of grad, two arguments (second order)",
     lambda ns: ns.jvp(lambda u: ns.grad(lambda r, b: ns.np.sum(
         ns.grad(lambda r, b: ns.s(r, A, b), argnums=(0, 1))(r, b)[0] * u),
         argnums=(0, 1))(R, B), (VR,), (WR,))[1]),
    ("jvp in the tangent of jvp",
     lambda ns: ns.jvp(lambda t: ns.jvp(lambda r: ns.s(r, A, B), (R,), (t,))[1],
                       (VR,), (WR,))[1]),
    ("jvp in the tangents of jvp of grad, two arguments (second order)",
     lambda ns: ns.jvp(lambda vr, vb: ns.jvp(
         ns.grad(lambda r, b: ns.s(r, A, b), argnums=(0, 1)), (R, B), (vr, vb))[1],
         (VR, VB), (WR, WB))[1]),
    ("jacobian in the tangent of jvp of a map",
     lambda ns: ns.jacobian(lambda t: ns.jvp(lambda r: ns.k(r, A, B), (R,), (t,))[1])(VR)),
    ("the Hessian as the jacobian in v of jvp of grad (second order)",
     lambda ns: ns.jacobian(lambda v: ns.jvp(ns.grad(lambda r: ns.s(r, A, B)),
                                             (R,), (v,))[1])(VR)),
    ("hessian in the tangent of jvp squared",
     lambda ns: ns.hessian(lambda t: ns.jvp(lambda r: ns.s(r, A, B), (R,), (t,))[1] ** 2)(VR)),
]


def _leaves(x):
    return [np.asarray(leaf) for leaf in (x if isinstance(x, (tuple, list)) else (x,))]


def _check(got, want, rtol):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("program", [p for _, p in PROGRAMS], ids=[n for n, _ in PROGRAMS])
def test_against_numpy_rules_and_jax(program, jax):
    namespaces = _namespaces(jax)
    got = program(namespaces["kernel"])
    _check(got, program(namespaces["numpy"]), 1e-13)
    _check(got, program(namespaces["jax"]), 1e-12)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobians_in_the_tangent_both_modes(mode):
    # the Hessian of k.sum in r (r a column: its own broadcast), by db.hessian too
    hessian = db.hessian(lambda r: pair.sum(r, A, B))(R)
    got = db.jacobian(lambda v: db.jvp(db.grad(lambda r: pair.sum(r, A, B)), (R,), (v,))[1],
                      mode=mode)(VR)
    np.testing.assert_allclose(got, hessian, rtol=1e-13)
    partials = pair.value_and_partials(R, A, B, wrt=0)[1]           # (3, 4)
    got = db.jacobian(lambda t: db.jvp(lambda r: pair(r, A, B), (R,), (t,))[1], mode=mode)(VR)
    want = np.zeros((3, 4, 3, 1))
    want[np.arange(3), :, np.arange(3), 0] = partials
    np.testing.assert_array_equal(got, want)


def test_the_tangent_enters_through_the_kernels_partials_exactly():
    # grad in t of jvp(k.sum, r; t) is the gradient itself, bit for bit (the sum loop's)
    gradient = db.grad(lambda r: pair.sum(r, A, B))(R)
    np.testing.assert_array_equal(db.grad(lambda t: db.jvp(lambda r: pair.sum(r, A, B),
                                                           (R,), (t,))[1])(VR), gradient)
    # and d/dv of jvp(grad(k.sum), r; v) . 1 the Hessian's row sums
    hessian = db.hessian(lambda r: pair.sum(r, A, B))(R).reshape(3, 3)
    got = db.grad(lambda v: np.sum(db.jvp(db.grad(lambda r: pair.sum(r, A, B)),
                                          (R,), (v,))[1]))(VR)
    np.testing.assert_allclose(got.ravel(), hessian.sum(axis=0), rtol=1e-14)


def test_a_gradient_scaled_by_a_traced_factor():
    # u * k.sum(r): the sum's vjp meets a traced cotangent (it wrote into its buffer)
    for u in (2.0, np.array(2.0)):
        got = db.grad(lambda u: np.sum(db.grad(lambda r: u * pair.sum(r, A, B))(R) * WR))(u)
        want = np.sum(db.grad(lambda r: pair.sum(r, A, B))(R) * WR)
        assert got == pytest.approx(want, rel=1e-14)
        assert type(got) is type(u)
    got = db.jvp(lambda u: db.grad(lambda r: u * pair.sum(r, A, B))(R), (2.0,), (1.5,))[1]
    np.testing.assert_allclose(got, 1.5 * db.grad(lambda r: pair.sum(r, A, B))(R), rtol=1e-14)


def test_scalars():
    # all scalars: the tangent a Python float, its gradient one
    got = db.grad(lambda t: db.jvp(lambda r: pair(r, 0.8, B), (0.9,), (t,))[1])(0.5)
    assert type(got) is float
    assert got == pair.value_and_partials(0.9, 0.8, B, wrt=0)[1]


def test_under_jit():
    def hvp_in_v(r, v):
        return db.grad(lambda v: np.sum(db.jvp(db.grad(lambda r: pair.sum(r, A, B)),
                                               (r,), (v,))[1] * WR))(v)

    def gradient_in_t(r, t):
        return db.grad(lambda t: db.jvp(lambda r: pair.sum(r, A, B), (r,), (t,))[1])(t)

    for f in (hvp_in_v, gradient_in_t):
        jitted = db.jit(f)
        for r in (R, R + 0.25, R):
            np.testing.assert_allclose(jitted(r, VR), f(r, VR), rtol=1e-14)


def test_both_arguments_moving_with_broadcast_tangents():
    # r (3, 1) and a (4,) both moving: tangents smaller than the map (3, 4), gradients
    # and their tangents summed back to each argument's shape
    ta, wa = RNG.standard_normal(4), RNG.standard_normal(4)
    numpy_body = _body(np)

    def programs(k, s):
        gradient = db.grad(lambda tr, ta: db.jvp(lambda r, a: s(r, a, B), (R, A), (tr, ta))[1],
                           argnums=(0, 1))(VR, ta)
        hessian_times = db.grad(lambda tr, ta: sum(np.sum(h * w) for h, w in zip(db.jvp(
            db.grad(lambda r, a: np.sum(k(r, a, B) * r), argnums=(0, 1)), (R, A),
            (tr, ta))[1], (WR, wa))), argnums=(0, 1))(VR, ta)
        return (*gradient, *hessian_times)

    got = programs(pair, pair.sum)
    want = programs(numpy_body, lambda *args: np.sum(numpy_body(*args)))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)


THIRD_ORDER = [
    ("grad of grad of grad", lambda: db.grad(lambda r: np.sum(db.grad(lambda r: np.sum(
        db.grad(lambda r: pair.sum(r, A, B))(r) * WR))(r) * WR))(R)),
    ("grad in the primal of jvp of grad", lambda: db.grad(lambda r: np.sum(
        db.jvp(db.grad(lambda r: pair.sum(r, A, B)), (r,), (VR,))[1] * WR))(R)),
    ("jvp of grad of jvp with the primal as tangent", lambda: db.jvp(db.grad(
        lambda r: db.jvp(lambda r: pair.sum(r, A, B), (r,), (r,))[1]), (R,), (WR,))),
    ("hessian in the primal of jvp", lambda: db.hessian(
        lambda r: db.jvp(lambda r: pair.sum(r, A, B), (r,), (VR,))[1])(R)),
    ("hessian in the primal of a map's jvp", lambda: db.hessian(lambda r: np.sum(
        db.jvp(lambda r: pair(r, A, B), (r,), (VR,))[1] * WEIGHTS))(R)),
]


@pytest.mark.parametrize("program", [p for _, p in THIRD_ORDER], ids=[n for n, _ in THIRD_ORDER])
def test_third_order_in_the_primal_is_still_refused(program):
    with pytest.raises(NotImplementedError, match="third order"):
        program()


def test_the_kernels_own_tangent_methods_refuse_a_traced_tangent_by_name():
    # (they compute on plain arrays; it named the tangent "argument 3 ... a Box")
    calls = [lambda t: pair.jvp(R, A, B, tangents={0: t})[1],
             lambda t: pair.sum_jvp(R, A, B, tangents={0: t})[1],
             lambda t: pair.value_and_partials(R, A, B, wrt=0, tangents={0: t})[3],
             lambda t: pair.sum_and_partials(R, A, B, tangents={0: t})[3]]
    for call in calls:
        with pytest.raises(TypeError, match=r"db\.jvp\(pair, primals, tangents\)"):
            db.grad(lambda t: np.sum(call(t)))(VR)
