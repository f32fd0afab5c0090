"""Fused staged programs (dualbcast/jit/staged_fusion.py): a staged program of kernel
sum loops, scalar arithmetic and NaN-safe passes over their gradients, compiled into
one Numba function, gives the bits the eager call gives -- values, their types and
shapes -- on every call, and hands back to the replay whatever it does not cover
(non-finite values, a kernel compiled afresh, underflow reported, larger passes)."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import dualbcast as db
from dualbcast.config import config
from replays import same_bits as _same, staged_programs_of

RNG = np.random.default_rng(23)

pytestmark = pytest.mark.usefixtures("fuse_at_once")


@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


@db.fast_broadcast
def wave(x, a, b):
    return a * math.sin(b * x) + x * x


def embed(p):
    return p ** 2 + p ** 3 + 0.25 * p ** 4


def eam(x):
    return embed(rho.sum(x))


def eam_hvp(x, v):
    return db.jvp(db.grad(eam), (x,), (v,))[1]


def _program(jitted):
    [entry] = staged_programs_of(jitted).entries.values()
    return entry.program


def _fused(jitted):
    fused = _program(jitted).fused
    return fused is not None and fused.fusion is not None and fused.fusion.function is not None


def _agree(f, argsets):
    """``db.jit(f)`` (fused from its second call) against ``f`` on every call."""
    jitted = db.jit(f)
    for args in argsets:
        _same(jitted(*args), f(*args))
    return jitted


@pytest.mark.parametrize("shape", [(100,), (7, 9), (1,)])
def test_the_eam_hessian_vector_product_is_fused_and_gives_the_eager_bits(fused_runs, shape):
    argsets = [(RNG.uniform(0.2, 1.5, shape), RNG.standard_normal(shape)) for _ in range(5)]
    jitted = _agree(eam_hvp, argsets)
    assert _fused(jitted) and len(fused_runs) == 4          # calls 2 to 5
    assert "fused into one Numba function" in jitted.explain()


def test_scalar_outputs_of_every_sum_loop_and_scalar_operator(fused_runs):
    # A sum (its value), its tangent (sum_tangent), a gradient with respect to a scalar
    # argument summed in a register and its tangent (sum_partials_tangent), then + - *
    # / ** and negation of the results, and constants of both kinds.
    def f(x, a, t):
        value, tangent = db.jvp(lambda a: wave.sum(x, a, 1.5), (a,), (t,))
        slope = db.jvp(db.grad(lambda a: wave.sum(x, a, 0.5) ** 2), (a,), (t,))[1]
        return (-value / (1.0 + tangent ** 2) - 3 * slope, value ** 0.5 * 2.0,
                tangent - a, wave.sum(x, 2.0, a))
    argsets = [(RNG.uniform(0.1, 2.0, 50), float(RNG.uniform(0.5, 2)), float(RNG.normal()))
               for _ in range(4)]
    jitted = _agree(f, argsets)
    assert _fused(jitted) and len(fused_runs) == 3
    out = jitted(*argsets[0])
    assert [type(v) for v in out] == [type(v) for v in f(*argsets[0])]


def test_an_input_returned_beside_computed_outputs():
    jitted = _agree(lambda x, v: (x, eam_hvp(x, v), v),
                    [(RNG.uniform(0.2, 1.5, 30), RNG.standard_normal(30)) for _ in range(3)])
    assert _fused(jitted)
    x, v = RNG.uniform(0.2, 1.5, 30), RNG.standard_normal(30)
    got = jitted(x, v)
    assert got[0] is x and got[2] is v


@given(st.lists(st.sampled_from([0.0, -0.0, 1e-300, 1e300, 7.5, -2.0, np.inf, -np.inf,
                                 np.nan, 0.5]), min_size=3, max_size=3),
       st.integers(0, 2))
def test_non_finite_and_huge_values_hand_back_to_the_replay_with_the_eager_bits(values, where):
    # Overflows, infinities and NaNs in the inputs, the tangents or the scalar chain:
    # the fused function sees a non-finite value and the replay (which meets NumPy's
    # warnings as the eager call does) runs instead.
    x = RNG.uniform(0.2, 1.5, 8)
    v = RNG.standard_normal(8)
    arrays = [x.copy(), v.copy()]
    arrays[where % 2][:3] = values
    jitted = db.jit(eam_hvp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(3):
            _same(jitted(*[a.copy() for a in arrays]), eam_hvp(*[a.copy() for a in arrays]))
            _same(jitted(x, v), eam_hvp(x, v))


def test_warnings_are_the_eager_calls():
    x, v = RNG.uniform(0.2, 1.5, 10), RNG.standard_normal(10)
    jitted = db.jit(eam_hvp)
    for _ in range(3):
        jitted(x, v)
    assert _fused(jitted)
    huge = np.full(10, -62.0)           # the density 1e80: its fourth power overflows
    for call in (jitted, eam_hvp):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with np.errstate(all="warn"):
                call(huge, v)
        if call is jitted:
            got = sorted(str(w.message) for w in caught)
        else:
            assert got == sorted(str(w.message) for w in caught)
    with np.errstate(over="raise", invalid="raise"):
        with pytest.raises(FloatingPointError):
            jitted(huge, v)


def test_a_kernel_compiled_afresh_drops_the_fused_function():
    namespace = {"math": math, "SCALE": 3.0}
    exec("def decay(r):\n    return math.exp(-SCALE * r)\n", namespace)
    decay = db.fast_broadcast(namespace["decay"])

    def hvp(x, v):
        return db.jvp(db.grad(lambda x: decay.sum(x) ** 3), (x,), (v,))[1]
    x, v = RNG.uniform(0.2, 1.5, 20), RNG.standard_normal(20)
    jitted = _agree(hvp, [(x, v)] * 3)
    assert _fused(jitted)
    namespace["SCALE"] = 2.0            # the kernel reads a new value: compiled afresh
    _same(jitted(x, v), hvp(x, v))
    assert not _fused(jitted) and "a name a kernel reads changed" in jitted.explain()
    _same(jitted(x, v), hvp(x, v))


SCALE = 2.0
WEIGHTS = np.linspace(0.5, 1.5, 20)


def test_the_fused_calls_short_path_checks_what_the_general_path_checks(fused_runs):
    # a fused program's calls skip the general path (positional float arrays): what it
    # checks, it checks too -- a rebound global, a closed-over array changed in place,
    # another signature, keyword arguments -- each call the eager call's bits
    global SCALE

    def hvp(x, v, *, power=3):
        return db.jvp(db.grad(lambda x: SCALE * wave.sum(x, WEIGHTS, 0.5) ** power),
                      (x,), (v,))[1]
    x, v = RNG.uniform(0.2, 1.5, 20), RNG.standard_normal(20)
    jitted = _agree(hvp, [(x, v)] * 4)
    assert _fused(jitted) and staged_programs_of(jitted).fused_runs
    runs = len(fused_runs)
    _same(jitted(x + 0.25, v), hvp(x + 0.25, v))
    assert len(fused_runs) == runs + 1
    try:
        SCALE = 3.0
        _same(jitted(x, v), hvp(x, v))
        WEIGHTS[3] = 7.0
        _same(jitted(x, v), hvp(x, v))
    finally:
        SCALE = 2.0
        WEIGHTS[3] = 0.5 + 3 / 19
    _same(jitted(x, v), hvp(x, v))
    strided = np.repeat(x, 2)[::2]                  # (another signature: its strides)
    _same(jitted(strided, v), hvp(strided, v))
    _same(jitted(x, v, power=2), hvp(x, v, power=2))
    _same(jitted(x.astype(np.float32), v.astype(np.float32)),
          hvp(x.astype(np.float32), v.astype(np.float32)))


def test_underflow_reported_runs_the_replay(fused_runs):
    x, v = RNG.uniform(0.2, 1.5, 20), RNG.standard_normal(20)
    jitted = _agree(eam_hvp, [(x, v)] * 3)
    runs = len(fused_runs)
    with np.errstate(under="raise"):
        _same(jitted(x, v), eam_hvp(x, v))
    assert len(fused_runs) == runs and _fused(jitted)


def test_a_threaded_kernel_loop_inside_the_fused_function(monkeypatch, fused_runs):
    # A directional derivative of the energy: scalar outputs only, the kernel's loop on
    # its threaded driver from config.parallel_threshold elements (its chunks' sums
    # added up exactly, as the replay adds them).
    monkeypatch.setattr(config, "parallel_threshold", 5000)
    monkeypatch.setattr(config, "threads", 2)

    def slope(x, v):
        return db.jvp(eam, (x,), (v,))
    argsets = [(RNG.uniform(0.2, 1.5, 40000), RNG.standard_normal(40000)) for _ in range(4)]
    jitted = _agree(slope, argsets)
    assert _fused(jitted) and _program(jitted).fused.fusion.threaded == 40000
    assert len(fused_runs) == 3


def test_a_pass_at_the_threads_threshold_is_not_fused(monkeypatch):
    monkeypatch.setattr(config, "parallel_threshold", 64)
    x, v = RNG.uniform(0.2, 1.5, 64), RNG.standard_normal(64)
    jitted = _agree(eam_hvp, [(x, v)] * 3)
    assert not _fused(jitted)
    assert "an elementwise pass over 64 elements" in jitted.explain()


@pytest.mark.parametrize("f, why", [
    (lambda x, v: np.exp(eam_hvp(x, v)), "numpy.exp"),
    # (the ufunc's fast paths for 0.5, 2, -1 round otherwise than the C library's pow,
    # which ** calls: found by a review, 1 ulp on ~0.1% of inputs)
    (lambda x, v: np.power(rho.sum(x), 0.5) + np.power(rho.sum(v * v), 2.0), "numpy.power"),
    (lambda x, v: eam_hvp(x, v)[::2], "getitem"),
    (lambda x, v: eam_hvp(x.astype(np.float32), v), "not fused:"),
])
def test_other_programs_are_not_fused_and_still_right(f, why):
    x, v = RNG.uniform(0.2, 1.5, 12), RNG.standard_normal(12)
    jitted = _agree(f, [(x, v)] * 3)
    assert not _fused(jitted)
    assert why in jitted.explain(), jitted.explain()


def test_numpy_power_of_a_scalar_keeps_the_ufuncs_bits():
    # Where np.power's fast path (a square root for 0.5) and the C library's pow differ
    # by an ulp, the jitted call gives the ufunc's, as the eager call does.
    xs = RNG.uniform(0.1, 10.0, 20000)
    differing = [float(a) for a in xs if np.power(np.float64(a), 0.5) != math.pow(a, 0.5)]

    def f(x, c):
        return np.power(wave.sum(x, c, 0.0) * c, 0.5), np.power(c, 2.0) ** 2
    jitted = db.jit(f)
    x = np.ones(1)
    for c in [2.0, 2.0, 2.0] + differing[:20]:
        _same(jitted(x, c), f(x, c))
