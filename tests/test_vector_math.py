"""Kernels compute math.exp & co with dualbcast.vmath (vectorised, no libm calls in
the loop) unless ``libm=True``; both agree within the documented ulp bounds, values
and partials alike."""
import math
import re
from math import exp as imported_exp

import numba
import numpy as np
import pytest
from ulp import ulp_errors

import dualbcast as db
from dualbcast.vmath import explog, trig

VECTORISED = ("exp", "expm1", "log", "log1p", "tanh", "sin", "cos", "pow")
# Numba's large code model calls through a register: ``movabsq $exp, %rax; callq *%rax``.
REFERENCED = re.compile(r"(?:movabsq\s+\$|call\w*\s+)([A-Za-z_][\w.]*)")


def _called(kernel):
    """The functions the compiled loops of ``kernel`` call: libm names, and compiled
    Python functions (the kernel, rules) that were not inlined."""
    asm = "\n".join(loop.inspect_asm(sig) for loop in kernel._loops.values()
                    for sig in loop.signatures)
    symbols = set(REFERENCED.findall(asm))
    # lane_sum adds up a chunk once its loop is done (one call per 4096 elements,
    # compiled once per installation and cached): not a call inside the element loop.
    return {s for s in symbols if s in VECTORISED
            or s.startswith("_ZN") and "NumbaEnv" not in s and "dualbcast_loop_" not in s
            and "8lane_sum" not in s}


def _everything(x, y):
    return (math.exp(x) + math.expm1(y) + math.log(y) + math.log1p(x * x) + math.tanh(x)
            + math.sin(x) * math.cos(y) + math.pow(y, x))


VECTOR = db.fast_broadcast(_everything)
LIBM = db.fast_broadcast(libm=True)(_everything)


def test_kernel_loops_call_nothing_unless_libm_is_asked_for():
    x, y = np.linspace(-2, 2, 64), np.linspace(0.1, 3, 64)
    for kernel in (VECTOR, LIBM):
        kernel(x, y)
        kernel.sum_and_partials(x, y, wrt=(0, 1))
    assert _called(VECTOR) == set()          # kernel, rules and math all inlined
    assert set(VECTORISED) - {"sin", "cos"} <= _called(LIBM)    # sin/cos may be sincos


def _kernels(name):
    """The kernel ``math.<name>`` with vector math and with libm."""
    fn = getattr(math, name)
    kernel = (lambda a, b: fn(a, b)) if name == "pow" else (lambda a: fn(a))
    return db.fast_broadcast(kernel), db.fast_broadcast(libm=True)(kernel)


@pytest.mark.parametrize("name", VECTORISED)
def test_vmath_vectorises_in_a_plain_njit_loop(name):
    # Called from a user's own numba.njit loop (Python's error model: a division there
    # tests for zero and may raise, which stops the vectoriser) the functions still
    # inline to straight vector code.
    fn = getattr(trig if name in ("sin", "cos") else explog, name)
    if name == "pow":
        @numba.njit
        def loop(x, out):
            for i in range(x.size):
                out[i] = fn(x[i], 1.5)
    else:
        @numba.njit
        def loop(x, out):
            for i in range(x.size):
                out[i] = fn(x[i])
    x = np.linspace(0.1, 3.0, 100)
    out = np.empty_like(x)
    loop(x, out)
    ir = loop.inspect_llvm(loop.signatures[0])
    # the function itself, not its Python wrapper
    body = next(part for part in ir.split("\ndefine ")[1:]
                if re.search(r'@"?_ZN(?!7cpython)\w*loop', part.split("{")[0]))
    called = {name for name in re.findall(r'call [^@]*@"?([\w.$]+)', body)
              if not name.startswith("llvm.")}
    assert called == set(), called
    assert re.search(r"<(4|8) x double>", body)        # (AVX2 or AVX-512 lanes)
    expected = np.power(x, 1.5) if name == "pow" else getattr(np, name)(x)
    np.testing.assert_allclose(out, expected, rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", VECTORISED)
def test_vector_math_agrees_with_libm_values_and_partials(name, dtype):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.01 if name == "log" else -3, 3, 1000).astype(dtype)
    args = (rng.uniform(0.01, 4, 1000).astype(dtype), x) if name == "pow" else (x,)
    vector, libm = _kernels(name)
    wrt = tuple(range(len(args)))
    v_value, v_partials = vector.value_and_partials(*args, wrt=wrt)
    l_value, l_partials = libm.value_and_partials(*args, wrt=wrt)
    # each within 1 ulp of the exact result, so within 2 of each other
    assert ulp_errors(v_value, l_value.astype(np.longdouble)).max() <= 2
    # partials: the same formulas of those values (expm1' = y + 1 cancels near -1, so
    # an absolute tolerance too)
    eps = np.finfo(dtype).eps
    for v, lib in zip(v_partials, l_partials):
        np.testing.assert_allclose(v, lib, rtol=8 * eps, atol=4 * eps)


def _from_module(x):
    return imported_exp(-x)


def test_functions_imported_by_name_and_closures_are_vectorised_too():
    by_name = db.fast_broadcast(_from_module)

    def make(fn):
        return db.fast_broadcast(lambda x: fn(-x))
    in_closure = make(math.exp)
    x = np.linspace(0, 1, 64)
    for kernel in (by_name, in_closure):
        np.testing.assert_allclose(kernel.sum_and_partials(x)[1], -np.exp(-x), rtol=1e-15)
        assert _called(kernel) == set()


def test_globals_defined_after_the_kernel_are_found():
    kernel = db.fast_broadcast(lambda x: _defined_later(x))
    np.testing.assert_array_equal(kernel(np.arange(3.0)), [1.0, 2.0, 3.0])


def _defined_later(x):
    return x + 1.0


_defined_later = __import__("numba").njit(_defined_later)


def test_math_still_means_math_in_python():
    # Only the kernel's compiled copy sees the stand-ins.
    assert math.exp is not db.vmath.VECTOR_MATH.exp
    assert _everything.__globals__["math"] is math
    assert db.vmath.VECTOR_MATH.exp(1.0) == math.exp(1.0)
    assert db.vmath.VECTOR_MATH.pi == math.pi


def test_unknown_options_are_refused():
    with pytest.raises(TypeError, match="unknown options"):
        db.fast_broadcast(simd=True)
