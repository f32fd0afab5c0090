"""``db.jit`` of functions that are not gradients (dualbcast/jit/staged.py): Hessian-vector
products, jvps, Hessians, Jacobians, gradients computed inside, and plain programs,
staged once per signature and run again.

The contract: a replay computes what the eager call computes.  Values, jvps and
Hessian-vector products (whose eager call nests the same traces) come out bit for bit;
a gradient computed inside is a nested derivative there (its backward pass recorded as
operations): equal to the eager gradient to rounding.  Checked against the eager
call, autograd, and a fresh trace."""
import tracemalloc
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbcast as db
from profiles import examples
from replays import staged_counts
from test_higher_order import PROGRAMS, eam as eam_program, pair, rho
from test_jit_adversarial import ARRAY_OPS, _bits, array_program, assert_same, call_sequences

RNG = np.random.default_rng(11)


def eam(x):
    return eam_program(x, np)


def _hvp(f):
    return lambda x, v: db.jvp(db.grad(f), (x,), (v,))[1]


# ------------------------------------------------------------------ second order under jit

@pytest.mark.parametrize("name", PROGRAMS)
def test_jitted_hvp_is_the_eager_hvp_bit_for_bit(name):
    f, oracle, n = PROGRAMS[name]           # (test_higher_order's programs)
    eager = _hvp(f)
    jitted = db.jit(eager)
    v = RNG.standard_normal(n)
    signs = np.resize([1.0, -0.3, 1.0], n)     # (branchy's branches kept call to call)
    for call in range(5):
        x = signs * RNG.uniform(0.1, 1.2, n)
        got, want = jitted(x, v), eager(x, v)
        assert _bits(got) == _bits(want), (call, got, want)
        np.testing.assert_allclose(got, autograd.hessian(oracle)(x) @ v, rtol=1e-10,
                                   atol=1e-12)
    assert staged_counts(jitted) == (1, 4)


@pytest.mark.parametrize("n", [1, 100, 10 ** 5])
def test_jitted_eam_hvp_at_sizes_a_kernel_loop_splits(n):
    hvp = _hvp(eam)
    jitted = db.jit(hvp)
    v = RNG.standard_normal(n)
    for _ in range(3):
        x = RNG.uniform(-0.5, 1.0, n)
        assert _bits(jitted(x, v)) == _bits(hvp(x, v))
    assert staged_counts(jitted) == (1, 2)


def test_jit_of_jvp_hessian_jacobian_and_nested_grad():
    def f(x):
        return np.sum(np.sin(x) * x ** 2) + rho.sum(x) * np.prod(x[:2])

    def fa(x):
        return anp.sum(anp.sin(x) * x ** 2) + anp.sum(anp.exp(-3.0 * (x + 1.0))) * anp.prod(x[:2])

    def vector(x):
        return np.stack([np.sum(x ** 3), rho.sum(x), x[0] * x[1]])

    def vector_a(x):
        return anp.stack([anp.sum(x ** 3), anp.sum(anp.exp(-3.0 * (x + 1.0))), x[0] * x[1]])

    functions = {
        "jvp": (lambda x, v: db.jvp(f, (x,), (v,)),
                lambda x, v: (fa(x), autograd.grad(fa)(x) @ v)),
        "hessian": (lambda x, v: db.hessian(f)(x), lambda x, v: autograd.hessian(fa)(x)),
        "jacobian_forward": (lambda x, v: db.jacobian(vector, mode="forward")(x),
                             lambda x, v: autograd.jacobian(vector_a)(x)),
        "jacobian_reverse": (lambda x, v: db.jacobian(vector, mode="reverse")(x),
                             lambda x, v: autograd.jacobian(vector_a)(x)),
        "grad_of_grad_dot_v": (lambda x, v: db.grad(lambda y: db.grad(f)(y) @ v)(x),
                               lambda x, v: autograd.hessian(fa)(x) @ v),
    }
    for name, (function, oracle) in functions.items():
        jitted = db.jit(function)
        for _ in range(3):
            x, v = RNG.uniform(0.1, 1.0, 4), RNG.standard_normal(4)
            got, want = jitted(x, v), function(x, v)
            for g, w, o in zip(np.atleast_1d(got) if name != "jvp" else got,
                               np.atleast_1d(want) if name != "jvp" else want,
                               oracle(x, v) if name == "jvp" else np.atleast_1d(oracle(x, v))):
                assert _bits(g) == _bits(w), name
                np.testing.assert_allclose(g, o, rtol=1e-11, atol=1e-13, err_msg=name)
        assert staged_counts(jitted) == (1, 2), name


