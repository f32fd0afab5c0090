"""dualbcast: fast gradients of array code built from scalar kernels."""
from .kernel import FastBroadcast, KernelCompileError, fast_broadcast

__all__ = ["FastBroadcast", "KernelCompileError", "fast_broadcast"]
__version__ = "0.1.0"
