"""The benchmark workloads compute the same thing in every system they compare."""
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "asv_bench"))
from benchmarks.gradients import CASES, make_call  # noqa: E402
from benchmarks.workloads import WORKLOADS, inputs  # noqa: E402


def _flatten(result):
    if isinstance(result, tuple):
        return [np.asarray(r, np.float64) for r in result]
    return [np.asarray(result, np.float64)]


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("mode", ["value", "value_and_partials", "sum_and_partials"])
def test_systems_agree(workload, mode):
    calls = WORKLOADS[workload](inputs(257))[mode]
    ours = calls["dualbcast"]()
    if mode != "value":
        value, parts = ours
        ours = (value, parts)
    for system in ("numba", "numpy"):
        for a, b in zip(_flatten(ours), _flatten(calls[system]())):
            np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if not c.endswith(("1e6", "1e7", "1e5"))])
@pytest.mark.parametrize("peer", ["numba", "autograd", "jax", "torch", "dualbcast_jit"])
def test_gradient_cases_agree(case, peer):
    try:
        value, grad = make_call(case, peer)()
    except (NotImplementedError, ImportError):
        pytest.skip(f"{peer} has no version of {case}, or is not installed")
    our_value, our_grad = make_call(case, "dualbcast")()
    np.testing.assert_allclose(float(our_value), float(value), rtol=1e-12)
    ours, theirs = _leaves(our_grad), _leaves(grad)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)


def _leaves(gradient):
    """A gradient's arrays (a tuple or list of them: each one), as float64 NumPy."""
    if isinstance(gradient, (tuple, list)):
        return [leaf for item in gradient for leaf in _leaves(item)]
    if hasattr(gradient, "detach"):                 # a torch tensor
        gradient = gradient.detach().numpy()
    return [np.asarray(gradient, np.float64)]