def test_a_gradient_inside_jit_is_the_eager_gradient_to_rounding():
    def f(x, a):
        return np.sum(pair(x, a) * np.exp(-x)) + a * rho.sum(x[::2])

    def step(x, a):
        value, gradient = db.value_and_grad(f, argnums=(0, 1))(x, a)
        return value, x - 0.1 * gradient[0], gradient[1]

    jitted = db.jit(step)
    for _ in range(4):
        x, a = RNG.uniform(-0.5, 1.5, 9), float(RNG.uniform(0.5, 2.0))
        got, want = jitted(x, a), step(x, a)
        assert _bits(got[0]) == _bits(want[0])          # the value: the same operations
        np.testing.assert_allclose(got[1], want[1], rtol=1e-14, atol=1e-15)
        assert got[2] == pytest.approx(want[2], rel=1e-14)
    assert staged_counts(jitted) == (1, 3)


def test_a_replay_is_the_trace_of_its_arguments_bit_for_bit():
    def step(x):
        return db.grad(lambda y: np.sum(np.tanh(y) * y[::-1]) + rho.sum(y) ** 2)(x)

    first, second = RNG.standard_normal(7), RNG.standard_normal(7)
    replayed = db.jit(step)
    replayed(first)
    traced = db.jit(step)
    assert _bits(replayed(second)) == _bits(traced(second))
    assert staged_counts(replayed) == (1, 1) and staged_counts(traced) == (1, 0)


@pytest.mark.parametrize("body", [
    lambda y: np.sum(np.tanh(y)),                       # switches at |x| = 0.55
    lambda y: np.sum(np.arcsin(0.9 * np.sin(y))),       # at |x| = 0.5
    lambda y: np.sum(np.hypot(y, 0.5)),                 # at |x| = |y|
], ids=["tanh", "arcsin", "hypot"])
@pytest.mark.parametrize("transform", [
    lambda f: lambda x: db.grad(f)(x), db.hessian,
    lambda f: lambda x: db.jvp(db.grad(f), (x,), (np.ones_like(x),))[1],
], ids=["grad", "hessian", "hvp"])
def test_a_rule_s_switch_between_formulas_is_replayed_not_guarded(body, transform):
    # The rules choose a formula by the values (tanh' as 1 - tanh^2 near 0): a replay
    # computes the choice again, at every order; a guard would trace again whenever the
    # values cross the switch (or change sign: np.abs's rule asks for np.sign).
    step = transform(body)
    small, large = np.linspace(-0.3, 0.3, 5), np.linspace(-3.0, 3.0, 5)
    jitted = db.jit(step)
    jitted(small)
    for x in (large, small, -large[::-1] + 0.5):
        assert _bits(jitted(x)) == _bits(step(x))
    assert staged_counts(jitted) == (1, 3)


# ------------------------------------------------------------------ random programs

def _same_outcomes(eager, jitted, calls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for number, args in enumerate(calls, 1):
            try:
                expected = eager(*args)
            except Exception as err:
                expected = err
            try:
                got = jitted(*args)
            except Exception as err:
                got = err
            if isinstance(expected, Exception) or isinstance(got, Exception):
                assert type(got) is type(expected), (number, expected, got)
                continue
            assert_same(expected, got, f"call {number}")


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(ARRAY_OPS, min_size=1, max_size=6),
       finish=st.sampled_from(["sum", "mean", "square"]), calls=call_sequences())
def test_random_programs_jit_equals_eager(ops, finish, calls):
    """A plain program (no derivative): the same values, bit for bit."""
    f = array_program(tuple(ops), finish)
    _same_outcomes(f, db.jit(f), calls)


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(ARRAY_OPS, min_size=1, max_size=5),
       finish=st.sampled_from(["sum", "square"]), calls=call_sequences())
