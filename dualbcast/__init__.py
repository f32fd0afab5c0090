"""dualbcast: fast gradients of array code built from scalar kernels."""
from . import rules as _rules  # noqa: F401  (registers the gradient rules with the core)
from .config import config
from .core import (grad, hessian, jacfwd, jacobian, jacrev, jvp, stop_gradient, value_and_grad,
                   vjp, vmap)
from .jit import jit
from .kernel import FastBroadcast, FrozenDependencyChanged, KernelCompileError, fast_broadcast
from .memory import tune_malloc as _tune_malloc

_tune_malloc()      # freed temporaries kept for the next call (dualbcast/memory.py)

__all__ = ["FastBroadcast", "FrozenDependencyChanged", "KernelCompileError", "config",
           "fast_broadcast", "grad", "hessian", "jacfwd", "jacobian", "jacrev", "jit", "jvp",
           "stop_gradient", "value_and_grad", "vjp", "vmap"]
__version__ = "0.1.0"


def __dir__():
    # The public API only; the internal modules (dualbcast.kernel, dualbcast.core, ...)
    # and the adapters (dualbcast.torch, ...) stay importable by name.
    return sorted(__all__ + ["__version__"])
