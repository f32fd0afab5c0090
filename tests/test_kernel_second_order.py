"""Second order in the kernel layer (issue 15 item 3): the tangent modes of a kernel
(``k.jvp``, ``k.sum_jvp``, ``tangents=`` on ``value_and_partials`` and
``sum_and_partials``, and ``kernel._prepare("tangent" | "sum_tangent" |
"partials_tangent" | "sum_partials_tangent", ...)`` as the core calls them).

Oracles: central differences of the first partials (``value_and_partials``), autograd
(Hessian-vector products by reverse over reverse, elementwise second derivatives),
closed forms, and the conventions of design.md section 4 at singular points, exactly.
Kernels are shared between tests: compiling dominates the run time."""
import math
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbcast as db
from profiles import examples
from selector_kernels import selector

# --------------------------------------------------------------------------- every function

# Expressions of x (in their domain for x in X), one branch each of one kernel: one
# compile per mode covers every rule.
UNARY = [
    "math.exp(x)", "math.expm1(x)", "math.log(x)", "math.log1p(x)", "math.log2(x)",
    "math.log10(x)", "math.sqrt(x)", "math.sin(x)", "math.cos(x)", "math.tan(x)",
    "math.asin(0.3 * x)", "math.acos(0.3 * x)", "math.atan(x)", "math.sinh(x)",
    "math.cosh(x)", "math.tanh(x)", "math.asinh(x)", "math.acosh(x + 1.5)",
    "math.atanh(0.3 * x)", "math.erf(x)", "math.erfc(x)", "math.fabs(x - 1.0)",
    "abs(x - 1.0)", "math.exp2(x)", "math.cbrt(x)", "math.gamma(x)", "math.lgamma(x)",
    "math.degrees(x)", "math.radians(x)", "math.floor(x) * x", "math.ceil(x) * x",
    "math.trunc(x) * x", "math.pow(x, 2.5)", "math.pow(2.0, x)", "x ** 3", "x ** -2",
    "x ** 0.5", "1.0 / x", "math.atan2(x, 2.0)", "math.atan2(2.0, x)",
    "math.hypot(x, 2.0)", "math.hypot(x, 2.0, 3.0)", "math.copysign(x, -1.0) * x",
    "math.fmod(x, 0.3) * x", "math.fmod(2.5, x)", "math.remainder(x, 0.3) * x",
    "math.remainder(2.5, x)", "math.log(x, 3.0)", "math.log(2.0, x + 1.0)",
    "math.ldexp(x, 3) * x", "(x % 0.3) * x", "2.5 % x", "(2.5 // x) * x",
    "max(x, 1.0) * x", "min(x, 1.0) * x", "math.isnan(x) + x * x",
    "np.exp(x)", "np.exp2(x)", "np.expm1(x)", "np.log(x)", "np.log2(x)", "np.log10(x)",
    "np.log1p(x)", "np.sqrt(x)", "np.cbrt(x)", "np.sin(x)", "np.cos(x)", "np.tan(x)",
    "np.arcsin(0.3 * x)", "np.arccos(0.3 * x)", "np.arctan(x)", "np.sinh(x)",
    "np.cosh(x)", "np.tanh(x)", "np.arcsinh(x)", "np.arccosh(x + 1.5)",
    "np.arctanh(0.3 * x)", "np.fabs(x - 1.0) * x", "np.absolute(x - 1.0) * x",
    "np.deg2rad(x) * x", "np.radians(x) * x", "np.rad2deg(x) * x", "np.degrees(x) * x",
    "np.square(x) * x", "np.negative(x) * x", "np.positive(x) * x", "np.reciprocal(x)",
    "np.power(x, 2.5)", "np.power(x, 3)", "np.float_power(x, 1.5)", "np.arctan2(x, 2.0)",
    "np.hypot(x, 2.0)", "np.copysign(x, -1.0) * x", "np.fmod(2.5, x)",
    "np.remainder(2.5, x)", "np.floor_divide(2.5, x) * x", "np.maximum(x, 1.0) * x",
    "np.minimum(x, 1.0) * x", "np.add(x, x) * x", "np.subtract(x, 2.0) * x",
    "np.multiply(x, x) * x", "np.true_divide(1.0, x) * x * x", "np.floor(x) * x",
    "np.ceil(x) * x", "np.trunc(x) * x", "np.sign(x - 1.0) * x * x", "np.rint(x) * x",
]
# Functions of (x, y) whose Hessian is checked in both arguments.
BINARY = [
    "math.pow(x, y)", "x ** y", "math.atan2(x, y)", "math.hypot(x, y)",
    "math.hypot(x, y, x * y)", "math.copysign(x * x, y - 1.0)", "math.fmod(x, y)",
    "math.remainder(x, y)", "math.log(x, y + 1.0)", "x % y", "x / y", "x * y * y",
    "max(x, y) * y", "min(x, y) * x", "np.power(x, y)", "np.arctan2(x, y)",
    "np.hypot(x, y)", "np.maximum(x, y) * x", "np.minimum(x, y) * y", "np.fmod(x, y)",
    "np.remainder(x, y)", "math.exp(x * y) / (1.0 + y)", "math.sin(x) * math.cos(y)",
    "math.sqrt(x * x + y * y)", "math.tanh(x - y) * math.log1p(x * y)",
]
X = np.array([0.35, 0.7, 1.3, 2.2])
Y = np.array([0.6, 1.1, 0.45, 1.7])


