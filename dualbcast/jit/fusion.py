"""A replayed program compiled whole: kernel sums and the scalar code around them as
one Numba function.

A small gradient such as the EAM energy at 10^2 elements, ``p = rho.sum(x); p ** 2 +
p ** 3 + p ** 4 / 4``, is mostly Python: even replayed as generated code
(:mod:`.codegen`) it is twenty calls — the kernel's prepared call,
six scalar operations and their vjps, the gradient's scaling — around a loop of well
under a microsecond.  A program made only of

- kernel sums ``k.sum(...)`` whose arguments are the differentiated arguments or
  constants, every gradient float64 and either stored whole (an array argument) or
  summed in a register (a scalar argument);
- *segments* (:mod:`.segments`): chains of kernel maps ``k(...)``, ``x ** 2`` and
  ``np.sum`` over arrays of one shape, ending in sums;
- scalar ``x + y``, ``x - y``, ``x * y``, ``x / y``, ``-x`` and ``x ** c`` (``c`` a
  constant) on float64;
- no guards (no control flow on traced values), a float64 scalar output,

is written out as one function: each sum's loop (the kernel's own compiled loop,
called; on its threaded driver from ``config.parallel_threshold`` elements), each
segment's two loops, the scalar forward pass, and the backward pass with every
cotangent in a local variable.  Python is left with the operands, the gradient arrays
and one call (~2 µs).  The function is straight-line code, every name assigned once, so that
Numba compiles it in time and memory linear in its length (see :mod:`.fused_runtime`).

Exactly the replay's bits: the same IEEE operations in the same order (no fast-math;
the chunks' partial sums added up correctly rounded, as ``math.fsum`` does);
``x ** c`` calls the C library's ``pow`` as NumPy does (LLVM would turn ``x ** 2.0``
into ``x * x``, which rounds differently for about 0.1% of inputs).  NumPy warns
about an overflow or an invalid operation in scalar code, so any non-finite scalar, or
a non-finite element of a scaled gradient, hands the call back to the generated
replay, which meets the warning as a trace would.

Compiling costs about a second, so a program is fused only after
:data:`.policy.FUSE_AFTER` replays, and only up to
:data:`.policy.FUSE_UP_TO` records and :data:`.policy.MAX_STATEMENTS`
lines of source (which bound the compile's time and memory); the function is
cached on disk next to the kernels' loops (its file is named by a hash of its source,
which names the loops' files, which are named by the kernels' fingerprints).  The
source names no size, shape or chunk count and no constant: the function takes them
as arguments (``N``, ``K``), so that one compile serves every program of its kind —
at any shape, for any value of a non-differentiated float — shared through
:mod:`.compiled` (Numba never frees a compiled function: compiling one per shape or
value grew memory without bound).
"""
import ast
import hashlib

import numba
import numpy as np

from ..config import config
from ..core.operators import OPERATOR_UFUNCS
from ..core.registry import SCALAR_FORMS, SCALAR_UFUNC_VJPS
from ..core.tape import LinearRecord
from ..dual import make_dual, partials_of, value_of
from ..kernel.arguments import read_only_alias
from ..kernel.cache import load_loop
from ..safe_cache import guarded_njit
from ..kernel.loops import REGISTER, STORE, lane_sum
from ..kernel.products import nan_safe_product
from ..kernel.threads import ThreadChoice, launch_threads, next_chunk, run_as_chosen
from ..rules.fast import SUM_COTANGENT_FORM, kernel_sum_loop
from .fused_runtime import (_GRADIENT_SOURCE, _add_to, _libm_pow, _nan_safe, _where,
                            chunk_sum, exact_sum, numpy_sum)
from . import policy
from .segments import BLOCK, SegmentSource, find_segments

_FLOAT64 = np.dtype(np.float64)
_SCALARS = (float, np.float64)
_CONSTANTS = (float, int, np.float64)
_INT64 = np.iinfo(np.int64)
_NAN = float("nan")



def plan_fusion(records, values, leaves, output, guards):
    """A :class:`Fusion` of the program (its records as one run made them, with that
    run's ``values``); :class:`NotFusable`, saying why, if it is not of the kind
    described above, or its function would be longer than :data:`.policy.MAX_STATEMENTS`."""
    if guards:
        raise NotFusable("control flow on traced values (the fused function has no guards)")
    if output is None or type(values[output]) not in _SCALARS:
        raise NotFusable("the output is not a float64 scalar")
    return _Writer(records, values, leaves, output).fusion()