def test_random_programs_hvp_jit_equals_eager(ops, finish, calls):
    """The Hessian-vector product of a random program along a fixed direction."""
    f = array_program(tuple(ops), finish)

    def hvp(x, a):
        v = np.cos(np.arange(np.size(x), dtype=np.result_type(x))).reshape(np.shape(x))
        return db.jvp(db.grad(f), (x, a), (v, 1.0))[1]
    _same_outcomes(hvp, db.jit(hvp), calls)


def test_a_float32_scalars_tangent_is_float32_eager_and_jitted():
    # (found by the random programs above: the tangent of np.max of a float32 array, a
    # NumPy scalar, stayed float64, and the power after it formed its tangent from the
    # scalar's partial eagerly but from the traced rule under jit: np.float64 against
    # np.float32, and a float32 Hessian-vector product of -2.5e-08 against 0)
    def f(x, a):
        v = np.max(x) ** 0.5
        v = np.where(v > 0.0, v, 2.0 * v)
        return np.sum(v * v) + 1.0

    def jvp(x, a):
        return db.jvp(lambda x: np.max(x) ** 0.5, (x,), (np.ones_like(x),))

    def hvp(x, a):
        return db.jvp(db.grad(f), (x, a), (np.ones_like(x), 1.0))[1]
    x = np.array(0.5, dtype=np.float32)
    assert type(jvp(x, 0.0)[1]) is np.float32
    calls = [(np.array(0.0, dtype=np.float32), 0.0)] + [(x, 0.0)] * 3
    _same_outcomes(jvp, db.jit(jvp), calls)
    _same_outcomes(hvp, db.jit(hvp), calls)


def test_scalar_code_hvp_under_jit_is_bit_for_bit():
    """A power of a traced NumPy scalar is NumPy's scalar power at every level (the
    ufunc's vectorised pow rounded differently: 1 ulp apart, in float32 and float64)."""
    def loop(x):
        total = 0.0
        for xi in x:
            total = total + np.cosh(xi) ** -1
        return total

    hvp = _hvp(loop)
    for _ in range(30):
        x, v = RNG.uniform(0.1, 1.2, 5), RNG.standard_normal(5)
        assert _bits(db.jit(hvp)(x, v)) == _bits(hvp(x, v))

    hvp = _hvp(lambda x: np.sum((2 * x) ** 0.5))
    x, v = np.array(3.0, np.float32), np.array(1.0, np.float32)
    assert _bits(db.jit(hvp)(x, v)) == _bits(hvp(x, v))


# ------------------------------------------------------------------ what a replay checks

def test_control_flow_inside_a_nested_trace_is_guarded():
    def step(x):
        return db.grad(lambda y: np.sum(y ** 2) if np.sum(y) > 0 else np.sum(y ** 3))(x)

    jitted = db.jit(step)
    for sign in (1, 1, -1, -1, 1):
        x = sign * RNG.uniform(0.1, 1.0, 3)
        np.testing.assert_array_equal(jitted(x), 2 * x if sign > 0 else 3 * x ** 2)


SCALE = 2.0


@db.fast_broadcast
def scaled(x):
    return SCALE * x * x


def test_globals_of_the_function_and_of_its_kernels_are_read_again():
    global SCALE
    hvp = db.jit(lambda x, v: db.jvp(db.grad(lambda y: scaled.sum(y) * np.sum(y)),
                                     (x,), (v,))[1])
    x, v = RNG.standard_normal(3), RNG.standard_normal(3)
    try:
        for scale in (2.0, 2.0, 5.0, 5.0):
            SCALE = scale
            want = scale * (2 * v * np.sum(x) + 2 * x * np.sum(v) + 2 * np.sum(x * v))
            np.testing.assert_allclose(hvp(x, v), want, rtol=1e-13)
    finally:
        SCALE = 2.0


def test_integer_arrays_are_inputs():
    # An index array is an input: a new value (here written in place) is replayed.
    def energy(flat, i, j):
        d = flat.reshape(-1, 3)[i] - flat.reshape(-1, 3)[j]
        return np.sum(1.0 / np.sum(d * d, axis=1))

    hessian = db.jit(db.hessian(energy))
    flat = RNG.standard_normal(12)
    i, j = np.array([0, 0, 1]), np.array([1, 2, 3])
    want = db.hessian(energy)(flat, i, j)
    np.testing.assert_array_equal(hessian(flat, i, j), want)
    j[2] = 2                                    # changed in place: replayed on it
    np.testing.assert_array_equal(hessian(flat, i, j), db.hessian(energy)(flat, i, j))
    np.testing.assert_array_equal(hessian(flat, j, i), db.hessian(energy)(flat, j, i))
    assert staged_counts(hessian) == (1, 2)


