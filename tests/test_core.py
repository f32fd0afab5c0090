"""The reverse-mode core: the API contract (structures, dtypes, argnums, vjp, stop_gradient),
the tape (order, memory, threads, nesting) and every error it raises."""
import collections
import threading

import numpy as np
import pytest

import dualbcast as db
from dualbcast.core import Box

Point = collections.namedtuple("Point", "x y")


# --- structures, shapes and dtypes --------------------------------------------------------

def test_gradient_has_the_structure_shapes_and_dtypes_of_the_argument():
    params = {"w": np.ones((2, 3), np.float32), "b": [np.float64(2.0), (3.0, None)],
              "p": Point(np.zeros(2), 1.5)}

    def f(params):
        w, b, p = params["w"], params["b"], params["p"]
        return np.sum(w) * b[0] + b[1][0] ** 2 + np.sum(p.x + 1.0) * p.y

    g = db.grad(f)(params)
    assert list(g) == ["w", "b", "p"]
    assert g["w"].dtype == np.float32 and g["w"].shape == (2, 3)
    np.testing.assert_array_equal(g["w"], np.full((2, 3), 2.0))
    assert type(g["b"]) is list and type(g["b"][0]) is np.float64 and g["b"][0] == 6.0
    assert g["b"][1] == (6.0, None) and type(g["b"][1][0]) is float
    assert type(g["p"]) is Point and g["p"].y == 2.0
    np.testing.assert_array_equal(g["p"].x, [1.5, 1.5])


def test_a_defaultdict_gives_a_defaultdict_with_its_default_factory():
    """As in JAX: a defaultdict's gradient, cotangent and tangent are defaultdicts of
    the same factory (they came back plain dicts: the factory was lost rebuilding)."""
    params = collections.defaultdict(list, {"a": 2.0, "b": [collections.defaultdict(
        float, {"w": np.ones(2)})]})

    def f(p):
        return p["a"] ** 2 * np.sum(p["b"][0]["w"])

    def check(tree):
        assert type(tree) is collections.defaultdict and tree.default_factory is list
        inner = tree["b"][0]
        assert type(inner) is collections.defaultdict and inner.default_factory is float
    g = db.grad(f)(params)
    check(g)
    assert g["a"] == 8.0
    np.testing.assert_array_equal(g["b"][0]["w"], [4.0, 4.0])
    assert g["missing"] == [] and g["b"][0]["missing"] == 0.0     # the factories work
    check(db.vjp(lambda p: p, params)[1](params)[0])
    check(db.jvp(lambda p: p, (params,), (params,))[1])
    check(db.jit(db.grad(f))(params))
    # a plain dict is a cotangent of the same structure
    check(db.vjp(f, params)[1](1.0)[0])
    db.vjp(lambda p: p, params)[1]({"a": 1.0, "b": [{"w": np.ones(2)}]})


@pytest.mark.parametrize("x", [2.0, np.float32(2.0), np.float64(2.0), np.array(2.0),
                               np.array(2.0, np.float32), np.array([2.0], np.float16)])
def test_scalar_kinds_and_dtypes_are_kept(x):
    g = db.grad(lambda x: np.sum(x * x))(x)
    assert type(g) is type(x) and np.result_type(g) == np.result_type(x)
    assert np.shape(g) == np.shape(x)
    np.testing.assert_array_equal(g, 4.0)


def test_unused_argument_gets_zeros():
    g = db.grad(lambda x, y: np.sum(y), argnums=(0, 1))(np.ones(3, np.float32), np.ones(2))
    np.testing.assert_array_equal(g[0], np.zeros(3))
    assert g[0].dtype == np.float32


def test_constant_output_gives_zero_gradient():
    assert db.value_and_grad(lambda x: 3.0)(1.0) == (3.0, 0.0)


def test_argnums_int_and_tuple_and_negative():
    f = lambda x, y, z: x * y * z
    assert db.grad(f)(2.0, 3.0, 4.0) == 12.0
    assert db.grad(f, argnums=(2, 0))(2.0, 3.0, 4.0) == (6.0, 12.0)
    assert db.grad(f, argnums=-1)(2.0, 3.0, 4.0) == 6.0
    assert db.grad(f, argnums=(1,))(2.0, 3.0, 4.0) == (8.0,)