class NotFusable(Exception):
    """Why a program is not fused (its message, for ``explain()`` and the log)."""


def _require(condition, why=""):
    if not condition:
        raise NotFusable(why)


class _Writer:
    """Writes the fused function's source, record by record."""

    def __init__(self, records, values, leaves, output):
        self.values, self.leaves, self.output = values, leaves, output
        self.namespace = {"pow": _libm_pow, "_exact_sum": exact_sum, "_where": _where,
                          "_add_to": _add_to, "_nan_safe": _nan_safe, "_NAN": _NAN,
                          "_chunk_sum": chunk_sum,
                          "_empty": np.empty, "_zeros": np.zeros, "_bool": np.bool_,
                          "_prange": numba.prange, "_lane_sum": lane_sum,
                          "_numpy_sum": numpy_sum, "_product": nan_safe_product,
                          "_dual": make_dual, "_value": value_of, "_partials": partials_of,
                          "_to_float": numba.float64, "_u": numba.uint64, "BLOCK": BLOCK,
                          "_int64": np.int64, "_next_chunk": next_chunk}
        self.params = []                # the fused function's parameters
        # The numbers a run takes, read from the parameters N (ints: sizes, shapes,
        # chunk counts) and K (floats: constants) at the top: the source names none of
        # them, so that one compiled function serves a program at every size and for
        # every value of its constants (each compile costs ~1 s and stays in memory).
        self.ints, self.floats, self.head = [], [], []
        self.forward = []
        self.backward = []              # per record: a function writing its backward pass
        self.kernels = []               # per kernel sum: its SumLoop
        self.shared = {}                # id -> (parameter, constant) passed as it is
        self.operand_params = []        # operands computed per call, and per kernel:
        self.transformed = []           # (inputs, its SumLoop, their positions)
        self.array_gradients = {}       # array leaf slot -> its STORE buffers (name, shape)
        self.stores = False             # whether a gradient is ever stored
        self.names = 0                  # fresh names so far
        self.bad = "0.0"                # the name of the finiteness check so far
        self.arrays = {}                # ("t" totals or "r" scratch, rows, width) -> name
        self.helpers = []               # per segment or threaded kernel sum: its helpers'
                                        # source and (name, parallel) of each function
        self.threaded = 0               # the most elements a part on threads loops over
        self.kernel_sources = []        # segments' kernels' cache keys (name the source)
        self.segment_buffers = set()    # segments' gradient buffers: only one that is a
                                        # leaf's accumulator is allocated
        self.cacheable = True           # whether every kernel's code is named by a file
        for leaf in range(leaves):
            value = values[leaf]
            if type(value) is np.ndarray:
                _require(value.dtype == _FLOAT64, "an input is not float64")
            else:
                _require(type(value) in _SCALARS, "an input is not a float64 scalar")
                self.params.append(f"v{leaf}")
        last_use = {}
        for k, record in enumerate(records):
            for slot in record.parents:
                last_use[slot] = k
            for _, slot in getattr(record, "others", ()):
                last_use[slot] = k
        last_use[output] = len(records)
        segments = find_segments(records, values, leaves, last_use)
        k = 0
        while k < len(records):
            record = records[k]
            try:
                if k in segments:
                    self._segment(segments[k])
                    k = segments[k].stop
                    continue
                if type(record) is LinearRecord:
                    self._linear(record)
                elif kernel_sum_loop(record.func) is not None:
                    self._kernel_sum(k, record)
                else:
                    self._scalar(record)
            except NotFusable as refused:
                raise NotFusable(str(refused) or f"{_described(record)} on "
                                  f"{_operand_kinds(record, values)} is not of a fusable "
                                  f"kind (kernel sums, chains of kernel maps over one shape, "
                                  f"float64 scalar arithmetic)") from None
            k += 1

    def fusion(self):
        # Parameters: the number of threads the parts on threads may use (1: this one),
        # the scalar leaves, the array leaves and constants the loops take
        # as they are, the operands computed per call, then per array leaf with stored
        # gradients its cotangent's buffer (the one the backward pass meets first: its
        # last), and per size one 2-d block whose rows are the other buffers.
        array_leaves = [leaf for leaf in range(self.leaves)
                        if type(self.values[leaf]) is np.ndarray]
        accumulators = [(slot, buffers[-1]) for slot, buffers in self.array_gradients.items()]
        blocks, rows = {}, []           # size -> (its block, rows so far)
        for slot, buffers in self.array_gradients.items():
            for name, shape in buffers[:-1]:
                if name in self.segment_buffers:
                    continue            # (a segment adds into the accumulator itself)
                size = int(np.prod(shape))
                block, count = blocks.get(size, (f"B{len(blocks)}", 0))
                rows.append(f"{name} = {block}[{count}]")
                blocks[size] = (block, count + 1)
        params = (["workers", "N", "K"] + self.params + [f"x{leaf}" for leaf in array_leaves]
                  + [name for name, _ in self.shared.values()] + self.operand_params
                  + [name for _, (name, _) in accumulators]
                  + [block for block, _ in blocks.values()])
        # The backward pass, record by record, last first.  A scalar slot's cotangent
        # so far is self.g[slot] and whether one reached it yet self.h[slot] (a slot
        # no cotangent reaches gets None in the replay: here its cotangent is 0.0 and
        # reached False).
        self.g = {slot: "0.0" for slot in range(len(self.values))
                  if type(self.values[slot]) is not np.ndarray}
        self.h = dict.fromkeys(self.g, "False")
        self.g[self.output], self.h[self.output] = "1.0", "True"
        # An array's cotangent: self.a[slot] whether one reached it yet, added up in
        # self.c[slot], the buffer the backward pass meets first (its last).
        self.a = dict.fromkeys(self.array_gradients, "False")
        self.c = {slot: buffers[-1][0] for slot, buffers in self.array_gradients.items()}
        self.lines = []
        for write in reversed(self.backward):
            write()
        lines = [f"def fused({', '.join(params)}):"]
        lines += ["    " + line for line in self.head + rows + self.forward + self.lines]
        result = [f"{self.bad} == 0.0", f"v{self.output}"]
        for leaf in range(self.leaves):
            if leaf in self.array_gradients:
                result.append(f"{self.a[leaf]}, 0.0")
            elif type(self.values[leaf]) is np.ndarray:
                result.append("False, 0.0")        # an array nothing differentiated
            else:
                result.append(f"{self.h[leaf]}, {self.g[leaf]}")
        lines.append(f"    return ({', '.join(result)})")
        if len(lines) > policy.MAX_STATEMENTS:
            raise NotFusable(f"its fused function would be {len(lines)} lines long, "
                              f"past the bound of {policy.MAX_STATEMENTS}")
        source = "\n".join(lines) + "\n"
        if self.stores:
            source = _GRADIENT_SOURCE + source
        source = "".join(helper for helper, _ in self.helpers) + source
        scalar_leaves = [slot for slot in self.g if slot < self.leaves]
        return Fusion(source, self.namespace, self.ints, self.floats, self.kernels,
                      self.leaves, scalar_leaves,
                      array_leaves, [value for _, value in self.shared.values()],
                      self.transformed, [(slot, shape) for slot, (_, shape) in accumulators],
                      [(count, size) for size, (_, count) in blocks.items()],
                      type(self.values[self.output]),
                      [function for _, functions in self.helpers for function in functions],
                      self.threaded, self.cacheable and None not in self.kernel_sources,
                      self.kernel_sources)

    # ------------------------------------------------------------------ writing

    def _fresh(self, prefix):
        self.names += 1
        return f"{prefix}_{self.names}"

    def _int(self, value):
        """A name for ``value``, an int the run passes in ``N``."""
        _require(_INT64.min <= value <= _INT64.max)
        name = f"n{len(self.ints)}"
        self.head.append(f"{name} = N[{len(self.ints)}]")
        self.ints.append(int(value))
        return name

    def _float(self, name, value):
        """``name`` for ``value``, a float the run passes in ``K``."""
        self.head.append(f"{name} = K[{len(self.floats)}]")
        self.floats.append(float(value))
        return name

    def _emit(self, name, expression):
        self.lines.append(f"{name} = {expression}")
        return name

    def _check(self, lines, expression):
        """Add ``expression * 0.0`` (0, or nan once the value is not finite) to the
        finiteness check ``bad``."""
        name = self._fresh("bad")
        lines.append(f"{name} = {self.bad} + {expression} * 0.0")
        self.bad = name

    def _add_scalar(self, slot, ct, live):
        """Add ``ct`` into the cotangent of scalar ``slot`` where ``live``."""
        g, h, bad = self._fresh("g"), self._fresh("h"), self._fresh("bad")
        self.lines.append(f"{g}, {h}, {bad} = _add_to({live}, {self.h[slot]}, {self.g[slot]}, "
                          f"{ct}, {self.bad})")
        self.g[slot], self.h[slot], self.bad = g, h, bad

    # ------------------------------------------------------------------ records

    def _operand(self, k, i, value, traced):
        if i in traced:
            _require(type(self.values[traced[i]]) in _SCALARS)
            return f"v{traced[i]}"
        _require(type(value) in _CONSTANTS and (type(value) is not int or abs(value) < 2 ** 53))
        return self._float(f"c{k}_{i}", value)

    def _form(self, op):
        # The rule's scalar form, declared beside the rule (dualbcast.rules.elementwise).
        try:
            ufunc = OPERATOR_UFUNCS.get(op) if type(op) is not np.ufunc else op
        except TypeError:               # a record's func need not be hashable
            raise NotFusable from None
        form = SCALAR_FORMS.get(ufunc)
        _require(form is not None)
        return ufunc, form

    def _linear(self, record):
        # x + y, x - y, x * y, x ** c: local partials formed in the forward pass; the
        # backward pass multiplies them by the cotangent, skipped for a zero cotangent
        # (NaN-safe), and adds the products into the parents'.
        out, parents, saved, argnums = record.out, record.parents, record.args, record.argnums
        _, form = self._form(record.op)
        _require(type(self.values[out]) in _SCALARS and form.partials is not None)
        traced = dict(zip(argnums, parents))
        x, y = (self._operand(out, i, value, traced) for i, value in enumerate(saved))
        self.forward.append(f"v{out} = {_branch_free(form.value.format(x=x, y=y))}")
        self._check(self.forward, f"v{out}")
        names = []
        for j, i in enumerate(argnums):
            _require(form.partials[i] is not None)
            names.append(f"q{out}_{j}")
            self.forward.append(f"{names[-1]} = {_branch_free(form.partials[i].format(x=x, y=y))}")
            self._check(self.forward, names[-1])

        def write():
            # (g * q is nan only for an infinite g or q, both checked: the call is
            # handed back, so the replay's 0 for a zero q needs no code here)
            g = self.g[out]
            live = self._emit(self._fresh("live"), f"{self.h[out]} & ({g} != 0.0)")
            for slot, name in zip(parents, names):
                self._add_scalar(slot, self._emit(self._fresh("ct"), f"{g} * {name}"), live)
        self.backward.append(write)

    def _scalar(self, record):
        # -x and x / y: recorded with their scalar vjps, written out as the rule's
        # form gives them, NaN-safe as the vjps are.
        out, parents, argnums, saved = record.out, record.parents, record.argnums, record.args
        ufunc, form = self._form(record.func)
        _require(form.cotangents is not None and not record.kwargs and not record.others
                 and type(self.values[out]) in _SCALARS
                 and tuple(record.vjps) == tuple(SCALAR_UFUNC_VJPS[ufunc]))
        traced = dict(zip(argnums, parents))
        operands = [self._operand(out, i, value, traced) for i, value in enumerate(saved)]
        names = dict(zip("xy", operands))
        self.forward.append(f"v{out} = {_branch_free(form.value.format(**names))}")
        self._check(self.forward, f"v{out}")
        cotangents = [form.cotangents[i] for i in argnums]
        _require(None not in cotangents)

        def write():
            g, live = self.g[out], self.h[out]
            for slot, cotangent in zip(parents, cotangents):
                ct = self._emit(self._fresh("ct"),
                                _branch_free(cotangent.format(g=g, **names)))
                self._add_scalar(slot, self._emit(self._fresh("ct"), f"_nan_safe({ct}, {g})"),
                                 live)
        self.backward.append(write)

    def _kernel_sum(self, k, record):
        out, parents, argnums, saved = record.out, record.parents, record.argnums, record.args
        prepared = kernel_sum_loop(record.func)
        _require(prepared is not None and not record.kwargs and not record.others
                 and prepared.dtype == _FLOAT64)
        if not prepared.source.endswith(".py"):
            self.cacheable = False      # (its loop's code is not named by a file)
        traced = dict(zip(argnums, parents))
        inputs = []                     # per argument: a leaf slot, or a constant
        for i, value in enumerate(saved):
            if i in traced:
                _require(traced[i] < self.leaves)     # kernels of the arguments only
                inputs.append(traced[i])
            else:
                inputs.append(_Constant(value))
        # Each operand as the loop takes it (found for this run's values, and true of
        # every later run's, whose leaves have the signature's types, shapes and
        # strides and whose constants are the same objects): a leaf or a constant as
        # it is is one parameter for every loop (a number: a constant of the source);
        # another is computed per call.  (A parameter per loop's operand made the
        # function's Python wrapper, which unboxes each and on failure releases all
        # those before it, grow as the square of their number.)
        given = [self.values[item] if type(item) is int else item.value for item in inputs]
        try:
            bound = prepared.operands_for(given)
        except Exception:
            raise NotFusable from None
        operands, transformed = [], []
        for m, (item, value, operand) in enumerate(zip(inputs, given, bound)):
            if operand is not value:
                transformed.append(m)
                operands.append(f"o{k}_{m}")
                self.operand_params.append(operands[-1])
            elif type(item) is int:
                operands.append(f"x{item}" if type(value) is np.ndarray else f"v{item}")
            elif type(value) is int:
                operands.append(self._int(value))
            elif type(value) in (float, np.float64):
                operands.append(self._float(f"k{k}_{m}", value))
            else:
                operands.append(self.shared.setdefault(id(value),
                                                       (f"s{len(self.shared)}", value))[0])
        if transformed:
            self.transformed.append((inputs, prepared, transformed))
        buffers, registers = [], []
        for (slot, i), (kind, shape, dtype, is_array) in zip(zip(parents, argnums),
                                                             prepared.gradients):
            _require(dtype == _FLOAT64)
            if kind == STORE and is_array:
                buffers.append(f"b{k}_{len(buffers)}")
                stored = self.array_gradients.setdefault(slot, [])
                _require(not stored or stored[0][1] == shape)
                stored.append((buffers[-1], shape))
            else:
                _require(kind == REGISTER and not is_array)
                registers.append(slot)
        stored = list(buffers)
        self.kernels.append(prepared)
        self.namespace[f"_loop{k}"] = prepared.loop
        width, chunks = prepared.totals_width, self._int(prepared.nchunks)
        shape = "".join(self._int(size) + ", " for size in prepared.loop_shape)
        # Row c of the totals: the sum and the register gradients of chunk c; the
        # scratch: the loop's own.  One of each shape for all the loops (each loop's
        # totals read as soon as it has run).
        totals = self.arrays.get(("t", prepared.nchunks, width))
        if totals is None:
            totals = self.arrays["t", prepared.nchunks, width] = f"t{len(self.arrays)}"
            self.forward.append(f"{totals} = _empty(({chunks}, {width}))")
        scratch = self.arrays.get(("r", prepared.chunk_size, width))
        if scratch is None:
            scratch = self.arrays["r", prepared.chunk_size, width] = f"r{len(self.arrays)}"
            self.forward.append(f"{scratch} = _empty(({width}, "
                                f"{self._int(prepared.chunk_size)}))")
        call = f"({shape}), 0, {chunks}, {self._int(prepared.rows)}, " \
               f"{', '.join(operands + buffers)}, {totals}"
        if prepared.threaded:
            # On the loop's own threaded driver (a check: nan when a thread failed)
            self.threaded = max(self.threaded, int(np.prod(prepared.loop_shape)))
            self.namespace[f"_threads{k}"] = prepared.loop.parallel.made()
            self._threaded_sum(k, len(operands) + len(buffers), width)
            self._check(self.forward, f"_sum{k}(workers, {call}, {scratch})")
        else:
            self.forward.append(f"_loop{k}({call}, {scratch})")
        # The chunks' sums added up as the replay adds them: one chunk as it is,
        # several exactly.
        sums = []
        for column in range(1 + len(registers)):
            sums.append(f"v{out}" if column == 0 else f"x{out}_{column}")
            self.forward.append(f"{sums[-1]} = _chunk_sum({totals}, {column})")
        self._check(self.forward, f"v{out}")
        if stored:
            self.stores = True

        def write():
            # The sum rule's vjp, from its form (beside the rule): each gradient element
            # times the cotangent, 0 for a zero cotangent; a cotangent of 1 leaves a
            # stored gradient as it is.
            g, live = self.g[out], self.h[out]
            column = 0
            buffers = iter(stored)
            for slot in parents:
                if slot in registers:
                    column += 1
                    ct = self._emit(self._fresh("ct"), _branch_free(
                        SUM_COTANGENT_FORM.format(x=sums[column], g=g)))
                    self._add_scalar(slot, ct, live)
                    continue
                buffer = next(buffers)
                reached, bad = self._fresh("a"), self._fresh("bad")
                if self.a[slot] == "False" and buffer == self.c[slot]:
                    call = f"_first_gradient({live}, {buffer}, {g}, {self.bad})"
                else:
                    call = f"_add_gradient({live}, {self.a[slot]}, {self.c[slot]}, {buffer}, " \
                           f"{g}, {self.bad})"
                self.lines.append(f"{reached}, {bad} = {call}")
                self.a[slot], self.bad = reached, bad
        self.backward.append(write)


    def _threaded_sum(self, k, count, width):
        """The source of ``_sum{k}``: kernel sum ``k``'s loop on ``workers`` threads, or
        on this one; nan when a thread failed (the replay meets the exception)."""
        operands = ", ".join(f"o{m}" for m in range(count))
        source = (f"def _sum{k}(workers, shape, lo, hi, rows, {operands}, totals, scratch):\n"
                  f"    if workers > 1:\n"
                  f"        failed = _zeros(workers, _bool)\n"
                  f"        _threads{k}(workers, failed, shape, hi, rows, {operands}, totals, "
                  f"_empty((workers, {width}, scratch.shape[1])))\n"
                  f"        for t in range(workers):\n"
                  f"            if failed[t]:\n"
                  f"                return _NAN\n"
                  f"        return 0.0\n"
                  f"    _loop{k}(shape, lo, hi, rows, {operands}, totals, scratch)\n"
                  f"    return 0.0\n\n")
        self.helpers.append((source, [(f"_sum{k}", False)]))

    def _segment(self, segment):
        """A segment (see :mod:`.segments`): its values loop in the forward pass, its
        gradients loop where the backward pass has its sums' cotangents."""
        n = len(self.helpers)
        threaded = segment.size >= config.parallel_threshold
        if threaded:
            self.threaded = max(self.threaded, segment.size)
        source = SegmentSource(segment, n, self.namespace, threaded)
        for kernel in segment.kernels:
            if kernel._cache_key is None:
                self.cacheable = False
        self.helpers.append((source.source, source.functions()))
        self.kernel_sources += [kernel._cache_key for kernel in segment.kernels]
        workers = "workers" if threaded else "1"
        arrays = []
        for kind, item in source.array_params:
            if kind == "array":
                value = segment.arrays[item]
                arrays.append(self.shared.setdefault(id(value), (f"s{len(self.shared)}", value))[0])
            else:
                arrays.append(f"x{item}")
        scalars = [f"v{slot}" for slot in source.scalar_params] + \
            [self._float(f"q{n}_{j}", number) for j, number in enumerate(source.numbers)]
        size = self._int(segment.size)
        result = self._fresh("seg")
        self.forward.append(f"{result} = _s{n}_forward("
                            f"{', '.join([workers, size] + arrays + scalars)})")
        self._check(self.forward, f"{result}[0]")
        for j, slot in enumerate(segment.sums):
            self.forward.append(f"v{slot} = {result}[{j + 1}]")
            self._check(self.forward, f"v{slot}")
        names = {}
        for slot in source.leaf_gradients:
            names[slot] = f"b{n}s_{slot}"
            self.segment_buffers.add(names[slot])
            stored = self.array_gradients.setdefault(slot, [])
            _require(not stored or stored[0][1] == segment.shape)
            stored.append((names[slot], segment.shape))

        def write():
            # Every sum's cotangent must have reached it (else the call is handed back:
            # the replay skips the records no cotangent reaches).
            live = self._emit(self._fresh("live"), " & ".join(
                f"({self.h[slot]})" for slot in segment.sums))
            bad = self._fresh("bad")
            self.lines.append(f"{bad} = {self.bad} + _where({live}, 0.0, _NAN)")
            self.bad = bad
            gradients = []
            for slot in source.leaf_gradients:
                gradients += [self.c[slot], f"({self.a[slot]})"]
            out = self._fresh("seg")
            self.lines.append(f"{out} = _s{n}_backward(" + ", ".join(
                [workers, size] + [self.g[slot] for slot in segment.sums] + arrays + scalars
                + gradients[0::2] + gradients[1::2]) + ")")
            bad = self._fresh("bad")
            self.lines.append(f"{bad} = {self.bad} + {out}[0]")
            self.bad = bad
            for slot in source.leaf_gradients:
                self.a[slot] = "True"
            for j, slot in enumerate(source.dots):
                self._add_scalar(slot, self._emit(self._fresh("ct"), f"{out}[{j + 1}]"), live)
        self.backward.append(write)




