"""``dualbcast.jit``: record a gradient function's program once per signature and
replay it — guarded on traced control flow, written out as Python code, and fused
into one Numba function where it can be; any other function (a Hessian-vector
product, a jvp) staged whole on a trace that only records (:mod:`.staged`).  A layer above the core, the rules and the
kernels: the core tells it what a trace did through the tape's recorder hook."""
from .jitted import jit

__all__ = ["jit"]