UNARY_PY = selector("unary", UNARY, ["x"])
BINARY_PY = selector("binary", BINARY, ["x", "y"])
unary = db.fast_broadcast(UNARY_PY)
binary = db.fast_broadcast(BINARY_PY)
# libm=True: math.exp & co from the C library, and their own rules (not the stand-ins')
LIBM = [e for e in UNARY if e.startswith("math.") and e.split("(")[0][5:] in
        ("exp", "expm1", "log", "log1p", "tanh", "pow", "sin", "cos")]
unary_libm = db.fast_broadcast(libm=True)(selector("unary_libm", LIBM, ["x"]))


def _grid(expressions, *points):
    w = np.repeat(np.arange(len(expressions), dtype=float), len(points[0]))
    return [np.tile(p, len(expressions)) for p in points] + [w]


@pytest.mark.parametrize("kernel, expressions", [(unary, UNARY), (unary_libm, LIBM)],
                         ids=["vmath", "libm"])
def test_every_unary_function_second_derivative_against_central_differences(kernel,
                                                                            expressions):
    python = kernel.py_func
    x, w = _grid(expressions, X)
    t = 0.5
    h = 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # (a derivative's branch at points not met)
        value, tangent, partial, partial_tangent = kernel.value_and_partials(
            x, w, wrt=0, tangents={0: t})
        # (the same loop's first partials: one compile less; they are checked against
        # value_and_partials's in the tests below, and against closed forms in
        # test_kernel_math.py)
        above = kernel.value_and_partials(x + h, w, wrt=0, tangents={0: t})[2]
        below = kernel.value_and_partials(x - h, w, wrt=0, tangents={0: t})[2]
    np.testing.assert_allclose(tangent, partial * t, rtol=1e-15)
    central = (above - below) / (2 * h) * t
    for k, expression in enumerate(expressions):
        rows = w == k
        np.testing.assert_allclose(partial_tangent[rows], central[rows], rtol=2e-6, atol=1e-7,
                                   err_msg=expression)
        np.testing.assert_allclose(value[rows], [python(xi, k) for xi in x[rows]],
                                   rtol=4e-15, atol=1e-15, err_msg=expression)
    total, total_tangent, gradient, hvp = kernel.sum_and_partials(x, w, tangents={0: t})
    np.testing.assert_array_equal(gradient, partial)
    np.testing.assert_array_equal(hvp, partial_tangent)
    assert total == pytest.approx(np.sum(value), rel=1e-14)
    assert total_tangent == pytest.approx(np.sum(tangent), rel=1e-13)


