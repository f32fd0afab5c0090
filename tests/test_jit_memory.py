"""db.jit's memory (dualbcast/jit/compiled.py): a fused function's source names no size
and no constant, so one compile serves a program at every shape, for every value of its
scalar arguments and of the constants it closes over, shared by every program of equal
source; each jitted function fuses a bounded number of different programs.  Numba never frees compiled
code, so this is what bounds memory: soaks over hundreds of shapes and values hold RSS
flat, in a process of their own, and give the eager call's bits on every call."""
import logging
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbcast as db
from dualbcast.jit import compiled, policy
from replays import programs_of
from soak import run_soak

pytestmark = pytest.mark.usefixtures("fuse_at_once")

RNG = np.random.default_rng(27)


@db.fast_broadcast
def density(r, a):
    return a * math.exp(-r)


def energy(x, a, b=3.0):
    # floats in a kernel sum, in a segment (a kernel map, a square, a sum), in scalar
    # operations and as a power
    p = density.sum(x, a)
    return a * p ** b - p / a + a * np.sum(density(x, a) ** 2)


# (a fused program takes its arguments as parameters: x and a are differentiated; a
# float argument not differentiated is an input too, which stages the gradient)
BOTH = (0, 1)


def _same(got, want):
    value, (gradient, ga) = got
    assert type(value) is type(want[0]) and type(gradient) is type(want[1][0])
    assert np.float64(value).tobytes() == np.float64(want[0]).tobytes(), (value, want[0])
    assert gradient.shape == want[1][0].shape and gradient.tobytes() == want[1][0].tobytes()
    assert type(ga) is type(want[1][1]) and _bits([ga]) == _bits([want[1][1]])


def _bits(floats):
    return [np.float64(value).tobytes() for value in floats]


def _fused_functions(vg):
    """The fused functions of jitted ``vg``'s programs, those it keeps alive."""
    programs = programs_of(vg)
    held = [entry.program.fusion.function for entry in programs.entries.values()
            if entry.program is not None and entry.program.fusion is not None]
    return {id(function) for function in held}, programs.fused_functions


def test_programs_at_other_shapes_and_constants_share_one_fused_function(fused_runs):
    vg = db.jit(db.value_and_grad(energy, BOTH))
    eager = db.value_and_grad(energy, BOTH)
    for n, a in [(7, 0.5), (300, 3.0), (5000, 1e-300), (9000, 2.5), (2, 1e-200)]:
        x = RNG.uniform(0.0, 1.0, n)
        for _ in range(3):                  # traced, replayed (planned), fused
            _same(vg(x, a), eager(x, a))
    held, kept = _fused_functions(vg)
    assert len(fused_runs) == 5 and len(held) == 1 and len(kept.functions) == 1
    # another jitted function of the same program (a closure made again) shares it
    again = db.jit(db.value_and_grad(lambda x, a: energy(x, a, 3.0), BOTH))
    x = RNG.uniform(0.0, 1.0, 40)
    for _ in range(3):
        _same(again(x, 0.25), eager(x, 0.25))
    assert _fused_functions(again)[0] == held and len(fused_runs) == 6


def test_two_dimensional_shapes_share_one_fused_function(fused_runs):
    vg = db.jit(db.value_and_grad(energy, BOTH))
    eager = db.value_and_grad(energy, BOTH)
    for shape in [(3, 5), (40, 7), (2, 3000)]:
        x = RNG.uniform(0.0, 1.0, shape)
        for _ in range(3):
            _same(vg(x, 0.75), eager(x, 0.75))
    held, kept = _fused_functions(vg)
    assert len(fused_runs) == 3 and len(held) == 1 and len(kept.functions) == 1


_B = 3.0         # the power of energy_b: a constant it reads (a new value traces again)


def energy_b(x, a):
    return energy(x, a, _B)


_HELD = set()    # the fused functions the examples below ran: one for them all


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 5000),
       a=st.one_of(st.floats(-1e3, 1e3),
                   st.sampled_from([0.0, -0.0, 5e-324, -1e-310, 1e-300, 1e300])),
       b=st.one_of(st.floats(0.25, 3.0), st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0])))
def test_constants_passed_to_the_fused_function_give_the_eager_bits(fused_runs, n, a, b):
    """Any float a program takes as an argument or a constant (in a kernel sum, a
    segment, a scalar operation, a power), at any size: the eager call's bits, or the
    call handed back to the replay (a non-finite value, an error: it warns or raises as
    the eager call), never another number; and one fused function for them all."""
    global _B
    _B = b
    x = RNG.uniform(-1.0, 1.0, n)
    eager = db.value_and_grad(energy_b, BOTH)
    jitted = db.jit(db.value_and_grad(energy_b, BOTH))
    fused = len(fused_runs)
    with np.errstate(all="ignore"):
        want = eager(x, a)
        for _ in range(3):
            _same(jitted(x, a), want)
    if 1e-3 <= a <= 1e3 and b > 0:         # finite throughout: the fused function's answer
        assert len(fused_runs) == fused + 1, jitted.explain()
    _HELD.update(_fused_functions(jitted)[0])
    assert len(_HELD) <= 1


