"""The kernel layer: ``@fast_broadcast`` and the loops it compiles."""
from .dependencies import FrozenDependencyChanged
from .fast_broadcast import FastBroadcast, KernelCompileError, fast_broadcast

__all__ = ["FastBroadcast", "FrozenDependencyChanged", "KernelCompileError", "fast_broadcast"]
