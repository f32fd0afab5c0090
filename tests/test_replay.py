"""Replay (dualbcast/jit): a jitted value_and_grad function traces once per
signature and replays afterwards, and a replay never differs from a trace.

Each test counts how often the function's Python body runs (a trace runs it, a replay
does not) and checks every gradient against autograd or a closed form."""
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbcast as db
from dualbcast.jit import policy
from dualbcast.testing import check_grads
from replays import programs_of

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True, params=["interpreted", "generated"])
def replay_mode(request, monkeypatch):
    """Every test twice: replays interpreted, and replays running generated code from
    the second replay on (programs are recorded at the first call)."""
    monkeypatch.setattr(policy, "GENERATE_AFTER",
                        1 if request.param == "generated" else 10 ** 9)
    return request.param


class Counted:
    """``f`` that counts the runs of its body (the traces)."""

    def __init__(self, body):
        self.body = body
        self.runs = 0

    def __call__(self, *args, **kwargs):
        self.runs += 1
        return self.body(*args, **kwargs)


@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


def eam(np, rho_sum):
    def energy(x):
        p = rho_sum(x)
        return p ** 2 + p ** 3 + 0.25 * p ** 4
    return energy


def test_eam_traces_once_and_replays_the_right_gradients():
    f = Counted(eam(np, rho.sum))
    vg = db.jit(db.value_and_grad(f))
    want = autograd.value_and_grad(eam(anp, lambda x: anp.sum(anp.exp(-3.0 * (x + 1.0)))))
    for _ in range(4):
        x = RNG.uniform(0, 1, 50)
        value, gradient = vg(x)
        value_want, gradient_want = want(x)
        np.testing.assert_allclose(value, value_want, rtol=1e-12)
        np.testing.assert_allclose(gradient, gradient_want, rtol=1e-12)
    assert f.runs == 1


def test_without_jit_every_call_traces():
    f = Counted(eam(np, rho.sum))
    vg = db.value_and_grad(f)
    for _ in range(3):
        vg(RNG.uniform(0, 1, 5))
    assert f.runs == 3
    g = Counted(eam(np, rho.sum))
    grad = db.grad(g)
    grad(np.ones(3))
    grad(np.ones(3))
    assert g.runs == 2


# --- the branchy qux of the control-flow seed: bools as non-differentiated arguments ---

def qux(np):
    def f(a, b, x):
        aa = np.sin(x) if a else np.cos(x)
        return 1.0 / np.cosh(aa) if b else np.tanh(aa)
    return f


@pytest.mark.parametrize("repeat", [1, 2])
def test_qux_each_branch_combination_is_its_own_replay(repeat):
    f = Counted(qux(np))
    grad = db.jit(db.grad(f, argnums=2))
    want = autograd.grad(qux(anp), 2)
    combinations = [(True, False), (False, True), (True, True), (False, False)]
    for _ in range(repeat):
        for a, b in combinations:
            x = float(RNG.uniform(-2, 2))
            assert grad(a, b, x) == pytest.approx(want(a, b, x), rel=1e-12)
    assert f.runs == len(combinations)


def test_a_branch_on_a_traced_value_is_checked_on_every_replay():
    def body(x):
        if x > 0:
            return np.sin(x) * x
        return np.cos(x) - x
    f = Counted(body)
    grad = db.jit(db.grad(f))
    assert grad(1.0) == pytest.approx(math.cos(1.0) * 1.0 + math.sin(1.0))
    assert grad(2.0) == pytest.approx(math.cos(2.0) * 2.0 + math.sin(2.0))
    assert f.runs == 1                                  # same branch: replayed
    assert grad(-1.0) == pytest.approx(-math.sin(-1.0) - 1.0)   # other branch: traced
    assert f.runs == 2
    assert grad(-3.0) == pytest.approx(-math.sin(-3.0) - 1.0)
    assert f.runs == 2


def test_bool_of_a_traced_value_and_a_while_loop():
    def body(x):
        y = x
        while y < 10.0:                 # the number of iterations depends on x
            y = y * 2.0
        return y
    f = Counted(body)
    grad = db.jit(db.grad(f))
    assert grad(3.0) == 4.0             # 3 -> 6 -> 12
    assert grad(4.0) == 4.0             # 4 -> 8 -> 16: same path, replayed
    assert f.runs == 1
    assert grad(1.0) == 16.0            # 1 -> 2 -> 4 -> 8 -> 16: a longer path
    assert f.runs == 2


