"""Generate and compile the loops that drive a scalar kernel over arrays.

A loop is specialised on what changes its machine code (:class:`LoopSpec`): the mode,
which arguments are arrays or scalars, which are active (get a dual), how many nested
loops walk the broadcast shape, and the dtype.  Numba then specialises it further on
the array types (dtype, layout, read-only).  Scalars are converted and seeded once,
outside the loop; only active arguments become duals, so ``n`` = number of active
arguments.

Modes:
  ``map``           values, written to a flat C-ordered output
  ``sum``           the sum of the values (float64 accumulator), nothing stored
  ``partials``      values, plus ``n`` partials arrays at the result shape
  ``sum_partials``  the sum, plus per active argument the gradient of the sum at that
                    argument's own shape: summed in a register (scalar argument), stored
                    (full-size argument) or accumulated through a zero-stride view
                    (an argument broadcast along some axes)

Chunks: the outermost loop runs in chunks of ``rows`` iterations, and a loop call does
the chunks ``lo <= c < hi``, so threads can share a call: ``parallel_loop``, compiled
at the first call that splits, gives each of ``workers`` Numba threads a contiguous
range of chunks and its own scratch row.  A chunk's values (and register gradients) go
to a ``scratch`` row of the calling thread and are added up by :func:`lane_sum` into
``totals`` (one row per chunk), which are added up exactly afterwards: a sum depends on
the shape only, never on how many threads ran or on how LLVM compiled the loop.

A chunk is a compiled function of its own (``chunk``), which ``loop`` calls (LLVM does
not inline it: too large, vector math and all; a test checks): written inside the loop
over chunks, the element loop re-materialised the vector math's constants in every
iteration (two instructions each, with Numba's large code model), ~1.3x slower on one
core.  The price is ~0.15 s more for a loop's first compile (LLVM optimises and emits
the chunk's code again as part of the loop's).
"""
import hashlib
from dataclasses import dataclass

import numba

from ..dual import make_dual, partials_of, value_of
from .arguments import ARRAY
from .cache import load_loop

MODES = ("map", "sum", "partials", "sum_partials")
REGISTER, STORE, ACCUMULATE = "register", "store", "accumulate"


@dataclass(frozen=True)
class LoopSpec:
    mode: str
    kinds: tuple              # per argument: SCALAR or ARRAY (see arguments.py)
    active: tuple = ()        # indices of the differentiated arguments
    ndim: int = 1             # number of nested loops
    grad_kinds: tuple = ()    # sum_partials: per active argument REGISTER/STORE/ACCUMULATE
    dtype: str = "float64"    # compute dtype

    @property
    def n(self):
        return len(self.active)


