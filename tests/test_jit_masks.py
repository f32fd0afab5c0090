"""Masks computed from traced values under ``db.jit`` (``np.where(x > 0, ...)``,
``np.maximum``'s backward pass, ``np.isnan``): operations of the program, computed
again by every replay -- never a check that traces again whenever a value crosses to
the mask's other side -- while a branch on one (``if mask.any()``) is still checked.
And a comparison between a value of a ``grad`` inside the jit and a jitted argument
depends on both (it once read the argument's value at the trace, silently)."""
import logging

import numpy as np
import pytest

import dualbcast as db
from test_jit_adversarial import _bits

RNG = np.random.default_rng(20261128)

MASKED = {
    "where": lambda w, x: np.sum(np.where(w > 0, w * x, 0.1 * w) ** 2),
    "maximum": lambda w, x: np.sum(np.maximum(w, x) ** 2),
    "minimum of a constant": lambda w, x: np.sum(np.minimum(w, 0.0) ** 2 * x),
    "clip": lambda w, x: np.sum(np.clip(w, -0.5, 0.5) * x),
    "fmax": lambda w, x: np.sum(np.fmax(w, x) * x),
    "abs": lambda w, x: np.sum(np.abs(w) * x),
    "sign and floor": lambda w, x: np.sum(np.sign(w) * w * x + (w - np.floor(w)) * x),
    "a mask as a number": lambda w, x: np.sum(w * (w > 0) * x + (w < x).astype(float) * w),
    "logical": lambda w, x: np.sum(np.where(~(w > 0) & (x > 0) | (w > 1), w * x, w)),
    "isnan": lambda w, x: np.sum(np.where(np.isnan(x), 0.0, w * x)),
    "operand order": lambda w, x: np.sum(np.where(0.0 < w, w, x) * np.where(x >= w, x, w)),
}


def _draw(name, n):
    w, x = RNG.standard_normal(n), RNG.standard_normal(n)
    if name == "isnan":
        x[::7] = np.nan
    return w, x


@pytest.mark.parametrize("argnums", [0, (0, 1)])
@pytest.mark.parametrize("name", sorted(MASKED))
def test_masks_are_computed_again_by_every_replay(name, argnums):
    f = MASKED[name]
    eager = db.value_and_grad(f, argnums=argnums)
    jitted = db.jit(eager)
    for _ in range(5):                      # (new values: the masks differ every call)
        w, x = _draw(name, 300)
        value, gradient = jitted(w, x)
        want_value, want_gradient = eager(w, x)
        assert _bits(value) == _bits(want_value)
        for got, want in zip(np.atleast_1d(gradient) if argnums == 0 else gradient,
                             np.atleast_1d(want_gradient) if argnums == 0 else want_gradient):
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    # (the report of the programs that run now: the staged ones, once a mask changed)
    last = jitted.explain().split("db.jit of")[-1]
    assert "1 trace," in last and "0 eager calls, 0 failed replays" in last, last


def test_a_gradient_whose_trace_made_a_mask_is_staged_and_says_so(caplog):
    f = MASKED["logical"]
    jitted = db.jit(db.value_and_grad(f, argnums=(0, 1)))
    with caplog.at_level(logging.INFO, logger="dualbcast"):
        for _ in range(3):
            jitted(*_draw("logical", 50))
    said = [r.getMessage() for r in caplog.records if "a mask computed" in r.getMessage()]
    assert len(said) == 1 and "staged from now on" in said[0]
    report = jitted.explain()
    assert "staged since a mask computed from traced values" in report
    assert "(value_and_grad, staged)" in report and "1 trace, 1 replay," in report, report


def test_a_branch_on_a_mask_is_still_checked():
    def f(w, x):
        big = w > 1.5
        if big.any():                   # (a branch: checked, traced again when it flips)
            return np.sum(np.where(big, w * x, w))
        return np.sum(w * w)

    eager = db.value_and_grad(f)
    jitted = db.jit(eager)
    for scale in (1.0, 0.1, 1.0, 0.1, 3.0):
        w, x = RNG.standard_normal(200) * scale, RNG.standard_normal(200)
        value, gradient = jitted(w, x)
        want_value, want_gradient = eager(w, x)
        assert _bits(value) == _bits(want_value)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-14, atol=0)