def test_a_mask_from_a_comparison_is_checked_then_computed_again():
    def body(np):
        return lambda x: np.sum(np.where(x > 0, x ** 2, np.sin(x)))
    f = Counted(body(np))
    grad = db.jit(db.grad(f))
    want = autograd.grad(body(anp))
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(grad(x), want(x))
    y = np.array([2.0, -1.0, 0.5])              # the same mask: replayed
    np.testing.assert_allclose(grad(y), want(y))
    assert f.runs == 1
    z = np.array([-1.0, 2.0, 0.5])              # another mask: staged (traced), from now on
    np.testing.assert_allclose(grad(z), want(z))
    assert f.runs == 2
    for t in [x, y, z, -x]:                     # (staged: replayed, whatever the mask)
        np.testing.assert_allclose(grad(t), want(t))
        assert f.runs == 2
    assert "staged since a mask computed from traced values" in grad.explain()


def test_an_index_from_argmax_is_checked():
    f = Counted(lambda x: x[np.argmax(x)] * 3.0 + np.sum(x))
    grad = db.jit(db.grad(f))
    np.testing.assert_array_equal(grad(np.array([1.0, 5.0, 2.0])), [1.0, 4.0, 1.0])
    np.testing.assert_array_equal(grad(np.array([0.0, 3.0, 2.0])), [1.0, 4.0, 1.0])
    assert f.runs == 1
    np.testing.assert_array_equal(grad(np.array([9.0, 3.0, 2.0])), [4.0, 1.0, 1.0])
    assert f.runs == 2


def test_an_integer_cast_of_a_traced_value_is_checked():
    f = Counted(lambda x: x * np.sum(x.astype(np.int64)))
    grad = db.jit(db.grad(f))
    assert grad(np.array(2.5)) == 2.0
    assert grad(np.array(2.7)) == 2.0
    assert f.runs == 1
    assert grad(np.array(3.5)) == 3.0
    assert f.runs == 2


def test_a_flipping_branch_stops_being_recorded():
    f = Counted(lambda x: np.sin(x) if x > 0 else np.cos(x))
    grad = db.jit(db.grad(f))
    xs = [1.0, -1.0] * 12
    for x in xs:
        want = math.cos(x) if x > 0 else -math.sin(x)
        assert grad(x) == pytest.approx(want)
    assert f.runs == len(xs)            # every call traced, every gradient right
    vg = db.jit(db.value_and_grad(f))
    for x in xs:
        vg(x)
    calls_before = f.runs
    for x in xs[:4]:
        vg(x)
    assert f.runs == calls_before + 4


# --- arguments a replay must match -------------------------------------------------

def test_non_differentiated_array_argument_is_an_input():
    # Arguments are inputs (jax.jit's contract): a new value, even one written in
    # place, is replayed, never compared and never traced again.
    f = Counted(lambda x, a: np.sum(x * a) + np.sum(a))
    vg = db.jit(db.value_and_grad(f))
    x = np.arange(3.0)
    a = np.array([1.0, 2.0, 3.0])
    assert vg(x, a)[0] == 14.0
    a[0] = 10.0                         # changed in place
    value, gradient = vg(x, a)
    assert value == 23.0
    np.testing.assert_array_equal(gradient, a)
    vg(x + 1.0, a.copy())               # another object
    value, gradient = vg(x, np.array([-1.0, 0.5, 2.0]))
    assert value == -1.0 * 0 + 0.5 * 1 + 2.0 * 2 + 1.5
    np.testing.assert_array_equal(gradient, [-1.0, 0.5, 2.0])
    assert f.runs == 1


@pytest.mark.parametrize("first, second, runs", [(0.5, -0.5, 1), (2.5, 7.0, 1), (2, 2.0, 2),
                                                 (True, 1, 2), (np.float32(1), 1.0, 2)])
