"""``dualbcast.jit``: record a function's program once per signature and run it again.

A layer above the core, the rules and the kernels: the core tells it what a trace did
through the tape's recorder hook.  The wing, from the call down:

- :mod:`.jitted` -- ``jit`` itself: which programs a call runs.
- :mod:`.entries`, :mod:`.signature` -- the per-signature cache (what keys a call,
  what happened to its calls, ``explain()``, the log); :mod:`.recorder` -- what a
  trace learns besides its records (guards, constants); :mod:`.policy` -- every
  threshold, with the measurement behind it.
- :mod:`.program` -- what every program shares: guards, the assumptions checked before
  a run, the interpreter.  Two kinds:

  - :mod:`.gradient` -- a gradient whose inputs are its differentiated arguments: its
    forward records replayed, then the core's backward pass (eager's bits); written
    out as Python code (:mod:`.codegen`), and a program of kernel sums and scalar
    arithmetic compiled whole as one Numba function (:mod:`.fusion` writes it, with
    :mod:`.fused_kernels`, :mod:`.segments` and :mod:`.fused_source`;
    :mod:`.fused_function` compiles and calls it, :mod:`.fused_runtime` is what it
    calls, :mod:`.compiled` shares and bounds the compiled functions);
  - :mod:`.staged` -- any other function, and a gradient with other inputs: every
    operation staged, derivatives' included, and run as one Numba function where it
    is made of kernel sums, scalar arithmetic and NaN-safe passes
    (:mod:`.staged_fusion`; :mod:`.compiled` runs either kind's), else as generated
    Python code after a plan (:mod:`.staged_plan`: repeats and unused views left out, elementwise runs
    as compiled loops: :mod:`.loop_forms` says what a record computes per element,
    :mod:`.elementwise` groups the records into loops and runs them,
    :mod:`.loop_source` writes their code, with :mod:`.loop_sums` for what they add up
    and :mod:`.loop_kernels` for the kernel calls they make; :mod:`.loop_cache` keeps
    them).

- :mod:`.out` -- a staged gradient written into the caller's ``out=`` arrays.
"""
from .jitted import jit

__all__ = ["jit"]
