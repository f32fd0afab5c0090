"""The dual type and its rules compiled for Numba's CUDA target: PTX from numba-cuda's
``compile_ptx``, which needs no GPU (issue 31's check).  Skips where numba-cuda is not
installed (``pip install "numba-cuda[cu12]"``: its NVVM and libdevice come as wheels).

What compiles: the dual type, its casts and fields, the operators (lowered in place,
``dual.builtins``), comparisons and truth, the table's rules of ``math`` functions at
first and second order, in float64 and float32, and ``numba.njit`` helpers.  What does
not (strict xfails below, so a fix is noticed): rules whose value or derivative uses a
NumPy ufunc numba-cuda does not lower (``np.sign`` in ``abs``, ``np.floor``); the
vectorised math's ``sin``/``cos`` (``np.rint``), which ``@fast_broadcast`` kernels call
in place of ``math.sin``; and calling a kernel object from CUDA code (it is typed as
its CPU dispatcher).  The loops themselves are CPU code (threads, chunks).
"""
import math
import types as pytypes

import pytest

pytest.importorskip("numba_cuda", reason="numba-cuda is not installed")

import numba  # noqa: E402
from numba import cuda, types  # noqa: E402
from numba.cuda import dispatcher as cuda_dispatcher  # noqa: E402

import dualbcast  # noqa: E402,F401  (registers the dual rules)
from dualbcast.dual import DualType, make_dual  # noqa: E402

#: A compute capability every CUDA 12 toolkit targets.
CC = (7, 5)
D = DualType(types.float64, 2)
D32 = DualType(types.float32, 2)
NESTED = DualType(DualType(types.float64, 1), 2)
F = types.float64


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    # numba-cuda compiles a device function's callees (overloads, njit helpers) for the
    # current device, which it asks the driver for even when compile_ptx is given a
    # compute capability: without a GPU, a device of that capability stands in.
    monkeypatch.setattr(cuda_dispatcher, "get_current_device",
                        lambda: pytypes.SimpleNamespace(compute_capability=CC))


def _ptx(function, signature):
    try:
        ptx, result = cuda.compile_ptx(function, signature, device=True, cc=CC)
    except Exception as error:     # (NVVM missing is an installation without its wheels)
        if "NVVM" in str(error) and "not found" in str(error).lower():
            pytest.skip(f"numba-cuda has no NVVM here: {error}")
        raise
    assert ".func" in ptx
    return result


def arithmetic(x, y):
    z = x * y + x / y - 2.0 * x
    z += 1
    z -= y
    return -z


def branches(x, y):
    if x > y and x:
        return x - y
    return -x


@numba.njit
def _helper(x):
    return x * x + 1.0


def helper_call(x):
    return _helper(x) / 3.0


def table_rules(x):
    return math.exp(x) + math.sin(x) * math.cos(x) + math.sqrt(x) + math.log1p(x) \
        + math.tanh(x) + math.atan2(x, 2.0) + x ** 2 + x ** 2.5 + max(x, 0.5)


def second_order_rules(x):
    # (tanh's second derivative goes through abs: np.sign, below)
    return math.exp(x) + math.sin(x) * math.cos(x) + math.sqrt(x) + math.log1p(x) \
        + math.atan2(x, 2.0) + x ** 2 + x ** 2.5 + max(x, 0.5)


def single_precision(x, y):
    z = x * y - x / y
    return -z if z > y else z


def seeded(v):
    return make_dual(v, (1.0, 0.0)).val


@pytest.mark.parametrize("function, signature, result", [
    (arithmetic, (D, D), D),
    (arithmetic, (D, F), D),
    (arithmetic, (F, D), D),
    (single_precision, (D32, D32), D32),
    (single_precision, (D32, types.float32), D32),
    (arithmetic, (NESTED, NESTED), NESTED),
    (branches, (D, D), D),
    (branches, (NESTED, F), NESTED),
    (helper_call, (D,), D),
    (table_rules, (D,), D),
    (second_order_rules, (NESTED,), NESTED),
    (seeded, (F,), F),
])
def test_dual_code_compiles_to_ptx(function, signature, result):
    assert _ptx(function, signature) == result


@pytest.mark.parametrize("function", [
    pytest.param(lambda x: abs(x), id="abs: np.sign"),
    pytest.param(lambda x: math.floor(x), id="floor: np.floor"),
    pytest.param(lambda x: math.tanh(x), id="tanh's second derivative: abs"),
])
@pytest.mark.xfail(strict=True, reason="numba-cuda lowers no np.sign or np.floor ufunc")
def test_rules_through_numpy_ufuncs_do_not_compile_for_cuda(function):
    _ptx(function, (NESTED,))


@pytest.mark.xfail(strict=True, reason="vector math sin uses np.rint, which numba-cuda "
                                       "does not lower")
def test_a_kernels_vector_math_does_not_compile_for_cuda():
    kernel = dualbcast.fast_broadcast(lambda x: math.sin(x) * x)
    _ptx(kernel._scalar_kernel.py_func, (D,))