def test_non_differentiated_numbers_floats_are_inputs_ints_static(first, second, runs):
    # Floats are inputs keyed by their type (a new value replays); ints and bools are
    # static, keyed by type and value.
    f = Counted(lambda x, c: np.sum(x / c))
    grad = db.jit(db.grad(f))
    x = np.ones(2)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(grad(x, first), 1.0 / np.asarray(first, dtype=float))
        np.testing.assert_array_equal(grad(x, second), 1.0 / np.asarray(second, dtype=float))
    assert f.runs == runs


def test_a_global_array_changed_in_place_is_noticed():
    weights = np.array([1.0, 2.0, 3.0])
    f = Counted(lambda x: np.sum(x * weights))
    grad = db.jit(db.grad(f))
    np.testing.assert_array_equal(grad(np.zeros(3)), [1.0, 2.0, 3.0])
    weights *= 2.0
    np.testing.assert_array_equal(grad(np.zeros(3)), [2.0, 4.0, 6.0])
    assert f.runs == 2
    np.testing.assert_array_equal(grad(np.ones(3)), [2.0, 4.0, 6.0])
    assert f.runs == 2


def test_a_constant_array_a_kernel_reads_changed_in_place_is_noticed():
    @db.fast_broadcast
    def scaled(x, w):
        return w * x * x

    weights = np.array([1.0, 2.0, 3.0])
    f = Counted(lambda x: scaled.sum(x, weights))
    grad = db.jit(db.grad(f))
    np.testing.assert_array_equal(grad(np.ones(3)), [2.0, 4.0, 6.0])
    weights[1] = 0.0
    np.testing.assert_array_equal(grad(np.ones(3)), [2.0, 0.0, 6.0])
    assert f.runs == 2


def test_a_large_constant_in_a_kernel_is_not_copied_so_not_replayed():
    @db.fast_broadcast
    def scaled(x, w):
        return w * x

    weights = np.ones(200_000)                  # 1.6 MB: above the copy limit
    f = Counted(lambda a: scaled.sum(a, weights))
    grad = db.jit(db.grad(f))
    assert grad(2.0) == 200_000.0
    weights[:] = 2.0
    assert grad(2.0) == 400_000.0
    assert f.runs == 2
    weights.flags.writeable = False             # read-only: another view could write it
    grad = db.jit(db.grad(f))
    grad(1.0)
    grad(1.0)
    assert f.runs == 4


def test_a_new_shape_dtype_or_structure_traces_again():
    f = Counted(lambda p: np.sum(p["w"] ** 2) + p["b"])
    grad = db.jit(db.grad(f))
    params = {"w": np.ones(3), "b": 1.0}
    assert grad(params)["w"].tolist() == [2.0, 2.0, 2.0]
    assert f.runs == 1
    gradient = grad({"w": np.ones(4, np.float32), "b": 1.0})
    assert gradient["w"].dtype == np.float32 and gradient["w"].shape == (4,)
    assert f.runs == 2
    grad({"w": np.ones((2, 2))[:, 0], "b": 1.0})        # non-contiguous: strides differ
    assert f.runs == 3
    grad({"w": np.ones(3), "b": np.float64(1.0)})        # a NumPy scalar, not a float
    assert f.runs == 4
    grad({"w": np.full(3, 5.0), "b": 2.0})
    assert f.runs == 4


def test_an_argument_that_cannot_be_compared_means_tracing_every_call():
    class Settings:
        scale = 2.0
    f = Counted(lambda x, s: np.sum(x) * s.scale)
    grad = db.jit(db.grad(f))
    settings = Settings()
    assert grad(np.ones(2), settings).tolist() == [2.0, 2.0]
    settings.scale = 3.0
    assert grad(np.ones(2), settings).tolist() == [3.0, 3.0]
    assert f.runs == 2


def test_printing_or_stop_gradient_means_tracing_every_call(capsys):
    def printing(x):
        print(f"x = {x:.1f}")
        return x * x

    grad = db.jit(db.grad(printing))
    grad(1.0)
    grad(2.0)
    assert capsys.readouterr().out == "x = 1.0\nx = 2.0\n"
    f = Counted(lambda x: x * db.stop_gradient(x))
    grad = db.jit(db.grad(f))
    assert grad(2.0) == 2.0
    assert grad(3.0) == 3.0
    assert f.runs == 2


