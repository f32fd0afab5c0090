"""Kernels inside grad: the fast broadcast rule and the sum-of-map rule.  Only traced
arguments become duals, gradients reduce over broadcast axes, and a sum-of-map
gradient costs no N-sized allocation beyond the gradient itself."""
import math
import tracemalloc

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import dualbcast as db
from dualbcast.testing import check_grads

RNG = np.random.default_rng(2)


@db.fast_broadcast
def wave(x, a, b):
    return a * math.sin(x) + b * x * x


def wave_autograd(x, a, b):
    return a * anp.sin(x) + b * x * x


def active_sets(kernel, mode):
    return sorted({spec.active for spec in kernel._specializations if spec.mode == mode})


def test_only_traced_arguments_become_duals():
    @db.fast_broadcast
    def k(x, a, b):
        return a * math.sin(x) + b * x * x
    x = np.linspace(0.0, 1.0, 5)
    db.grad(lambda a: np.sum(k(x, a, 2.0)))(0.3)
    db.grad(lambda x, b: k.sum(x, 0.3, b), argnums=(0, 1))(x, 2.0)
    assert active_sets(k, "partials") == [(1,)]
    assert active_sets(k, "sum_partials") == [(0, 2)]


@given(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3),
       st.sampled_from([(0,), (1,), (0, 2), (0, 1, 2)]), st.booleans(),
       st.sampled_from([np.float64, np.float32]))
def test_kernel_rules_against_autograd(shapes, argnums, use_sum, dtype):
    args = [RNG.uniform(0.5, 1.5, s).astype(dtype) for s in shapes.input_shapes]
    weights = RNG.standard_normal(shapes.result_shape)

    def f(x, a, b):
        return wave.sum(x, a, b) * 2.0 if use_sum else np.sum(wave(x, a, b) * weights)

    def f_autograd(x, a, b):
        y = wave_autograd(x, a, b)
        return anp.sum(y) * 2.0 if use_sum else anp.sum(y * weights)
    value, g = db.value_and_grad(f, argnums=argnums)(*args)
    args64 = [a.astype(np.float64) for a in args]
    want = autograd.grad(f_autograd, argnums)(*args64)
    tol = 1e-12 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(value, f_autograd(*args64), rtol=tol, atol=tol)
    for i, got, expected in zip(argnums, g, want):
        assert got.shape == args[i].shape and got.dtype == dtype
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_three_ways_to_sum_a_kernel_agree():
    x, a = RNG.uniform(0, 1, (4, 5)), RNG.uniform(0, 1, (1, 5))
    ways = [lambda x, a: wave.sum(x, a, 0.5), lambda x, a: np.sum(wave(x, a, 0.5)),
            lambda x, a: wave(x, a, 0.5).sum()]
    results = [db.value_and_grad(f, argnums=(0, 1))(x, a) for f in ways]
    for value, (gx, ga) in results[1:]:
        np.testing.assert_allclose(value, results[0][0], rtol=1e-13)
        np.testing.assert_allclose(gx, results[0][1][0], rtol=1e-13)
        np.testing.assert_allclose(ga, results[0][1][1], rtol=1e-13)


def test_python_float_and_keyword_arguments_are_traced():
    x = np.linspace(0.0, 1.0, 7)
    g = db.grad(lambda a, b: wave.sum(x, b=b, a=a) + np.sum(wave(x, a, b=b)),
                argnums=(0, 1))(0.3, 2.0)
    assert all(type(v) is float for v in g)
    np.testing.assert_allclose(g, (2 * np.sum(np.sin(x)), 2 * np.sum(x * x)), rtol=1e-13)


def test_kernel_pullback_may_run_twice():
    x = RNG.uniform(0, 1, 6)
    for f in (lambda x: wave(x, 0.3, 2.0), lambda x: wave.sum(x, 0.3, 2.0)):
        out, pullback = db.vjp(f, x)
        ct = np.ones(np.shape(out))
        first = pullback(ct)[0].copy()
        np.testing.assert_array_equal(pullback(ct)[0], first)
        check_grads(f, x)


def test_kernel_inside_a_bigger_program():
    x = RNG.uniform(0.5, 1.5, (3, 4))

    def f(x, np=np, wave=wave):
        h = wave(x @ x.T, x[:, :1], 0.5)
        return np.sum(np.tanh(h) * 2.0) + wave(x[0, 0], x[1, 1], x[2, 2])
    g = db.grad(f)(x)
    np.testing.assert_allclose(g, autograd.grad(lambda x: f(x, anp, wave_autograd))(x),
                               rtol=1e-10, atol=1e-13)


def _peak_bytes(run):
    run()                                           # compile and warm up (then the
    run()                                           # loop's parallel driver)
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_sum_rule_allocates_only_the_gradient():
    n = 500_000
    x = RNG.uniform(0, 1, n)
    # A broadcast coefficient: its gradient accumulates in the loop, nothing N-sized.
    assert _peak_bytes(lambda: db.grad(lambda a: wave.sum(x, a, 2.0))(0.3)) < 0.05 * x.nbytes
    # A full-size argument: the loop's gradient buffer is scaled in place and returned.
    peak = _peak_bytes(lambda: db.grad(lambda x: 3.0 * wave.sum(x, 0.3, 2.0))(x))
    assert peak < 1.1 * x.nbytes


@pytest.mark.parametrize("bad", [np.ones(3, np.int64), 2])
def test_kernel_in_grad_with_int_arguments_is_not_differentiated(bad):
    g = db.grad(lambda a: wave.sum(bad, a, 1.0))(0.5)
    np.testing.assert_allclose(g, np.sum(np.sin(np.asarray(bad, float)) * np.ones(np.shape(bad))))


@pytest.mark.parametrize("method, instead", [("value_and_partials", r"sq\(\.\.\.\)"),
                                             ("sum_and_partials", r"sq\.sum\(\.\.\.\)")])
def test_the_forward_mode_methods_refuse_traced_values_and_name_the_call_to_use(method, instead):
    # (The error once suggested stop_gradient, which would silently drop the gradient.)
    @db.fast_broadcast
    def sq(x, a):
        return a * x * x

    with pytest.raises(TypeError, match=f"{method} got a value traced.*{instead}"):
        db.grad(lambda x: np.sum(getattr(sq, method)(x, 2.0)[0]))(np.ones(3))
    with pytest.raises(TypeError, match=method):
        db.grad(lambda a: np.sum(getattr(sq, method)(np.ones(3), a=a)[0]))(2.0)
