"""Elementwise segments of a fused program: a chain of kernel maps on arrays of one
shape, ending in sums, compiled as two loops over the elements instead of a pass over
memory per kernel.

A program such as ``h = k_i(h, a)`` for ten kernels, then ``np.sum(h ** 2)``, runs
record by record in a replay: each kernel map writes its values and partials (three
arrays), its backward pass reads them back, and the scalar arguments' cotangents are a
dot product per kernel.  A *segment* is a run of consecutive records made only of

- kernel maps ``k(...)`` (float64, not ``fastmath``) whose array arguments are the
  program's float64 argument arrays, constant float64 arrays or arrays of the segment,
  all of one shape and C-contiguous, and whose scalar arguments are float64 scalars of
  the program computed before the segment, or numbers;
- ``x ** 2`` of such an array (NumPy's fast path: ``x * x``; its vjp ``2 * x ** 1.0``:
  exact operations, so a loop computes NumPy's bits);
- ``np.sum(x)`` of such an array (the whole array),

whose arrays are used by no record after it.  Its sums are the segment's outputs.  It
is compiled into two loops in the fused function (:mod:`.fusion`):

- *values*: every record's value per element; the sums' terms are written to memory
  and added up as ``np.add.reduce`` adds them (:func:`.fused_runtime.numpy_sum`);
- *gradients*, once the backward pass has the sums' cotangents: the values again, now
  with each kernel's partials (its dual-number call, as its partials loop makes it),
  then per element the backward pass of every record, last first, in registers: the
  NaN-safe products the replay's vjps form (``products._multiply``), a scalar
  argument's products added up per chunk of ``products.CHUNK`` elements by
  ``lane_sum`` as ``nan_safe_dot`` adds them, and each argument array's cotangent
  added into its gradient in the replay's order.

The same IEEE operations in the same order as the replay: the same bits, without an
array between the kernels.  Threads share the chunks of both loops (each chunk's sums
its own): the bits do not depend on them.
"""
import operator
from types import SimpleNamespace

import numpy as np

from ..core.registry import PRIMITIVES
from ..core.tape import Record, RuleRecord
from ..kernel.loops import packed_call
from ..kernel.products import CHUNK
from ..rules.fast import kernel_map_rule
from ..rules.reductions import is_whole_sum

_FLOAT64 = np.dtype(np.float64)
_SCALARS = (float, np.float64)
_NUMBERS = (float, int, np.float64)
_MAP, _SQUARE, _SUM = "map", "square", "sum"
BLOCK = 256         # elements of a block (see SegmentSource._write)
# The most kernel maps a segment holds: each is compiled twice into it (values; duals),
# ~0.7 s a kernel of vectorised math (a chain of ten: ~7 s, once, then cached on disk),
# so this bounds the compile.  A longer chain is not fused.
MAX_KERNELS = 12
# Operand kinds: a traced array or scalar (a slot), a constant array (an index into the
# segment's arrays), a number.
ARRAY_SLOT, SCALAR_SLOT, ARRAY, NUMBER = "array slot", "scalar slot", "array", "number"


class Step:
    """One record of a segment: ``kind`` (map, square, sum), its output slot, its
    operands (per argument ``(kind, slot, index or number)``), and for a map its
    kernel, the positions of its differentiated arguments, their slots and the index
    of each one's partial in the kernel's dual result."""

    __slots__ = ("kind", "out", "operands", "kernel", "active", "parents", "partial")

    def __init__(self, kind, out, operands, kernel=None, active=(), parents=(), partial=None):
        self.kind, self.out, self.operands = kind, out, operands
        self.kernel, self.active, self.parents, self.partial = kernel, active, parents, partial


class Segment:
    """Records ``start <= k < stop`` of a program as :class:`Step` s over arrays of
    ``shape``; ``arrays``: the constant arrays it reads; ``sums``: its sums' slots."""

    def __init__(self, start, stop, shape, steps, arrays):
        self.start, self.stop, self.shape, self.steps = start, stop, shape, steps
        self.size = int(np.prod(shape))
        self.arrays = arrays
        self.sums = [step.out for step in steps if step.kind == _SUM]
        self.kernels = [step.kernel for step in steps if step.kind == _MAP]