def test_non_differentiated_arguments_are_untouched():
    seen = []

    def f(x, table, n, flag, name, *, scale):
        seen.append((table, n, flag, name, scale))
        return np.sum(x * table[n]) * scale
    table = {1: np.arange(3.0)}
    g = db.grad(f)(np.ones(3), table, 1, True, "label", scale=np.float32(2.0))
    assert seen == [(table, 1, True, "label", np.float32(2.0))]
    assert seen[0][0] is table
    np.testing.assert_array_equal(g, [0.0, 2.0, 4.0])


def test_input_arrays_are_not_modified_and_gradients_do_not_alias():
    x = np.arange(3.0)
    x.flags.writeable = False
    gx, gy = db.grad(lambda x, y: np.sum(x + y), argnums=(0, 1))(x, np.zeros(3))
    assert gx is not gy and not np.shares_memory(gx, gy)
    gx[0] = 5.0
    assert gy[0] == 1.0
    np.testing.assert_array_equal(x, [0.0, 1.0, 2.0])


def test_gradient_of_broadcast_sum_is_a_writeable_fresh_array():
    g = db.grad(lambda x: np.sum(x))(np.ones((2, 3)))
    assert g.flags.writeable and g.flags.owndata
    g += 1.0


@pytest.mark.parametrize("kind", [float, np.float64, np.float32])
@pytest.mark.parametrize("c", [3, np.int64(3), 3.0, np.float64(3.0), np.float32(3.0), True],
                         ids=lambda c: type(c).__name__)
def test_scalar_arithmetic_with_constants_of_every_kind(kind, c):
    # Scalar + - * ** have an inlined path for some operand types and the general one
    # for the rest; both must give the untraced value (type and bits) and the closed-form
    # gradient, traced and replayed.
    def f(x, y):
        return (x - c) * y + (c - x) * x + c * x ** 2 + y * c + x * y - x / c

    x, y = kind(1.5), kind(-0.5)
    expected = f(x, y)
    dx = float(y) + float(c) - 2 * float(x) + 2 * float(c) * float(x) + float(y) - 1 / float(c)
    for vg in (db.value_and_grad(f, argnums=(0, 1)),
               db.jit(db.value_and_grad(f, argnums=(0, 1)))):
        for _ in range(4):                  # traced; with jit: recorded, replayed, generated
            value, (gx, gy) = vg(x, y)
            assert type(value) is type(expected) and value == expected
            assert type(gx) is kind and type(gy) is kind
            tolerance = 1e-6 if np.float32 in (kind, type(c)) else 1e-14
            assert gx == pytest.approx(dx, rel=tolerance) and gy == pytest.approx(2 * float(x))


# --- vjp and stop_gradient ----------------------------------------------------------------

def test_vjp_structured_output_and_repeated_pullback():
    x = np.array([0.5, 1.0, 2.0])
    out, pullback = db.vjp(lambda x, a: {"s": np.sin(x) * a, "t": (a * 2.0, 7)}, x, 3.0)
    np.testing.assert_allclose(out["s"], np.sin(x) * 3.0)
    assert out["t"] == (6.0, 7)
    ct = {"s": np.array([1.0, 0.0, 2.0]), "t": (1.0, 0)}
    for _ in range(2):      # the pullback may be called again: no state is consumed
        gx, ga = pullback(ct)
        np.testing.assert_allclose(gx, np.cos(x) * 3.0 * ct["s"], rtol=1e-15)
        np.testing.assert_allclose(ga, np.sum(np.sin(x) * ct["s"]) + 2.0, rtol=1e-15)
    assert ct["s"][0] == 1.0


def test_vjp_identity_does_not_hand_back_the_callers_cotangent():
    ct = np.ones(3)
    (g,) = db.vjp(lambda x: x, np.zeros(3))[1](ct)
    np.testing.assert_array_equal(g, ct)
    assert not np.shares_memory(g, ct)