def loop_source(spec):
    """The Python source of the loop function for ``spec`` (readable on purpose: it is
    what a user would write by hand for this call)."""
    nargs = len(spec.kinds)
    params = ["shape", "lo", "hi", "rows"] + [f"a{i}" for i in range(nargs)]
    if spec.mode in ("map", "partials"):
        params.append("out")
    if spec.mode == "partials":
        params.append("pout")
    if spec.mode == "sum_partials":
        params += [f"g{j}" for j, kind in enumerate(spec.grad_kinds) if kind != REGISTER]
    if spec.mode in ("sum", "sum_partials"):
        params += ["totals", "scratch"]

    head, body, chunk_tail = [], [], []
    index = ", ".join(f"i{d}" for d in range(spec.ndim))
    flat = {0: "0", 1: "i0"}.get(spec.ndim, "k")       # position in the C-ordered output
    local = {0: "0", 1: "i0 - u0"}.get(spec.ndim, "k - k0")      # position in the chunk
    for j, i in enumerate(spec.active):
        unit = ", ".join("_f(1.0)" if m == j else "_f(0.0)" for m in range(spec.n))
        head.append(f"seed{j} = ({unit},)")
    call = []
    for i, kind in enumerate(spec.kinds):
        value = f"_f(a{i}[{index}])" if kind == ARRAY else f"c{i}"
        if kind != ARRAY:
            head.append(f"c{i} = _f(a{i})")
        if i in spec.active:
            j = spec.active.index(i)
            if kind == ARRAY:
                value = f"_dual({value}, seed{j})"
            else:
                head.append(f"d{i} = _dual(c{i}, seed{j})")
                value = f"d{i}"
        call.append(value)
    body.append(f"r = kernel({', '.join(call)})")

    if spec.mode in ("map", "partials"):
        body.append(f"out[{flat}] = _value(r)")
    # Sums: the values (and register gradients) of a chunk go to a scratch row, then
    # _sum adds each row up in an order fixed by the source (so the machine code LLVM
    # picks for the loop cannot change the result).
    if spec.mode in ("sum", "sum_partials"):
        body.append(f"scratch[0, {local}] = _value(r)")
        chunk_tail.append("totals[c, 0] = _sum(scratch[0], count)")
    if spec.mode in ("partials", "sum_partials"):
        body.append("p = _partials(r, seed0)")
    if spec.mode == "partials":
        body += [f"pout[{j}, {flat}] = p[{j}]" for j in range(spec.n)]
    if spec.mode == "sum_partials":
        registers = 0
        for j, kind in enumerate(spec.grad_kinds):
            if kind == REGISTER:
                registers += 1
                body.append(f"scratch[{registers}, {local}] = p[{j}]")
                chunk_tail.append(f"totals[c, {registers}] = _sum(scratch[{registers}], count)")
            elif kind == STORE:
                body.append(f"g{j}[{flat}] = p[{j}]")
            else:
                body.append(f"g{j}[{index}] += p[{j}]")

    # One chunk is a function of its own (see "A chunk is a compiled function" above).
    chunk_params = ["c", "shape", "rows"] + params[4:]
    lines = [f"def chunk({', '.join(chunk_params)}):"] + ["    " + h for h in head]
    indent = " " * 4
    # Indices are unsigned: Numba then knows they are not negative and skips the
    # wraparound test on every access, which keeps LLVM's vector loop lean (~1.6x).
    if spec.ndim >= 1:
        lines.append(f"{indent}start = c * rows")
        lines.append(f"{indent}stop = start + rows")      # (not min(): one compile less)
        lines.append(f"{indent}if stop > shape[0]:")
        lines.append(f"{indent}    stop = shape[0]")
        lines.append(f"{indent}u0 = _u(start)")
    inner = " * ".join(f"shape[{d}]" for d in range(1, spec.ndim)) or "1"
    if spec.ndim >= 2:
        lines.append(f"{indent}k0 = k = _u(start * {inner})")
    if spec.mode in ("sum", "sum_partials"):
        lines.append(f"{indent}count = " + ("1" if spec.ndim == 0 else
                                            f"(stop - start) * {inner}"))
    for d in range(spec.ndim):
        bounds = "u0, _u(stop)" if d == 0 else f"_u(shape[{d}])"
        lines.append(f"{indent}for i{d} in range({bounds}):")
        indent += "    "
    lines += [indent + b for b in body]
    if spec.ndim >= 2:
        lines.append(indent + "k += _u(1)")
    lines += ["    " + t for t in chunk_tail]
    lines += ["", "",
              f"def loop({', '.join(params)}):",
              "    for c in range(lo, hi):",
              f"        _chunk({', '.join(chunk_params)})"]
    return "\n".join(lines + _parallel_driver(params))


