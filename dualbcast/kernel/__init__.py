"""The kernel layer: ``@fast_broadcast`` and the loops it compiles."""
from .fast_broadcast import FastBroadcast, KernelCompileError, fast_broadcast

__all__ = ["FastBroadcast", "KernelCompileError", "fast_broadcast"]
