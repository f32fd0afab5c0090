"""dualbcast.torch: kernels as PyTorch operations, checked against the same function
written with torch ops (PyTorch's own autograd is the oracle) and by gradcheck."""
import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch", reason="PyTorch not installed (the [torch] extra)")

import dualbcast as db  # noqa: E402
import dualbcast.torch as dbt  # noqa: E402


@db.fast_broadcast
def leaky(x, a, c):
    """A smooth leaky activation with a branch."""
    if x > 0.0:
        return x + c * math.log1p(x * x)
    return a * (math.exp(x) - 1.0) + c * math.sin(x)


def leaky_torch(x, a, c):
    return torch.where(x > 0, x + c * torch.log1p(x * x),
                       a * torch.expm1(x) + c * torch.sin(x))


op = dbt.wrap(leaky)


def _leaf(shape, dtype=torch.float64, seed=0, grad=True):
    generator = torch.Generator().manual_seed(seed)
    return (2 * torch.randn(shape, generator=generator, dtype=dtype)).requires_grad_(grad)


def _grads(f, inputs):
    live = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    out = f(*inputs)
    cotangent = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).reshape(out.shape)
    return out, torch.autograd.grad(out, live, cotangent)


SHAPES = [((7,), (7,), (7,)), ((4, 3), (3,), ()), ((4, 1), (1, 5), (5,)),
          ((2, 3, 4), (3, 1), (1,)), ((), (), ()), ((0, 3), (3,), ())]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("method", ["map", "sum"])
def test_value_and_gradients_match_torch_ops(shapes, method):
    inputs = [_leaf(shape, seed=k) for k, shape in enumerate(shapes)]
    ours = op if method == "map" else op.sum
    theirs = leaky_torch if method == "map" else (lambda *a: leaky_torch(*a).sum())
    value, grads = _grads(ours, inputs)
    expected, expected_grads = _grads(theirs, inputs)
    assert value.shape == expected.shape and value.dtype == expected.dtype
    torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12)
    for got, want, x in zip(grads, expected_grads, inputs):
        assert got.shape == x.shape and got.dtype == x.dtype
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["map", "sum"])
def test_gradcheck_and_gradgradcheck(method):
    inputs = (_leaf((3, 4)), _leaf((4,), seed=1), _leaf((), seed=2))
    f = op if method == "map" else op.sum
    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs)


@pytest.mark.parametrize("method", ["map", "sum"])
def test_second_order_matches_torch_ops(method):
    """Hessian-vector products through create_graph=True, every pair of live inputs."""
    x, a = _leaf((5, 3)), _leaf((3,), seed=1)
    v = torch.randn(5, 3, dtype=torch.float64)

    def hvp(f):
        out = f(x, a, 0.7)
        total = out if method == "sum" else (out * torch.cos(out.detach())).sum()
        gx, ga = torch.autograd.grad(total, (x, a), create_graph=True)
        return torch.autograd.grad((gx * v).sum() + ga.sum(), (x, a))

    theirs = leaky_torch if method == "map" else (lambda *a: leaky_torch(*a).sum())
    for got, want in zip(hvp(op if method == "map" else op.sum), hvp(theirs)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_a_third_derivative_is_refused():
    x = _leaf((4,))
    g, = torch.autograd.grad(op.sum(x, 0.5, 0.3), x, create_graph=True)
    h, = torch.autograd.grad(g.sum(), x, create_graph=True)
    assert h.requires_grad           # (not silently a constant)
    with pytest.raises(RuntimeError, match="up to second order"):
        torch.autograd.grad(h.sum(), x)


def test_only_inputs_that_require_grad_get_partials():
    x, a = _leaf((6,)), _leaf((6,), seed=1, grad=False)
    before = dict(leaky._specializations)
    op.sum(x, a, 0.2).backward()
    modes = {spec.active for spec in leaky._specializations if spec not in before
             and spec.mode == "sum_partials"}
    assert modes <= {(0,)}
    expected, = torch.autograd.grad(leaky_torch(x, a, 0.2).sum(), x)
    torch.testing.assert_close(x.grad, expected, rtol=1e-12, atol=1e-12)
    assert a.grad is None


def test_no_grad_and_constants():
    x = _leaf((5,))
    with torch.no_grad():
        y = op(x, 0.5, 0.1)
    assert not y.requires_grad
    ints = torch.arange(5)                                  # an integer tensor: a constant
    torch.testing.assert_close(op(ints, 0.5, 0.1), leaky_torch(ints.double(), 0.5, 0.1))


def test_float32_and_mixed_dtypes():
    x32 = _leaf((8,), dtype=torch.float32)
    a64 = _leaf((8,), seed=1)
    value, grads = _grads(op, [x32, 0.5, 0.25])
    expected, expected_grads = _grads(leaky_torch, [x32, 0.5, 0.25])
    assert value.dtype == torch.float32 and grads[0].dtype == torch.float32
    torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[0], expected_grads[0], rtol=1e-5, atol=1e-6)
    # float32 with float64 computes in float64; each gradient in its input's dtype
    value, (gx, ga) = _grads(op, [x32, a64, 0.25])
    assert value.dtype == torch.float64
    assert gx.dtype == torch.float32 and ga.dtype == torch.float64