def test_vjp_of_a_kernel_sum_may_be_pulled_back_twice():
    @db.fast_broadcast
    def square(x, a):
        return a * x * x
    x = np.arange(4.0)
    _, pullback = db.vjp(lambda x: square.sum(x, 2.0), x)
    first = pullback(3.0)[0].copy()
    np.testing.assert_array_equal(pullback(3.0)[0], first)
    np.testing.assert_array_equal(first, 12.0 * x)


def test_vjp_cotangent_errors():
    _, pullback = db.vjp(lambda x: (x, x * 2.0), np.ones(3))
    with pytest.raises(ValueError, match="structure"):
        pullback(np.ones(3))
    with pytest.raises(ValueError, match=r"shape \(2,\).*shape \(3,\)"):
        pullback((np.ones(2), np.ones(3)))


def test_stop_gradient():
    def f(x):
        c = db.stop_gradient(x)
        assert type(c) is np.ndarray and not c.flags.writeable
        return np.sum(x * c)
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(db.grad(f)(x), x)
    assert db.stop_gradient(x) is x
    assert db.stop_gradient({"a": (x, 1)})["a"][0] is x


# --- the tape: control flow, memory, threads, nesting -------------------------------------

def test_python_control_flow_and_recursion():
    def power(x, n):
        return 1.0 if n == 0 else x * power(x, n - 1)

    def f(x):
        total = 0.0
        while abs(total) < 50.0:
            total = total + power(x, 3)
        return total if x > 0 else -total
    assert db.grad(f)(2.0) == 7 * 3 * 4.0
    assert db.grad(f)(-2.0) == -(7 * 3 * 4.0)


