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
import numba
import numpy as np

from ..core.operators import OPERATOR_UFUNCS
from ..core.registry import NO_RULES, PRIMITIVES
from ..core.tape import LinearRecord
from ..dual import make_dual, partials_of, value_of
from ..kernel.loops import lane_sum
from ..kernel.products import nan_safe_product
from ..kernel.threads import next_chunk
from ..rules.fast import kernel_sum_loop
from . import policy
from .fused_runtime import (GRADIENT_SOURCE, add_to, chunk_sum, exact_sum, libm_pow, nan_safe,
                            numpy_sum, where)
from .fused_function import Fusion
from .fused_kernels import write_kernel_sum, write_segment
from .fused_source import NotFusable, branch_free, require
from .segments import BLOCK, find_segments

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
    return Writer(records, values, leaves, output).fusion()


# What the fused function's source calls, by the names it calls them.
_NAMESPACE = {"pow": libm_pow, "_exact_sum": exact_sum, "_where": where, "_add_to": add_to,
              "_nan_safe": nan_safe, "_NAN": _NAN, "_chunk_sum": chunk_sum,
              "_empty": np.empty, "_zeros": np.zeros, "_bool": np.bool_,
              "_prange": numba.prange, "_lane_sum": lane_sum, "_numpy_sum": numpy_sum,
              "_product": nan_safe_product, "_dual": make_dual, "_value": value_of,
              "_partials": partials_of, "_to_float": numba.float64, "_u": numba.uint64,
              "BLOCK": BLOCK, "_int64": np.int64, "_next_chunk": next_chunk}


class ProgramWriter:
    """What writing any fused function's source takes: its namespace, its parameters,
    the sizes and constants it reads from ``N`` and ``K``, fresh names, the finiteness
    check, the kernels' loops it calls (:mod:`.fused_kernels`), and the forward pass's
    scalar arithmetic from the rules' forms.  :class:`Writer` writes a gradient
    program's; :class:`.staged_fusion.StagedWriter` a staged one's."""

    def __init__(self, values, leaves):
        self.values, self.leaves = values, leaves
        self.namespace = dict(_NAMESPACE)
        self.params = []                # the fused function's parameters
        # The numbers a run takes, read from the parameters N (ints: sizes, shapes,
        # chunk counts) and K (floats: constants) at the top: the source names none of
        # them, so that one compiled function serves a program at every size and for
        # every value of its constants (each compile costs ~1 s and stays in memory).
        self.ints, self.floats, self.head = [], [], []
        self.forward = []
        self.kernels = []               # per kernel sum: its SumLoop
        self.shared = {}                # id -> (parameter, constant) passed as it is
        self.operand_params = []        # operands computed per call, and per kernel:
        self.transformed = []           # (inputs, its SumLoop, their positions)
        self.names = 0                  # fresh names so far
        self.bad = "0.0"                # the name of the finiteness check so far
        self.arrays = {}                # ("t" totals or "r" scratch, rows, width) -> name
        self.helpers = []               # per segment or threaded kernel sum: its helpers'
                                        # source and (name, parallel) of each function
        self.threaded = 0               # the most elements a part on threads loops over
        self.kernel_sources = []        # segments' kernels' cache keys (name the source)
        self.cacheable = True           # whether every kernel's code is named by a file

    def fresh(self, prefix):
        self.names += 1
        return f"{prefix}_{self.names}"

    def int_name(self, value):
        """A name for ``value``, an int the run passes in ``N``."""
        require(_INT64.min <= value <= _INT64.max)
        name = f"n{len(self.ints)}"
        self.head.append(f"{name} = N[{len(self.ints)}]")
        self.ints.append(int(value))
        return name

    def float_name(self, name, value):
        """``name`` for ``value``, a float the run passes in ``K``."""
        self.head.append(f"{name} = K[{len(self.floats)}]")
        self.floats.append(float(value))
        return name

    def check(self, lines, expression):
        """Add ``expression * 0.0`` (0, or nan once the value is not finite) to the
        finiteness check ``bad``."""
        name = self.fresh("bad")
        lines.append(f"{name} = {self.bad} + {expression} * 0.0")
        self.bad = name

    def constant(self, k, i, value):
        """A number among record ``k``'s arguments (its ``i``-th), as a name."""
        require(type(value) in _CONSTANTS and (type(value) is not int or abs(value) < 2 ** 53))
        return self.float_name(f"c{k}_{i}", value)

    def form(self, op):
        """``(ufunc, scalar form)`` of a record's function: the rule's form, declared
        beside the rule (dualbcast.rules.elementwise)."""
        try:
            ufunc = OPERATOR_UFUNCS.get(op) if type(op) is not np.ufunc else op
        except TypeError:               # a record's func need not be hashable
            raise NotFusable from None
        form = PRIMITIVES.get(ufunc, NO_RULES).form
        require(form is not None)
        return ufunc, form


