"""The benchmark workloads compute the same thing in every system they compare."""
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "asv_bench"))
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
