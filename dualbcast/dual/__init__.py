"""The dual layer: a Numba dual-number type and its differentiation rules.

Importing this package registers every rule with Numba; nothing else is needed for
``@fast_broadcast`` kernels (or ``numba.njit`` helpers they call) to accept duals.
"""
from . import builtins, arithmetic, rules  # noqa: F401  (registers the rules)
from .dualtype import DualType, make_dual, value_of
from .partials import partials_of

__all__ = ["DualType", "make_dual", "value_of", "partials_of"]