def test_non_contiguous_inputs_are_read_in_place():
    base = _leaf((6, 4), grad=False)
    x = base.t().requires_grad_()                            # a transposed view
    value, (g,) = _grads(op, [x, 0.5, 0.1])
    expected, (h,) = _grads(leaky_torch, [x, 0.5, 0.1])
    torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)


def test_inside_a_module_trains_like_torch_ops():
    """An nn.Module with the kernel as its activation: a few SGD steps give the same
    parameters as the same module with the activation written in torch ops."""
    def train(activation):
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 3).double()
        slope = torch.nn.Parameter(torch.tensor(0.5, dtype=torch.float64))
        optimiser = torch.optim.SGD([*layer.parameters(), slope], lr=0.05)
        data = torch.randn(32, 4, dtype=torch.float64)
        for _ in range(5):
            optimiser.zero_grad()
            loss = activation(layer(data), slope, 0.1).pow(2).mean()
            loss.backward()
            optimiser.step()
        return [p.detach().clone() for p in (*layer.parameters(), slope)]
    for got, want in zip(train(op), train(leaky_torch)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad, error, message", [
    (lambda: torch.ones(3, device="meta"), ValueError, "on device meta.*cpu"),
    (lambda: torch.ones(3, dtype=torch.complex128), TypeError, "complex"),
    (lambda: torch.ones(3, dtype=torch.float16), TypeError, "float32 and float64"),
    (lambda: torch.ones(3, dtype=torch.bfloat16), TypeError, "float32 and float64"),
    (lambda: torch.ones(3).to_sparse(), TypeError, "dense"),
    (lambda: np.ones(3), TypeError, "tensors and Python numbers"),
])
def test_bad_input_is_refused_before_any_work(bad, error, message):
    with pytest.raises(error, match=message):
        op(bad(), 0.5, 0.1)
    with pytest.raises(error, match=message):
        op.sum(bad(), 0.5, 0.1)


def test_keywords_and_defaults_bind_like_the_kernel():
    @db.fast_broadcast
    def scaled(x, scale=2.0):
        return scale * math.tanh(x)
    x = _leaf((4,))
    dbt.wrap(scaled).sum(x=x).backward()
    torch.testing.assert_close(x.grad, 2.0 / torch.cosh(x.detach()) ** 2)


def test_wrong_argument_count_and_shapes():
    with pytest.raises(TypeError, match="missing a required argument: 'c'"):
        op(torch.ones(3), 0.5)
    with pytest.raises(ValueError, match="could not be broadcast"):
        op(torch.ones(3), torch.ones(4), 0.1)
    with pytest.raises(TypeError, match="@fast_broadcast kernel"):
        dbt.wrap(math.sin)


# Derivatives with respect to every input the operation takes (issue 27, item 2 and
# the class behind it): the primal inputs, constants, the grad_outputs of a backward
# pass and of a double backward, at first and second order, against torch ops.

@db.fast_broadcast
def wave(x, a, c):
    """Every second partial nonzero (a full Hessian: a transposed block would show)."""
    return a * math.sin(x) * math.exp(c * x)


def wave_torch(x, a, c):
    return a * torch.sin(x) * torch.exp(c * x)


wave_op = dbt.wrap(wave)
WAVES = {"map": (wave_op, wave_torch),
         "sum": (wave_op.sum, lambda *args: wave_torch(*args).sum())}
# (shape or None for a Python number, requires_grad) per argument: broadcasting, 0-d,
# empty, and inputs that do and do not require grad side by side.
LAYOUTS = [(((3, 4), True), ((4,), False), ((), True)),
           (((3, 1), True), ((1, 4), False), (None, False)),
           (((5,), True), ((5,), True), ((5,), True)),
           (((0, 2), True), ((2,), True), (None, False))]