def test_shapes_that_follow_integer_inputs_are_checked():
    # np.repeat by counts: the result's length follows the counts' values, where f's
    # Python code read the trace's shape; another length traces again (each signature
    # keeps the program of its last trace).
    def f(x, counts):
        y = np.repeat(x, counts)
        return y * float(len(y))

    jitted = db.jit(f)
    x = np.array([1.0, 2.0, 3.0])
    for counts in ([1, 1, 1], [1, 2, 1], [1, 1, 1], [0, 0, 5], [0, 0, 5]):
        counts = np.array(counts)
        np.testing.assert_array_equal(jitted(x, counts), f(x, counts))
    assert staged_counts(jitted) == (4, 1)


def test_outputs_keep_their_structure_and_constants_are_fresh_arrays():
    def f(x, scale):
        return {"y": (x * scale, np.sum(x)), "zeros": np.zeros(2), "n": 3, "none": None}

    jitted = db.jit(f)
    for _ in range(3):
        x = RNG.standard_normal(4)
        out = jitted(x, 2.0)
        assert_same(f(x, 2.0), out)
        out["zeros"][:] = 7.0                   # the caller's to write into
    assert staged_counts(jitted) == (1, 2)


def test_jitted_function_inside_a_trace_runs_as_it_is():
    jitted = db.jit(lambda x: np.sum(np.sin(x)) * rho.sum(x))
    x = RNG.standard_normal(5)
    jitted(x)
    jitted(x)
    want = db.grad(lambda x: np.sum(np.sin(x)) * rho.sum(x))(x)
    np.testing.assert_array_equal(db.grad(jitted)(x), want)
    np.testing.assert_array_equal(db.jvp(jitted, (x,), (x,))[1],
                                  db.jvp(lambda x: np.sum(np.sin(x)) * rho.sum(x), (x,), (x,))[1])


def test_what_cannot_be_staged_runs_eagerly_and_errors_are_the_eager_ones():
    jitted = db.jit(lambda a: np.sum(np.linspace(0.0, a, 5)))    # no rule: not staged
    assert jitted(2.0) == jitted(2.0) == np.sum(np.linspace(0.0, 2.0, 5))
    assert jitted(3.0) == np.sum(np.linspace(0.0, 3.0, 5))

    def fails(x):
        if np.sum(x) > 10:
            raise ValueError("too large")
        return x * 2

    jitted = db.jit(fails)
    np.testing.assert_array_equal(jitted(np.ones(2)), 2 * np.ones(2))
    with pytest.raises(ValueError, match="too large"):
        jitted(np.full(2, 6.0))
    np.testing.assert_array_equal(jitted(np.ones(2)), 2 * np.ones(2))


def test_third_order_through_a_kernel_is_still_refused():
    third = db.jit(lambda x: db.grad(db.grad(db.grad(lambda y: rho.sum(y))))(x))
    with pytest.raises(NotImplementedError, match="third order"):
        third(0.3)


def test_bad_uses_are_named():
    with pytest.raises(TypeError, match="takes a function"):
        db.jit(3)

    class Result:
        pass

    with pytest.raises(TypeError, match="returned a Result"):
        db.jit(lambda x: Result())(np.ones(2))
    jitted = db.jit(lambda x: x)
    assert db.jit(jitted) is jitted


def test_a_float_error_in_a_replay_gives_the_eager_result():
    hvp = _hvp(lambda x: np.sum(np.sqrt(x) * x))
    jitted = db.jit(hvp)
    v = np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in (np.array([1.0, 2.0, 3.0]), np.array([0.0, 2.0, 3.0]),
                  np.array([4.0, 2.0, 1.0])):
            assert _bits(jitted(x, v)) == _bits(hvp(x, v))


def test_memory_stays_bounded_over_thousands_of_replays():
    hvp = db.jit(_hvp(eam))
    x, v = RNG.standard_normal(50), RNG.standard_normal(50)
    for _ in range(50):
        hvp(x, v)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            hvp(x, v)
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert grown < 200_000, grown