def test_a_jitted_function_fuses_a_bounded_number_of_different_programs(
        monkeypatch, caplog, fused_runs):
    """Programs whose records differ (a loop as long as an argument) each need a
    fused function of their own: past MAX_FUNCTIONS they are replayed unfused, with
    the same bits, and the log says so once."""
    monkeypatch.setattr(policy, "MAX_FUNCTIONS", 2)
    caplog.set_level(logging.INFO, logger="dualbcast")

    def horner(x, n):
        total = x
        for _ in range(n):
            total = total * x + 1.0
        return total
    vg = db.jit(db.value_and_grad(horner))
    eager = db.value_and_grad(horner)
    for n in (1, 2, 3, 4, 1):
        for _ in range(3):
            assert _bits(vg(0.7, n)) == _bits(eager(0.7, n))
    held, kept = _fused_functions(vg)
    assert len(kept.functions) == 2 and len(held) == 2
    assert len(fused_runs) == 5                 # n = 1 (once, then three times), 2
    unfused = [entry.program for entry in programs_of(vg).entries.values()
               if entry.program.fusion is None]
    assert len(unfused) == 2 and all(program.generated is not None for program in unfused)
    refusals = [r.getMessage() for r in caplog.records if "replayed unfused" in r.getMessage()]
    assert len(refusals) == 1 and "horner" in refusals[0]


def test_the_process_wide_cache_keeps_the_most_recently_used(monkeypatch):
    monkeypatch.setattr(policy, "SHARED_FUNCTIONS", 2)
    monkeypatch.setattr(compiled, "_shared", compiled.OrderedDict())

    class Fake:
        objects = ()

        def __init__(self, key):
            self.key = key

        def compile(self):
            return object()
    functions = compiled.FusedFunctions("f")
    made = {key: functions.function_for(Fake(key)) for key in "abc"}
    assert list(compiled._shared) == ["b", "c"]
    # "a" is still this function's own; another function compiles it afresh
    assert functions.function_for(Fake("a")) is made["a"]
    assert list(compiled._shared) == ["c", "a"]
    other = compiled.FusedFunctions("g")
    assert other.function_for(Fake("c")) is made["c"]
    assert other.function_for(Fake("b")) is not made["b"]


# The soaks run in a process of their own: its RSS is theirs alone.
_SOAK = """
    import json, sys
    import numpy as np
    import dualbcast as db
    sys.path.insert(0, {tests!r})
    from replays import programs_of
    from soak import collected, rss_mb

    compiles = collected("fused into one Numba function")

    from test_jit_memory import energy     # (its kernel's loops cached on disk)

    vg = db.jit(db.value_and_grad(energy, (0, 1)))
    eager = db.value_and_grad(energy, (0, 1))
    rng = np.random.default_rng(0)
    kind, count = {kind!r}, {count}
    rss, mismatches = [], 0
    for i in range(count):
        n = 64 if kind == "values" else 1 + (37 * i) % 2000
        a = 1.0 + i / 7.0 if kind == "values" else 0.5
        x = rng.uniform(0.0, 1.0, n)
        want = eager(x, a)
        for _ in range(3):          # traced, replayed, fused
            value, (gradient, ga) = vg(x, a)
            mismatches += (np.float64(value).tobytes() != np.float64(want[0]).tobytes()
                           or gradient.tobytes() != want[1][0].tobytes()
                           or np.float64(ga).tobytes() != np.float64(want[1][1]).tobytes())
        if len(compiles) > 1:       # a compile per value or shape: stop now
            break
        rss.append(rss_mb())
    kept = programs_of(vg).fused_functions.functions
    print(json.dumps(dict(rss=rss, mismatches=mismatches, compiles=len(compiles),
                          kept=len(kept))))
"""


@pytest.mark.parametrize("kind", ["values", "shapes"])
def test_a_soak_over_hundreds_of_values_or_shapes_holds_memory_flat(kind):
    count = 400
    report = run_soak(_SOAK, kind=kind, count=count)
    # one fused function compiled (or loaded from the disk cache) for every call
    assert report["compiles"] <= 1 and report["kept"] == 1, report
    assert len(report["rss"]) == count and report["mismatches"] == 0
    rss = report["rss"]
    half = rss[count // 2]
    # after a warm-up (the compile, the first 32 programs), the second half grows by
    # less than a fused function compiled per value would add in three values
    assert rss[-1] - half < 12, (rss[count // 4], half, rss[-1])