def test_every_binary_function_hessian_against_central_differences():
    x, y, w = _grid(BINARY, X, Y)
    tx, ty = 0.75, -1.25
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tangents = {0: tx, 1: ty}
        value, tangent, parts, part_tangents = binary.value_and_partials(
            x, y, w, wrt=(0, 1), tangents=tangents)
        h = 1e-6
        above = binary.value_and_partials(x + h * tx, y + h * ty, w, wrt=(0, 1),
                                          tangents=tangents)[2]
        below = binary.value_and_partials(x - h * tx, y - h * ty, w, wrt=(0, 1),
                                          tangents=tangents)[2]
    np.testing.assert_allclose(tangent, parts[0] * tx + parts[1] * ty, rtol=1e-14)
    for i in range(2):
        central = (above[i] - below[i]) / (2 * h)
        for k, expression in enumerate(BINARY):
            rows = w == k
            np.testing.assert_allclose(part_tangents[i][rows], central[rows], rtol=1e-5,
                                       atol=1e-6, err_msg=f"{expression}, d/d{'xy'[i]}")


def test_closed_forms_at_regular_points():
    # d2/dx2 exp(-3(x+1)) = 9 exp(-3(x+1)); d2 sin = -sin; d2 x**y / dx dy
    x = np.array([0.1, 0.9, 1.7])
    k = db.fast_broadcast(lambda x, y: math.exp(-3.0 * (x + 1.0)) + math.sin(x) * y + x ** y)
    y = 1.5
    value, tangent, (px, py), (ptx, pty) = k.value_and_partials(x, y, wrt=(0, 1),
                                                                 tangents={0: 1.0})
    np.testing.assert_allclose(ptx, 9.0 * np.exp(-3.0 * (x + 1.0)) - np.sin(x) * y
                               + y * (y - 1.0) * x ** (y - 2.0), rtol=1e-14)
    np.testing.assert_allclose(pty, np.cos(x) + x ** (y - 1.0) * (1.0 + y * np.log(x)),
                               rtol=1e-14)


# --------------------------------------------------------------------------- conventions

# Exact values at singular points (design.md section 4, at second order).
CONVENTIONS = [
    # (expression of x, y; x, y; (d/dx, d/dy); d2/dx2 with tangent (1, 0);
    #  d2/dydx with tangent (0, 1) (the tangent of d/dx))
    ("math.sqrt(x)", 0.0, 1.0, (math.inf, 0.0), -math.inf, 0.0),
    ("math.log(x)", 0.0, 1.0, (math.inf, 0.0), -math.inf, 0.0),
    ("x ** 2", 0.0, 1.0, (0.0, 0.0), 2.0, 0.0),
    ("x ** 1", 0.0, 1.0, (1.0, 0.0), 0.0, 0.0),
    ("x ** 3", 0.0, 1.0, (0.0, 0.0), 0.0, 0.0),
    ("x ** 0", 0.0, 1.0, (0.0, 0.0), 0.0, 0.0),
    ("abs(x)", 0.0, 1.0, (0.0, 0.0), 0.0, 0.0),
    ("math.fabs(x)", 0.0, 1.0, (0.0, 0.0), 0.0, 0.0),
    ("max(x, y)", 1.0, 1.0, (0.5, 0.5), 0.0, 0.0),
    ("min(x, y)", 1.0, 1.0, (0.5, 0.5), 0.0, 0.0),
    ("np.maximum(x, y) * x", 1.0, 1.0, (1.5, 0.5), 1.0, 0.5),
    # NaN-safe: a zero partial meeting an infinite derivative gives 0, at every order
    ("math.sqrt(x) + y", 0.0, 2.0, (math.inf, 1.0), -math.inf, 0.0),
    ("math.sqrt(x) * y", 0.0, 2.0, (math.inf, 0.0), -math.inf, math.inf),
    ("y * math.sqrt(x)", 0.0, 0.0, (0.0, 0.0), 0.0, math.inf),
    ("math.log(x) + y * y", 0.0, 3.0, (math.inf, 6.0), -math.inf, 0.0),
    ("math.sqrt(y) * x * x", 0.0, 0.0, (0.0, 0.0), 0.0, 0.0),
]
conventions = db.fast_broadcast(selector("conventions", [c[0] for c in CONVENTIONS],
                                          ["x", "y"]))


