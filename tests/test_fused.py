"""Fused replays (dualbcast/jit/fusion.py): a program of kernel sums and scalar
arithmetic compiled into one Numba function gives the bits a trace gives — value,
gradients, their types — on every call, and hands back to the replay whatever it does
not cover (non-finite values, errors, guards, large or float32 loops)."""
import ast
import math
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import dualbcast as db
from dualbcast.jit import policy
from dualbcast.jit.fused_runtime import exact_sum
from replays import same_bits as _same, programs_of

RNG = np.random.default_rng(11)


# Record at the first call, generate at the first replay, fuse at the next (jit's own
# policy, set by conftest.fuse_at_once so that the tests say what they rely on).
pytestmark = pytest.mark.usefixtures("fuse_at_once")


@db.fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


@db.fast_broadcast
def scaled_wave(x, a, b):
    return a * math.sin(b * x)


@db.fast_broadcast
def inverse_square(x):
    return x ** -2


def _program(vg):
    [entry] = programs_of(vg).entries.values()
    return entry.program


def _agree(f, argsets, argnums=0):
    """Replayed (fused after the second call) against traced on every call."""
    vg = db.jit(db.value_and_grad(f, argnums))
    traced = db.value_and_grad(f, argnums)
    for args in argsets:
        _same(vg(*args), traced(*args))
    return vg


def embed(p):
    return p ** 2 + p ** 3 + 0.25 * p ** 4


def test_the_eam_energy_is_fused_and_gives_the_traced_bits(fused_runs):
    argsets = [(RNG.uniform(-0.5, 1.0, 100),) for _ in range(6)]
    vg = _agree(lambda x: embed(rho.sum(x)), argsets)
    assert _program(vg).fusion.function is not None
    assert len(fused_runs) == 4             # calls 3 to 6
    # and against an independent oracle
    x = argsets[0][0]
    want = autograd.value_and_grad(lambda x: embed(anp.sum(anp.exp(-3.0 * (x + 1.0)))))(x)
    value, gradient = vg(x)
    np.testing.assert_allclose(value, want[0], rtol=1e-13)
    np.testing.assert_allclose(gradient, want[1], rtol=1e-13)


@pytest.mark.parametrize("size", [4097, 10 ** 4])
def test_sums_over_several_chunks_are_added_up_exactly_as_the_replay_does(size, fused_runs):
    # The chunks' sums (and a scalar argument's register gradient) added up by the
    # fused function's own exact sum: the bits of math.fsum, which the replay uses.
    def f(x, a, b):
        p = scaled_wave.sum(x, a, b) + inverse_square.sum(x)
        return p * p - b * p
    argsets = [(RNG.uniform(0.05, 2.0, size), 1.0 + RNG.uniform(), 2.0 + RNG.uniform())
               for _ in range(5)]
    argsets[-1][0][::7] = 1e-5          # terms of 1e10 among terms of 1: every order differs
    vg = _agree(f, argsets, argnums=(0, 1, 2))
    assert _program(vg).fusion.function is not None
    assert len(fused_runs) == 3


def test_exact_sum_is_math_fsum():
    rng = np.random.default_rng(5)
    for n in [0, 1, 2, 3, 7, 40]:
        for scale in [1.0, 1e-300, 1e300 / max(n, 1)]:
            for values in (rng.standard_normal(n) * scale,
                           rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n),
                           np.array([1e-16, 1.0, 1e16, -0.0, 1.0, -1e16][:n])):
                want = math.fsum(values.tolist())
                assert np.float64(exact_sum(values)).tobytes() == np.float64(want).tobytes()