def _wave_inputs(layout, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [0.3 if shape is None else
            (torch.randn(shape, generator=generator, dtype=torch.float64) * 0.7).requires_grad_(grad)
            for shape, grad in layout]


def _live(inputs):
    return [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]


@pytest.mark.parametrize("method", ["map", "sum"])
def test_a_double_backward_is_differentiable_in_its_vector(method):
    """The issue's report: hv = grad(g, x, grad_outputs=v, create_graph=True), then
    d(hv.sum())/dv was None ("not used in the graph"); PyTorch's ops give H 1."""
    x = torch.linspace(-1.0, 2.0, 5, dtype=torch.float64, requires_grad=True)
    v = torch.linspace(0.3, 1.0, 5, dtype=torch.float64, requires_grad=True)
    results = []
    for f in WAVES[method]:
        total = f(x, 0.7, 0.2) if method == "sum" else (f(x, 0.7, 0.2) ** 2).sum()
        g, = torch.autograd.grad(total, x, create_graph=True)
        hv, = torch.autograd.grad(g, x, grad_outputs=v, create_graph=True)
        results.append((hv, *torch.autograd.grad(hv.sum(), v)))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # torch.autograd.functional.hvp is the same double-backward trick
    f = lambda x: wave_op.sum(x, 0.7, 0.2)
    torch.testing.assert_close(torch.autograd.functional.hvp(f, x.detach(), v.detach())[1],
                               torch.autograd.functional.hvp(
                                   lambda x: wave_torch(x, 0.7, 0.2).sum(), x.detach(),
                                   v.detach())[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS[:2])
@pytest.mark.parametrize("method", ["map", "sum"])
def test_gradcheck_with_constants_and_inputs_that_do_not_require_grad(method, layout):
    inputs = tuple(_wave_inputs(layout))
    f = WAVES[method][0]
    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs)


@pytest.mark.parametrize("method", ["map", "sum"])
def test_gradcheck_in_the_grad_outputs(method):
    """A backward pass (a vector-Jacobian product) as a function of its grad_outputs
    u, and a double backward (a Hessian-vector product) as a function of u and of its
    own grad_outputs v: bilinear, so gradgradcheck checks the cross term H."""
    x, a, c = _wave_inputs(LAYOUTS[0])
    f = WAVES[method][0]
    u = torch.randn(f(x, a, c).shape, dtype=torch.float64, requires_grad=True)

    def vjp(u):
        return torch.autograd.grad(f(x, a, c), (x, c), grad_outputs=u, create_graph=True)

    def hvp(u, vx, vc):
        g = vjp(u)
        return torch.autograd.grad(g, (x, c), grad_outputs=(vx, vc), create_graph=True)

    vx = torch.randn(x.shape, dtype=torch.float64, requires_grad=True)
    vc = torch.randn((), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(vjp, (u,))
    assert torch.autograd.gradgradcheck(vjp, (u,))
    assert torch.autograd.gradcheck(lambda u, x, c: torch.autograd.grad(
        f(x, a, c), (x, c), grad_outputs=u, create_graph=True), (u, x, c))
    assert torch.autograd.gradcheck(hvp, (u, vx, vc))
    assert torch.autograd.gradgradcheck(hvp, (u, vx, vc))


def _every_derivative(f, inputs, method):
    """The value, the gradients of the live inputs along a cotangent u, their
    derivatives along vectors v (with respect to the inputs, u and v: second order),
    the Hessian-vector products hv along v, and the derivatives of <hv, w> with
    respect to u, v and w (not the inputs: that would be a third derivative)."""
    live = _live(inputs)
    out = f(*inputs)
    u = torch.linspace(-1.0, 1.5, out.numel(), dtype=out.dtype).reshape(out.shape)
    u.requires_grad_()
    vs = [torch.linspace(0.2, 1.1, x.numel(), dtype=x.dtype).reshape(x.shape).requires_grad_()
          for x in live]
    ws = [torch.cos(torch.arange(x.numel(), dtype=x.dtype)).reshape(x.shape).requires_grad_()
          for x in live]
    # (a kernel linear in an input has a gradient that does not depend on it: PyTorch's
    # ops then leave it out of the graph, hence materialised zeros)
    grad = functools.partial(torch.autograd.grad, allow_unused=True, materialize_grads=True)
    g = grad(out, live, grad_outputs=u, create_graph=True)
    first = grad(sum((gi * vi).sum() for gi, vi in zip(g, vs)), live + [u] + vs,
                 retain_graph=True)
    hv = grad(g, live, grad_outputs=vs, create_graph=True)
    second = grad(sum((h * w).sum() for h, w in zip(hv, ws)), [u] + vs + ws)
    return [out, *g, *first, *hv, *second]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", ["map", "sum"])
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_derivatives_in_every_input_match_torch_ops(method, layout, seed):
    inputs = _wave_inputs(layout, seed)
    ours, theirs = (_every_derivative(f, inputs, method) for f in WAVES[method])
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_third_derivatives_through_the_vector_are_still_refused():
    x = torch.linspace(-1.0, 2.0, 5, dtype=torch.float64, requires_grad=True)
    v = torch.ones(5, dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(wave_op.sum(x, 0.7, 0.2), x, create_graph=True)
    hv, = torch.autograd.grad(g, x, grad_outputs=v, create_graph=True)
    for wrt in [x, (v, x)]:
        with pytest.raises(RuntimeError, match="up to second order"):
            torch.autograd.grad(hv.sum(), wrt, retain_graph=True)
    # differentiated in v again (H H v: second order) it works; in x it is refused
    hhv, = torch.autograd.grad((hv * hv).sum() / 2, v, create_graph=True)
    h = torch.autograd.functional.hessian(lambda x: wave_torch(x, 0.7, 0.2).sum(), x.detach())
    torch.testing.assert_close(hhv, h @ h @ v.detach(), rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="up to second order"):
        torch.autograd.grad(hhv.sum(), x)
    # a vector that depends on x: d/dx of hv needs the third derivative
    hv2, = torch.autograd.grad(g, x, grad_outputs=2 * x, create_graph=True)
    with pytest.raises(RuntimeError, match="up to second order"):
        torch.autograd.grad(hv2.sum(), x)