# --- what a replay produces ----------------------------------------------------------

def test_out_buffers_are_filled_by_replays():
    f = Counted(eam(np, rho.sum))
    buffer = np.empty(20)
    vg = db.jit(db.value_and_grad(f, out=buffer))
    for _ in range(3):
        x = RNG.uniform(0, 1, 20)
        _, gradient = vg(x)
        assert gradient is buffer
        np.testing.assert_allclose(buffer, db.grad(eam(np, rho.sum))(x),
                                   rtol=1e-14)
    assert f.runs == 1


def test_a_constant_output_replays_to_a_zero_gradient():
    f = Counted(lambda x: 3.0)
    vg = db.jit(db.value_and_grad(f))
    assert vg(np.ones(2))[0] == 3.0
    value, gradient = vg(np.ones(2))
    assert value == 3.0 and gradient.tolist() == [0.0, 0.0]
    assert f.runs == 1


def test_replayed_gradients_are_fresh_arrays():
    grad = db.jit(db.grad(lambda x: np.sum(np.sin(x))))
    first = grad(np.zeros(3))
    second = grad(np.zeros(3))
    assert first is not second and not np.shares_memory(first, second)
    first[:] = 7.0
    np.testing.assert_array_equal(grad(np.zeros(3)), [1.0, 1.0, 1.0])


def test_memoised_computation_graph_and_fold_replay():
    def graph(x):
        memo = {}

        def node(name, compute):
            if name not in memo:
                memo[name] = compute()
            return memo[name]
        a = node("a", lambda: np.tanh(x))
        c = node("c", lambda: node("a", None) * (x * 2.0 + 1.0))
        return np.sum(np.sin(c) + a)

    def agraph(x):
        a = anp.tanh(x)
        return anp.sum(anp.sin(a * (x * 2.0 + 1.0)) + a)

    def fold(xs):
        total = xs[0]
        for x in xs[1:]:
            total = total - x
        return total * total

    for f, oracle, make in [(graph, agraph, lambda: RNG.standard_normal(5)),
                            (fold, fold, lambda: tuple(RNG.standard_normal(16)))]:
        counted = Counted(f)
        grad = db.jit(db.grad(counted))
        for _ in range(3):
            x = make()
            got, want = grad(x), autograd.grad(oracle)(x)
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-12)
        assert counted.runs == 1


def test_a_jitted_gradient_differentiated_again():
    """A jitted gradient called on traced values (inside grad, or inside another
    jitted gradient) runs traced: second derivatives, replayed or not, are right."""
    grad = db.jit(db.grad(lambda x: x * x * x))
    grad(1.0)
    second = db.jit(db.grad(lambda y: grad(y)))
    for y in (1.0, 2.0, -3.0, 2.0):
        assert second(y) == 6.0 * y
        assert db.grad(lambda y: grad(y))(y) == 6.0 * y


@settings(max_examples=40, deadline=None)
@given(shape=st.sampled_from([(), (1,), (4,), (3, 4), (0,)]),
       signs=st.lists(st.sampled_from([-1.0, 1.0]), min_size=3, max_size=3),
       seed=st.integers(0, 2**16))
def test_replay_equals_tracing_on_branchy_array_code(shape, signs, seed):
    """Calls on values whose branches come and go: replaying or not, the same bits."""
    def body(x, c):
        y = np.where(x > c, np.exp(-x) * x, x ** 3)
        if np.sum(y) > 0:
            y = y * np.tanh(y)
        return np.sum(y) + (np.max(y) if np.size(y) else 0.0)

    replaying = db.jit(db.value_and_grad(body))
    tracing = db.value_and_grad(body)
    rng = np.random.default_rng(seed)
    for sign in signs:
        x = sign * rng.uniform(0.1, 2.0, shape)
        # (c = 0.5 is an input too: the gradient is staged, equal to rounding)
        got, want = replaying(x, 0.5), tracing(x, 0.5)
        assert got[0] == want[0] or np.isnan(got[0]) and np.isnan(want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-15)
    x = rng.uniform(0.1, 2.0, shape)
    np.testing.assert_allclose(replaying(x, 0.5)[1],
                               autograd.grad(lambda x: body_autograd(x, 0.5))(x), rtol=1e-12)


