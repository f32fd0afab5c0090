"""Gradient rules, registered with the core on import: NumPy's elementwise ufuncs,
reductions, shape operations and products, and the fast rules for kernels."""
from . import arrays, batching, einsum, elementwise, fast, linalg, reductions, shapes  # noqa: F401  (registration)
