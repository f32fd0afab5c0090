"""The plan of a staged replay (dualbcast/jit/staged_plan.py, elementwise.py): records
that no output needs are not run, records computed twice run once, and float64
elementwise records run as compiled loops -- with the eager call's bits.

Checked against the eager call bit for bit (values, jvps, Hessian-vector products) or
to rounding (a gradient computed inside: its backward pass adds in the staged order),
over random elementwise programs on 1-d to 3-d arrays with broadcasting, slices and
their cotangents, and NaN, inf and huge values; and that the loops do run."""
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbcast as db
from profiles import examples
from dualbcast.jit import policy
from replays import staged_plans
from soak import run_soak
from test_jit_adversarial import _bits, assert_same_to_rounding

RNG = np.random.default_rng(17)


@pytest.fixture(autouse=True)
def loops_at_every_size(monkeypatch):
    # (loops are compiled from 2048 elements on: these tests' arrays are smaller; and
    # a process compiles at most 256, which the random programs of a long profile,
    # DUALBCAST_EXAMPLES=20, use up before the tests that check a loop ran)
    monkeypatch.setattr(policy, "LOOP_MIN_ELEMENTS", 1)
    monkeypatch.setattr(policy, "MAX_LOOPS", 100_000)


def loops_of(jitted):
    """The elementwise loops of ``jitted``'s staged programs that ran."""
    return [group for plan in staged_plans(jitted) for group in plan.groups if group.calls]


def _gradient_checked(energy, draw, others, element):
    """``db.jit(db.grad(energy))`` over three calls on new first arguments ``draw()``
    and ``others``: equal to the eager gradient to rounding, and at ``element`` to a
    central difference.  The jitted gradient, for its loops."""
    grad = db.grad(energy)
    jitted = db.jit(grad)
    for _ in range(3):
        x = draw()
        assert_same_to_rounding(grad(x, *others), jitted(x, *others))
    h, e = 1e-6, np.zeros_like(x)
    e[element] = h
    central = (energy(x + e, *others) - energy(x - e, *others)) / (2 * h)
    np.testing.assert_allclose(jitted(x, *others)[element], central, rtol=1e-6)
    return jitted


def _stencil_energy(u, kappa):
    gx = u[1:, :] - u[:-1, :]
    gy = u[:, 1:] - u[:, :-1]
    return 0.5 * kappa * (np.sum(gx * gx) + np.sum(gy * gy)) + np.sum(u ** 2 * (1.0 - u) ** 2)


def test_stencil_hvp_runs_loops_and_keeps_the_bits():
    hvp = lambda u, v, kappa: db.jvp(db.grad(lambda u: _stencil_energy(u, kappa)), (u,),
                                     (v,))[1]
    jitted = db.jit(hvp)
    for call in range(4):
        u, v = RNG.uniform(0.1, 0.9, (40, 33)), RNG.standard_normal((40, 33))
        kappa = float(RNG.uniform(0.5, 2.0))
        assert _bits(jitted(u, v, kappa)) == _bits(hvp(u, v, kappa)), call
    loops = loops_of(jitted)
    assert loops, "no elementwise loop ran"
    # the slices' cotangents ran in a loop, not as zeros-then-write NumPy calls
    assert any("scattered" in group.names for group in loops)
    report = jitted.explain()
    assert "not run" in report and "a loop of" in report, report


def test_stencil_gradient_to_rounding_and_against_central_differences():
    jitted = _gradient_checked(_stencil_energy, lambda: RNG.uniform(0.1, 0.9, (12, 9)),
                               (1.3,), (3, 4))
    assert loops_of(jitted)


def test_unused_views_are_not_run_and_repeated_records_run_once():
    def f(x, a):
        x.reshape(-1)[1:]                   # unused views: not run by a replay
        used = x * a + 1.0
        twice = (x * a + 1.0) * 2.0         # x * a + 1.0 again: computed once
        return used + twice

    jitted = db.jit(f)
    for _ in range(3):
        x, a = RNG.standard_normal((5, 10)), float(RNG.uniform(1, 2))
        assert _bits(jitted(x, a)) == _bits(f(x, a))
    plan, = staged_plans(jitted)
    assert plan.removed == 4      # the reshape, its slice; the second x * a and + 1.0
    assert "records of the trace not run" in jitted.explain()


def test_unused_operations_still_raise_and_warn_as_eager():
    def f(x, a):
        np.log(x)                           # unused: still run (it may raise or warn)
        return x * a

    jitted = db.jit(f)
    x = RNG.uniform(1, 2, 64)
    for _ in range(3):
        jitted(x, 2.0)
    x[3] = 0.0
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError):
            f(x, 2.0)
        with pytest.raises(FloatingPointError):
            jitted(x, 2.0)
    with pytest.warns(RuntimeWarning):
        jitted(x, 2.0)


def test_repeated_records_do_not_make_outputs_share_memory():
    def f(x):
        return (x * 2.0).reshape(-1), (x * 2.0).reshape(-1)

    jitted = db.jit(f)
    x = RNG.standard_normal((3, 4))
    for _ in range(3):
        a, b = jitted(x)
    assert not np.shares_memory(a, b)