def body_autograd(x, c):
    y = anp.where(x > c, anp.exp(-x) * x, x ** 3)
    if anp.sum(y) > 0:
        y = y * anp.tanh(y)
    return anp.sum(y) + (anp.max(y) if anp.size(y) else 0.0)


def test_a_rebound_global_or_closure_variable_named_by_f_is_noticed():
    rows = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    index = 0
    runs = []

    def f(x):                                   # a function: its free variables are known
        runs.append(1)
        return np.sum(x * rows[index])
    grad = db.jit(db.grad(f))
    np.testing.assert_array_equal(grad(np.zeros(2)), [1.0, 2.0])
    index = 1                                   # a closure variable rebound
    np.testing.assert_array_equal(grad(np.zeros(2)), [3.0, 4.0])
    assert len(runs) == 2
    np.testing.assert_array_equal(grad(np.ones(2)), [3.0, 4.0])
    assert len(runs) == 2
    global GLOBAL_SCALE
    GLOBAL_SCALE = 2.0
    vg = db.jit(db.value_and_grad(scaled_by_global))
    assert vg(1.0) == (2.0, 2.0)
    GLOBAL_SCALE = 5.0                          # a global rebound
    assert vg(1.0) == (5.0, 5.0)


GLOBAL_SCALE = 1.0


def scaled_by_global(x):
    return x * GLOBAL_SCALE


@db.fast_broadcast
def soft(z, a):
    return math.log1p(math.exp(-abs(z * a))) + max(z, 0.0)


def everything(x, w):
    """A program touching every kind of record a replay generates code for."""
    h = soft(w @ x, 0.5)                                   # matmul, a kernel map
    picked = x[np.array([0, 2, 2, 1]), 1]                  # indexing with repeats
    rows = np.sum(h, axis=1, keepdims=True)                # keywords
    both = np.concatenate([rows.ravel(), picked])          # joining
    signed = np.copysign(both, picked.sum() - 1.0)         # a traced argument without vjp
    # (a mask the same on every call: one that changes stages the gradient, whose
    # bits are then the eager ones to rounding, test_jit_masks)
    tied = np.maximum(both, np.where(both > -50.0, both, 0.3))
    total = soft.sum(signed, 2.0) + np.sum(tied * tied) + (picked[0] * x[1, 0] - x[2, 1])
    return total * 2.0 - total / 3.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_replayed_code_equals_tracing_for_every_kind_of_record(dtype):
    replaying = db.jit(db.value_and_grad(everything, argnums=(0, 1)))
    tracing = db.value_and_grad(everything, argnums=(0, 1))
    rng = np.random.default_rng(3)
    for _ in range(4):
        x = rng.uniform(-1, 1, (3, 2)).astype(dtype)
        w = rng.uniform(-1, 1, (4, 3)).astype(dtype)
        got, want = replaying(x, w), tracing(x, w)
        assert got[0] == want[0]
        for g, h in zip(got[1], want[1]):
            assert g.dtype == h.dtype == dtype
            np.testing.assert_array_equal(g, h)
    check_grads(everything, x.astype(np.float64), w.astype(np.float64), argnums=(0, 1))


def test_every_kind_of_record_with_a_mask_that_changes_is_staged_to_rounding():
    def masked(x, w):
        both = np.concatenate([np.sum(soft(w @ x, 0.5), axis=1), x[np.array([0, 2, 2, 1]), 1]])
        return everything(x, w) + np.sum(np.where(both > 0.3, both, 0.3) ** 2)

    replaying = db.jit(db.value_and_grad(masked, argnums=(0, 1)))
    tracing = db.value_and_grad(masked, argnums=(0, 1))
    rng = np.random.default_rng(4)
    for _ in range(6):              # (the mask changes: the program is staged)
        x, w = rng.uniform(-1, 1, (3, 2)), rng.uniform(-1, 1, (4, 3))
        got, want = replaying(x, w), tracing(x, w)
        assert got[0] == want[0]
        for g, h in zip(got[1], want[1]):
            np.testing.assert_allclose(g, h, rtol=1e-14, atol=1e-15)
    assert "staged since a mask computed" in replaying.explain()


