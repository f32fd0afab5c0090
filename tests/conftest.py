import os
import tempfile

import numpy as np
import pytest
from hypothesis import settings

from profiles import examples

# Compiled loops are cached on disk: the suite uses a fresh cache of its own (so every
# run compiles, and the user's cache is left alone).
os.environ["DUALBCAST_CACHE_DIR"] = tempfile.mkdtemp(prefix="dualbcast-test-cache-")

# Kernels compile on first use; a compile must not count against a deadline.
settings.register_profile("dualbcast", deadline=None, max_examples=examples(40))
settings.load_profile("dualbcast")


def central_difference(f, args, i, h=1e-6):
    """d f / d args[i] by central differences, elementwise (args are float64 arrays)."""
    lo = list(args)
    hi = list(args)
    lo[i] = np.asarray(args[i], np.float64) - h
    hi[i] = np.asarray(args[i], np.float64) + h
    return (f(*hi) - f(*lo)) / (2 * h)


@pytest.fixture(scope="module")
def jax():
    """JAX in float64 for the module that asks for it only (set globally, x64 would leak
    into every module after it); the module's tests skip where JAX is not installed."""
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


@pytest.fixture
def fuse_at_once(monkeypatch):
    """db.jit records at the first call, generates at the first replay, fuses at the
    next (jit's own policy, set for the fusion tests so that they say what they rely
    on)."""
    from dualbcast.jit import policy    # (after the cache is set, above)
    monkeypatch.setattr(policy, "GENERATE_AFTER", 1)
    monkeypatch.setattr(policy, "FUSE_AFTER", 1)


@pytest.fixture
def fused_runs(monkeypatch):
    """How many calls the fused functions answered."""
    from dualbcast.jit.compiled import FusedRuns
    count = []
    real = FusedRuns.__call__

    def counted(runs, values):
        result = real(runs, values)
        if result is not None:
            count.append(1)
        return result
    monkeypatch.setattr(FusedRuns, "__call__", counted)
    return count
