import os
import tempfile

import numpy as np
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