def find_segments(records, values, leaves, last_use):
    """``{start: Segment}``: the program's segments (see the module's docstring), at
    most one starting at each record; ``last_use[slot]``: the last record reading
    ``slot`` (``len(records)`` for the program's output)."""
    segments = {}
    k = 0
    while k < len(records):
        segment = _grow(records, k, values, leaves, last_use)
        if segment is None:
            k += 1
        else:
            segments[k] = segment
            k = segment.stop
    return segments


def _grow(records, start, values, leaves, last_use):
    first = records[start].out          # the segment's scalars are computed before it
    shape, steps, arrays, made = None, [], [], set()
    for record in records[start:]:
        step, shape = _step(record, values, leaves, first, made, shape, arrays)
        if step is None:
            break
        steps.append(step)
        if step.kind != _SUM:
            made.add(step.out)
    while steps and steps[-1].kind != _SUM:     # it ends in a sum
        made.discard(steps.pop().out)
    stop = start + len(steps)
    kernels = sum(step.kind == _MAP for step in steps)
    if not kernels or kernels > MAX_KERNELS or \
            any(last_use.get(slot, -1) >= stop for slot in made):
        return None                     # nothing to fuse, too much, or an array needed later
    return Segment(start, stop, shape, steps, arrays)


def _step(record, values, leaves, first, made, shape, arrays):
    """``(step, shape)``: ``record`` as a :class:`Step` of a segment over arrays of
    ``shape`` (None: its first array decides), or ``(None, shape)``."""
    kind, partial = type(record), None
    if kind is RuleRecord:
        rule = kernel_map_rule(record.func)
        if rule is None or record.kwargs or record.others:
            return None, shape
        kernel, prepared = rule
        spec = prepared.loop.spec
        if prepared.plan.dtype != _FLOAT64 or kernel.fastmath \
                or spec.mode != "partials" or set(spec.active) != set(record.argnums) \
                or type(values[record.out]) is not np.ndarray:
            return None, shape
        step_kind, partial = _MAP, spec.active
    elif kind is Record and not record.others:
        if is_whole_sum(record.func, record.vjps, record.kwargs):
            step_kind = _SUM
        elif record.func in (operator.pow, np.power) and not record.kwargs \
                and record.argnums == (0,) and len(record.args) == 2 \
                and type(record.args[1]) in (int, float) and record.args[1] == 2 \
                and tuple(record.vjps) == PRIMITIVES[np.power].vjps:
            step_kind = _SQUARE
        else:
            return None, shape
    else:
        return None, shape
    traced = dict(zip(record.argnums, record.parents))
    operands = []
    for i, value in enumerate(record.args):
        if step_kind == _SQUARE and i == 1:
            break                       # (the exponent, 2)
        if i in traced:
            slot = traced[i]
            value = values[slot]
            if type(value) is np.ndarray:
                if not (slot in made or slot < leaves) or not _loopable(value, shape):
                    return None, shape
                shape = value.shape
                operands.append((ARRAY_SLOT, slot))
            elif type(value) in _SCALARS and step_kind == _MAP and slot < first:
                operands.append((SCALAR_SLOT, slot))
            else:
                return None, shape
        elif step_kind != _MAP:
            return None, shape
        elif type(value) is np.ndarray:
            if not _loopable(value, shape):
                return None, shape
            shape = value.shape
            operands.append((ARRAY, len(arrays)))
            arrays.append(value)
        elif type(value) in _NUMBERS and (type(value) is not int or abs(value) < 2 ** 53):
            operands.append((NUMBER, float(value)))
        else:
            return None, shape
    out = values[record.out]
    if step_kind != _SUM and (out.dtype != _FLOAT64 or out.shape != shape):
        return None, shape
    return Step(step_kind, record.out, operands, rule[0] if partial is not None else None,
                tuple(record.argnums), tuple(record.parents), partial), shape