def test_nan_constants_of_either_sign_are_not_merged():
    def f(x):
        return x + float("nan"), x + -float("nan")

    jitted = db.jit(f)
    x = RNG.standard_normal(5)
    for _ in range(3):
        got, want = jitted(x), f(x)
    assert [np.signbit(g).tolist() for g in got] == [np.signbit(w).tolist() for w in want]


def test_a_slice_read_outside_its_loop_stays_a_view():
    def f(x):
        v = x[:, 1:]
        return np.sum(v), v * 2.0 + 1.0, v

    jitted = db.jit(f)
    for _ in range(3):
        x = RNG.standard_normal((40, 300))
        got, want = jitted(x), f(x)
        assert list(map(_bits, got)) == list(map(_bits, want))
    assert np.shares_memory(got[2], x)


def test_a_slice_of_a_value_of_the_same_loop():
    def f(x):
        y = x * 2.0 + 1.0
        return y[:, :] * 3.0 - y

    jitted = db.jit(f)
    for _ in range(4):
        x = RNG.standard_normal((64, 40))
        assert _bits(jitted(x)) == _bits(f(x))
    assert "0 failed replays" in jitted.explain()


def test_transposed_and_fortran_ordered_operands_keep_numpys_layout():
    def f(x):
        z = x.T * 1.1 + 0.3
        return np.sum(z, axis=0), z

    jitted = db.jit(f)
    for x in (RNG.standard_normal((64, 33)), np.asfortranarray(RNG.standard_normal((33, 64)))):
        for _ in range(3):
            got, want = jitted(x), f(x)
            assert list(map(_bits, got)) == list(map(_bits, want))
        assert got[1].flags.f_contiguous == want[1].flags.f_contiguous


def test_a_slice_cotangent_of_minus_zero_is_zero_as_eager():
    grad = db.grad(lambda x, y: np.sum(x[1:] * y))
    jitted = db.jit(grad)
    x, y = RNG.standard_normal(3000), RNG.standard_normal(2999)
    y[::2] = -0.0
    for _ in range(3):
        assert _bits(jitted(x, y)) == _bits(grad(x, y))


def test_zero_times_inf_in_a_backward_product_meets_numpys_settings():
    grad = db.grad(lambda x, w, c: np.sum(x * w * c))
    jitted = db.jit(grad)
    x, w, c = RNG.standard_normal((100, 3)), RNG.uniform(1, 2, 3), RNG.uniform(1, 2, (100, 3))
    for _ in range(3):
        jitted(x, w, c)
    w[0], c[:, 0] = np.inf, 0.0
    with np.errstate(invalid="raise"):
        with pytest.raises(FloatingPointError):
            grad(x, w, c)
        with pytest.raises(FloatingPointError):
            jitted(x, w, c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same_to_rounding(grad(x, w, c), jitted(x, w, c))


def test_an_index_out_of_range_in_an_unused_record_raises_as_eager():
    def f(x, i):
        _ = x[i]                  # unused, but may raise: run
        return x * 2.0

    jitted = db.jit(f)
    x = np.arange(5.0)
    jitted(x, np.array([0, 1]))
    jitted(x, np.array([2, 3]))
    with pytest.raises(IndexError):
        f(x, np.array([7]))
    with pytest.raises(IndexError):
        jitted(x, np.array([7]))


def test_a_loop_that_meets_inf_hands_back_and_warns_as_eager():
    def f(x, y):
        return (x * y - 1.0) / (x - y)

    jitted = db.jit(f)
    x, y = RNG.standard_normal(64), RNG.standard_normal(64)
    for _ in range(3):
        assert _bits(jitted(x, y)) == _bits(f(x, y))
    assert loops_of(jitted)
    with pytest.warns(RuntimeWarning):
        want = f(x, x)                      # 0 / 0 and finite / 0
    with pytest.warns(RuntimeWarning):
        got = jitted(x, x)
    assert _bits(got) == _bits(want)
    with np.errstate(divide="raise", invalid="raise"):
        with pytest.raises(FloatingPointError):
            jitted(x, x)


def test_inputs_that_are_inf_or_nan_give_numpys_values_without_a_warning():
    def f(x, y):
        return x * y + y

    jitted = db.jit(f)
    x, y = RNG.uniform(1, 2, 64), RNG.uniform(1, 2, 64)
    for _ in range(3):
        jitted(x, y)
    x[3], y[5] = np.inf, np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, want = jitted(x, y), f(x, y)
    assert _bits(got) == _bits(want)


def test_non_contiguous_and_broadcast_inputs():
    def f(x, row, column):
        return (x * row - column) * (x + 1.0)

    jitted = db.jit(f)
    base = RNG.standard_normal((9, 14))
    for x in (base[:, ::2], base[1:, 3:10], base.T[:7], np.asfortranarray(base[:, :7])):
        row, column = RNG.standard_normal(x.shape[1]), RNG.standard_normal((x.shape[0], 1))
        for _ in range(2):
            assert _bits(jitted(x, row, column)) == _bits(f(x, row, column))
    assert loops_of(jitted)


def test_a_shape_that_follows_an_integer_input_changes():
    def f(x, counts):
        r = np.repeat(x, counts)
        return r * r + r

    jitted = db.jit(f)
    x = RNG.standard_normal(4)
    for counts in ([1, 2, 1, 1], [1, 2, 1, 1], [3, 0, 2, 2], [1, 1, 1, 1]):
        counts = np.array(counts)
        assert _bits(jitted(x, counts)) == _bits(f(x, counts))


def test_outputs_are_fresh_arrays_not_views_of_each_other():
    def f(x, a):
        y = x * a + 1.0
        return y, x * a + 1.0, y[1:]

    jitted = db.jit(f)
    x = RNG.standard_normal(6)
    for _ in range(3):
        got, want = jitted(x, 2.0), f(x, 2.0)
        assert list(map(_bits, got)) == list(map(_bits, want))
    y, z, tail = got
    assert not np.shares_memory(y, z)
    y[:] = 0.0
    assert _bits(z) == _bits(x * 2.0 + 1.0)


# ------------------------------------------------------------- random elementwise programs

SHAPES = st.sampled_from([(7,), (5, 6), (3, 4, 5), (1, 6), (5, 1), (8, 2)])
VALUES = st.sampled_from(["normal", "huge", "special"])
STEPS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["+", "-", "*", "/"]), st.sampled_from(["v", "a", "b", "s", 0.5,
                                                                       -2, 0.0])),
    st.tuples(st.just("pow"), st.sampled_from([2, 0.5, -1, 1, 3])),
    st.tuples(st.just("ufunc"), st.sampled_from(["sqrt", "abs", "negative", "square",
                                                  "exp"])),
    st.tuples(st.just("stencil"), st.sampled_from([0, -1])),
    st.tuples(st.just("where"), st.sampled_from([0.0, 0.5])),
    st.tuples(st.sampled_from(["maximum", "minimum"]), st.sampled_from(["b", 0.0, -0.0, "s"])),
    st.tuples(st.sampled_from(["clip", "mask times", "logical"]),),
    st.tuples(st.just("row"),),
    st.tuples(st.sampled_from(["sum", "mean"]), st.sampled_from([0, -1, (0, -1), 1]),
              st.booleans()),
    st.tuples(st.just("kernel"),),
    st.tuples(st.just("gather"),)),
    min_size=1, max_size=8)