def test_scalar_arguments_register_gradients_and_every_scalar_operator(fused_runs):
    def f(x, a, b):
        s = scaled_wave.sum(x, a, b)
        t = rho.sum(x)
        return (s * t - 2.0 * s + t ** 3 - 1.5 ** 2 * a + (b - s) * (s + 0.5) + s ** 0
                + 3.0 - t + (s ** -1.5 if s > 0 else 0.0) * 0.0)

    # the comparison s > 0 is a guard: programs with guards are not fused
    vg = _agree(f, [(RNG.uniform(0, 1, 64), RNG.uniform(0.5, 1.5), 0.75) for _ in range(4)],
                argnums=(0, 1, 2))
    assert _program(vg).fusion is None and fused_runs == []

    def g(x, y, a, b):
        s = scaled_wave.sum(x, a, b)
        t = rho.sum(y)
        return s * t - 2.0 * s + t ** 3 - 1.5 ** 2 * a + (b - s) * (s + 0.5) + s ** 0 + 3.0 - t

    argsets = [(RNG.uniform(0, 1, 64), RNG.uniform(0, 1, (3, 5)), RNG.uniform(0.5, 1.5),
                np.float64(0.75)) for _ in range(5)]
    vg = _agree(g, argsets, argnums=(0, 1, 2, 3))
    assert len(fused_runs) == 3
    for argnum in range(4):                 # and against autograd
        oracle = autograd.grad(_g_autograd, argnum)(*argsets[0])
        np.testing.assert_allclose(vg(*argsets[0])[1][argnum], oracle, rtol=1e-11)


def _g_autograd(x, y, a, b):
    s = anp.sum(a * anp.sin(b * x))
    t = anp.sum(anp.exp(-3.0 * (y + 1.0)))
    return s * t - 2.0 * s + t ** 3 - 1.5 ** 2 * a + (b - s) * (s + 0.5) + s ** 0 + 3.0 - t


def test_negation_and_division(fused_runs):
    def f(x, y, a):
        p, q = rho.sum(x), scaled_wave.sum(y, 1.5, a)
        return -p / q + (-a) / 3.0 + 2.0 / (p * a) - q / 4.0
    argsets = [(RNG.uniform(0, 1, 20), RNG.uniform(0.5, 1, 20), RNG.uniform(0.5, 2))
               for _ in range(5)]
    vg = _agree(f, argsets, argnums=(0, 1, 2))
    assert len(fused_runs) == 3

    def f_autograd(x, y, a):
        p, q = anp.sum(anp.exp(-3.0 * (x + 1.0))), anp.sum(1.5 * anp.sin(a * y))
        return -p / q + (-a) / 3.0 + 2.0 / (p * a) - q / 4.0
    for argnum in range(3):
        np.testing.assert_allclose(vg(*argsets[0])[1][argnum],
                                   autograd.grad(f_autograd, argnum)(*argsets[0]), rtol=1e-12)


