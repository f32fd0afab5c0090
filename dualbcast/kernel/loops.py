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
the chunks ``lo <= c < hi``, so threads can share a call (each a range of chunks; the
loops release the GIL).  Sums and register gradients are kept per chunk in ``totals``
(one row per chunk) and added up in chunk order afterwards: the result depends on the
shape only, never on how many threads ran.
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
        params.append("totals")

    head, chunk_head, body, chunk_tail = [], [], [], []
    index = ", ".join(f"i{d}" for d in range(spec.ndim))
    flat = {0: "0", 1: "i0"}.get(spec.ndim, "k")       # position in the C-ordered output
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
    if spec.mode in ("sum", "sum_partials"):
        chunk_head.append("total = 0.0")
        body.append("total += _value(r)")
        chunk_tail.append("totals[c, 0] = total")
    if spec.mode in ("partials", "sum_partials"):
        body.append("p = _partials(r, seed0)")
    if spec.mode == "partials":
        body += [f"pout[{j}, {flat}] = p[{j}]" for j in range(spec.n)]
    if spec.mode == "sum_partials":
        registers = 0
        for j, kind in enumerate(spec.grad_kinds):
            if kind == REGISTER:
                registers += 1
                chunk_head.append(f"r{j} = 0.0")
                body.append(f"r{j} += p[{j}]")
                chunk_tail.append(f"totals[c, {registers}] = r{j}")
            elif kind == STORE:
                body.append(f"g{j}[{flat}] = p[{j}]")
            else:
                body.append(f"g{j}[{index}] += p[{j}]")

    lines = [f"def loop({', '.join(params)}):"] + ["    " + h for h in head]
    lines.append("    for c in range(lo, hi):")
    indent = " " * 8
    lines += [indent + h for h in chunk_head]
    if spec.ndim >= 1:
        lines.append(f"{indent}start = c * rows")
        lines.append(f"{indent}stop = min(start + rows, shape[0])")
    if spec.ndim >= 2:
        inner = " * ".join(f"shape[{d}]" for d in range(1, spec.ndim))
        lines.append(f"{indent}k = start * {inner}")
    for d in range(spec.ndim):
        bounds = "start, stop" if d == 0 else f"shape[{d}]"
        lines.append(f"{indent}for i{d} in range({bounds}):")
        indent += "    "
    lines += [indent + b for b in body]
    if spec.ndim >= 2:
        lines.append(indent + "k += 1")
    lines += ["        " + t for t in chunk_tail]
    return "\n".join(lines) + "\n"


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
    }
    loop = None
    if cache_key is not None:
        spec_name = f"{spec.mode}_{hashlib.sha256(repr(spec).encode()).hexdigest()[:16]}"
        loop = load_loop(f"# dualbcast loop for {spec}\n" + source, namespace, cache_key,
                         spec_name)
    if loop is None:
        exec(compile(source, f"<dualbcast loop {spec}>", "exec"), namespace)
        loop = namespace["loop"]
    loop.__doc__ = source
    # Reassociating the loop's own additions lets LLVM vectorise the sums (several
    # partial sums per chunk, a fixed order for a given shape); the kernel's math keeps
    # the kernel's flags.
    fastmath = jit_options.get("fastmath") or {"reassoc"}
    compiled = numba.njit(**{**jit_options, "fastmath": fastmath}, nogil=True,
                          cache=loop.__code__.co_filename.endswith(".py"))(loop)
    compiled.spec = spec
    return compiled