@db.fast_broadcast
def softplus(x, a):
    # (branchy, with a kernel's own math: its loop and a staged loop must agree)
    if a * x > 30.0:
        return a * x
    return math.log1p(math.exp(a * x))


def _values(kind, shape):
    x = RNG.standard_normal(shape)
    if kind == "huge":
        x *= 1e154
    elif kind == "special" and x.size > 2:
        x.flat[0], x.flat[-1] = np.inf, np.nan
    return x


def elementwise_program(steps):
    def f(a, b, s):
        v = a
        for step in steps:
            kind = step[0]
            if kind in "+-*/":
                w = {"v": v, "a": a, "b": b, "s": s}.get(step[1], step[1])
                if step[1] in ("a", "b") and np.shape(w) != np.shape(v):
                    continue
                v = v + w if kind == "+" else v - w if kind == "-" else \
                    v * w if kind == "*" else v / w
            elif kind == "pow":
                v = v ** step[1]
            elif kind == "ufunc":
                v = getattr(np, step[1])(v)
            elif kind == "stencil" and np.ndim(v) and np.shape(v)[step[1]] > 1:
                if step[1] == 0:
                    v = v[1:] - v[:-1]
                else:
                    v = v[..., 1:] * v[..., :-1]
            elif kind == "where":
                v = np.where(v > step[1], v * s, -v)   # (the mask: the program's)
            elif kind in ("maximum", "minimum"):
                w = {"b": b, "s": s}.get(step[1], step[1])
                if np.shape(w) == np.shape(v) or np.ndim(w) == 0:
                    v = getattr(np, kind)(v, w)
            elif kind == "clip":
                v = np.clip(v, -1.0, 1.5)
            elif kind == "mask times":
                v = v * (v > 0.25) + (v <= s) * s
            elif kind == "logical":
                v = np.where(~(v > 0) & (v > -1.0) | np.isnan(v), v * s, v)
            elif kind == "row" and np.ndim(v) > 1:
                v = v * v[:1]                   # broadcast a row
            elif kind == "gather" and np.ndim(v):
                n = np.shape(v)[0]              # (rows repeated, negative ones)
                v = v[(np.arange(n) * 3) % n - n // 2]
            elif kind == "kernel":
                v = softplus(v, s) * a if np.shape(v) == np.shape(a) else softplus(v, s)
            elif kind in ("sum", "mean") and np.ndim(v) > 1:
                reduce = np.sum if kind == "sum" else np.mean   # (in a loop or not)
                v = reduce(v, axis=step[1], keepdims=step[2])
        return np.sum(v * v)
    return f


@settings(max_examples=examples(5), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, shape=SHAPES, kind=VALUES)
def test_random_elementwise_programs_value_gradient_and_hvp(steps, shape, kind):
    f = elementwise_program(steps)
    value = db.jit(f)
    gradient = db.jit(db.grad(f))
    hvp = lambda a, t, b, s: db.jvp(lambda a: db.grad(f)(a, b, s), (a,), (t,))[1]
    jitted_hvp = db.jit(hvp)
    for call in range(3):
        a, b = _values(kind, shape), _values("normal", shape)
        s, t = float(RNG.uniform(0.5, 2.0)), RNG.standard_normal(shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                want_value, want_gradient = f(a, b, s), db.grad(f)(a, b, s)
                want_hvp = hvp(a, t, b, s)
            got_value, got_gradient = value(a, b, s), gradient(a, b, s)
            got_hvp = jitted_hvp(a, t, b, s)
        assert _bits(got_value) == _bits(want_value), call
        assert _bits(got_hvp) == _bits(want_hvp), call
        assert_same_to_rounding(want_gradient, got_gradient)


def test_pair_geometry_over_a_neighbour_list_gradient_and_short_rows():
    # d = X[j] - X[i] over pairs, a sum over the 3 coordinates: the backward pass
    # broadcasts each pair's cotangent along its row of 3 (a view of stride 0)
    def energy(X, i, j, scale):
        d = X[j] - X[i]
        r2 = np.sum(d * d, axis=1)
        return np.sum(scale * (r2 * r2 - 2.0 * r2))

    i, j = np.nonzero(np.ones((30, 30)) - np.eye(30))
    jitted = _gradient_checked(energy, lambda: RNG.standard_normal((30, 3)), (i, j, 0.7),
                               (4, 2))
    modes = {group.mode for group in loops_of(jitted)}
    assert "expanded" in modes, modes


def test_a_slice_of_whole_rows_is_read_as_a_full_array_in_a_flat_loop():
    # bond vectors of a chain, X[1:] - X[:-1]: the slices are contiguous blocks, read
    # as arrays by a flat loop (read at an offset, rows of 3 ran 4x slower than NumPy)
    def f(X, a):
        d = X[1:] - X[:-1]
        return d * d * a + X[1:]

    jitted = db.jit(f)
    for n in (50, 50, 50):
        X = RNG.standard_normal((n, 3))
        assert _bits(jitted(X, 0.5)) == _bits(f(X, 0.5))
    assert {group.mode for group in loops_of(jitted)} == {"flat"}

    def bonds(X, k):
        d = X[1:] - X[:-1]
        return np.sum(k * (np.sqrt(np.sum(d * d, axis=1)) - 1.0) ** 2)

    jitted = _gradient_checked(bonds, lambda: np.cumsum(RNG.standard_normal((60, 3)), axis=0),
                               (2.0,), (7, 1))
    assert loops_of(jitted)


def test_gathers_by_index_arrays_run_in_the_loop_with_numpys_bits_and_errors():
    # X[j] - X[i] over a pair list, indices as inputs (negative ones wrap as in NumPy)
    def f(X, i, j, a):
        d = X[j] - X[i]
        return d * d * a

    jitted = db.jit(f)
    for _ in range(3):
        X = RNG.standard_normal((40, 3))
        i, j = RNG.integers(-40, 40, 300), RNG.integers(0, 40, 300)
        assert _bits(jitted(X, i, j, 0.5)) == _bits(f(X, i, j, 0.5))
    (group,) = loops_of(jitted)
    assert group.mode == "short" and group.names.count("take_rows") == 2
    j[7] = 40                                   # out of range: NumPy's error
    with pytest.raises(IndexError):
        jitted(X, i, j, 0.5)
    j[7] = -41
    with pytest.raises(IndexError):
        jitted(X, i, j, 0.5)
    j[7] = 3
    assert _bits(jitted(X, i, j, 0.5)) == _bits(f(X, i, j, 0.5))

    def energy(X, i, j):
        d = X[j] - X[i]
        return np.sum(np.sqrt(np.sum(d * d, axis=1)) ** 3)

    j = (i + RNG.integers(1, 40, 300)) % 40     # (no pair of an atom with itself)
    jitted = _gradient_checked(energy, lambda: RNG.standard_normal((40, 3)), (i, j), (3, 0))
    assert any("take_rows" in group.names for group in loops_of(jitted))


@pytest.mark.parametrize("layout", ["int32 index", "Fortran order", "three axes",
                                    "a strided view", "big-endian index"])
def test_gathers_of_other_layouts_and_index_types(layout):
    X = RNG.standard_normal((40, 3, 2) if layout == "three axes" else (40, 3))
    if layout == "Fortran order":
        X = np.asfortranarray(X)
    elif layout == "a strided view":
        X = RNG.standard_normal((80, 3))[::2]
    index = RNG.integers(-40, 40, 200).astype({"int32 index": np.int32,
                                               "big-endian index": ">i8"}.get(layout, int))

    def f(X, index, a):
        return (X[index] + a) * X[index[::-1]]

    jitted = db.jit(f)
    for _ in range(3):
        assert _bits(jitted(X, index, 0.25)) == _bits(f(X, index, 0.25))
        X = X + 0.5
    # (an index Numba cannot type is no loop's: no loop failed to compile)
    assert not any(group.failed for plan in staged_plans(jitted) for group in plan.groups)


def test_a_temporary_of_the_trace_is_not_noted_as_a_constant_compared_on_every_call():
    # the backward pass broadcasts the constant seed to the pairs' shape: an array the
    # trace made and dropped, never compared (it was noted as a closed-over array)
    def energy(X, i, j):
        d = X[i] - X[j]
        return np.sum(4.0 * np.sum(d * d, axis=1) ** -6)

    i, j = np.triu_indices(300, 1)
    jitted = db.jit(db.value_and_grad(energy))
    for _ in range(2):
        jitted(RNG.standard_normal((300, 3)) * 10, i, j)
    assert "note:" not in jitted.explain()


@pytest.mark.parametrize("shape, mode", [((40, 4), "short"), ((4, 40), "rows")])
def test_slices_along_short_and_long_rows(shape, mode):
    def f(x, a):
        return (x[:, 1:] - x[:, :-1]) * a + x[:, 1:] * x[:, :-1]

    jitted = db.jit(f)
    for _ in range(3):
        x, a = RNG.standard_normal(shape), float(RNG.uniform(1, 2))
        assert _bits(jitted(x, a)) == _bits(f(x, a))
    assert {group.mode for group in loops_of(jitted)} == {mode}


_LOOP_SOAK = """
    import json, sys
    import numpy as np
    import dualbcast as db
    sys.path.insert(0, {tests!r})
    from soak import released, rss_mb
    from dualbcast.jit import loop_cache, policy
    policy.LOOP_MIN_ELEMENTS = 1

    def energy(u, kappa):
        gx = u[1:, :] - u[:-1, :]
        gy = u[:, 1:] - u[:, :-1]
        return kappa * (np.sum(gx * gx) + np.sum(gy * gy)) + np.sum(u * u * (1.0 - u))

    hvp = lambda u, v, kappa: db.jvp(db.grad(lambda u: energy(u, kappa)), (u,), (v,))[1]
    jitted = db.jit(hvp)
    rng = np.random.default_rng(0)
    rss, same, loops = [], True, []
    for i in range({count}):
        k = (i // 10) % {shapes}            # (10 calls a shape; a shape met again
        shape = (4 + k % 13, 5 + k)         # after 32 others is traced again)
        u, v = rng.uniform(0.1, 0.9, shape), rng.normal(size=shape)
        kappa = 1.0 + i / 1000.0
        same &= jitted(u, v, kappa).tobytes() == hvp(u, v, kappa).tobytes()
        if i in (10 * {shapes}, {count} - 1):
            released()      # (what the allocator keeps of freed memory is no growth)
        rss.append(rss_mb())
        loops.append(len(loop_cache.LOOPS))
    print(json.dumps(dict(rss=rss, same=bool(same), loops=loops)))
"""


def test_a_soak_over_hundreds_of_shapes_compiles_each_loop_once_and_holds_memory_flat():
    count, shapes = 1500, 100
    report = run_soak(_LOOP_SOAK, count=count, shapes=shapes)
    assert report["same"]
    loops = report["loops"]
    # one loop per structure (and per way of looping: short rows or long, a short
    # row's length written in its source), whatever the shape: none compiled once
    # every shape was met (a shape traced again too)
    from dualbcast.jit import policy
    short = {n for k in range(shapes) for n in (4 + k, 5 + k) if n < policy.LOOP_SHORT_ROWS}
    assert 0 < loops[10 * shapes] == loops[-1] <= 6 * (1 + len(short)), \
        (loops[10 * shapes], loops[-1])
    rss = report["rss"]
    assert rss[-1] - rss[10 * shapes] < 4, (rss[10 * shapes], rss[-1])


def test_where_with_a_mask_runs_in_a_loop_forward_and_backward():
    def energy(x, a):
        return np.sum(np.where(x > 0, x * a, -x) ** 2)

    grad = db.grad(energy)
    jitted, value = db.jit(grad), db.jit(energy)
    signs = np.sign(RNG.standard_normal(3000))      # (the mask: the same on every call)
    for call in range(4):
        x = signs * RNG.uniform(0.5, 1.5, 3000)
        assert_same_to_rounding(grad(x, 1.5), jitted(x, 1.5))
        assert _bits(value(x, 1.5)) == _bits(energy(x, 1.5))
    assert any("where" in group.names for group in loops_of(jitted))


def test_masks_and_maximum_run_in_loops_with_numpy_s_bits():
    # (the masks are the program's: computed again per call, in the loop, as are
    # np.maximum and np.minimum; np.maximum's backward pass compares, then adds bools)
    def energy(w, x):
        hinge = np.maximum(w * x, 0.0) + np.minimum(w, x) + np.abs(w)  # (|w|': np.sign)
        return np.sum(np.where((w > 0) & ~np.isnan(x), hinge, 0.5 * w) ** 2)

    jitted = db.jit(db.value_and_grad(energy))
    eager = db.value_and_grad(energy)
    for call in range(4):
        w, x = RNG.standard_normal(3000), RNG.standard_normal(3000)
        value, gradient = jitted(w, x)
        want_value, want_gradient = eager(w, x)
        assert _bits(value) == _bits(want_value)
        assert_same_to_rounding(want_gradient, gradient)
    names = [name for group in loops_of(jitted) for name in group.names]
    for name in ("maximum", "minimum", "gt", "bitwise_and", "invert", "isnan", "where", "eq",
                 "sign"):
        assert name in names, (name, names)
    assert all(group.handed_back == 0 for group in loops_of(jitted))


def test_a_tie_of_zeros_of_both_signs_hands_maximum_back_to_numpy():
    # NumPy's maximum(0.0, -0.0) depends on where the element falls (its vector loop
    # gives the second operand, its scalar tail the first): the loop gives way there
    def f(w, x):
        return np.maximum(w * 2.0, x) - np.minimum(x, w * 2.0)

    jitted = db.jit(f)
    for call in range(6):
        w, x = RNG.standard_normal(1001), RNG.standard_normal(1001)
        if call >= 3:
            w[::3], x[::3] = 0.0, -0.0
            w[1::5], x[1::5] = -0.0, 0.0
        assert _bits(jitted(w, x)) == _bits(f(w, x)), call
    # (2 replays in the loop; the third met ties: the group runs as NumPy calls since)
    group, = loops_of(jitted)
    assert "maximum" in group.names and group.calls == 3 and group.failed


# ------------------------------------------------------------- sums in loops

def test_a_sums_reader_waits_so_that_the_backward_pass_joins_the_forward_loop():
    # (the energy from the sums of a stencil's squares is read before the backward pass,
    # which reads the stencil again: one loop per shape, not two)
    def energy(u, kappa):
        gx, gy = u[1:, :] - u[:-1, :], u[:, 1:] - u[:, :-1]
        total = 0.5 * kappa * (np.sum(gx * gx) + np.sum(gy * gy))
        return total + np.sum(np.where(u > 0.5, u * u, u))

    eager = db.value_and_grad(energy)
    jitted = db.jit(eager)
    for _ in range(3):
        u = RNG.uniform(0.0, 1.0, (64, 48))
        value, gradient = jitted(u, 0.7)
        want_value, want_gradient = eager(u, 0.7)
        assert _bits(value) == _bits(want_value)
        assert_same_to_rounding(want_gradient, gradient)
    shapes = [group.shape for group in loops_of(jitted)]
    assert sorted(shapes) == [(63, 48), (64, 47), (64, 48)], shapes


PARITY = np.arange(48) % 2                   # (an int mask: np.where by it is a NumPy call)


def _waits_for_a_closed_group(x, y):
    v = x * 2.0 + 1.0                       # (a loop over (64, 48), closed by the exp...)
    c = np.exp(v * 3.0)
    s = np.sum(y * y)                       # (...a loop over (64, 47), open)
    return np.where(PARITY, v, s), c        # (waits for the sum, reads v: written)


def _waits_on_a_waiting_value(x, y):
    t = 0.5 * np.sum(y * y)                 # (waits for the (64, 47) loop)
    v = x * 3.0                             # (a loop over (64, 48), open)
    r = np.where(PARITY, v, t)              # (reads t: waits; reads v: its loop writes it)
    return r, y * t, x + 1.0                # (y * t places r; x + 1.0 in a loop after it)


@pytest.mark.parametrize("f", [_waits_for_a_closed_group, _waits_on_a_waiting_value])
def test_what_a_waiting_record_reads_besides_sums_is_computed_before_it(f):
    # (a review found a waiting record reading a loop's value never written -- None --
    # or computed after it)
    jitted = db.jit(f)
    for _ in range(3):
        x, y = RNG.standard_normal((64, 48)), RNG.standard_normal((64, 47))
        for got, want in zip(jitted(x, y), f(x, y)):
            assert got.dtype == want.dtype and _bits(got) == _bits(want)
    assert "0 failed replays" in jitted.explain()


@pytest.mark.parametrize("shape, axis, keepdims", [
    ((300, 5), None, False), ((300, 5), (0, 1), True),        # whole: pairwise past 128
    ((40, 3), 1, False), ((6, 300), -1, True),                # trailing: short and long rows
    ((2, 3, 70), (1, 2), False), ((300, 4), 0, False),        # leading
    ((5, 1, 40), (0, 1), False), ((1, 40, 7), (0, 1), True),  # axes of length 1 aside
])
def test_sums_of_a_loops_values_are_added_up_in_the_loop_as_numpy_adds(shape, axis, keepdims):
    def f(x, y):
        d = x * y - 0.5
        return np.sum(d * d, axis=axis, keepdims=keepdims), np.sum(d, axis=axis)

    jitted = db.jit(f)
    for _ in range(3):
        x, y = RNG.standard_normal(shape) * 1e3, RNG.standard_normal(shape)
        x.flat[::7] = -0.0                  # (terms of -0.0: NumPy's sums start at 0.0)
        got, want = jitted(x, y), f(x, y)
        for a, b in zip(got, want):
            assert type(a) is type(b) and np.shape(a) == np.shape(b)
            assert _bits(a) == _bits(b)
    (loop,) = loops_of(jitted)
    assert loop.sums and loop.calls == 2      # (the first call traces)


@pytest.mark.parametrize("shape, axis, keepdims", [
    ((300, 5), None, False), ((40, 3), -1, True), ((300, 4), 0, False), ((6, 300), 1, False)])
def test_means_are_the_loops_sums_divided_as_numpy_divides(shape, axis, keepdims):
    def f(x, y):
        d = x * y - 0.5
        return np.mean(d * d, axis=axis, keepdims=keepdims)

    jitted = db.jit(f)
    for _ in range(3):
        x, y = RNG.standard_normal(shape) * 1e3, RNG.standard_normal(shape)
        got, want = jitted(x, y), f(x, y)
        assert type(got) is type(want) and np.shape(got) == np.shape(want)
        assert _bits(got) == _bits(want)
    (loop,) = loops_of(jitted)
    assert loop.sums and loop.sums[0].count is not None


@pytest.mark.parametrize("axis", [1, (0, 2)])
def test_sums_numpy_adds_in_another_order_stay_numpy_calls(axis):
    def f(x):
        return np.sum((x * x) * 2.0, axis=axis)

    jitted = db.jit(f)
    x = RNG.standard_normal((4, 5, 6))
    for _ in range(2):
        assert _bits(jitted(x)) == _bits(f(x))
    assert not any(loop.sums for loop in loops_of(jitted))


def test_a_sum_that_overflows_hands_back_and_warns_as_eager():
    def f(x):
        return np.sum(x * 2.0)

    jitted = db.jit(f)
    x = np.full(300, 1e306)
    for _ in range(2):
        assert _bits(jitted(x[:10])) == _bits(f(x[:10]))
    assert loops_of(jitted)
    with pytest.warns(RuntimeWarning):
        want = f(x)
    with pytest.warns(RuntimeWarning):
        got = jitted(x)
    assert got == want == np.inf


def test_a_sum_read_before_the_loop_takes_more_records_is_not_read_stale():
    # s is read (t = x * s) between the loop's members: the loop must not move past it
    def f(x, y):
        d = x * y
        s = np.sum(d)
        e = x - y
        return np.sum(e * s + d)

    jitted = db.jit(f)
    for _ in range(3):
        x, y = RNG.standard_normal(50), RNG.standard_normal(50)
        assert _bits(jitted(x, y)) == _bits(f(x, y))


def test_loops_cached_on_disk_are_named_by_the_librarys_fingerprint(tmp_path, monkeypatch):
    # (a loop inlines fused_runtime's sums, which Numba's cache does not check)
    from dualbcast.kernel import cache
    monkeypatch.setattr(db.config, "cache_dir", str(tmp_path))
    f = lambda x: np.sum((x * 3.0) * x)
    x, jitted = RNG.standard_normal(40), db.jit(f)
    for _ in range(3):                      # (traced, then replayed: the loop compiled)
        assert _bits(jitted(x)) == _bits(f(x))
    fingerprint = cache.library_fingerprint()[:20]
    assert [p.name for p in tmp_path.iterdir()] == [f"elementwise-{fingerprint}"]


# ------------------------------------------------------------- kernels in loops

def _without_kernels_in_loops(monkeypatch):
    from dualbcast.jit import loop_forms
    monkeypatch.setattr(loop_forms, "_kernel_form", lambda record, values: None)


def _layer(W, b, beta, X):
    h = softplus(X @ W + b, beta)
    return np.sum(h * h) + np.sum(h, axis=0) @ b


def test_a_kernels_partials_run_in_the_loop_of_the_operations_around_it(monkeypatch):
    # the bias added before the kernel, the products of its partials after it: one loop
    rng = np.random.default_rng(3)
    args = [(rng.normal(size=(2, 24)), rng.normal(size=24), 0.7, rng.normal(size=(40, 2)))
            for _ in range(3)]
    value_and_grad = db.value_and_grad(_layer, argnums=(0, 1, 2))
    fused = db.jit(value_and_grad)
    got = [fused(*a) for a in args]
    assert any(loop.kernels for loop in loops_of(fused))
    _without_kernels_in_loops(monkeypatch)
    apart = db.jit(value_and_grad)
    want = [apart(*a) for a in args]
    assert not any(loop.kernels for loop in loops_of(apart))
    for (v, g), (w, h) in zip(got, want):         # the same operations: the same bits
        assert _bits(v) == _bits(w) and all(_bits(x) == _bits(y) for x, y in zip(g, h))
    for a, (v, g) in zip(args, got):                # and eager's, to rounding
        assert_same_to_rounding(value_and_grad(*a), (v, g))


def test_a_kernel_map_in_a_loop_keeps_eagers_bits_and_a_kernels_error_is_raised():
    @db.fast_broadcast
    def checked(x, a):
        if x > 50.0:
            raise ValueError("x is too large")
        return x * math.exp(-a * x)

    def f(x, y, a):
        return checked(x * y + 1.0, a) - y

    jitted = db.jit(f)
    x, y = RNG.standard_normal((30, 5)), RNG.standard_normal((30, 5))
    for _ in range(3):
        assert _bits(jitted(x, y, 0.3)) == _bits(f(x, y, 0.3))
    (loop,) = loops_of(jitted)
    assert loop.kernels and loop.calls == 2
    x[4, 2], y[4, 2] = 10.0, 10.0
    with pytest.raises(ValueError, match="too large"):
        f(x, y, 0.3)
    with pytest.raises(ValueError, match="too large"):
        jitted(x, y, 0.3)


def test_a_fastmath_kernel_stays_its_own_loop():
    fast = db.fast_broadcast(fastmath=True)(lambda x, a: x * math.exp(-a * x))

    def f(x, a):
        return fast(x + 1.0, a) * 2.0

    jitted = db.jit(f)
    x = RNG.standard_normal((30, 5))
    for _ in range(3):
        assert _bits(jitted(x, 0.5)) == _bits(f(x, 0.5))
    assert not any(loop.kernels for loop in loops_of(jitted))


# ------------------------------------------------------------- scatter-adds in loops

def _without_scatter_adds_in_loops(monkeypatch):
    from dualbcast.jit import loop_forms
    monkeypatch.setattr(loop_forms, "_scatter_add_form", lambda record, values: None)


def _pair_energy(X, i, j, a):
    d = X[j] - X[i]
    r2 = np.sum(d * d, axis=-1)
    return np.sum(a * r2 / (1.0 + r2))


@pytest.mark.parametrize("shape", [(40, 3), (40, 20), (40,)])
def test_gathers_cotangents_are_added_in_by_the_loop_as_np_add_at_adds(shape, monkeypatch):
    # repeated and negative indices: each row added in where it goes, in the rows' order
    rng = np.random.default_rng(8)
    i, j = rng.integers(-40, 40, 500), rng.integers(0, 40, 500)
    Xs = [rng.standard_normal(shape) for _ in range(3)]
    gradient = db.grad(_pair_energy)
    fused = db.jit(gradient)
    got = [fused(X, i, j, 0.7) for X in Xs]
    assert any(loop.scatters for loop in loops_of(fused))
    _without_scatter_adds_in_loops(monkeypatch)
    apart = db.jit(gradient)
    want = [apart(X, i, j, 0.7) for X in Xs]
    assert not any(loop.scatters for loop in loops_of(apart))
    for a, b, X in zip(got, want, Xs):
        assert _bits(a) == _bits(b)                 # the same additions, in order
        assert_same_to_rounding(gradient(X, i, j, 0.7), a)
        x = X.copy()
        x.flat[5] += 1e-6
        up = _pair_energy(x, i, j, 0.7)
        x.flat[5] -= 2e-6
        central = (up - _pair_energy(x, i, j, 0.7)) / 2e-6
        np.testing.assert_allclose(a.flat[5], central, rtol=1e-5, atol=1e-8)


# A kernel of this module reading a module global (the tests below change it).
SCALE = 2.0


@db.fast_broadcast
def _scaled(x, a):
    return SCALE * x * a


def test_a_kernel_in_a_loop_whose_global_changes_runs_its_new_code(monkeypatch):
    # bound as the trace ran it: a changed global makes the kernel's own loop run,
    # compiled afresh (found by a review: the loop kept the old code)
    def loss(w, X):
        return np.sum(_scaled(X * w + 1.0, 0.5) ** 2)

    eager = db.value_and_grad(loss, argnums=(0,))
    step = db.jit(eager)
    w, X = np.linspace(0, 1, 8), np.linspace(1, 2, 40).reshape(5, 8)
    for _ in range(3):
        step(w, X)
    assert any(loop.kernels for loop in loops_of(step))
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 5.0)
    for _ in range(2):
        assert_same_to_rounding(eager(w, X), step(w, X))


_WRITER_THEN_READER = """
import sys
import numpy as np
import dualbcast as db
from dualbcast.jit import policy
policy.LOOP_MIN_ELEMENTS = 1
SCALE = 2.0

@db.fast_broadcast
def k(x, a):
    return SCALE * x * a

def f(x, a):
    return k.sum(x, a) + k(x + 1.0, a) * 3.0

x = np.linspace(0, 1, 50)
jitted = db.jit(f)
if sys.argv[1] == "writer":
    jitted(x, 0.5)              # traced with SCALE = 2.0, the loop not yet compiled
    SCALE = 5.0
for _ in range(3):
    got = jitted(x, 0.5)
print((got == f(x, 0.5)).all())
"""


def test_a_loop_compiled_after_its_kernel_changed_is_not_cached_under_the_old_name(tmp_path):
    # the writer's kernel changes between its trace and its loop's compile; a later
    # process with the old value must not load the loop (found by a review)
    script = tmp_path / "writer_reader.py"
    script.write_text(_WRITER_THEN_READER)
    environment = {**os.environ, "DUALBCAST_CACHE_DIR": str(tmp_path / "cache")}
    for role in ("writer", "reader"):
        done = subprocess.run([sys.executable, str(script), role], capture_output=True,
                              text=True, env=environment, timeout=600)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[-1] == "True", (role, done.stdout, done.stderr)


def test_a_kernels_parts_are_kept_room_in_a_full_loop(monkeypatch):
    # a kernel's outputs must join its loop: one refused for want of room made the
    # whole group NumPy calls (a review's performance cliff)
    def energy(x, a):
        return np.sum(softplus(x * 2.0 + 1.0, a) * x)

    gradient = db.grad(energy)
    for records in (4, 5, 6, 48):
        monkeypatch.setattr(policy, "LOOP_MAX_RECORDS", records)
        jitted = db.jit(gradient)
        x = RNG.standard_normal((20, 5))
        for _ in range(3):
            assert_same_to_rounding(gradient(x, 0.5), jitted(x, 0.5))
        assert any(loop.kernels for loop in loops_of(jitted)), records


def test_past_the_process_bound_new_loops_run_as_numpy_calls_said_once(monkeypatch, caplog):
    # (Numba never frees compiled code: a process compiles at most policy.MAX_LOOPS)
    from dualbcast.jit import elementwise, loop_cache
    monkeypatch.setattr(elementwise, "LOOPS", loop_cache._Loops())
    monkeypatch.setattr(policy, "MAX_LOOPS", 0)
    f = lambda x, y: np.sum((x * y - 1.0) * x)
    g = lambda x, y: (x - y) * (x + y)
    x, y = RNG.standard_normal(50), RNG.standard_normal(50)
    with caplog.at_level("INFO", logger="dualbcast"):
        for function in (f, g):
            jitted = db.jit(function)
            for _ in range(3):
                assert _bits(jitted(x, y)) == _bits(function(x, y))
            assert not loops_of(jitted)
    said = [r for r in caplog.records if "different elementwise loops" in r.getMessage()]
    assert len(said) == 1