def test_two_threads_take_gradients_independently():
    barrier = threading.Barrier(2)
    results = {}

    def worker(k):
        def f(x):
            barrier.wait()          # both traces are open at once
            y = x ** k
            barrier.wait()
            return np.sum(y)
        results[k] = db.grad(f)(np.full(1000, 2.0))
    threads = [threading.Thread(target=worker, args=(k,)) for k in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(results[2], np.full(1000, 4.0))
    np.testing.assert_array_equal(results[3], np.full(1000, 12.0))


def test_escaped_box_cannot_be_used_later():
    leaked = []
    db.grad(lambda x: leaked.append(x) or x * 1.0)(1.0)
    with pytest.raises(RuntimeError, match="after its grad"):
        leaked[0] * 2.0


def test_boxes_from_two_traces_cannot_meet():
    _, pullback = db.vjp(lambda x: x, 1.0)
    leaked = []
    db.vjp(lambda x: leaked.append(x) or x, 1.0)
    with pytest.raises((RuntimeError, ValueError)):
        db.grad(lambda y: leaked[0] + y)(1.0)


def test_records_only_for_traced_operations():
    recorded = []

    def f(x, c):
        y = np.sin(c) * 2.0 + c[1]          # constants: no record
        z = x * y[0]
        recorded.append(len(z.tape.records))
        return z
    db.grad(f)(1.0, np.arange(5.0))
    assert recorded == [1]


# --- errors -------------------------------------------------------------------------------

def test_grad_of_non_scalar_output_names_the_shape():
    with pytest.raises(TypeError, match=r"shape \(3,\)"):
        db.grad(lambda x: x * 2.0)(np.ones(3))
    with pytest.raises(TypeError, match="tuple"):
        db.grad(lambda x: (x, x))(1.0)


@pytest.mark.parametrize("bad", [1, True, np.int32(3), np.arange(3), np.array([True]),
                                 {"a": 1.0, "n": 2}, 1.0 + 2.0j, "x"])
def test_differentiating_int_bool_or_other_arguments_is_a_type_error(bad):
    with pytest.raises(TypeError, match="cannot differentiate"):
        db.grad(lambda x: 1.0)(bad)


def test_argnums_errors():
    f = lambda x, y: x * y
    with pytest.raises(ValueError, match="out of range"):
        db.grad(f, argnums=2)(1.0, 2.0)
    with pytest.raises(ValueError, match="out of range"):
        db.grad(f, argnums=(0, -3))(1.0, 2.0)
    with pytest.raises(ValueError, match="repeats"):
        db.grad(f, argnums=(0, 0))
    with pytest.raises(TypeError, match="argnums"):
        db.grad(f, argnums=1.0)


@pytest.mark.parametrize("outer", [
    lambda inner, x: db.grad(lambda x: np.sum(inner(x)))(x),
    lambda inner, x: db.jvp(inner, (x,), (x,)),
    lambda inner, x: db.jacobian(inner)(x),
    lambda inner, x: db.hessian(lambda x: np.sum(inner(x)))(x),
    lambda inner, x: db.vjp(inner, x),
], ids=["grad", "jvp", "jacobian", "hessian", "vjp"])
@pytest.mark.parametrize("closure", [False, True])
def test_out_inside_another_transform_is_refused_before_f_runs(outer, closure):
    """A gradient traced by an enclosing transform cannot be written into a plain out
    array: refused saying so, before f runs (the error said the out array, of the right
    shape and dtype, had the wrong ones; or, the argument untraced but f closing over
    a traced value, that writing the gradient 'would detach' it)."""
    buffer, calls = np.zeros(2), []

    def f(y, c):
        calls.append(1)
        return np.sum(y ** 3) * c

    def inner(x):
        if closure:         # the gradient depends on the outer trace through f's c
            return db.value_and_grad(f, out=buffer)(np.ones(2), np.sum(x))[1]
        return db.value_and_grad(f, out=buffer)(x, 1.0)[1]
    with pytest.raises(TypeError, match="out= cannot be used inside another transform"):
        outer(inner, np.array([1.0, 2.0]))
    assert not calls and not buffer.any()
    with pytest.raises(TypeError, match=r"\(here an enclosing jvp\)"):
        db.jvp(inner, (np.ones(2),), (np.ones(2),))
    # without out=, the same programs differentiate
    np.testing.assert_array_equal(
        db.jvp(lambda x: db.grad(f)(x, 1.0), (np.array([1.0, 2.0]),), (np.ones(2),))[1],
        [6.0, 12.0])


@pytest.mark.parametrize("write", [
    lambda x: x.__setitem__(0, 1.0),
    lambda x: np.exp(x, out=x),
    lambda x: np.exp(np.ones(3), out=np.empty(3)) + np.multiply(x, 2.0, out=np.empty(3)),
    lambda x: np.sum(x, out=np.empty(())),
])
def test_in_place_writes_raise(write):
    with pytest.raises(TypeError, match="in-place|immutable"):
        db.grad(lambda x: np.sum(write(x)))(np.ones(3))


def test_augmented_assignment_on_a_traced_array_raises():
    def f(x):
        x += 1.0
        return np.sum(x)
    with pytest.raises(TypeError, match=r"in-place \+="):
        db.grad(f)(np.ones(3))

    def g(x):
        y = np.zeros(3)
        y += x                  # into a plain array: out= with a traced input
        return np.sum(y)
    with pytest.raises(TypeError, match="in-place"):
        db.grad(g)(np.ones(3))


@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "vmap", "jacobian", "jacfwd",
                                       "jacrev", "hessian", "jit"])
def test_a_transform_of_something_not_callable_raises_at_once(transform):
    with pytest.raises(TypeError, match=f"dualbcast.{transform} takes a function, not 3"):
        getattr(db, transform)(3)


@pytest.mark.parametrize("start", [2.0, np.float64(2.0)])
def test_augmented_assignment_on_a_traced_scalar_rebinds_it(start):
    # A float is immutable: x += 1 is x = x + 1, traced or not (as JAX and autograd).
    def f(x):
        x += 1.0
        x *= x
        x -= 0.5
        x /= 2.0
        x **= 2
        return x
    expected = 2 * ((start + 1.0) ** 2 - 0.5) / 2.0 * (start + 1.0)    # d/dx ((x+1)^2-1/2)^2/4
    assert db.grad(f)(start) == pytest.approx(expected, rel=1e-14)
    assert db.grad(lambda x: f(np.sum(x)))(np.ones(2))[0] == pytest.approx(
        db.grad(f)(2.0), rel=1e-14)