def test_conventions_at_singular_points_exactly():
    x = np.array([c[1] for c in CONVENTIONS])
    y = np.array([c[2] for c in CONVENTIONS])
    w = np.arange(len(CONVENTIONS), dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        along_x = conventions.value_and_partials(x, y, w, wrt=(0, 1), tangents={0: 1.0})
        along_y = conventions.value_and_partials(x, y, w, wrt=(0, 1), tangents={1: 1.0})
    for k, (expression, _, _, partials, dxx, dxy) in enumerate(CONVENTIONS):
        got = (along_x[2][0][k], along_x[2][1][k], along_x[3][0][k], along_y[3][0][k])
        assert got == (*partials, dxx, dxy), expression


# --------------------------------------------------------------------------- several args

def _pair_body(np_):
    def pair(r, a, b):
        return a * np_.exp(-b * r) + np_.sqrt(r * r + b * b) * a - (r * a) ** 2
    return pair


pair = db.fast_broadcast(_pair_body(math))
pair_ag = _pair_body(anp)


@db.fast_broadcast
def branchy(r, a, b):
    # if/else and a loop: a polynomial evaluated by Horner's rule, clamped below
    s = 0.0
    for c in (0.5, -1.0, 2.0):
        s = s * r + c * a
    if r > 1.0:
        s = s + b * r * r
    else:
        s = s - b * math.exp(r)
    return max(s, -5.0)


def branchy_ag(r, a, b):
    s = 0.0
    for c in (0.5, -1.0, 2.0):
        s = s * r + c * a
    s = anp.where(r > 1.0, s + b * r * r, s - b * anp.exp(r))
    return anp.maximum(s, -5.0)


def _hvp_oracle(f_ag, args, wrt, tangents):
    """The gradient tangents of sum(f(*args)) w.r.t. the ``wrt`` args by autograd:
    reverse over reverse, d/dargs [sum_j grad_j . t_j]."""
    n = len(args)
    full = [tangents.get(j, 0.0) * np.ones_like(np.asarray(args[j], float)) for j in range(n)]

    def total(*xs):
        return anp.sum(f_ag(*xs) + 0.0 * sum(xs))     # (the broadcast shape)

    grads = autograd.grad(total, tuple(range(n)))

    def directional(*xs):
        return sum(anp.sum(g * t) for g, t in zip(grads(*xs), full))

    return [autograd.grad(directional, i)(*args) for i in wrt]


SHAPES = [((3, 1), (4,), ()), ((4,), (4,), (4,)), ((3, 4), (1, 4), ()),
          ((2, 3, 4), (3, 1), (4,))]


@pytest.mark.parametrize("kernel, oracle", [(pair, pair_ag), (branchy, branchy_ag)],
                         ids=["pair", "branchy"])
@pytest.mark.parametrize("wrt, tangent_positions, shapes", [
    ((0, 1), (0, 1), SHAPES[0]), ((0,), (1, 2), SHAPES[1]), ((2, 0), (0,), SHAPES[2]),
    ((1, 2), (0, 1, 2), SHAPES[3])])
def test_several_arguments_broadcast_against_autograd(kernel, oracle, wrt, tangent_positions,
                                                      shapes):
    rng = np.random.default_rng(len(wrt) + 3 * len(tangent_positions))
    for shapes in [shapes]:
        args = [rng.uniform(0.3, 1.8, s) if s else float(rng.uniform(0.3, 1.8)) for s in shapes]
        tangents = {j: rng.normal(size=shapes[j]) if shapes[j] else float(rng.normal())
                    for j in tangent_positions}
        total, total_tangent, grads, hvps = kernel.sum_and_partials(
            *args, wrt=wrt, tangents=tangents)
        want = _hvp_oracle(oracle, args, wrt, tangents)
        for i, g, hv, w in zip(wrt, grads, hvps, want):
            assert np.shape(hv) == np.shape(args[i]) == np.shape(g)
            np.testing.assert_allclose(hv, w, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(g, autograd.grad(
                lambda *xs: anp.sum(oracle(*xs) + 0.0 * sum(xs)), i)(*args), rtol=1e-13)
        assert total == pytest.approx(kernel.sum(*args), rel=1e-15)
        # the map variant: elementwise second derivatives at the broadcast shape
        value, tangent, parts, part_tangents = kernel.value_and_partials(
            *args, wrt=wrt, tangents=tangents)
        shape = np.broadcast_shapes(*shapes)
        full = [np.broadcast_to(a, shape).copy() for a in args]
        tfull = {j: np.broadcast_to(t, shape) for j, t in tangents.items()}
        for i, p, pt in zip(wrt, parts, part_tangents):
            d_i = autograd.elementwise_grad(oracle, i)
            np.testing.assert_allclose(p, d_i(*full), rtol=1e-13, atol=1e-14)
            want = sum(autograd.elementwise_grad(d_i, j)(*full) * t for j, t in tfull.items())
            np.testing.assert_allclose(pt, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tangent, sum(
            autograd.elementwise_grad(oracle, j)(*full) * t for j, t in tfull.items()),
            rtol=1e-13, atol=1e-14)
        assert total_tangent == pytest.approx(np.sum(tangent), rel=1e-12, abs=1e-13)
        np.testing.assert_array_equal(kernel.jvp(*args, tangents=tangents)[1], tangent)
        s, ts = kernel.sum_jvp(*args, tangents=tangents)
        assert (s, ts) == (total, total_tangent)


# --------------------------------------------------------------------------- layouts

@st.composite
def _layouts(draw):
    shape = draw(st.sampled_from([(), (4,), (3, 4), (1, 4), (3, 1), (0,), (0, 3)]))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    strided = draw(st.booleans())
    return shape, dtype, strided


def _array(rng, shape, dtype, strided):
    if strided and shape:
        big = rng.uniform(0.3, 1.8, shape[:-1] + (2 * shape[-1],)).astype(dtype)
        return big[..., ::2]
    return np.asarray(rng.uniform(0.3, 1.8, shape), dtype)


@settings(max_examples=examples(8), deadline=None)
@given(_layouts(), _layouts(), st.integers(0, 2 ** 31))
def test_layouts_dtypes_and_empty_agree_with_the_float64_contiguous_call(lr, lt, seed):
    rng = np.random.default_rng(seed)
    r = _array(rng, *lr)
    shape = np.shape(r)
    # a tangent of its own layout and dtype that broadcasts to r's shape
    try:
        t_shape = lt[0] if np.broadcast_shapes(lt[0], shape) == shape else shape
    except ValueError:
        t_shape = shape
    t = _array(rng, t_shape, lt[1], lt[2])
    a = 0.7
    dtype = np.result_type(r, np.float64 if np.ndim(r) == 0 and r.dtype == np.float64 else r)
    got = pair.value_and_partials(r, a, 1.3, wrt=(0, 1), tangents={0: t, 1: 0.5})
    r64, t64 = np.array(r, np.float64), np.array(t, np.float64)    # (C-contiguous copies)
    want = pair.value_and_partials(r64, a, 1.3, wrt=(0, 1), tangents={0: t64, 1: 0.5})
    tol = 1e-5 if r.dtype == np.float32 else 1e-13
    for g, w in zip((got[0], got[1], *got[2], *got[3]), (want[0], want[1], *want[2], *want[3])):
        assert np.shape(g) == shape
        assert np.asarray(g).dtype == dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    total, total_tangent, grads, hvps = pair.sum_and_partials(r, a, wrt=(0, 1), b=1.3,
                                                              tangents={0: t, 1: 0.5})
    assert type(total) is dtype.type and type(total_tangent) is dtype.type
    assert np.shape(grads[0]) == np.shape(hvps[0]) == shape
    assert np.asarray(hvps[0]).dtype == r.dtype
    assert type(grads[1]) is type(hvps[1]) is float or np.ndim(grads[1]) == 0
    np.testing.assert_allclose(hvps[0], want[3][0], rtol=tol, atol=tol)
    np.testing.assert_allclose(hvps[1], np.sum(want[3][1]), rtol=10 * tol, atol=10 * tol)


def test_threads_give_the_bits_of_one_thread(monkeypatch):
    rng = np.random.default_rng(0)
    r = rng.uniform(0.3, 1.8, (300, 40))
    a = rng.uniform(0.3, 1.8, (40,))
    v = rng.normal(size=r.shape)
    one = pair.sum_and_partials(r, a, 1.3, wrt=(0, 1), tangents={0: v, 1: 1.0})
    monkeypatch.setattr(db.config, "threads", 2)
    monkeypatch.setattr(db.config, "parallel_threshold", 1)
    monkeypatch.setattr(db.config, "adaptive_threads", False)   # (every call splits)
    for _ in range(2):          # (the first call compiles on one thread)
        many = pair.sum_and_partials(r, a, 1.3, wrt=(0, 1), tangents={0: v, 1: 1.0})
    assert many[:2] == one[:2]
    for g, w in zip((*many[2], *many[3]), (*one[2], *one[3])):
        np.testing.assert_array_equal(g, w)
    # (a broadcast a: its gradient accumulates along the split loop: not split)
    m = pair.value_and_partials(r, a, 1.3, wrt=0, tangents={1: 1.0})
    monkeypatch.setattr(db.config, "parallel_threshold", 10 ** 9)
    o = pair.value_and_partials(r, a, 1.3, wrt=0, tangents={1: 1.0})
    for g, w in zip(m, o):
        np.testing.assert_array_equal(g, w)


# --------------------------------------------------------------------------- the core's API

def test_prepared_calls_as_the_core_calls_them():
    r, v = np.array([0.3, 0.9, 1.4]), np.array([1.0, -2.0, 0.5])
    values = (r, 0.7, 1.3)
    call = pair._prepare("sum_partials_tangent", values, ((0,), (0,)))
    total, total_tangent, grads, hvps = call.sum_partials_tangent(values, (v,))
    assert type(grads) is tuple and type(hvps) is tuple and len(grads) == 1
    again = pair._prepare("sum_partials_tangent", values, ((0,), (0,)))
    assert again is call                             # (kept per signature)
    value, tangent = pair._prepare("tangent", values, (0, 2)).tangent(values, (v, 1.0))
    p = pair.value_and_partials(*values, wrt=(0, 2))[1]
    np.testing.assert_allclose(tangent, p[0] * v + p[1], rtol=1e-15)
    out = pair._prepare("partials_tangent", values, ((1,), (0,))).partials_tangent(values, (v,))
    assert len(out) == 4 and len(out[2]) == len(out[3]) == 1
    total2, tangent2 = pair._prepare("sum_tangent", values, (0,)).sum_tangent(values, (v,))
    assert (total2, tangent2) == (total, total_tangent)
    # another tangent signature: another loop, same call object
    hv2 = call.sum_partials_tangent(values, (2.0,))[3][0]
    np.testing.assert_allclose(hv2, call.sum_partials_tangent(values, (np.full(3, 2.0),))[3][0],
                               rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes", [((5,), (), ()), ((3, 4), (3, 1), ()), ((4,), (4,), (4,))],
                         ids=["scalars", "broadcast", "arrays"])
def test_several_tangent_directions_in_one_loop_are_one_direction_each(shapes, dtype):
    # a width-3 loop (three directions at once: the chunks of a Hessian's unit tangents)
    # gives, per direction, the bits of the one-direction loop; gradients kept in
    # registers, stored whole, and summed into a broadcast argument's shape
    rng = np.random.default_rng(7)
    values = tuple(rng.uniform(0.2, 1.6, shape).astype(dtype) if shape
                   else dtype(rng.uniform(0.2, 1.6)) for shape in shapes)
    wrt, positions = (0, 1, 2), (1, 2)
    directions = [(rng.standard_normal(shapes[0]).astype(dtype), dtype(0.5)),
                  (dtype(1.0), dtype(0.0)), (dtype(0.0), dtype(-2.0))]
    for kernel in (pair, branchy):
        call = kernel._prepare("sum_partials_tangent", values, (wrt, positions, 3))
        flat = tuple(directions[d][q] for q in range(2) for d in range(3))
        total, tangents, grads, grad_tangents = call.sum_partials_tangent(values, flat)
        assert len(tangents) == 3 and len(grad_tangents) == 3
        one = kernel._prepare("sum_partials_tangent", values, (wrt, positions))
        for d, tangent in enumerate(directions):
            want = one.sum_partials_tangent(values, tangent)
            got = (total, tangents[d], grads, grad_tangents[d])
            for g, w in zip(got[:2], want[:2]):
                assert type(g) is type(w) and np.asarray(g).tobytes() == np.asarray(w).tobytes()
            for gs, ws in zip(got[2:], want[2:]):
                for g, w in zip(gs, ws):
                    assert type(g) is type(w) and np.shape(g) == np.shape(w)
                    assert np.asarray(g).dtype == np.asarray(w).dtype
                    assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
    with pytest.raises(TypeError, match="6 \\(3 per tangent position"):
        call.sum_partials_tangent(values, flat[:4])
    with pytest.raises(TypeError, match="no tangent width"):
        pair._prepare("partials_tangent", values, (wrt, positions, 3))
    with pytest.raises(TypeError, match="no tangent width"):
        pair._prepare("sum_partials_tangent", values, (wrt, positions, 0))


@db.fast_broadcast
def wide(x, a, b, c, d, e, f, g):
    eta = a + b * x + c * x * x + d * math.sin(x) + e * math.exp(-x) + f * g * x
    return math.log1p(math.exp(eta)) + 0.5 * eta * eta * x


def wide_ag(x, a, b, c, d, e, f, g):
    eta = a + b * x + c * x * x + d * anp.sin(x) + e * anp.exp(-x) + f * g * x
    return anp.log1p(anp.exp(eta)) + 0.5 * eta * eta * x


@pytest.mark.parametrize("count", [1, 2, 4, 5, 7])
def test_a_hessian_in_chunks_of_unit_tangents_is_one_tangent_at_a_time(count, monkeypatch):
    # the Hessian of a sum in scalar parameters: chunks of at most three unit tangents
    # per loop (the last one padded), the bits of one loop per tangent, eager and under
    # db.jit; beside an array argument (map loops, one per tangent) in one Hessian
    from dualbcast.rules import fast_nested
    x = np.linspace(-1.0, 1.5, 40)
    fixed = [0.1, -0.2, 0.3, 0.05, -0.1, 0.2, 0.4]

    def params(v):
        return [v[i] if i < count else fixed[i] for i in range(7)]

    def scalars(v):         # (the sum's own tangent enters too: g g' + s H)
        return wide.sum(x, *params(v)) ** 2

    def mixed(w):
        return wide.sum(w[count:], *params(w))
    v = np.linspace(-0.3, 0.4, count)
    w = np.concatenate([v, x[:6]])
    chunked = [db.hessian(scalars)(v), db.hessian(mixed)(w)]
    jitted = db.jit(db.hessian(scalars))
    chunked += [jitted(v) for _ in range(3)]
    monkeypatch.setattr(fast_nested, "CHUNK", 1)
    single = [db.hessian(scalars)(v), db.hessian(mixed)(w)]
    for got, want in zip(chunked, single + single[:1] * 3):
        assert got.tobytes() == want.tobytes()
    oracle = autograd.hessian(lambda v: anp.sum(wide_ag(x, *params(v))) ** 2)(v)
    np.testing.assert_allclose(chunked[0], oracle, rtol=1e-11, atol=1e-11)


def test_errors():
    r = np.array([0.3, 0.9, 1.4])
    with pytest.raises(ValueError, match="do not broadcast"):
        pair.jvp(r, 0.7, 1.3, tangents={1: np.ones((2, 3))})
    with pytest.raises(ValueError, match="broadcast"):
        pair.jvp(r, 0.7, 1.3, tangents={0: np.ones(4)})
    with pytest.raises(TypeError, match="cannot take a tangent"):
        pair.jvp(r, 1, 1.3, tangents={1: 1.0})
    with pytest.raises(TypeError, match="non-empty dict"):
        pair.jvp(r, 0.7, 1.3, tangents={})
    with pytest.raises(ValueError, match="not a parameter"):
        pair.jvp(r, 0.7, 1.3, tangents={"z": 1.0})
    with pytest.raises(ValueError, match="out of range"):
        pair.sum_jvp(r, 0.7, 1.3, tangents={3: 1.0})
    with pytest.raises(TypeError, match="out="):
        pair.sum_and_partials(r, 0.7, 1.3, tangents={0: 1.0}, out=np.empty(3))
    # traced arguments are refused, as by the first-order methods
    for method in ("jvp", "sum_jvp"):
        with pytest.raises(TypeError, match=method):
            db.grad(lambda x: getattr(pair, method)(x, 0.7, 1.3, tangents={0: 1.0})[0])(r)
    with pytest.raises(TypeError, match="sum_and_partials"):
        db.grad(lambda x: pair.sum_and_partials(x, 0.7, 1.3, tangents={0: 1.0})[0])(r)


def test_names_scalars_and_zero_dim():
    v = pair.jvp(0.5, 0.7, 1.3, tangents={"r": 1.0, "b": 2.0})
    w = pair.jvp(0.5, 0.7, 1.3, tangents={2: 2.0, 0: 1.0})
    assert v == w and all(type(x) is float or isinstance(x, np.float64) for x in v)
    z = pair.value_and_partials(np.array(0.5), 0.7, 1.3, wrt=0, tangents={0: np.array(1.0)})
    assert all(np.ndim(x) == 0 for x in z)
    assert z[3] == pytest.approx(pair.value_and_partials(0.5, 0.7, 1.3, wrt=0,
                                                         tangents={0: 1.0})[3], rel=1e-15)


# --------------------------------------------------------------------------- dependencies

SCALE = 2.0


@db.fast_broadcast
def scaled(x):
    return SCALE * x * x


def test_a_changed_global_recompiles_the_tangent_modes(monkeypatch):
    x = np.array([1.0, 2.0])
    assert scaled.sum_and_partials(x, tangents={0: 1.0})[3].tolist() == [4.0, 4.0]
    assert scaled.jvp(x, tangents={0: 1.0})[1].tolist() == [4.0, 8.0]
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    assert scaled.sum_and_partials(x, tangents={0: 1.0})[3].tolist() == [6.0, 6.0]
    assert scaled.jvp(x, tangents={0: 1.0})[1].tolist() == [6.0, 12.0]


def test_the_loops_are_cached_on_disk():
    import glob
    import os
    if db.config.cache_dir is None:
        pytest.skip("no cache directory")
    scaled.sum_and_partials(np.array([1.0, 2.0]), tangents={0: 1.0})
    found = glob.glob(os.path.join(db.config.cache_dir, "*scaled*",
                                   "loop_sum_partials_tangent_*.py"))
    assert found