def _described(record):
    func = getattr(record, "op", None) or record.func
    name = getattr(func, "__name__", None) or type(func).__name__
    return f"numpy.{name}" if isinstance(func, np.ufunc) else name


def _operand_kinds(record, values):
    kinds = []
    for slot in record.parents:
        value = values[slot]
        kinds.append(f"{value.dtype}{list(value.shape)}" if type(value) is np.ndarray
                     else type(value).__name__)
    return "(" + ", ".join(kinds) + ")"


class _Select(ast.NodeTransformer):
    """``x if c else y`` as ``_where(c, x, y)``, ``a or b`` and ``a and b`` of
    comparisons as ``a | b`` and ``a & b``: the fused function stays one block."""

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return ast.Call(ast.Name("_where", ast.Load()), [node.test, node.body, node.orelse], [])

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        op = ast.BitOr() if type(node.op) is ast.Or else ast.BitAnd()
        combined = node.values[0]
        for value in node.values[1:]:
            combined = ast.BinOp(combined, op, value)
        return combined


# What a rule's form may be made of: float arithmetic and comparisons of names and
# constants, pow, conditional expressions and ``and``/``or`` of comparisons (evaluated
# all ways: pure, nothing raises under the NumPy error model).
_PURE = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.IfExp,
         ast.Call, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