def test_a_program_too_long_to_generate_is_interpreted_with_the_same_bits():
    from dualbcast.jit import policy

    def f(x):
        total = 0.0
        for i in range(policy.GENERATE_UP_TO // 2):
            total = total + x[i % 3] * 1.0001 + 0.5 * np.sin(x[(i + 1) % 3])
        return total

    jitted = db.jit(f)
    for _ in range(3):
        x = RNG.standard_normal(3)
        assert _bits(np.float64(jitted(x))) == _bits(np.float64(f(x)))
    assert staged_counts(jitted) == (1, 2)


def _hvp_of(f):
    def hvp(x, a):
        v = np.cos(np.arange(np.size(x), dtype=np.result_type(x))).reshape(np.shape(x))
        return db.jvp(db.grad(f), (x, a), (v, 1.0))[1]
    return hvp


def test_a_python_float_tangent_stays_weak_in_a_staged_program():
    # (found by the random hvp programs: staged, the tangent 1.0 of a Python float was
    # an np.float64, and x32 - a's tangent became float64)
    hvp = _hvp_of(array_program((("pow", 2), ("branch", 0.0)), "square"))
    x = np.array(0.0, dtype=np.float32)
    _same_outcomes(hvp, db.jit(hvp), [(x, 0.0)] * 3)


def test_a_nan_input_gives_nans_in_the_same_places():
    # (found by the random hvp programs: the max's backward over a NaN meets two NaNs,
    # and which one a product carries -- its sign -- depends on the machine code)
    hvp = _hvp_of(array_program((("reduce", "max", None), ("ksum", "kexp", "a"),
                                 ("kmap", "kexp", "a")), "sum"))
    calls = [(np.zeros(3), 0.0), (np.zeros(3), 0.0), (np.array([0.0, 0.0, np.nan]), 0.0)]
    _same_outcomes(hvp, db.jit(hvp), calls)


def test_a_replay_hands_out_a_0d_array_where_the_eager_call_does():
    """Found by the random programs: after traces on NaN inputs, the replay of an HVP
    of a 0-d input gave a NumPy scalar (NumPy's operations on 0-d arrays give
    scalars) where the eager call gives a 0-d array."""
    f = array_program((("kmap", "kexp", "a"),), "sum")

    def hvp(x, a):
        v = np.cos(np.arange(np.size(x), dtype=np.result_type(x))).reshape(np.shape(x))
        return db.jvp(db.grad(f), (x, a), (v, 1.0))[1]
    calls = [(np.array(np.nan), 0.0)] * 3 + [(np.array(0.0), 0.0)]
    _same_outcomes(hvp, db.jit(hvp), calls)


def test_a_mean_s_cotangent_is_a_small_constant_not_a_large_one():
    # (the backward pass of np.mean broadcasts one number: a view of stride 0, whose
    # 0.8 MiB of elements once counted as a large constant, and the program ran eagerly)
    def f(w, x):
        return np.mean(w * x) + np.mean(np.sum(w[:, None] * x[:, None] * x[:, None], axis=1))

    eager = db.value_and_grad(f)
    jitted = db.jit(eager)
    for _ in range(3):
        w, x = np.random.default_rng(1).normal(size=(2, 100_000))
        value, gradient = jitted(w, x)
        want_value, want_gradient = eager(w, x)
        assert _bits(value) == _bits(want_value)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-14, atol=0)
    report = jitted.explain()
    assert "2 replays, 0 eager calls" in report, report


def test_a_closed_over_broadcast_view_is_compared_by_what_it_reads():
    v = np.random.default_rng(2).normal(size=600)
    table = np.broadcast_to(v, (600, 600))          # (2.7 MiB of elements, 4.7 KiB read)

    def f(x, y):
        return np.sum(x * table * y)

    jitted = db.jit(f)
    x, y = np.ones((600, 600)), np.full((600, 600), 0.5)
    for call in range(4):
        if call == 2:
            v[7] += 1.0                             # (changed in place, through the view)
        assert _bits(jitted(x, y)) == _bits(f(x, y)), call
    report = jitted.explain()
    assert "2 traces, 2 replays, 0 eager calls" in report, report
