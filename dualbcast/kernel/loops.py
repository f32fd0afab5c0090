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

Tangent modes (forward mode; the tangents of the ``tangents`` arguments are operands
of the loop after the arguments, broadcast like them):
  ``tangent``               values and their tangents: each ``tangents`` argument a
                            ``Dual(float, 1)`` seeded with its tangent
  ``sum_tangent``           the sum of the values and of the tangents
  ``partials_tangent``      values, tangents, the partials w.r.t. the ``active``
                            arguments and their tangents (second derivatives times the
                            tangents): nested duals ``Dual(Dual(float, 1), n)``
  ``sum_partials_tangent``  the sums and the gradients and their tangents, each
                            gradient tangent reduced as its gradient (Hessian-vector
                            products)

A tangent mode's ``width`` is the number of tangent directions one loop carries
(ForwardDiff's chunks): each argument with a tangent has ``width`` tangent operands,
one per direction, and its inner dual ``width`` partials.  One pass then gives what
``width`` passes of one direction give, the value and first partials once (the unit
tangents of a Hessian: 1.5x faster at width 3 than three passes, measured on a
nine-argument kernel; wider spills the nested duals out of registers).  The sums only:
their outputs per direction are rows of the totals and buffers of their own.

Chunks: the outermost loop runs in chunks of ``rows`` iterations, and a loop call does
the chunks ``lo <= c < hi``, so threads can share a call: in ``parallel_loop``,
compiled at the first call that splits, each of ``workers`` Numba threads takes the
next chunk from a queue until none is left (:mod:`.threads`), with a scratch row of its
own.  A chunk's values (and register gradients) go to a ``scratch`` row of the calling
thread and are added up by :func:`lane_sum` into ``totals`` (one row per chunk), which
are added up exactly afterwards: a sum depends on the shape only, never on how many
threads ran or on how LLVM compiled the loop.

One function: the element loops are written inside the loop over chunks.  (A chunk
used to be a compiled function of its own that ``loop`` called, because inside the
loop over chunks the element loop re-materialised the vector math's constants in
every iteration, ~1.3x slower; with the vector math no longer inlined as Numba IR that
is gone — the EAM loop at 10^6 on one thread, in turns, within 1% — while a linked
chunk was optimised and emitted twice, once as its own function and again inside the
loop's module: one function took the ten-kernel chain's first gradient from 4.8 to
4.2 s.)
"""
import hashlib
from dataclasses import dataclass

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import store_item

from ..dual import DualType, make_dual, partials_of, value_of
from .arguments import ARRAY, STRIDED
from ..safe_cache import guarded_njit
from .cache import load_loop
from .threads import launch_threads, next_chunk

MODES = ("map", "sum", "partials", "sum_partials", "tangent", "sum_tangent",
         "partials_tangent", "sum_partials_tangent")
SUM_MODES = frozenset({"sum", "sum_partials", "sum_tangent", "sum_partials_tangent"})
TANGENT_MODES = frozenset({"tangent", "sum_tangent", "partials_tangent",
                           "sum_partials_tangent"})
REGISTER, STORE, ACCUMULATE = "register", "store", "accumulate"


@dataclass(frozen=True)
class LoopSpec:
    mode: str
    kinds: tuple              # per argument: SCALAR or ARRAY (see arguments.py)
    active: tuple = ()        # indices of the differentiated arguments
    ndim: int = 1             # number of nested loops
    grad_kinds: tuple = ()    # sum_partials: per active argument REGISTER/STORE/ACCUMULATE
    dtype: str = "float64"    # compute dtype
    tangents: tuple = ()      # tangent modes: the arguments with a tangent operand
    width: int = 1            # tangent modes: the directions each tangent carries

    @property
    def n(self):
        return len(self.active)

    @property
    def nargs(self):
        """The kernel's arguments (the tangents' operands follow them in ``kinds``)."""
        return len(self.kinds) - len(self.tangents) * self.width

    @property
    def totals_width(self):
        """Per chunk of a sum: the value (and its tangent) and each register gradient
        (and its tangent)."""
        registers = 1 + sum(kind == REGISTER for kind in self.grad_kinds)
        return registers * self.channels

    @property
    def channels(self):
        """What each output has: its value, and in the tangent modes its tangent in
        each direction."""
        return 1 + self.width if self.mode in TANGENT_MODES else 1

    def channel_names(self):
        """The prefixes of a sum's gradient buffers, per channel: ``g`` the gradients,
        ``h`` their tangents (``h0_``, ``h1_``... per direction when several)."""
        if self.width == 1:
            return ["g", "h"][:self.channels]
        return ["g"] + [f"h{k}_" for k in range(self.width)]

    def argument_types(self):
        """The Numba types the scalar kernel is called with in this loop."""
        float_t = getattr(numba.types, self.dtype)
        if self.mode in ("tangent", "sum_tangent"):
            dual, duals = DualType(float_t, self.width), self.tangents
        elif self.mode in TANGENT_MODES:
            dual = DualType(DualType(float_t, self.width), self.n)
            duals = set(self.active) | set(self.tangents)
        else:
            dual, duals = DualType(float_t, self.n), self.active
        return tuple(dual if i in duals else float_t for i in range(self.nargs))


def loop_source(spec):
    """The Python source of the loop function for ``spec`` (readable on purpose: it is
    what a user would write by hand for this call)."""
    mode, nargs, width = spec.mode, spec.nargs, spec.width
    second = mode in ("partials_tangent", "sum_partials_tangent")
    # Output channels: the value (0) and, in the tangent modes, its tangent in each
    # direction (1...); each partial likewise.
    channels = spec.channels
    if width != 1 and mode not in SUM_MODES:
        raise ValueError(f"a {mode} loop carries one tangent direction, not {width}")
    differentiates = mode in ("partials", "sum_partials") or second
    params = ["shape", "lo", "hi", "rows"] + [f"a{m}" for m in range(len(spec.kinds))]
    if mode not in SUM_MODES:
        params += ["out", "tout"][:channels]
        if differentiates:
            params += ["pout", "ptout"][:channels]
    else:
        for name in spec.channel_names():
            params += [f"{name}{j}" for j, kind in enumerate(spec.grad_kinds) if kind != REGISTER]
        params += ["totals", "scratch"]

    head, body, chunk_tail = [], [], []
    index = ", ".join(f"i{d}" for d in range(spec.ndim))
    flat = {0: "0", 1: "i0"}.get(spec.ndim, "k")       # position in the C-ordered output
    local = {0: "0", 1: "i0 - u0"}.get(spec.ndim, "k - k0")      # position in the chunk

    views = []          # per chunk, before its loop: the 1-d array operands' pieces

    def operand(m):
        """The value of operand ``m`` (an argument or a tangent), and whether it is read
        in the loop (an array) rather than once before it."""
        if spec.kinds[m] == STRIDED:
            # Copied a chunk at a time into a contiguous piece, which the loop reads as
            # it reads a contiguous array (see arguments.STRIDED).
            views.extend([f"b{m} = _empty(stop - start, a{m}.dtype)",
                          "for j in range(_u(stop) - u0):",
                          f"    b{m}[j] = a{m}[u0 + j]"])
            return f"_f(b{m}[i0 - u0])", True
        if spec.kinds[m] == ARRAY:
            return f"_f(a{m}[{index}])", True
        head.append(f"c{m} = _f(a{m})")
        return f"c{m}", False

    if channels > 1:
        head.append(f"zt = ({', '.join(['_f(0.0)'] * width)},)")   # a tangent's zero partials
    if second:
        # Nested duals: the inner partial is the tangent, the outer ones the partials
        # (each seed partial a constant inner dual).
        head += ["one = _dual(_f(1.0), zt)", "zero = _dual(_f(0.0), zt)",
                 f"seedz = ({'zero, ' * spec.n})"]
        seeds = [", ".join("one" if m == j else "zero" for m in range(spec.n))
                 for j in range(spec.n)]
    else:
        seeds = [", ".join("_f(1.0)" if m == j else "_f(0.0)" for m in range(spec.n))
                 for j in range(spec.n)]
    for j, unit in enumerate(seeds):
        head.append(f"seed{j} = ({unit},)")
    call = []
    for i in range(nargs):
        value, varies = operand(i)
        if i in spec.tangents:
            # (its tangent in each direction: the operands after the arguments, one per
            # direction, argument by argument)
            first = nargs + spec.tangents.index(i) * width
            directions = [operand(m) for m in range(first, first + width)]
            tangent = ", ".join(name for name, _ in directions)
            varies |= any(read for _, read in directions)
        if mode in ("partials", "sum_partials"):
            dual = f"_dual({value}, seed{spec.active.index(i)})" if i in spec.active else None
        elif not second:
            dual = f"_dual({value}, ({tangent},))" if i in spec.tangents else None
        elif i in spec.active or i in spec.tangents:
            inner = f"_dual({value}, ({tangent},))" if i in spec.tangents else \
                f"_dual({value}, zt)"
            outer = f"seed{spec.active.index(i)}" if i in spec.active else "seedz"
            dual = f"_dual({inner}, {outer})"
        else:
            dual = None
        if dual is not None and not varies:      # seeded once, outside the loop
            head.append(f"d{i} = {dual}")
            dual = f"d{i}"
        call.append(value if dual is None else dual)
    body.append(f"r = kernel({', '.join(call)})")

    # What each channel is, in terms of the kernel's result r and its partials p[j].
    if second:
        body.append("v = _value(r)")
        values = ["_value(v)"] + [f"_partials(v, zt)[{k}]" for k in range(width)]
        partials = ["_value(p[{j}])"] + [f"_partials(p[{{j}}], zt)[{k}]" for k in range(width)]
        body.append("p = _partials(r, seedz)")
    else:
        values = ["_value(r)"] + [f"_partials(r, zt)[{k}]" for k in range(channels - 1)]
        partials = ["p[{j}]"]
        if differentiates:
            body.append("p = _partials(r, seed0)")
    if mode not in SUM_MODES:
        body += [f"{name}[{flat}] = {value}" for name, value in zip(("out", "tout"), values)]
        if differentiates:
            body += [f"{name}[{j}, {flat}] = {partial.format(j=j)}" for j in range(spec.n)
                     for name, partial in zip(("pout", "ptout"), partials)]
    else:
        # Sums: the values (and register gradients) of a chunk go to scratch rows, then
        # _sum_rows adds each row up in an order fixed by the source (so the machine code
        # LLVM picks for the loop cannot change the result).  One store of all the rows
        # and one call adding them up: Numba lowers each setitem and getitem afresh (a
        # Hessian's loop has 40 rows: 120 of them were a third of its compile).
        rows = [*values]
        for name, partial in zip(spec.channel_names(), partials):
            for j, kind in enumerate(spec.grad_kinds):
                if kind == REGISTER:
                    rows.append(partial.format(j=j))
                elif kind == STORE:
                    body.append(f"{name}{j}[{flat}] = {partial.format(j=j)}")
                else:
                    body.append(f"{name}{j}[{index}] += {partial.format(j=j)}")
        body.append(f"_store_column(scratch, {local}, ({', '.join(rows)},))")
        chunk_tail.append(f"_sum_rows(totals, c, scratch, count, {len(rows)})")

    # The loop over chunks, each chunk's element loops inside it (see "One function"
    # above); what the head sets up (scalars converted, seeds) is done once.
    lines = [f"def loop({', '.join(params)}):"] + ["    " + h for h in head]
    lines.append("    for c in range(lo, hi):")
    indent = " " * 8
    # Indices are unsigned: Numba then knows they are not negative and skips the
    # wraparound test on every access, which keeps LLVM's vector loop lean (~1.6x).
    if spec.ndim >= 1:
        lines.append(f"{indent}start = c * rows")
        lines.append(f"{indent}stop = start + rows")      # (not min(): one compile less)
        lines.append(f"{indent}if stop > shape[0]:")
        lines.append(f"{indent}    stop = shape[0]")
        lines.append(f"{indent}u0 = _u(start)")
        lines += [indent + view for view in views]
    inner = " * ".join(f"shape[{d}]" for d in range(1, spec.ndim)) or "1"
    if spec.ndim >= 2:
        lines.append(f"{indent}k0 = k = _u(start * {inner})")
    if mode in SUM_MODES:
        lines.append(f"{indent}count = " + ("1" if spec.ndim == 0 else
                                            f"(stop - start) * {inner}"))
    for d in range(spec.ndim):
        bounds = "u0, _u(stop)" if d == 0 else f"_u(shape[{d}])"
        lines.append(f"{indent}for i{d} in range({bounds}):")
        indent += "    "
    lines += [indent + b for b in body]
    if spec.ndim >= 2:
        lines.append(indent + "k += _u(1)")
    lines += ["        " + t for t in chunk_tail]
    return "\n".join(lines + _parallel_driver(params))


def _parallel_driver(params):
    """The source of ``parallel_loop``: the chunks of ``loop`` shared by ``workers``
    Numba threads through a queue (see :mod:`.threads`).  An exception inside a
    parallel region would be lost (and a ``try`` there stops Numba from parallelising),
    so each worker runs ``guarded_loop``, which reports one in ``failed``; the caller
    then runs the loop again on one thread to raise it.  ``_loop``, ``_guarded``: the
    compiled functions."""
    args = ", ".join(params)
    operands = params[4:]
    if operands[-1] == "scratch":
        operands = operands[:-1] + ["scratch[t]"]      # each worker sums in its own row
    pack, call = packed_call("_loop", params)
    return ["", "",
            f"def guarded_loop({args}):",
            f"    {pack}",
            "    try:",
            f"        {call}",
            "    except Exception:",
            "        return True",
            "    return False",
            "", "",
            f"def parallel_loop(workers, failed, shape, nchunks, rows, "
            f"{', '.join(params[4:])}):",
            "    queue = _zeros(1, _int64)",
            "    for t in _prange(workers):",
            "        c = _next_chunk(queue)",
            "        while c < nchunks:",
            f"            if _guarded(shape, c, c + 1, rows, {', '.join(operands)}):",
            "                failed[t] = True",
            "            c = _next_chunk(queue)",
            "", ""]


def packed_call(callee, params):
    """``(packing, call)``: the source of a statement packing ``params`` into one tuple,
    and of a call of ``callee`` with it unpacked.  For calls inside a ``try`` block:
    CPython 3.11 builds the arguments of a call of more than 30 as a list turned into a
    tuple, which Numba cannot compile there (a kernel of nine scalar arguments and
    their tangents failed on threads); one starred tuple it can."""
    return f"arguments = ({', '.join(params)},)", f"{callee}(*arguments)"


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
        "_store_column": store_column,
        "_sum_rows": sum_rows,
        "_u": numba.uint64,
        "_prange": numba.prange,
        "_empty": np.empty,
        "_zeros": np.zeros,
        "_int64": np.int64,
        "_next_chunk": next_chunk,
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
    cache = module is not None
    compiled = guarded_njit(**jit_options, nogil=True, no_cfunc_wrapper=True, cache=cache)(loop)
    namespace["_loop"] = compiled
    compiled.spec = spec
    compiled.parallel = _Lazy(lambda: _compile_parallel(namespace, jit_options, cache))
    compiled.one_thread = 0.0       # seconds run on one thread where it could split
    return compiled


def _compile_parallel(namespace, jit_options, cache):
    launch_threads()
    namespace["_guarded"] = guarded_njit(**jit_options, nogil=True,
                                         cache=cache)(namespace["guarded_loop"])
    return guarded_njit(**jit_options, parallel=True, nogil=True,
                        cache=cache)(namespace["parallel_loop"])


class _Lazy:
    """A function made at its first call: the parallel driver is only compiled (1.3-1.8
    s) for a loop that has run long enough on arrays large enough to split (see
    ``prepared.DRIVER_AFTER``)."""
    __slots__ = ("make", "function")

    def __init__(self, make):
        self.make, self.function = make, None

    def __call__(self, *args):
        return self.made()(*args)

    def made(self):
        """The function, made now if it was not yet."""
        if self.function is None:
            self.function = self.make()
        return self.function


@intrinsic
def store_column(typingctx, array, column, values):
    """``array[r, column] = values[r]`` for every ``r``: a sum's values at one element
    written to its scratch rows (as Numba's setitems would, each cast to the array's
    dtype, without bounds checks).  The values may differ in type: a kernel's value (a
    bool, an int, a float of another width) beside its partials."""
    if not (isinstance(array, types.Array) and array.ndim == 2
            and isinstance(column, types.Integer) and isinstance(values, types.BaseTuple)
            and all(isinstance(t, (types.Number, types.Boolean)) for t in values.types)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(array)(context, builder, args[0])
        index = context.cast(builder, args[1], column, types.intp)
        for row, row_type in enumerate(values.types):
            pointer = cgutils.get_item_pointer(
                context, builder, array, ary, [context.get_constant(types.intp, row), index])
            value = context.cast(builder, builder.extract_value(args[2], row), row_type,
                                 array.dtype)
            store_item(context, builder, array, value, pointer)
        return context.get_dummy_value()

    return types.none(array, column, values), codegen


# Called once per chunk, not inlined: compiled once per installation (cached beside
# this file) rather than again inside every kernel's loop (~0.3 s of its first compile).
@guarded_njit(error_model="numpy", cache=True)
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


@guarded_njit(error_model="numpy", cache=True)
def sum_rows(totals, c, scratch, count, nrows):
    """``totals[c, r]``: the :func:`lane_sum` of each of the first ``nrows`` rows of
    ``scratch`` (a chunk's values, ``count`` of them)."""
    for row in range(nrows):
        totals[c, row] = lane_sum(scratch[row], count)
