"""db.jit's contract for arguments (jax.jit's): float arrays, integer arrays and floats,
differentiated or not, are inputs of the program, keyed by shape and dtype and never
by value; ints, bools and strings are static; closed-over arrays are constants.  And
what a jitted function says about itself: the ``"dualbcast"`` log, ``explain()``, one
warning when it runs eagerly on every call."""
import gc
import logging
import math
import warnings
import weakref

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import dualbcast as db
from profiles import examples
from soak import run_soak

RNG = np.random.default_rng(29)


@db.fast_broadcast
def morse(r2, depth, width):
    r = math.sqrt(r2)
    e = math.exp(-width * (r - 1.1))
    return depth * (e * e - 2.0 * e)


def pair_energy(X, i, j, depth):
    d = X[j] - X[i]
    return 0.5 * morse.sum(np.sum(d * d, axis=1), depth, 1.5)


def pair_energy_autograd(X, i, j, depth):
    d = X[j] - X[i]
    r = anp.sqrt(anp.sum(d * d, axis=1))
    e = anp.exp(-1.5 * (r - 1.1))
    return 0.5 * anp.sum(depth * (e * e - 2.0 * e))


def neighbours(X, cutoff):
    n = len(X)
    i, j = np.nonzero(np.triu(np.ones((n, n), bool), 1))
    keep = np.sum((X[i] - X[j]) ** 2, axis=1) < cutoff ** 2
    i, j = i[keep], j[keep]
    return np.concatenate([i, j]), np.concatenate([j, i])


def staged_entries(jitted):
    """The entries of a jitted gradient's staged calls (those with other inputs)."""
    staged = next(cell.cell_contents for cell in jitted.__closure__
                  if type(cell.cell_contents).__name__ == "StagedGradients")
    return list(staged.programs.entries.values())


# ---------------------------------------------------------------- arguments are inputs


def test_a_neighbour_list_potential_replays_on_new_positions_and_new_lists():
    energy = db.jit(db.value_and_grad(pair_energy))
    eager = db.value_and_grad(pair_energy)
    X = RNG.uniform(0.0, 3.0, (20, 3))
    i, j = neighbours(X, 2.0)
    for step in range(5):
        X = X + RNG.normal(0.0, 0.01, X.shape)
        if step == 3:                       # the same pairs in another order
            order = RNG.permutation(len(i))
            i, j = i[order], j[order]
        value, gradient = energy(X, i, j, 0.9)
        want_value, want_gradient = eager(X, i, j, 0.9)
        np.testing.assert_allclose(value, want_value, rtol=1e-13)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gradient, autograd.grad(pair_energy_autograd)(X, i, j, 0.9),
                                   rtol=1e-10, atol=1e-13)
    entries = staged_entries(energy)
    assert [(e.traces, e.replays, e.eager) for e in entries] == [(1, 4, 0)]


def test_an_index_out_of_range_raises_as_the_eager_call_does():
    energy = db.jit(db.value_and_grad(pair_energy))
    X = RNG.uniform(0.0, 3.0, (6, 3))
    i, j = np.array([0, 1, 2]), np.array([3, 4, 5])
    for _ in range(3):
        energy(X, i, j, 1.0)
    bad = np.array([3, 4, 6])
    with pytest.raises(IndexError):
        db.value_and_grad(pair_energy)(X, i, bad, 1.0)
    with pytest.raises(IndexError):
        energy(X, i, bad, 1.0)
    np.testing.assert_allclose(energy(X, i, j, 1.0)[1],
                               db.value_and_grad(pair_energy)(X, i, j, 1.0)[1], rtol=1e-12)