def _loopable(array, shape):
    return array.dtype == _FLOAT64 and array.flags.c_contiguous and array.ndim > 0 \
        and array.size > 0 and (shape is None or array.shape == shape)


def _loop(statements):
    """A loop over a block's elements doing ``statements``."""
    return ["        for i in range(_u(0), m):"] + ["            " + line for line in statements]


class SegmentSource:
    """The source of one segment's helpers, segment number ``n`` of its fused function,
    and what the function passes them:

    - ``_s{n}_forward(workers, size, *arrays, *scalars, *numbers) -> (check, *sums)``;
    - ``_s{n}_backward(workers, size, *sums' cotangents, *arrays, *scalars, *numbers,
      *per leaf gradient: (its gradient so far, whether one reached it)) -> (check,
      *dots)``.

    ``size``: the segment's number of elements; ``arrays``: :attr:`array_params`
    (``(ARRAY_SLOT, leaf)`` or ``(ARRAY, index)``); ``scalars``: :attr:`scalar_params`
    (slots); ``numbers``: :attr:`numbers` (the constant numbers the kernels take, in
    order); the leaf gradients:
    :attr:`leaf_gradients`; each dot the cotangent of one scalar argument of one
    kernel, in the order the replay's backward pass adds them (:attr:`dots`, their
    slots).  ``check`` is nan when a chunk failed (an exception in a kernel) or a
    square was not finite (NumPy would have warned): the replay must run.

    The source names no size and no number: they are arguments, so that one compiled
    function serves the segment at every size and for every value of its numbers."""

    def __init__(self, segment, n, namespace, threaded):
        self.segment, self.n, self.threaded = segment, n, threaded
        steps = segment.steps
        self.made = {step.out for step in steps if step.kind != _SUM}   # arrays made here
        self.array_params, self.scalar_params = [], []      # what the helpers are passed
        self.numbers, self.number_names = [], {}            # (step, operand) -> its name
        for k, step in enumerate(steps):
            for m, operand in enumerate(step.operands):
                if operand[0] == NUMBER:
                    self.number_names[k, m] = f"Q{len(self.numbers)}"
                    self.numbers.append(operand[1])
                elif operand[0] == SCALAR_SLOT and operand[1] not in self.scalar_params:
                    self.scalar_params.append(operand[1])
                elif (operand[0] == ARRAY or operand[0] == ARRAY_SLOT
                      and operand[1] not in self.made) and operand not in self.array_params:
                    self.array_params.append(operand)
        # The slots a cotangent reaches (every sum's does: the fused function hands
        # the call back otherwise), and the order scalar cotangents are formed in.
        reached = set(segment.sums)
        self.dots = []
        for step in reversed(steps):
            if step.out in reached:
                for operand in step.operands:
                    if operand[0] in (ARRAY_SLOT, SCALAR_SLOT):
                        reached.add(operand[1])
                if step.kind == _MAP:
                    self.dots += [slot for i, slot in zip(step.active, step.parents)
                                  if step.operands[i][0] == SCALAR_SLOT]
        self.reached = reached
        self.leaf_gradients = [slot for kind, slot in self.array_params
                               if kind == ARRAY_SLOT and slot in reached]
        # Squares read by more than sums: NumPy warns when one overflows, so each is
        # checked (one feeding only sums is checked by the sums, which the fused
        # function checks; the check's running sum keeps LLVM from vectorising).
        # (array operands only: a number's value is no slot)
        self.checked = {step.out for step in steps if step.kind == _SQUARE} & {
            operand[1] for step in steps if step.kind != _SUM for operand in step.operands
            if operand[0] == ARRAY_SLOT}
        self.namespace = namespace
        for k, step in enumerate(steps):
            if step.kind == _MAP:
                namespace[f"_k{n}_{k}"] = step.kernel._scalar_kernel
        self.source = self._write()

    # ---------------------------------------------------------------- names

    def _array_name(self, operand):
        return f"A{self.array_params.index(operand)}"

    def _element(self, operand, k, m):
        """The element (or scalar) operand ``m`` of step ``k`` is, in a block's loop."""
        kind, item = operand
        if kind == ARRAY_SLOT:
            if item in self.made:
                return f"e{item}[i]"
            return f"{self._array_name(operand)}[b + i]"
        if kind == ARRAY:
            return f"{self._array_name(operand)}[b + i]"
        if kind == SCALAR_SLOT:
            return f"V{self.scalar_params.index(item)}"
        return self.number_names[k, m]

    # ---------------------------------------------------------------- writing

    def _write(self):
        names = self._names()
        lines = (self._values_source(names) + self._gradients_source(names)
                 + self._drivers_source(names))
        return "\n".join(lines) + "\n"

    def _names(self):
        """The names the helpers' sources share: parameters, and a chunk's head and
        loop over blocks."""
        seg = self.segment
        names = SimpleNamespace(
            arrays=[f"A{j}" for j in range(len(self.array_params))],
            # (the numbers are passed as the scalars are)
            scalars=[f"V{j}" for j in range(len(self.scalar_params))]
            + [f"Q{j}" for j in range(len(self.numbers))],
            terms=[f"T{j}" for j in range(len(seg.sums))],
            grads=[f"R{j}" for j in range(len(self.leaf_gradients))],
            flags=[f"F{j}" for j in range(len(self.leaf_gradients))],
            sum_cts=[f"G{j}" for j in range(len(seg.sums))],
            made=[step.out for step in seg.steps if step.kind != _SUM])
        # A chunk runs in blocks of BLOCK elements, record by record: each record's
        # loop over a block is as small as the kernel's own loop, which LLVM
        # vectorises as well; a block's arrays stay in the cache.  (One loop over the
        # elements doing every record ran ~1.8x slower per element: too large a body.)
        # Indices are unsigned: Numba then skips the negative-index wraparound, which
        # kept LLVM from vectorising.  The block's arrays are allocated here, so that
        # LLVM knows no other array is them (passed in, they kept it from vectorising).
        names.head = [f"    lo = _u(c * {CHUNK})",
                      f"    hi = _u(min(c * {CHUNK} + {CHUNK}, size))"]
        names.blocks = ["    for b in range(lo, hi, _u(BLOCK)):",
                        "        m = min(_u(BLOCK), hi - b)"]
        return names

    def _values_source(self, names):
        """``_s{n}_values``: the values of one chunk, the sums' terms stored."""
        n, steps = self.n, self.segment.steps
        body, term = [], 0
        for k, step in enumerate(steps):
            args = [self._element(op, k, m) for m, op in enumerate(step.operands)]
            if step.kind == _MAP:
                body += _loop([f"e{step.out}[i] = _to_float(_k{n}_{k}({', '.join(args)}))"])
            elif step.kind == _SQUARE:
                square = [f"e{step.out}[i] = {args[0]} * {args[0]}"]
                if step.out in self.checked:
                    # (a bool or-ed up: a float sum made each iteration wait)
                    square.append(f"check = check | (e{step.out}[i] - e{step.out}[i] != 0.0)")
                body += _loop(square)
            else:
                body += _loop([f"T{term}[b + i] = {args[0]}"])
                term += 1
        params = ", ".join(["c", "size"] + names.arrays + names.scalars + names.terms)
        lines = [f"def _s{n}_values({params}):"] + names.head + ["    check = False"]
        lines += [f"    e{slot} = _empty(BLOCK)" for slot in names.made] + names.blocks + body
        return lines + ["    return _NAN if check else 0.0", ""]

    def _gradients_source(self, names):
        """``_s{n}_gradients``: the gradients of one chunk: the values again, with each
        kernel's partials (its dual-number call, as its partials loop makes it), then
        the backward pass (:meth:`_backward`)."""
        n, steps = self.n, self.segment.steps
        setup, body, partials = [], [], []
        for k, step in enumerate(steps):
            args = [self._element(op, k, m) for m, op in enumerate(step.operands)]
            if step.kind == _MAP:
                count = len(step.partial)
                for j in range(count):
                    unit = ", ".join("1.0" if m == j else "0.0" for m in range(count))
                    setup.append(f"    seed{k}_{j} = ({unit},)")
                call = []
                for m, (arg, operand) in enumerate(zip(args, step.operands)):
                    if m in step.active:
                        dual = f"_dual({arg}, seed{k}_{step.partial.index(m)})"
                        if operand[0] == SCALAR_SLOT:
                            setup.append(f"    d{k}_{m} = {dual}")        # seeded once
                            dual = f"d{k}_{m}"
                        call.append(dual)
                    else:
                        call.append(arg)
                partials += [f"p{k}_{j}" for j in range(count)]
                body += _loop([f"r = _k{n}_{k}({', '.join(call)})",
                               f"e{step.out}[i] = _to_float(_value(r))",
                               f"p = _partials(r, seed{k}_0)"]
                              + [f"p{k}_{j}[i] = p[{j}]" for j in range(count)])
            elif step.kind == _SQUARE:
                body += _loop([f"e{step.out}[i] = {args[0]} * {args[0]}"])
        body += self._backward()
        params = ", ".join(["c", "size", "dots"] + names.sum_cts + names.arrays + names.scalars
                           + names.grads + names.flags)
        lines = [f"def _s{n}_gradients({params}):"] + names.head + setup
        lines += [f"    rows = _empty(({len(self.dots)}, {CHUNK}))"]
        lines += [f"    {name} = _empty(BLOCK)" for name in
                  [f"e{slot}" for slot in names.made] + [f"c{slot}" for slot in names.made]
                  + partials]
        lines += names.blocks + body
        return lines + [f"    for d in range({len(self.dots)}):",
                        "        dots[c, d] = _lane_sum(rows[d], hi - lo)",
                        "    return 0.0", ""]

    def _backward(self):
        """A block's backward pass, last record first.  A slot's first cotangent is
        kept as it is, later ones added, as the replay's accumulate does; a leaf's are
        added into its gradient so far (R, F: whether one reached it) in the replay's
        order."""
        steps, started = self.segment.steps, set()

        def contribute(slot, ct):
            if slot in self.leaf_gradients:
                j = self.leaf_gradients.index(slot)
                if slot in started:
                    return f"R{j}[b + i] = R{j}[b + i] + {ct}"
                started.add(slot)
                return f"R{j}[b + i] = (R{j}[b + i] + {ct}) if F{j} else {ct}"
            if slot in started:
                return f"c{slot}[i] = c{slot}[i] + {ct}"
            started.add(slot)
            return f"c{slot}[i] = {ct}"

        body, dot = [], 0
        sum_number = {slot: j for j, slot in enumerate(self.segment.sums)}
        for k in reversed(range(len(steps))):
            step = steps[k]
            if step.out not in self.reached:
                continue
            if step.kind == _SUM:
                body += _loop([contribute(step.operands[0][1], f"G{sum_number[step.out]}")])
                continue
            g = f"c{step.out}[i]"
            if step.kind == _SQUARE:
                x = self._element(step.operands[0], k, 0)
                body += _loop([contribute(step.operands[0][1], f"_product({g}, 2.0 * {x})")])
                continue
            statements = []
            for i, slot in zip(step.active, step.parents):
                ct = f"_product({g}, p{k}_{step.partial.index(i)}[i])"
                if step.operands[i][0] == SCALAR_SLOT:
                    statements.append(f"rows[{dot}, b - lo + i] = {ct}")
                    dot += 1
                else:
                    statements.append(contribute(slot, ct))
            body += _loop(statements)
        return body

    def _drivers_source(self, names):
        """``_s{n}_forward`` and ``_s{n}_backward``: the chunks in order on one
        thread, or shared by workers, and their checks and sums."""
        n, arrays, scalars = self.n, names.arrays, names.scalars
        flat = [f"    {a} = {a}.reshape(size)" for a in arrays]
        values_args = ", ".join(arrays + scalars + names.terms)
        gradient_args = ", ".join(names.sum_cts + arrays + scalars + names.grads + names.flags)
        lines = self._threads_source(names, values_args, gradient_args) if self.threaded else []

        def chunks(threads, one_thread):
            # the chunks in order on this thread, or shared by the workers
            if not self.threaded:
                return ["    " + line for line in one_thread]
            return (["    if workers > 1:", "        " + threads, "    else:"]
                    + ["        " + line for line in one_thread])

        count = [f"    nchunks = (size + {CHUNK - 1}) // {CHUNK}"]
        checked = ["    check = 0.0", "    for c in range(nchunks):", "        check += checks[c]"]
        lines += [f"def _s{n}_forward({', '.join(['workers', 'size'] + arrays + scalars)}):"]
        lines += flat + count
        lines += [f"    {t} = _empty(size)" for t in names.terms]
        lines += ["    checks = _empty(nchunks)"]
        lines += chunks(f"_s{n}_values_threads(workers, nchunks, size, checks, {values_args})",
                        ["for c in range(nchunks):",
                         f"    checks[c] = _s{n}_values(c, size, {values_args})"])
        lines += checked
        lines += [f"    return (check, {''.join(f'_numpy_sum({t}), ' for t in names.terms)})", ""]
        lines += [f"def _s{n}_backward({', '.join(['workers', 'size', gradient_args])}):"]
        lines += flat + count
        lines += [f"    dots = _empty((nchunks, {max(len(self.dots), 1)}))",
                  "    checks = _empty(nchunks)"]
        lines += chunks(f"_s{n}_gradients_threads(workers, nchunks, size, checks, dots, "
                        f"{gradient_args})",
                        ["for c in range(nchunks):",
                         f"    checks[c] = _s{n}_gradients(c, size, dots, {gradient_args})"])
        lines += checked
        totals = []
        for d in range(len(self.dots)):
            # the chunks' sums added in order, as nan_safe_dot adds them
            lines += [f"    total{d} = 0.0", "    for c in range(nchunks):",
                      f"        total{d} += dots[c, {d}]"]
            totals.append(f"total{d}, ")
        return lines + [f"    return (check, {''.join(totals)})", ""]

    def _threads_source(self, names, values_args, gradient_args):
        """The chunk functions guarded, and the drivers that share chunks between
        workers (taken from a queue as threads get free: kernel/threads.py)."""
        n = self.n
        lines = self._guarded(f"_s{n}_values", ["c", "size"] + names.arrays + names.scalars
                              + names.terms)
        lines += self._guarded(f"_s{n}_gradients", ["c", "size", "dots"] + names.sum_cts
                               + names.arrays + names.scalars + names.grads + names.flags)
        for name, args in (("values", values_args), ("gradients", f"dots, {gradient_args}")):
            lines += [f"def _s{n}_{name}_threads(workers, nchunks, size, checks, {args}):",
                      "    queue = _zeros(1, _int64)",
                      "    for t in _prange(workers):",
                      "        c = _next_chunk(queue)",
                      "        while c < nchunks:",
                      f"            checks[c] = _s{n}_{name}_guarded(c, size, {args})",
                      "            c = _next_chunk(queue)", ""]
        return lines

    @staticmethod
    def _guarded(name, params):
        # A worker's exception would be lost in a parallel region (and a try there
        # keeps Numba from parallelising): each chunk reports one as nan.
        pack, call = packed_call(name, params)
        return [f"def {name}_guarded({', '.join(params)}):", f"    {pack}", "    try:",
                f"        return {call}", "    except Exception:", "        return _NAN", ""]

    def functions(self):
        """The names of the helpers to compile, each with whether it is parallel."""
        n = self.n
        threads = [(f"_s{n}_values_guarded", False), (f"_s{n}_gradients_guarded", False),
                   (f"_s{n}_values_threads", True), (f"_s{n}_gradients_threads", True)]
        return [(f"_s{n}_values", False), (f"_s{n}_gradients", False)] + \
            (threads if self.threaded else []) + \
            [(f"_s{n}_forward", False), (f"_s{n}_backward", False)]