class Writer(ProgramWriter):
    """Writes a gradient program's fused function's source, record by record."""

    def __init__(self, records, values, leaves, output):
        super().__init__(values, leaves)
        self.output = output
        self.backward = []              # per record: a function writing its backward pass
        self.array_gradients = {}       # array leaf slot -> its STORE buffers (name, shape)
        self.stores = False             # whether a gradient is ever stored
        self.repeated_buffers = set()   # buffers of an array passed twice to one sum
        self.segment_buffers = set()    # segments' gradient buffers: only one that is a
                                        # leaf's accumulator is allocated
        # The backward pass's state as it is written (last record first), by slot: a
        # scalar's cotangent so far and whether one reached it yet (a slot no cotangent
        # reaches gets None in the replay: here its cotangent is 0.0 and reached
        # False); an array's, whether one reached it and the buffer it is added up in.
        self.cotangent, self.reached = {}, {}
        self.array_reached, self.accumulator = {}, {}
        self.lines = []                 # the backward pass's source
        self._take_leaves()
        self._write_records(records)

    def _take_leaves(self):
        for leaf in range(self.leaves):
            value = self.values[leaf]
            if type(value) is np.ndarray:
                require(value.dtype == _FLOAT64, "an input is not float64")
            else:
                require(type(value) in _SCALARS, "an input is not a float64 scalar")
                self.params.append(f"v{leaf}")

    def _write_records(self, records):
        """Each record's forward pass, and a writer of its backward pass."""
        last_use = {}
        for k, record in enumerate(records):
            for slot in record.parents:
                last_use[slot] = k
            for _, slot in getattr(record, "others", ()):
                last_use[slot] = k
        last_use[self.output] = len(records)
        segments = find_segments(records, self.values, self.leaves, last_use)
        k = 0
        while k < len(records):
            record = records[k]
            try:
                if k in segments:
                    write_segment(self, segments[k])
                    k = segments[k].stop
                    continue
                if type(record) is LinearRecord:
                    self._linear(record)
                elif kernel_sum_loop(record.func) is not None:
                    write_kernel_sum(self, k, record)
                else:
                    self._scalar(record)
            except NotFusable as refused:
                raise NotFusable(str(refused) or f"{described(record)} on "
                                 f"{_operand_kinds(record, self.values)} is not of a "
                                 f"fusable kind (kernel sums, chains of kernel maps over "
                                 f"one shape, float64 scalar arithmetic)") from None
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
        # (the accumulator is written first: the backward pass must meet it first)
        require(not any(name in self.repeated_buffers for _, (name, _) in accumulators),
                "an array argument passed twice to the kernel sum that uses it last")
        blocks, rows = self._blocks()
        params = (["workers", "N", "K"] + self.params + [f"x{leaf}" for leaf in array_leaves]
                  + [name for name, _ in self.shared.values()] + self.operand_params
                  + [name for _, (name, _) in accumulators]
                  + [block for block, _ in blocks.values()])
        self._write_backward()
        lines = [f"def fused({', '.join(params)}):"]
        lines += ["    " + line for line in self.head + rows + self.forward + self.lines]
        lines.append(f"    return ({', '.join(self._results())})")
        if len(lines) > policy.MAX_STATEMENTS:
            raise NotFusable(f"its fused function would be {len(lines)} lines long, "
                             f"past the bound of {policy.MAX_STATEMENTS}")
        source = "\n".join(lines) + "\n"
        if self.stores:
            source = GRADIENT_SOURCE + source
        source = "".join(helper for helper, _ in self.helpers) + source
        return Fusion(
            source, self.namespace, self.ints, self.floats, self.kernels, self.leaves,
            scalar_leaves=[slot for slot in self.cotangent if slot < self.leaves],
            array_leaves=array_leaves, shared=[value for _, value in self.shared.values()],
            transformed=self.transformed,
            accumulators=[(slot, shape) for slot, (_, shape) in accumulators],
            blocks=[(count, size) for size, (_, count) in blocks.items()],
            output_type=type(self.values[self.output]),
            helpers=[function for _, functions in self.helpers for function in functions],
            threaded=self.threaded,
            cacheable=self.cacheable and None not in self.kernel_sources,
            kernel_keys=self.kernel_sources)

    def _blocks(self):
        """The gradient buffers besides the accumulators, as rows of one 2-d block per
        size: ``({size: (block, rows)}, the lines naming the rows)``."""
        blocks, rows = {}, []
        for buffers in self.array_gradients.values():
            for name, shape in buffers[:-1]:
                if name in self.segment_buffers:
                    continue            # (a segment adds into the accumulator itself)
                size = int(np.prod(shape))
                block, count = blocks.get(size, (f"B{len(blocks)}", 0))
                rows.append(f"{name} = {block}[{count}]")
                blocks[size] = (block, count + 1)
        return blocks, rows

    def _write_backward(self):
        """The backward pass, record by record, last first, from the output's 1.0."""
        self.cotangent = {slot: "0.0" for slot in range(len(self.values))
                          if type(self.values[slot]) is not np.ndarray}
        self.reached = dict.fromkeys(self.cotangent, "False")
        self.cotangent[self.output], self.reached[self.output] = "1.0", "True"
        self.array_reached = dict.fromkeys(self.array_gradients, "False")
        self.accumulator = {slot: buffers[-1][0]
                            for slot, buffers in self.array_gradients.items()}
        for write in reversed(self.backward):
            write()

    def _results(self):
        """What the function returns: whether every value was finite, the output, and
        per leaf whether a cotangent reached it and a scalar's cotangent."""
        results = [f"{self.bad} == 0.0", f"v{self.output}"]
        for leaf in range(self.leaves):
            if leaf in self.array_gradients:
                results.append(f"{self.array_reached[leaf]}, 0.0")
            elif type(self.values[leaf]) is np.ndarray:
                results.append("False, 0.0")        # an array nothing differentiated
            else:
                results.append(f"{self.reached[leaf]}, {self.cotangent[leaf]}")
        return results

    # ------------------------------------------------------------------ writing

    def emit(self, name, expression):
        self.lines.append(f"{name} = {expression}")
        return name

    def add_scalar(self, slot, ct, live):
        """Add ``ct`` into the cotangent of scalar ``slot`` where ``live``."""
        g, h, bad = self.fresh("g"), self.fresh("h"), self.fresh("bad")
        self.lines.append(f"{g}, {h}, {bad} = _add_to({live}, {self.reached[slot]}, "
                          f"{self.cotangent[slot]}, {ct}, {self.bad})")
        self.cotangent[slot], self.reached[slot], self.bad = g, h, bad

    # ------------------------------------------------------------------ records

    def _operand(self, k, i, value, traced):
        if i in traced:
            require(type(self.values[traced[i]]) in _SCALARS)
            return f"v{traced[i]}"
        return self.constant(k, i, value)

    def _linear(self, record):
        # x + y, x - y, x * y, x ** c: local partials formed in the forward pass; the
        # backward pass multiplies them by the cotangent, skipped for a zero cotangent
        # (NaN-safe), and adds the products into the parents'.
        out, parents, saved, argnums = record.out, record.parents, record.args, record.argnums
        _, form = self.form(record.op)
        require(type(self.values[out]) in _SCALARS and form.partials is not None)
        traced = dict(zip(argnums, parents))
        x, y = (self._operand(out, i, value, traced) for i, value in enumerate(saved))
        self.forward.append(f"v{out} = {branch_free(form.value.format(x=x, y=y))}")
        self.check(self.forward, f"v{out}")
        names = []
        for j, i in enumerate(argnums):
            require(form.partials[i] is not None)
            names.append(f"q{out}_{j}")
            self.forward.append(f"{names[-1]} = {branch_free(form.partials[i].format(x=x, y=y))}")
            self.check(self.forward, names[-1])

        def write():
            # (g * q is nan only for an infinite g or q, both checked: the call is
            # handed back, so the replay's 0 for a zero q needs no code here)
            g = self.cotangent[out]
            live = self.emit(self.fresh("live"), f"{self.reached[out]} & ({g} != 0.0)")
            for slot, name in zip(parents, names):
                self.add_scalar(slot, self.emit(self.fresh("ct"), f"{g} * {name}"), live)
        self.backward.append(write)

    def _scalar(self, record):
        # -x and x / y: recorded with their scalar vjps, written out as the rule's
        # form gives them, NaN-safe as the vjps are.
        out, parents, argnums, saved = record.out, record.parents, record.argnums, record.args
        ufunc, form = self.form(record.func)
        require(form.cotangents is not None and not record.kwargs and not record.others
                and type(self.values[out]) in _SCALARS
                and tuple(record.vjps) == PRIMITIVES[ufunc].scalar_vjps)
        traced = dict(zip(argnums, parents))
        operands = [self._operand(out, i, value, traced) for i, value in enumerate(saved)]
        names = dict(zip("xy", operands))
        self.forward.append(f"v{out} = {branch_free(form.value.format(**names))}")
        self.check(self.forward, f"v{out}")
        cotangents = [form.cotangents[i] for i in argnums]
        require(None not in cotangents)

        def write():
            g, live = self.cotangent[out], self.reached[out]
            for slot, cotangent in zip(parents, cotangents):
                ct = self.emit(self.fresh("ct"), branch_free(cotangent.format(g=g, **names)))
                self.add_scalar(slot, self.emit(self.fresh("ct"), f"_nan_safe({ct}, {g})"),
                                live)
        self.backward.append(write)


def described(record):
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