_CONDITIONS = (ast.Compare, ast.BoolOp)


def _branch_free(expression):
    """``expression`` (a form filled in) with no branch: conditional expressions as
    calls of ``_where``."""
    tree = ast.parse(expression, mode="eval")
    for node in ast.walk(tree):
        _require(isinstance(node, _PURE) or type(node) is ast.Compare and len(node.ops) == 1
                 or type(node) is ast.BoolOp and all(type(value) in _CONDITIONS
                                                     for value in node.values))
        _require(type(node) is not ast.Call or
                 type(node.func) is ast.Name and node.func.id == "pow")
    return ast.unparse(_Select().visit(tree))


class _Constant:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Fusion:
    """A fused program: ``fusion(values)`` gives ``(value, cotangents by leaf)`` (None
    where no cotangent reached a leaf), or None when the replay must run instead.

    Its function (``function``, set by whoever compiles it or finds it compiled: see
    :mod:`.compiled`) is that of every program whose :attr:`key` is equal: the same
    source, calling the same objects (kernel loops, helpers)."""

    def __init__(self, source, namespace, ints, floats, kernels, leaves, scalar_leaves,
                 array_leaves, shared, transformed, accumulators, blocks, output_type, helpers,
                 threaded, cacheable, kernel_keys):
        self.source, self.namespace, self.kernels = source, namespace, kernels
        # The sizes and constants of this program, the function's N and K
        self.ints, self.floats = np.array(ints, np.int64), np.array(floats, np.float64)
        self.output_type = output_type
        # The helper functions to compile ((name, parallel)); the most elements a part
        # on threads loops over (0: none); whether the function may be cached on disk
        # (every kernel's code named by its file or fingerprint: ``kernel_keys``, the
        # segments' kernels')
        self.helpers, self.threaded = helpers, threaded
        self.choice = ThreadChoice()    # whether its threaded parts run on threads
        self.cacheable, self.kernel_keys = cacheable, kernel_keys
        self.function = None
        # the parameters (see _Writer.fusion), in order
        self.scalar_leaves, self.array_leaves, self.shared = scalar_leaves, array_leaves, shared
        self.transformed = transformed
        self.accumulators = [shape for _, shape in accumulators]
        self.blocks = blocks
        # per leaf: -1 a scalar, else the number of its cotangent's buffer (None: none)
        numbers = {slot: n for n, (slot, _) in enumerate(accumulators)}
        self.kinds = [-1 if leaf in scalar_leaves else numbers.get(leaf)
                      for leaf in range(leaves)]
        # The source as compiled: its name (the file's) must change with anything it
        # is compiled from: the loops' files (named by their kernels' fingerprints) and
        # the numbers bound in its namespace (listed on top).
        loops = "".join(f"# _loop{k}: {prepared.source}\n"
                        for k, prepared in enumerate(kernels))
        loops += "".join(f"# kernel: {key}\n" for key in kernel_keys)
        constants = "".join(f"# {name} = {_exact(value)}\n"
                            for name, value in sorted(namespace.items())
                            if type(value) in (float, int, tuple))
        self.text = "# dualbcast: a fused replay\n" + loops + constants + source
        # What the function is: its source and the objects its namespace binds (by
        # identity: whoever keeps the key keeps them too, see .compiled).
        self.objects = tuple(value for _, value in sorted(namespace.items())
                             if type(value) not in (float, int, tuple))
        self.key = (self.text, tuple(map(id, self.objects)))

    def compile(self):
        """A new dispatcher of the fused function, compiled (or loaded from the disk
        cache) at its first call."""
        source = self.text
        name = hashlib.sha256(source.encode()).hexdigest()[:24]
        module = load_loop(source, self.namespace, "fused", name) if self.cacheable else None
        if module is None:
            exec(compile(source, "<dualbcast fused replay>", "exec"), self.namespace)
            functions, cache = self.namespace, False
        else:
            functions, cache = module.__dict__, True
        # (a module loaded before, by a program of the same source, has them compiled)
        helpers = [(name, False) for name in ("_scale_all", "_add_all", "_scaled",
                                              "_first_gradient", "_add_gradient")]
        if any(parallel for _, parallel in self.helpers):
            launch_threads()
        for name, parallel in helpers + self.helpers:
            helper = functions.get(name)
            if helper is not None and not isinstance(helper, numba.core.dispatcher.Dispatcher):
                functions[name] = guarded_njit(error_model="numpy", cache=cache, nogil=True,
                                               parallel=parallel)(helper)
        return guarded_njit(error_model="numpy", cache=cache)(functions["fused"])

    def __call__(self, values):
        if self.threaded < config.parallel_threshold or config.threads < 2:
            return self._run(values, 1)
        return run_as_chosen(self.choice, lambda: self._run(values, config.threads),
                             lambda: self._run(values, 1))

    def _run(self, values, workers):
        # (loops, not comprehensions: this is most of a small fused call's Python time)
        args = [workers, self.ints, self.floats]
        for leaf in self.scalar_leaves:
            args.append(float(values[leaf]))
        for leaf in self.array_leaves:
            array = values[leaf]
            # (read-only: the same Numba type as writeable, or the function compiles again)
            args.append(array if array.flags.writeable else read_only_alias(array))
        args += self.shared
        for inputs, prepared, positions in self.transformed:
            kernel_args = []
            for item in inputs:
                kernel_args.append(item.value if type(item) is _Constant else values[item])
            operands = prepared.operands_for(kernel_args)
            for m in positions:
                args.append(operands[m])
        gradients = []
        for shape in self.accumulators:
            gradient = np.empty(shape)
            gradients.append(gradient)
            args.append(gradient if len(shape) == 1 else gradient.reshape(-1))
        for shape in self.blocks:
            args.append(np.empty(shape))
        result = self.function(*args)
        if not result[0]:
            return None
        # per leaf: None where no cotangent reached it, else its float or array
        grads = []
        for reached, found, kind in zip(result[2::2], result[3::2], self.kinds):
            grads.append(None if not reached else found if kind == -1 else gradients[kind])
        return self.output_type(result[1]), grads


def _exact(value):
    return value.hex() if type(value) is float else repr(value)