@pytest.mark.parametrize("form", ["operator", "ufunc", "argument first"])
def test_a_comparison_with_a_jitted_argument_inside_a_grad_follows_the_argument(form):
    compare = {"operator": lambda w, t: w > t, "ufunc": np.greater,
               "argument first": lambda w, t: t < w}[form]

    def f(w, t):
        return db.grad(lambda w: np.sum(np.where(compare(w, t), w * w, 0.0)))(w)

    jitted = db.jit(f)
    w = np.linspace(-1.0, 1.0, 11)
    for threshold in (0.0, 0.5, -0.5, 0.95):
        t = np.full(11, threshold)
        assert _bits(jitted(w, t)) == _bits(f(w, t))


def test_a_mask_a_jitted_function_returns_is_a_mask():
    def f(x, y):
        d = x * y - 0.5
        return d > 0, np.isnan(d) | (d < -1.0), d

    jitted = db.jit(f)
    for _ in range(3):
        x, y = RNG.standard_normal((60, 50)), RNG.standard_normal((60, 50))
        got, want = jitted(x, y), f(x, y)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and _bits(g) == _bits(w)


def test_rows_a_mask_selects_are_checked_by_their_shape():
    def f(w, x):
        return np.sum(w[w > 0] ** 2) + np.sum(x)

    eager = db.value_and_grad(f)
    jitted = db.jit(eager)
    for _ in range(4):              # (another count of positive values every call)
        w, x = RNG.standard_normal(100), RNG.standard_normal(100)
        value, gradient = jitted(w, x)
        want_value, want_gradient = eager(w, x)
        assert _bits(value) == _bits(want_value) and _bits(gradient) == _bits(want_gradient)


DATA = np.arange(8.0)

PLAIN_USES = {                  # (a mask where a plain value is wanted: its value, checked)
    "a plain array indexed": lambda x: np.sum(DATA[x > 0]) * x,
    "written through": lambda x: x * (lambda b: (b.__setitem__(x > 0, 1.0), b)[1])(np.zeros(8)),
    "np.asarray": lambda x: x * np.asarray(x > 0),
    "int of its count": lambda x: x * int((x > 0).sum()),
    "tolist": lambda x: x * sum((x > 0).tolist()),
    "a ufunc's reduce": lambda x: x * np.add.reduce(x > 0),
    "a function without a rule": lambda x: x * np.unique(x > 0).size,
}


@pytest.mark.parametrize("use", sorted(PLAIN_USES))
def test_a_mask_used_as_a_plain_value_is_checked_not_eager(use):
    f = PLAIN_USES[use]
    jitted = db.jit(f)
    base = np.abs(RNG.standard_normal(8)) + 0.1
    for scale in (1.0, 1.1, 1.2, -1.0, 1.3):    # (the same mask, then another, then back)
        assert _bits(jitted(base * scale)) == _bits(f(base * scale))
    report = jitted.explain()
    assert "0 eager calls" in report and "2 replays" in report, report


def test_a_tie_of_zeros_hands_the_loop_to_numpy_once_and_for_all():
    # (relu written as np.maximum(x * (x > 0), 0.0): -0.0 against 0.0 wherever x < 0)
    f = lambda x, y: np.sum(np.maximum(x * (x > 0), 0.0) * y)
    eager = db.value_and_grad(f)
    jitted = db.jit(eager)
    for _ in range(4):
        x, y = RNG.standard_normal(3000), RNG.standard_normal(3000)
        value, gradient = jitted(x, y)
        want_value, want_gradient = eager(x, y)
        assert _bits(value) == _bits(want_value)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-14, atol=0)


def test_clip_keeps_the_sign_of_a_zero_at_a_bound_as_numpy_does():
    # (a review found np.clip(-0.0, 0.0, 1.0) traced as 0.0: np.maximum(x, 0.0) gives
    # its second operand at the tie, where np.clip keeps x)
    for n in (1, 7, 40, 3000):
        x = np.resize([-0.0, 0.5, -1.0, 0.0, 1.0, -0.0], n)
        f = lambda x: np.clip(x, 0.0, 1.0) + np.clip(-x, -1.0, -0.0)
        assert _bits(db.jit(f)(x)) == _bits(f(x)) == _bits(db.jit(f)(x)), n
        value, _ = db.value_and_grad(lambda x: np.sum(1.0 / np.clip(x, 0.0, 1.0)[:1]))(x[:1])
        assert value == 1.0 / np.clip(x[:1], 0.0, 1.0)[0]
        # (an array bound: np.clip gives the bound at the tie, as a review found)
        bounds = lambda x: np.clip(x, np.zeros(n), 1.0) + np.clip(-x, -1.0, np.full(n, -0.0))
        assert _bits(db.jit(bounds)(x)) == _bits(bounds(x)), n