def test_a_division_by_zero_is_seen_as_when_traced(fused_runs):
    def f(x, a):
        return rho.sum(x) / a
    vg = db.jit(db.value_and_grad(f, argnums=(0, 1)))
    for _ in range(3):
        vg(np.ones(4), 2.0)
    assert len(fused_runs) == 1
    with pytest.warns(RuntimeWarning, match="divide by zero"):     # NumPy's, as traced
        got = vg(np.ones(4), 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(got, db.value_and_grad(f, argnums=(0, 1))(np.ones(4), 0.0))
    assert got[0] == np.inf and len(fused_runs) == 1


def test_an_array_in_several_sums_adds_its_cotangents_up_as_a_replay_does(fused_runs):
    """The full EAM energy: a pair term and the embedding of the density, both sums
    over x; and x twice in one call."""
    def f(x, a):
        pair = scaled_wave.sum(x, a, x)
        p = rho.sum(x)
        unused = 0.0 * scaled_wave.sum(x, 1.0, 2.0)       # a zero cotangent: zeros added
        return pair + p ** 2 + p ** 3 + 0.25 * p ** 4 + unused
    argsets = [(RNG.uniform(0, 1, 40), RNG.uniform(0.5, 1.5)) for _ in range(5)]
    vg = _agree(f, argsets, argnums=(0, 1))
    assert len(fused_runs) == 3

    def f_autograd(x, a):
        p = anp.sum(anp.exp(-3.0 * (x + 1.0)))
        return anp.sum(a * anp.sin(x * x)) + p ** 2 + p ** 3 + 0.25 * p ** 4
    for argnum in range(2):
        np.testing.assert_allclose(vg(*argsets[0])[1][argnum],
                                   autograd.grad(f_autograd, argnum)(*argsets[0]), rtol=1e-12)


def test_gradient_types_follow_the_arguments(fused_runs):
    """A Python float's gradient is a float, a NumPy float's a NumPy float."""
    def f(x, a):
        return rho.sum(x) * a + a * a
    vg = _agree(f, [(RNG.uniform(0, 1, 10), 1.25) for _ in range(4)], argnums=(0, 1))
    assert type(vg(np.ones(10), 2.0)[1][1]) is float
    assert len(fused_runs) == 3


def test_leaves_no_cotangent_reaches_get_zeros(fused_runs):
    def f(x, y, a):
        return 0.0 * rho.sum(x) + a * 2.0       # y unused; x's cotangent is 0
    argsets = [(RNG.uniform(0, 1, 8), RNG.uniform(0, 1, 8), 0.5) for _ in range(4)]
    vg = _agree(f, argsets, argnums=(0, 1, 2))
    _, (gx, gy, ga) = vg(*argsets[0])
    assert not gx.any() and not gy.any() and ga == 2.0
    assert len(fused_runs) == 3


def test_each_call_gets_fresh_gradient_arrays(fused_runs):
    vg = db.jit(db.value_and_grad(lambda x: embed(rho.sum(x))))
    x = RNG.uniform(0, 1, 30)
    gradients = [vg(x)[1] for _ in range(5)]
    assert len(fused_runs) == 3
    assert len({id(g) for g in gradients}) == 5
    for g in gradients[1:]:
        np.testing.assert_array_equal(g, gradients[0])


@db.fast_broadcast
def pair(x, y):
    return x * math.sin(y)


@pytest.mark.parametrize("f, args, argnums, fused", [
    (lambda x: pair.sum(x, x) ** 2, (RNG.uniform(-0.5, 1.0, 50),), 0, False),
    (lambda x, a: a * pair.sum(x, x), (RNG.uniform(-0.5, 1.0, 50), 1.5), (0, 1), False),
    # (x's last use another sum: its accumulator is written first, as the replay does)
    (lambda x: pair.sum(x, x) + inverse_square.sum(x), (RNG.uniform(0.5, 1.0, 50),), 0,
     True)])
def test_an_array_passed_twice_to_one_kernel_sum_gets_the_eager_gradient(f, args, argnums,
                                                                        fused):
    """k.sum(x, x) as the last use of x: the fused function wrote the accumulator of
    x's cotangent (the buffer of its last use) before reading what the loop stored
    there; such a program is not fused, and every call gives the eager bits (found by
    a review: 827 off)."""
    vg, eager = db.jit(db.value_and_grad(f, argnums)), db.value_and_grad(f, argnums)
    for _ in range(4):
        _same(vg(*args), eager(*args))
    assert (_program(vg).fusion is not None) == fused


def test_an_array_passed_twice_to_one_kernel_sum_against_the_closed_form():
    x = RNG.uniform(-0.5, 1.0, 50)
    vg = db.jit(db.value_and_grad(lambda x: pair.sum(x, x) ** 2))
    p = np.sum(x * np.sin(x))
    for _ in range(4):
        np.testing.assert_allclose(vg(x)[1], 2 * p * (np.sin(x) + x * np.cos(x)), rtol=1e-12)


def test_the_short_path_keys_one_array_as_the_signature_does(fused_runs):
    """One array argument, the commonest call, is keyed on the short path without
    signature()'s walk: with the key signature() makes, so that a strided view and a
    read-only array find their own programs (or the one of their layout), with the
    eager bits."""
    from dualbcast.jit.signature import signature
    f = lambda x: embed(rho.sum(x))
    vg = db.jit(db.value_and_grad(f))
    x = RNG.uniform(0, 1, 40)
    strided = np.repeat(x, 2)[::2]
    read_only = x.copy()
    read_only.flags.writeable = False
    for arg in (x, strided, read_only) * 4:
        _same(vg(arg), db.value_and_grad(f)(arg))
    assert set(programs_of(vg).entries) == {signature((a,), None, (True,))[0]
                                            for a in (x, strided, read_only)}
    assert len(programs_of(vg).entries) == 2        # (read-only: x's layout)
    assert len(fused_runs) >= 6


def test_an_overflow_hands_the_call_back_and_warns_like_a_trace(fused_runs):
    def f(x):
        p = rho.sum(x)
        return p ** 300.0
    vg = db.jit(db.value_and_grad(f))
    small = np.full(4, 0.1)
    for _ in range(3):
        vg(small)
    assert len(fused_runs) == 1
    large = np.full(4, -1.6)                # p = 24.2, p ** 300 overflows: NumPy warns
    with pytest.warns(RuntimeWarning, match="overflow"):
        value, gradient = vg(large)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same((value, gradient), db.value_and_grad(f)(large))
    assert len(fused_runs) == 1


def test_an_infinite_sum_hands_the_call_back(fused_runs):
    """(The dual power gives inf at 0, as NumPy does; a non-finite sum is left to the
    replay, which gives what a trace gives.)"""
    f = lambda x: inverse_square.sum(x) * 2.0       # noqa: E731
    vg = db.jit(db.value_and_grad(f))
    x = np.linspace(1, 2, 5)
    for _ in range(3):
        vg(x)
    assert len(fused_runs) == 1
    x[2] = 0.0
    _same(vg(x), db.value_and_grad(f)(x))
    assert len(fused_runs) == 1


def test_a_constant_array_changed_in_place_is_seen(fused_runs):
    weights = np.linspace(0.5, 1.5, 16)

    def f(x):
        return scaled_wave.sum(x, weights, 2.0) * 3.0
    x = RNG.uniform(0, 1, 16)
    vg = _agree(f, [(x,)] * 3)
    weights[3] = 7.0                        # the next call traces again
    _same(vg(x), db.value_and_grad(f)(x))
    np.testing.assert_allclose(vg(x)[1], 3.0 * weights * 2.0 * np.cos(2.0 * x), rtol=1e-13)


@pytest.mark.parametrize("make, why", [
    (lambda: (np.ones(50, np.float32), lambda x: embed(rho.sum(x))), "float32"),
    (lambda: (np.ones(50), lambda x: embed(rho.sum(x * 2.0))), "a kernel of a computed array"),
    (lambda: (np.ones(50), lambda x: np.sum(x) * rho.sum(x)), "a NumPy reduction"),
])
def test_other_programs_are_not_fused_and_still_right(make, why, fused_runs):
    x, f = make()
    vg = _agree(f, [(x,)] * 4)
    assert _program(vg).fusion is None, why
    assert fused_runs == []


@pytest.mark.parametrize("threads", [1, 2])
def test_a_loop_large_enough_for_threads_is_fused_and_its_bits_do_not_depend_on_them(
        threads, monkeypatch, fused_runs):
    monkeypatch.setattr(db.config, "threads", threads)
    x = RNG.uniform(-0.5, 1.0, db.config.parallel_threshold + 5)
    vg = _agree(lambda x: embed(rho.sum(x)), [(x,)] * 4)
    assert _program(vg).fusion.function is not None and len(fused_runs) == 2


def test_fused_results_match_central_differences():
    def f(x, c):
        p = scaled_wave.sum(x, 1.3, c)
        return p * p - 0.5 * p ** 3 + c * p
    x, c = RNG.uniform(0, 1, 7), 0.9
    vg = db.jit(db.value_and_grad(f, argnums=(0, 1)))
    for _ in range(3):
        _, (gx, gc) = vg(x, c)
    h = 1e-6
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        np.testing.assert_allclose(gx[i], (f(x + e, c) - f(x - e, c)) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(gc, (f(x, c + h) - f(x, c - h)) / (2 * h), rtol=1e-6)


# ---------------------------------------------------------------- compile size and cap
# (issue 14, item 12: Numba's compile of the fused function grew as the square of the
# program, in time and memory; what keeps it linear is checked here as exact
# behaviour, its seconds by asv_bench/benchmarks/bench_fusion.py)


def records_program(n, kernels=1):
    """A program of exactly ``n`` records: ``kernels`` kernel sums of x (n >= 2 *
    kernels - 1), the rest scalar products and sums."""
    def f(x):
        p = rho.sum(x)
        count = 1
        for i in range(1, kernels):
            p = p + scaled_wave.sum(x, 1.0 + i, 0.5)
            count += 2
        s = p
        for i in range(n - count):
            p = p * 0.75 if i % 2 == 0 else p + s
        return p
    return f


def _records(vg):
    program = _program(vg)
    return program.slots - program.leaves


def _fused_body(source):
    [fused] = [node for node in ast.parse(source).body
               if type(node) is ast.FunctionDef and node.name == "fused"]
    return fused


def test_the_fused_function_is_straight_line_code_with_each_name_assigned_once(fused_runs):
    """No branch, no loop, no name assigned twice in the function Numba compiles (the
    helpers it calls hold those): what keeps Numba's passes linear in its length."""
    def f(x, y, a):
        s = scaled_wave.sum(x, a, y)            # a register gradient, two stored ones
        t = rho.sum(x)                          # x in a second sum
        u = 0.0 * (scaled_wave.sum(y, 1.0, 2.0) * 3.0)   # a sum no cotangent reaches
        return -s / t + s ** 3.0 - (a - t) * s + u
    argsets = [(RNG.uniform(0, 1, 30), RNG.uniform(0, 1, 30), RNG.uniform(0.5, 1.5))
               for _ in range(5)]
    vg = _agree(f, argsets, argnums=(0, 1, 2))
    assert len(fused_runs) == 3
    fused = _program(vg).fusion
    body = _fused_body(fused.source)
    assigned = []
    for statement in body.body:
        assert type(statement) in (ast.Assign, ast.Expr, ast.Return), ast.unparse(statement)
        for node in ast.walk(statement):
            assert type(node) not in (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp), \
                ast.unparse(statement)
        if type(statement) is ast.Assign:
            for target in statement.targets:
                assigned += [name.id for name in ast.walk(target) if type(name) is ast.Name]
    assert len(assigned) == len(set(assigned))
    # and Numba sees one block: its IR before any pass
    from numba.core.compiler import run_frontend
    assert len(run_frontend(fused.function.py_func).blocks) == 1


def test_the_fused_source_grows_linearly_with_the_records():
    lines = {}
    for n in (10, 20, 40, 80):
        vg = db.jit(db.value_and_grad(records_program(n, kernels=n // 5)))
        x = RNG.uniform(0, 1, 16)
        vg(x), vg(x)                                    # recorded, then planned
        assert _records(vg) == n
        lines[n] = _program(vg).fusion.source.count("\n")
    assert lines[80] - lines[40] == 2 * (lines[40] - lines[20]) == 4 * (lines[20] - lines[10])


def test_parameters_do_not_grow_with_the_kernel_sums():
    """One parameter per leaf and shared constant, however many loops read them (the
    function's Python wrapper unboxes each parameter and, on failure, releases all
    those before it: code as the square of their number)."""
    params = {}
    for kernels in (2, 8):
        vg = db.jit(db.value_and_grad(records_program(4 * kernels, kernels=kernels)))
        x = RNG.uniform(0, 1, 16)
        vg(x), vg(x)
        params[kernels] = _fused_body(_program(vg).fusion.source).args.args
    # workers, the sizes and constants (N, K), x, its cotangent, the other buffers
    assert len(params[2]) == len(params[8]) == 6


def test_a_program_at_the_cap_fuses_and_one_above_it_is_replayed_unfused(fused_runs):
    cap = policy.FUSE_UP_TO
    argsets = [(RNG.uniform(0, 1, 16),) for _ in range(4)]
    vg = _agree(records_program(cap + 1, kernels=4), argsets)
    assert _records(vg) == cap + 1
    assert _program(vg).fusion is None and fused_runs == []
    assert _program(vg).generated is not None           # replayed as generated code
    vg = _agree(records_program(cap, kernels=4), argsets)
    assert _records(vg) == cap
    assert _program(vg).fusion.function is not None and len(fused_runs) == 2


def test_the_cap_holds_the_source_within_its_bound():
    """FUSE_UP_TO records of the longest kinds of record stay within MAX_STATEMENTS
    lines, the bound on the compile's time and memory."""
    cap = policy.FUSE_UP_TO

    def divisions(xs):
        total = xs[0]
        for x in xs[1:]:
            total = -(total / x)
        return total
    def differences(xs):
        total = xs[0]
        for x in xs[1:]:
            total = total - x
        return total
    cases = [(records_program(cap, kernels=cap // 2), (RNG.uniform(0, 1, 16),)),
             (records_program(cap), (RNG.uniform(0, 1, 16),)),
             (divisions, (tuple(RNG.uniform(1, 2, cap // 2 + 1)),)),
             (differences, (tuple(RNG.uniform(1, 2, cap + 1)),))]
    for f, args in cases:
        vg = db.jit(db.value_and_grad(f))
        vg(*args), vg(*args)
        assert _records(vg) <= cap
        assert 0.5 * policy.MAX_STATEMENTS < _program(vg).fusion.source.count("\n") \
            <= policy.MAX_STATEMENTS


def test_a_function_longer_than_the_bound_is_not_fused_and_still_right(monkeypatch, fused_runs):
    monkeypatch.setattr(policy, "MAX_STATEMENTS", 60)
    argsets = [(RNG.uniform(0, 1, 16),) for _ in range(4)]
    vg = _agree(records_program(12), argsets)
    assert _program(vg).fusion is None and fused_runs == []
    vg = _agree(records_program(3), argsets)
    assert _program(vg).fusion.function is not None and len(fused_runs) == 2


def test_a_leaf_whose_last_sum_no_cotangent_reaches_gets_the_others_copied(fused_runs):
    """x's cotangent is added up in the buffer of the last sum of x, which the backward
    pass meets first; where no cotangent reaches that sum the next one is copied in."""
    def f(x, a):
        p = rho.sum(x)
        q = scaled_wave.sum(x, a, 2.0)
        dead = 0.0 * (scaled_wave.sum(x, 1.0, 3.0) * 3.0)
        return p * p + a * q + dead
    argsets = [(RNG.uniform(0, 1, 20), RNG.uniform(0.5, 1.5)) for _ in range(5)]
    argsets[-1][0][3] = -0.0
    _agree(f, argsets, argnums=(0, 1))
    assert len(fused_runs) == 3

    def g(x, y):                        # and a leaf no cotangent reaches at all
        return rho.sum(y) * 2.0 + 0.0 * (rho.sum(x) * 3.0)
    _agree(g, [(RNG.uniform(0, 1, 8), RNG.uniform(0, 1, 8)) for _ in range(4)],
           argnums=(0, 1))
    assert len(fused_runs) == 5


def test_a_zero_gradient_times_a_negative_cotangent_is_minus_zero_as_replayed(fused_runs):
    def f(x, a, b):
        return -scaled_wave.sum(x, a, b) * 2.0      # d/da = sum(sin(b * 0)) = 0.0, g = -2
    _agree(f, [(np.zeros(5), 1.5, 0.7)] * 4, argnums=(0, 1, 2))
    assert len(fused_runs) == 2
