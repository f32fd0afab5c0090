"""Gradient rules, registered with the core on import: NumPy's elementwise ufuncs,
reductions, shape operations and products, and the fast rules for kernels."""
from . import (arrays, batching, batching_indexing, batching_products, einsum,  # noqa: F401
               elementwise, fast, linalg, reductions, shapes)     # (registration)