@pytest.mark.parametrize("convert", [float, int, np.asarray, lambda x: x.item(),
                                     lambda x: __import__("math").exp(x)])
def test_detaching_conversions_raise(convert):
    with pytest.raises(TypeError, match="detach"):
        db.grad(lambda x: convert(x) * 1.0)(np.float64(1.0))


def test_operation_without_rule_raises_not_implemented_naming_it():
    with pytest.raises(NotImplementedError, match="numpy.median"):
        db.grad(lambda x: np.sum(np.median(x)))(np.ones(3))
    with pytest.raises(NotImplementedError, match="numpy.nextafter"):
        db.grad(lambda x: np.sum(np.nextafter(x, 2.0)))(np.ones(3))
    with pytest.raises(NotImplementedError, match="add.accumulate"):
        db.grad(lambda x: np.sum(np.add.accumulate(x)))(np.ones(3))
    with pytest.raises(NotImplementedError, match="numpy.linalg.eigvalsh"):
        db.grad(lambda x: np.sum(np.linalg.eigvalsh(x)))(np.eye(3))


def test_comparisons_give_plain_bool_arrays_and_bool_works():
    def f(x):
        mask = x > 1.0
        assert type(mask) is np.ndarray and mask.dtype == bool
        assert type(x[0] < x[1]) is np.bool_
        return np.sum(x[mask]) if bool(np.any(mask)) else np.sum(x)
    np.testing.assert_array_equal(db.grad(f)(np.array([0.5, 2.0, 3.0])), [0.0, 1.0, 1.0])


def test_box_attributes():
    def f(x):
        assert isinstance(x, Box)
        assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and x.dtype == np.float32
        assert len(x) == 2 and x.T.shape == (3, 2) and len(list(x)) == 2
        assert "Box" in repr(x)
        return np.sum(x)
    db.grad(f)(np.ones((2, 3), np.float32))


# --- regressions from the adversarial review ----------------------------------------------

def test_vjp_outputs_are_read_only_and_primals_are_remembered():
    x = np.array([0.0, 1.0])
    y, pullback = db.vjp(np.exp, x)
    with pytest.raises(ValueError, match="read-only"):
        y[:] = 0.0
    x += 1.0                                    # an optimiser step on the caller's array
    np.testing.assert_allclose(pullback(np.ones(2))[0], np.exp([0.0, 1.0]))
    t, _ = db.vjp(lambda x: x.T, x)
    assert not np.shares_memory(t, x)


def test_vjp_cotangent_dict_in_another_key_order_and_complex_rejected():
    _, pullback = db.vjp(lambda x: {"a": x, "b": 2.0 * x}, np.ones(2))
    (g,) = pullback({"b": np.ones(2), "a": np.zeros(2)})
    np.testing.assert_array_equal(g, [2.0, 2.0])
    with pytest.raises(TypeError, match="complex"):
        pullback({"a": np.ones(2) * 1j, "b": np.ones(2)})


def test_check_grads_uses_float64_settings_for_python_floats(monkeypatch):
    from dualbcast.core.registry import PRIMITIVES
    from dualbcast.testing import check_grads
    wrong = (lambda g, ans, x, y: g * 1.15 * y * x ** (y - 1), None)
    monkeypatch.setattr(PRIMITIVES[np.power], "vjps", wrong)
    monkeypatch.setattr(PRIMITIVES[np.power], "scalar_vjps", wrong)
    with pytest.raises(AssertionError):
        check_grads(lambda x: np.power(x, 3.0), 2.0)
    monkeypatch.undo()
    check_grads(lambda a, b: np.sum(a * b), np.ones(3, np.float32), np.ones(3))


def test_formatting_a_traced_value():
    assert db.grad(lambda x: (f"{x:.2f}" == "1.50") * x)(1.5) == 1.0