def _parallel_driver(params):
    """The source of ``parallel_loop``: the chunks of ``loop`` split between
    ``workers`` Numba threads.  An exception inside a parallel region would be lost
    (and a ``try`` there stops Numba from parallelising), so each worker runs
    ``guarded_loop``, which reports one in ``failed``; the caller then runs the loop
    again on one thread to raise it.  ``_loop``, ``_guarded``: the compiled functions."""
    args = ", ".join(params)
    operands = params[4:]
    if operands[-1] == "scratch":
        operands = operands[:-1] + ["scratch[t]"]      # each worker sums in its own row
    return ["", "",
            f"def guarded_loop({args}):",
            "    try:",
            f"        _loop({args})",
            "    except Exception:",
            "        return True",
            "    return False",
            "", "",
            f"def parallel_loop(workers, failed, shape, nchunks, rows, "
            f"{', '.join(params[4:])}):",
            "    for t in _prange(workers):",
            "        lo = nchunks * t // workers",
            "        hi = nchunks * (t + 1) // workers",
            f"        failed[t] = _guarded(shape, lo, hi, rows, {', '.join(operands)})",
            "", ""]


def compile_loop(spec, scalar_kernel, jit_options, cache_key=None):
    """Compile the loop for ``spec`` around ``scalar_kernel`` (a Numba dispatcher).
    With a ``cache_key`` (the kernel's fingerprint directory) the loop is loaded from a
    real file and cached on disk by Numba (see :mod:`.cache`)."""
    source = loop_source(spec)
    namespace = {
        "kernel": scalar_kernel,
        "_f": getattr(numba, spec.dtype),
        "_dual": make_dual,
        "_value": value_of,
        "_partials": partials_of,
        "_sum": lane_sum,
        "_u": numba.uint64,
        "_prange": numba.prange,
    }
    module = None
    if cache_key is not None:
        spec_name = f"{spec.mode}_{hashlib.sha256(repr(spec).encode()).hexdigest()[:16]}"
        module = load_loop(f"# dualbcast loop for {spec}\n" + source, namespace, cache_key,
                           spec_name)
    if module is None:
        exec(compile(source, f"<dualbcast loop {spec}>", "exec"), namespace)
    else:
        namespace = module.__dict__
    loop = namespace["loop"]
    loop.__doc__ = source
    cache = loop.__code__.co_filename.endswith(".py")
    namespace["_chunk"] = numba.njit(**jit_options, nogil=True, cache=cache)(namespace["chunk"])
    compiled = numba.njit(**jit_options, nogil=True, cache=cache)(loop)
    namespace["_loop"] = compiled
    compiled.spec = spec
    compiled.parallel = _Lazy(lambda: _compile_parallel(namespace, jit_options, cache))
    return compiled


def _compile_parallel(namespace, jit_options, cache):
    namespace["_guarded"] = numba.njit(**jit_options, nogil=True,
                                       cache=cache)(namespace["guarded_loop"])
    return numba.njit(**jit_options, parallel=True, nogil=True,
                      cache=cache)(namespace["parallel_loop"])


class _Lazy:
    """A function made at its first call: the parallel driver is only compiled (about
    a second) for a kernel that meets an array large enough to split."""
    __slots__ = ("make", "function")

    def __init__(self, make):
        self.make, self.function = make, None

    def __call__(self, *args):
        if self.function is None:
            self.function = self.make()
        return self.function(*args)


# Called once per chunk, not inlined: compiled once per installation (cached beside
# this file) rather than again inside every kernel's loop (~0.3 s of its first compile).
@numba.njit(error_model="numpy", cache=True)
def lane_sum(values, count):
    """The sum of ``values[:count]`` in a fixed order: eight running sums over the
    positions mod 8 (LLVM turns them into two vector registers), then the rest, then
    the eight combined pairwise.  More accurate than one running sum, and the same
    bits however it is compiled."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    i = 0
    while i + 8 <= count:
        a0 += values[i]
        a1 += values[i + 1]
        a2 += values[i + 2]
        a3 += values[i + 3]
        a4 += values[i + 4]
        a5 += values[i + 5]
        a6 += values[i + 6]
        a7 += values[i + 7]
        i += 8
    rest = 0.0
    while i < count:
        rest += values[i]
        i += 1
    return (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) + rest