def test_a_design_matrix_and_a_float_are_inputs():
    @db.fast_broadcast
    def poisson_nll(eta, y):
        return math.exp(eta) - y * eta

    def loss(w, X, y, ridge):
        return poisson_nll.sum(X @ w, y) + ridge * np.sum(w * w)

    jitted = db.jit(db.value_and_grad(loss))
    eager = db.value_and_grad(loss)
    w = RNG.normal(0.0, 0.1, 4)
    for ridge in (0.5, 0.25, 1e-3, 0.0):
        X = RNG.normal(0.0, 0.3, (50, 4))
        y = RNG.poisson(1.0, 50).astype(float)
        got, want = jitted(w, X, y, ridge), eager(w, X, y, ridge)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    assert "1 trace, 3 replays" in jitted.explain()


@settings(max_examples=examples(25), deadline=None)
@given(data=st.data())
def test_arguments_of_every_kind_changing_between_calls(data):
    # x differentiated; the others: a float array, an integer index array, a float, a
    # tuple of floats, a dict of arrays (inputs); an int and a bool (static), a bool
    # mask (a constant compared by value).
    def f(x, w, idx, scale, pair, table, power, flip, mask):
        y = x[idx] * w[idx] * scale + pair[0] * np.sum(table["a"] * x) - pair[1]
        y = np.where(mask[idx], y, -y) if flip else y
        return np.sum(np.tanh(y) ** power)

    n = data.draw(st.integers(1, 6))
    jitted = db.jit(db.value_and_grad(f))
    eager = db.value_and_grad(f)
    floats = st.floats(-2.0, 2.0, allow_nan=False)
    for _ in range(data.draw(st.integers(2, 6))):
        m = data.draw(st.sampled_from([1, 3]))
        args = (np.array(data.draw(st.lists(floats, min_size=n, max_size=n))),
                np.array(data.draw(st.lists(floats, min_size=n, max_size=n))),
                np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=m, max_size=m))),
                data.draw(floats),
                (data.draw(floats), data.draw(floats)),
                {"a": np.array(data.draw(st.lists(floats, min_size=n, max_size=n)))},
                data.draw(st.sampled_from([1, 2])),
                data.draw(st.booleans()),
                np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))))
        got, want = jitted(*args), eager(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
        assert type(got[0]) is type(want[0]) and got[1].dtype == want[1].dtype


def test_value_changes_never_trace_again_but_static_ones_do():
    runs = []

    def f(x, data, scale, n):
        runs.append(n)
        return np.sum(x * data[:n]) * scale

    jitted = db.jit(db.grad(f))
    x = np.ones(3)
    for k in range(6):
        jitted(x, RNG.normal(size=5), float(k), 3)
    assert len(runs) == 1
    jitted(np.ones(2), RNG.normal(size=5), 1.0, 2)               # another int: traced
    assert runs == [3, 2]


def test_an_integer_argument_cannot_be_differentiated_under_jit_either():
    jitted = db.jit(db.grad(lambda x, i: np.sum(x[i]), argnums=1))
    with pytest.raises(TypeError, match="only float scalars and float arrays"):
        db.grad(lambda x, i: np.sum(x[i]), argnums=1)(np.ones(3), np.array([0, 1]))
    with pytest.raises(TypeError, match="only float scalars and float arrays"):
        jitted(np.ones(3), np.array([0, 1]))


def test_out_buffers_with_other_inputs():
    def f(x, data):
        return np.sum(np.sin(x) * data)

    out = np.empty(3)
    jitted = db.jit(db.value_and_grad(f, out=out))
    for _ in range(3):
        data = RNG.normal(size=3)
        x = RNG.normal(size=3)
        value, gradient = jitted(x, data)
        assert gradient is out
        np.testing.assert_allclose(gradient, np.cos(x) * data, rtol=1e-14)
    with pytest.raises(ValueError, match="out leaf"):
        db.jit(db.value_and_grad(f, out=np.empty(4)))(x, data)
    with pytest.raises(ValueError, match="overlaps argument"):
        db.jit(db.value_and_grad(f, out=data))(x, data)


# ---------------------------------------------------------------- saying what happened


def test_the_log_and_explain_say_what_happened(caplog):
    caplog.set_level(logging.DEBUG, logger="dualbcast")

    def f(x, scale):
        return np.sum(x * scale)

    jitted = db.jit(db.value_and_grad(f))
    for _ in range(3):
        jitted(np.ones(3), 2.0)
    text = jitted.explain()
    assert "db.jit of" in text and "f" in text
    assert "(float64[3], float)" in text and "1 trace, 2 replays, 0 eager calls" in text
    assert any("traced for (float64[3], float): the first call" in r.getMessage()
               for r in caplog.records)

    fused = db.jit(db.value_and_grad(lambda x: np.sum(x * x)))
    for _ in range(4):
        fused(np.ones(3))
    assert "fused into one Numba function" in fused.explain() \
        or "not fused:" in fused.explain()


def test_an_unrecordable_program_runs_eagerly_says_why_and_warns_once(caplog):
    caplog.set_level(logging.INFO, logger="dualbcast")

    def f(x):
        return np.sum(db.stop_gradient(x) * x)

    jitted = db.jit(db.grad(f))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(25):
            np.testing.assert_array_equal(jitted(np.ones(2)), [1.0, 1.0])
    useless = [w for w in caught if "doing nothing" in str(w.message)]
    assert len(useless) == 1 and issubclass(useless[0].category, UserWarning)
    assert "stop_gradient was called" in str(useless[0].message)
    assert useless[0].filename == __file__          # pointed at the caller's line
    assert "stop_gradient was called" in jitted.explain()
    assert "runs eagerly" in jitted.explain()
    logged = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
    assert len(logged) == 1 and "stop_gradient was called" in logged[0]


BIG_TABLE = np.linspace(0.0, 1.0, 1 << 16)      # 512 KiB: past the copy limit


def test_a_large_closed_over_array_is_named_with_the_way_out():
    def f(x):
        return np.sum(x[0] * BIG_TABLE)     # (copied by the record: compared each replay)

    jitted = db.jit(db.grad(f))
    for _ in range(3):
        jitted(np.ones(3))
    text = jitted.explain()
    assert "1 trace, 2 replays" in text
    assert "note: the global array 'BIG_TABLE' (0.5 MiB) is a constant, compared on every " \
           "replay: pass it as an argument" in text
    table = BIG_TABLE.copy()
    table.flags.writeable = False           # (not copied: not compared either, eager)
    closure = db.jit(db.grad(lambda x: np.sum(x[0] * table)))
    for _ in range(2):
        closure(np.ones(3))
    text = closure.explain()
    assert "the closure variable 'table'" in text and "pass it as an argument" in text
    assert "2 eager calls" in text or "1 eager call" in text
    # passed as an argument, it is an input: replayed
    passed = db.jit(db.grad(lambda x, table: np.sum(x[0] * table)))
    for _ in range(3):
        passed(np.ones(3), BIG_TABLE)
    assert "1 trace, 2 replays" in passed.explain()


def test_a_staged_function_explains_itself():
    jitted = db.jit(lambda x, i: x[i] * 2.0)
    for _ in range(3):
        jitted(np.arange(4.0), np.array([1, 3]))
    text = jitted.explain()
    assert "(staged)" in text and "(float64[4], int64[2])" in text
    assert "1 trace, 2 replays" in text


def test_evicted_programs_are_released():
    jitted = db.jit(db.value_and_grad(lambda x, data: np.sum(x * data)))
    jitted(np.ones(1), np.ones(1))
    first = weakref.ref(staged_entries(jitted)[0])
    for n in range(2, 40):          # more shapes than a jitted function keeps (32)
        for _ in range(2):
            jitted(np.ones(n), np.ones(n))
    gc.collect()
    assert first() is None and len(staged_entries(jitted)) == 32


# ---------------------------------------------------------------- the soak

_SOAK = """
    import json, sys
    import numpy as np
    import dualbcast as db
    sys.path.insert(0, {tests!r})
    from soak import collected, rss_mb

    compiles = collected("compiled in", "cache in")

    @db.fast_broadcast
    def well(r, depth):
        return depth * (r * r - 1.0) ** 2

    def energy(x, data, idx, scale, n):
        return well.sum(x[idx] * scale, data[idx]) + np.sum(x[:n] ** 2)

    jitted = db.jit(db.value_and_grad(energy))
    rng = np.random.default_rng(0)
    rss, worst = [], 0.0
    for i in range({count}):
        size = 8 + (i % {shapes})
        x, data = rng.normal(size=size), rng.uniform(0.5, 2.0, size)
        idx = rng.integers(0, size, 2 * size)
        want = db.value_and_grad(energy)(x, data, idx, 1.0 + i / 1000.0, 3)
        got = jitted(x, data, idx, 1.0 + i / 1000.0, 3)
        worst = max(worst, abs(got[0] - want[0]) / max(abs(want[0]), 1e-300),
                    float(np.max(np.abs(got[1] - want[1]))))
        if i == {shapes} * 2:
            warm = len(compiles)
        rss.append(rss_mb())
    print(json.dumps(dict(rss=rss, worst=worst, compiles=len(compiles) - warm)))
"""


def test_a_soak_over_thousands_of_values_and_hundreds_of_shapes_holds_memory_flat():
    count, shapes = 3000, 100
    report = run_soak(_SOAK, count=count, shapes=shapes)
    assert report["worst"] < 1e-9, report["worst"]
    assert report["compiles"] == 0          # nothing compiled per value or per shape
    rss = report["rss"]
    # past the warm-up (each shape's first trace), flat: no memory per call
    assert rss[-1] - rss[count // 3] < 8, (rss[count // 3], rss[-1])


def test_an_integer_array_the_trace_cannot_take_becomes_a_constant(caplog):
    # An index into a plain array (NumPy converts the traced index) or np.take's rule:
    # the function's integer arrays are then constants, compared on every call, and
    # its calls replay as before integer arrays were inputs.
    caplog.set_level(logging.INFO, logger="dualbcast")
    table = np.linspace(1.0, 2.0, 10)

    def f(x, i):
        return np.sum(x * table[i]) + np.sum(np.take(x, i))

    jitted = db.jit(db.value_and_grad(f))
    eager = db.value_and_grad(f)
    x = RNG.normal(size=4)
    for i in ([0, 1, 2, 3], [0, 1, 2, 3], [3, 2, 1, 0], [3, 2, 1, 0], [3, 2, 1, 0]):
        i = np.array(i)
        got, want = jitted(x, i), eager(x, i)
        assert got[0] == want[0]
        np.testing.assert_array_equal(got[1], want[1])
    text = jitted.explain()
    assert "(float64[4], constant int64[4]):\n    2 traces, 2 replays, 0 eager calls" in text
    assert any("integer arrays are constants" in r.getMessage() for r in caplog.records)


def test_a_call_whose_trace_raises_does_not_stop_later_replays():
    f = lambda X, j: np.sum(X[j] ** 2)
    jitted = db.jit(db.value_and_grad(f))
    X = RNG.normal(size=(5, 3))
    good, bad = np.array([0, 4]), np.array([9, 0])
    jitted(X, good)
    with pytest.raises(IndexError):
        jitted(X, bad)                      # (the caller catches it)
    for _ in range(3):
        np.testing.assert_allclose(jitted(X, good)[1], db.grad(f)(X, good), rtol=1e-14)
    assert staged_entries(jitted)[0].replays >= 2


def test_a_gather_keeps_numpys_layout_and_so_its_sums():
    # (np.take copies rows in C order; a[index] keeps a transposed array's order
    # within the rows, and np.sum follows it)
    rng = np.random.default_rng(3)
    for _ in range(20):
        b = rng.standard_normal((40, 16, 3)).transpose(0, 2, 1)
        index = rng.integers(0, 40, 30)
        f = lambda b: np.sum(b[index])
        assert db.value_and_grad(f)(b)[0] == f(b)