def test_a_function_writing_into_its_argument_is_traced_again():
    def f(x, counts):
        counts += 1.0                   # a side effect on a non-differentiated argument
        return np.sum(x * counts)

    grad = db.jit(db.grad(f))
    counts = np.zeros(2)
    np.testing.assert_array_equal(grad(np.ones(2), counts), [1.0, 1.0])
    np.testing.assert_array_equal(grad(np.ones(2), counts), [2.0, 2.0])
    np.testing.assert_array_equal(counts, [2.0, 2.0])


def test_jit_records_at_the_first_call():
    f = Counted(lambda x: np.sum(np.sin(x)))
    grad = db.jit(db.grad(f))
    for expected_runs in (1, 1, 1, 1):      # traced and recorded, replayed...
        np.testing.assert_allclose(grad(np.full(2, 0.5)), np.cos(np.full(2, 0.5)))
        assert f.runs == expected_runs


def test_generated_code_takes_over_after_enough_replays(monkeypatch):
    monkeypatch.setattr(policy, "GENERATE_AFTER", 3)
    vg = db.jit(db.value_and_grad(eam(np, rho.sum)))
    want = db.value_and_grad(eam(np, rho.sum))
    programs = programs_of(vg)
    for call in range(6):
        x = RNG.uniform(0, 1, 7)
        got, expected = vg(x), want(x)
        assert got[0] == expected[0]
        np.testing.assert_array_equal(got[1], expected[1])
        (entry,) = programs.entries.values()
        # call 0 records; calls 1-3 are interpreted replays, the third generates code
        assert (entry.program.generated is not None) == (call >= 3)


# --- found by review: each replayed differently from tracing before its fix ---------

def agree(f, calls, **options):
    """``f``'s value and gradient by replaying and by tracing, call after call: the
    same bits.  ``calls``: argument tuples, or functions returning one (they may change
    state between calls)."""
    replaying = db.jit(db.value_and_grad(f, **options))
    tracing = db.value_and_grad(f, **options)
    for call in calls:
        args = call() if callable(call) else call
        got, want = replaying(*args), tracing(*args)
        assert np.array_equal(got[0], want[0], equal_nan=True)
        np.testing.assert_array_equal(got[1], want[1])


def test_a_guard_outcome_written_into_by_f():
    def f(x):
        k = np.floor(x)
        k += 1.0                        # f writes into the array the guard handed it
        return np.sum(x * k)
    agree(f, [(np.array([0.5]),), (np.array([0.5]),), (np.array([1.5]),)])


def test_a_traced_fill_value():
    agree(lambda x: np.sum(x * np.full_like(x, x[0])),
          [(np.array([1.0, 2.0]),), (np.array([1.0, 2.0]),), (np.array([3.0, 2.0]),)])


def test_lists_and_read_only_arrays_changed_between_calls_or_inside_f():
    x = np.array([1.0, 2.0, 3.0])
    indices = [0, 1]

    def change_list():
        indices[0] = 2
        return (x, [0, 1])
    agree(lambda x, i: np.sum(x[i] ** 2), [(x, indices), (x, indices), change_list])

    def built_and_changed(x):
        w = [1.0, 2.0]
        y = x * w
        w[0] = 5.0                      # after its use: the gradient must not see it
        return np.sum(y)
    agree(built_and_changed, [(x[:2],), (x[:2],), (x[:2],)])

    base = np.ones(3)
    view = base.view()
    view.flags.writeable = False

    def change_base():
        base[:] = 9.0
        return (x,)
    agree(lambda x: np.sum(x * view), [(x,), (x,), change_base])


def test_a_constant_operand_of_a_guard_changed_in_place():
    threshold = np.array([0.5])

    def change_threshold():
        threshold[0] = 5.0
        return (np.array([1.0]),)
    agree(lambda x: np.sum(x) if x > threshold else -np.sum(x),
          [(np.array([1.0]),), (np.array([1.0]),), change_threshold])


