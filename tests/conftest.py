import numpy as np
from hypothesis import settings

# Kernels compile on first use; a compile must not count against a deadline.
settings.register_profile("dualbcast", deadline=None, max_examples=40)
settings.load_profile("dualbcast")


def central_difference(f, args, i, h=1e-6):
    """d f / d args[i] by central differences, elementwise (args are float64 arrays)."""
    lo = list(args)
    hi = list(args)
    lo[i] = np.asarray(args[i], np.float64) - h
    hi[i] = np.asarray(args[i], np.float64) + h
    return (f(*hi) - f(*lo)) / (2 * h)