def test_errors_f_catches_or_raises_itself_mean_tracing_again():
    def caught(x):
        try:
            return 1.0 / x
        except ZeroDivisionError:
            return x * 0.0 + 1.0
    agree(caught, [(2.0,), (2.0,), (0.0,), (4.0,)])

    def own_error_settings(x):
        with np.errstate(divide="raise"):
            try:
                return np.sum(np.log(x))
            except FloatingPointError:
                return np.sum(x * 0.0)
    agree(own_error_settings, [(np.array([1.0, 2.0]),), (np.array([1.0, 2.0]),),
                               (np.array([0.0, 2.0]),)])


def test_bound_methods_are_not_compared_by_identity():
    class Model:
        scale = 2.0

        def apply(self, x):
            return x * self.scale
    model = Model()

    def rescale():
        model.scale = 5.0
        return (np.ones(2), model.apply)
    agree(lambda x, g: np.sum(g(x)), [(np.ones(2), model.apply), (np.ones(2), model.apply),
                                      rescale])


SCALE_IN_GENERATOR = 2.0


def test_a_global_named_inside_a_generator_expression():
    def f(x):
        return sum(SCALE_IN_GENERATOR * x[i] for i in range(2))

    def rebind():
        global SCALE_IN_GENERATOR
        SCALE_IN_GENERATOR = 5.0
        return (np.ones(2),)
    agree(f, [(np.ones(2),), (np.ones(2),), rebind])


def test_numbers_and_dict_keys_by_their_bits():
    agree(lambda x, c: np.sum(np.copysign(x, c)),
          [(np.ones(2), math.nan), (np.ones(2), math.nan), (np.ones(2), -math.nan)])
    agree(lambda x, d: np.sum(np.copysign(x, list(d)[0])),
          [(np.ones(2), {0.0: 1}), (np.ones(2), {0.0: 1}), (np.ones(2), {-0.0: 1})])


def test_a_long_program_is_not_generated(monkeypatch):
    monkeypatch.setattr(policy, "GENERATE_AFTER", 1)
    monkeypatch.setattr(policy, "GENERATE_UP_TO", 10)

    def fold(xs):
        total = xs[0]
        for x in xs[1:]:
            total = total - x
        return total
    vg = db.jit(db.value_and_grad(fold))
    xs = tuple(float(i) for i in range(20))
    for _ in range(4):
        assert vg(xs)[1] == (1.0,) + (-1.0,) * 19
    programs = programs_of(vg)
    (entry,) = programs.entries.values()
    assert entry.program.generated is None and entry.replays >= 2


def test_argnums_out_of_order_with_structured_arguments():
    """The short path's leaves follow argnums' order, as a trace's do (every leaf
    alike, so a mix-up could only show in the values); gradients keep each
    argument's structure."""
    def f(a, b, c):
        return (np.sum(a * 2.0) + np.sum(3.0 * b[0] * b[1]["w"][0]) + np.sum(c ** 2)
                + np.sum(c * b[0]))

    def calls():
        for k in range(5):
            yield (np.ones(3) * k, (np.arange(3.0) - k, {"w": [np.full(3, 2.5 + k)]}),
                   np.arange(3.0) + k)
    replaying = db.jit(db.value_and_grad(f, argnums=(2, 0, 1)))
    tracing = db.value_and_grad(f, argnums=(2, 0, 1))
    for args in calls():
        (value, got), (want_value, want) = replaying(*args), tracing(*args)
        assert value == want_value
        for g, w in zip((got[0], got[1], got[2][0], got[2][1]["w"][0]),
                        (want[0], want[1], want[2][0], want[2][1]["w"][0])):
            np.testing.assert_array_equal(g, w)
    f = Counted(f)
    replaying = db.jit(db.value_and_grad(f, argnums=(2, 0, 1)))
    for args in calls():
        replaying(*args)
    assert f.runs == 1


def test_a_float_leaf_in_a_structure_gets_a_float_gradient():
    f = Counted(lambda xs, ys: xs[0] * ys["y"] + xs[1] ** 2)
    vg = db.jit(db.value_and_grad(f, argnums=(1, 0)))
    for k in range(4):
        value, (gy, gx) = vg((1.5 + k, np.float64(0.5)), {"y": 2.0})
        assert type(gy["y"]) is float and gy["y"] == 1.5 + k
        assert type(gx) is tuple and type(gx[0]) is float and type(gx[1]) is np.float64
        assert gx == (2.0, 1.0)
    assert f.runs == 1
