"""A staged program compiled whole: its kernels' sum loops, the scalar arithmetic on
what they give and the elementwise passes over their gradients, as one Numba function.

A Hessian-vector product of the EAM energy, ``db.jvp(db.grad(lambda x: F(rho.sum(x))),
(x,), (v,))``, stages as one second-order loop of the kernel (the density, its tangent,
the gradient and its tangent), some thirty scalar operations of the embedding's chain
rule and one pass that scales and adds the two gradients: replayed as generated Python
code (:mod:`.codegen`), some forty-five calls around a loop of under a microsecond at
10^2 elements.  A program made only of

- kernel sum loops (``k.sum`` and its derivatives' loops: ``sum_partials``,
  ``sum_tangent``, ``sum_partials_tangent``) of the program's inputs and constants,
  float64, each gradient stored whole (an array argument) or summed in a register (a
  scalar argument), and the items of what they give;
- float64 scalar arithmetic whose rule has an exact scalar form (``+ - * / **``,
  negation) and NaN-safe products of scalars;
- NaN-safe products of a scalar or an array and an array the program computed, and
  their sums (``nan_safe_sum``), over one shape and below
  ``config.parallel_threshold`` elements (the replay runs larger passes on threads);
- no guards, and outputs the program computes (or inputs),

is written out as one function, as a gradient program is (:mod:`.fusion`, whose
:class:`~.fusion.ProgramWriter` and kernel loops' calls it shares): the kernels' own
compiled loops, called; the scalar code from the rules' forms; the passes from the
rules' per-element products (:mod:`.fused_runtime`).  Exactly the replay's bits.  A
non-finite value it computes hands the call back to the generated replay, which meets
NumPy's warnings and errors as a trace would; so does a kernel whose names changed (its
loop is compiled afresh: this function called the old one, and is dropped).
"""
import operator

import numpy as np

from ..config import config
from ..core.box import _as_kind
from ..core.tape import LinearRecord
from ..kernel.loops import REGISTER, STORE
from ..rules.common import nan_safe_product, nan_safe_sum
from ..rules.fast_nested import KernelLoop
from ..kernel.arguments import read_only_alias
from .fused_function import FusedCode
from .fused_kernels import _loop, _operands
from .fused_runtime import nan_safe_products, nan_safe_scaled, nan_safe_scaled_sum
from .fused_source import NotFusable, branch_free, require
from .fusion import ProgramWriter, described as _described

_FLOAT64 = np.dtype(np.float64)
_SCALARS = (float, np.float64)
_PASSES = {"_nan_safe_scaled": nan_safe_scaled, "_nan_safe_products": nan_safe_products,
           "_nan_safe_scaled_sum": nan_safe_scaled_sum}


def plan_staged_fusion(plan, values, leaves, outputs, guards, shapes):
    """The :class:`StagedFusion` of a staged program (its :class:`.staged_plan.Plan`,
    with the trace's ``values``; ``outputs``: where a replay finds each output leaf,
    see :func:`.staged._output`); :class:`NotFusable`, saying why, if it is not of the
    kind described above."""
    if guards:
        raise NotFusable("control flow on traced values (the fused function has no guards)")
    if shapes:
        raise NotFusable("arrays whose shapes follow integer inputs")
    return StagedWriter(plan, values, leaves, outputs).fusion()


class StagedWriter(ProgramWriter):
    """Writes a staged program's fused function: its forward pass, step by step."""

    def __init__(self, plan, values, leaves, outputs):
        super().__init__(values, leaves)
        self.namespace.update(_PASSES, _full=np.full)
        self.rename = plan.rename
        # By slot: its name in the source and its kind (None: a float64 scalar; a
        # shape: a 1-d float64 array of that many elements, the value's shape), or the
        # items of a kernel loop's tuple as (name, kind) pairs.
        self.name, self.kind, self.items = {}, {}, {}
        self.dependencies = []      # the kernels' names, checked before each run
        self._take_leaves()
        for record in _records(plan):
            try:
                self._write(record)
            except NotFusable as refused:
                raise NotFusable(str(refused) or f"{_described(record)} is not of a "
                                 f"fusable kind (kernel sum loops, float64 scalar "
                                 f"arithmetic, NaN-safe products of their gradients)") from None
        self.outputs = self._outputs(outputs)

    def _take_leaves(self):
        for leaf in range(self.leaves):
            value = self.values[leaf]
            if type(value) is np.ndarray:
                require(value.dtype == _FLOAT64, "an input is not float64")
                self.params.append(f"x{leaf}")      # (kernels' operands only)
            else:
                require(type(value) in _SCALARS, "an input is not a float64 scalar")
                self.params.append(f"v{leaf}")
                self.name[leaf], self.kind[leaf] = f"v{leaf}", None

    def fusion(self):
        returned = ", ".join(name for _, name, _ in self.outputs)
        lines = [f"def fused({', '.join(['workers', 'N', 'K'] + self.params + self._shared())}):"]
        lines += ["    " + line for line in self.head + self.forward]
        lines.append(f"    return ({self.bad} == 0.0, {returned})")
        source = "".join(helper for helper, _ in self.helpers) + "\n".join(lines) + "\n"
        return StagedFusion(self, source)

    def _shared(self):
        return [name for name, _ in self.shared.values()] + self.operand_params

    # ------------------------------------------------------------------ records

    def _write(self, record):
        if type(record) is LinearRecord:
            return self._scalar(record, record.op)
        require(not record.kwargs and not record.others)
        func = record.func
        if type(func) is KernelLoop:
            return self._kernel_loop(record)
        if func is operator.getitem:
            return self._item(record)
        if func is nan_safe_product or func is nan_safe_sum:
            return self._nan_safe(record)
        if func is _as_kind:
            return self._same_value(record)
        return self._scalar(record, func)

    def _same_value(self, record):
        # A derivative handed out as its argument's kind (a float for a float): the
        # same float64, of another type (the outputs are converted to the trace's).
        name, kind = self._operand(record, 0, record.args[0])
        require(kind is None and type(self.values[record.out]) in _SCALARS)
        self.name[record.out], self.kind[record.out] = name, None

    def _slot(self, record, i):
        """The slot record's ``i``-th argument is read from, or None for a constant."""
        traced = dict(zip(record.argnums, record.parents))
        slot = traced.get(i)
        return None if slot is None else self.rename.get(slot, slot)

    def _operand(self, record, i, value):
        """``(name, kind)`` of record's ``i``-th argument: a value the program has, or a
        number, passed in ``K``."""
        slot = self._slot(record, i)
        if slot is None:
            return self.constant(record.out, i, value), None
        require(slot in self.name)
        return self.name[slot], self.kind[slot]

    def _scalar(self, record, op):
        # x + y, x - y, x * y, x / y, x ** y, -x of float64 scalars: the rule's form,
        # which is the IEEE operation NumPy performs (the C library's pow for **).
        # Not np.power(x, y) called as a ufunc: its loop takes fast paths (y = 0.5, 2,
        # -1) that round otherwise than pow, where the scalar ** of NumPy and Python
        # calls pow.
        _, form = self.form(op)
        require(form.partials is not None or form.cotangents is not None)
        require(op is not np.power and op is not np.float_power,
                "numpy.power called as a ufunc (its fast paths round otherwise than pow)")
        self._scalar_value(record, form.value)

    def _scalar_value(self, record, template):
        out = record.out
        require(type(self.values[out]) in _SCALARS and len(record.args) <= 2)
        operands = [self._operand(record, i, value) for i, value in enumerate(record.args)]
        require(all(kind is None for _, kind in operands))
        names = dict(zip("xy", (name for name, _ in operands)))
        self._assign(out, f"v{out}", branch_free(template.format(**names)))

    def _assign(self, slot, name, expression, kind=None):
        self.forward.append(f"{name} = {expression}")
        if kind is None:
            self.check(self.forward, name)
        self.name[slot], self.kind[slot] = name, kind

    def _item(self, record):
        parent, index = self._slot(record, 0), record.args[1]
        require(parent in self.items and type(index) is int)
        self.name[record.out], self.kind[record.out] = self.items[parent][index]

    def _nan_safe(self, record):
        """A NaN-safe product (two operands) or sum of two (four: ``a * x + b * y``):
        of scalars, the rule's per-element product; with arrays, a pass over them."""
        out = record.out
        operands = [self._operand(record, i, value) for i, value in enumerate(record.args)]
        kinds = [kind for _, kind in operands]
        names = [name for name, _ in operands]
        if all(kind is None for kind in kinds):
            require(type(self.values[out]) in _SCALARS)
            products = [f"_product({a}, {b})" for a, b in zip(names[0::2], names[1::2])]
            return self._assign(out, f"v{out}", " + ".join(products))
        shapes = {kind for kind in kinds if kind is not None}
        answer = self.values[out]
        require(len(shapes) == 1 and type(answer) is np.ndarray and answer.dtype == _FLOAT64
                and answer.shape in shapes,
                "a NaN-safe product of arrays of other shapes, or not float64")
        require(answer.size < config.parallel_threshold,
                f"an elementwise pass over {answer.size} elements (the replay runs it on "
                f"threads)")
        if len(operands) == 2:
            scalars = [kind is None for kind in kinds]
            if any(scalars):
                scalar, array = (names[0], names[1]) if scalars[0] else (names[1], names[0])
                call = f"_nan_safe_scaled({scalar}, {array})"
            else:
                call = f"_nan_safe_products({names[0]}, {names[1]})"
        else:
            require(kinds[0] is None and kinds[2] is None and None not in (kinds[1], kinds[3]))
            call = f"_nan_safe_scaled_sum({', '.join(names)})"
        name, bad, total = self.fresh("a"), self.fresh("bad"), self.fresh("bad")
        self.forward += [f"{name}, {bad} = {call}", f"{total} = {self.bad} + {bad}"]
        self.bad = total
        self.name[out], self.kind[out] = name, answer.shape

    def _kernel_loop(self, record):
        """A kernel's sum loop, called: its totals (the sum, its tangent, the register
        gradients and theirs) and its stored gradients (and their tangents) as the
        items of the record's value."""
        call, k, out = record.func, record.out, record.out
        prepared = call.prepared
        if prepared is not None:
            prepared = prepared.prepared_for([self.values[self._slot(record, i)] if
                                              self._slot(record, i) is not None else value
                                              for i, value in enumerate(record.args)])
        loop = None if prepared is None else prepared.sum_loop()
        require(loop is not None and loop.dtype == _FLOAT64,
                f"{_described(record)}: not a kernel's sum loop over float64")
        if not loop.source.endswith(".py"):
            self.cacheable = False      # (its loop's code is not named by a file)
        require(all(slot == self.rename.get(slot, slot) for slot in record.parents))
        operands = _operands(self, k, record, loop)
        self.kernels.append(loop)
        self.dependencies.append(prepared.dependencies)
        channels = prepared.loop.spec.channels     # (the value, its tangents' directions)
        stored = []
        for kind, shape, dtype, is_array in loop.gradients:
            require(dtype == _FLOAT64 and (kind == REGISTER or kind == STORE and is_array),
                    f"{_described(record)}: a gradient added up into its argument's "
                    f"shape (a broadcast array)")
            if kind == STORE:
                stored.append(shape)
        buffers = []            # per channel, per stored gradient: (name, kind)
        for _ in range(channels):
            for shape in stored:
                name = self.fresh("b")
                self.forward.append(f"{name} = _empty({self.int_name(int(np.prod(shape)))})")
                buffers.append((name, shape))
        sums = _loop(self, k, out, loop, operands, [name for name, _ in buffers],
                     loop.totals_width - 1)
        for name in sums[1:]:
            self.check(self.forward, name)
        totals = [(name, None) for name in sums]
        if call.loop == "sum":
            self.name[out], self.kind[out] = sums[0], None
            return
        items = totals[:channels]          # the value (and its tangent)
        columns = iter(totals[channels:])  # the register gradients, then their tangents
        stored_items = iter(buffers)
        for _ in range(channels):
            for kind, shape, _, is_array in loop.gradients:
                if kind == STORE:
                    items.append(next(stored_items))
                elif is_array:          # (an array broadcast whole: its sum, everywhere)
                    name = self.fresh("b")
                    self.forward.append(f"{name} = _full({self.int_name(int(np.prod(shape)))}, "
                                        f"{next(columns)[0]})")
                    items.append((name, shape))
                else:
                    items.append(next(columns))
        self.items[out] = items

    def _outputs(self, outputs):
        """Per output leaf the program computes: ``(slot, name, kind)``."""
        returned = []
        for output in outputs:
            if output[0] != "slot" or output[1] < self.leaves:
                continue                # (a constant or an input: the replay's own)
            slot = output[1]
            require(slot in self.name, "an output is not a scalar or an array")
            returned.append((slot, self.name[slot], self.kind[slot]))
        require(returned, "no output computed")
        return returned


def _records(plan):
    """The plan's records in the order it runs them (a group's one after another)."""
    for kind, step, _ in plan.steps:
        if kind == "record":
            yield step
        else:
            yield from step.records


class StagedFusion(FusedCode):
    """A fused staged program: ``fusion(values)`` writes the outputs it computes into
    their slots of ``values`` (the inputs, extended) and gives True, or None when the
    replay must run instead."""

    def __init__(self, writer, source):
        super().__init__(source, writer.namespace, writer.kernels, writer.kernel_sources,
                         writer.ints, writer.floats,
                         [function for _, functions in writer.helpers for function in functions],
                         writer.threaded, writer.cacheable, "a fused staged program")
        self.leaves = writer.leaves
        self.array_leaves = [leaf for leaf in range(writer.leaves)
                             if type(writer.values[leaf]) is np.ndarray]
        self.shared = [value for _, value in writer.shared.values()]
        self.transformed = writer.transformed
        self.dependencies = writer.dependencies
        # per output: (slot, the type a replay gives: np.float64 or float, or a shape)
        self.outputs = [(slot, shape if shape is not None else type(writer.values[slot]))
                        for slot, _, shape in writer.outputs]
        self.slots = len(writer.values)

    def current(self):
        """Whether every kernel still runs the code its loop was compiled from."""
        return all(dependencies.unchanged() for dependencies in self.dependencies)

    def _runner(self, function):
        names = {"function": function, "ints": self.ints, "floats": self.floats,
                 "read_only_alias": read_only_alias, "fusion": self,
                 "nones": [None] * (self.slots - self.leaves)}
        lines = ["def run(values, workers):"]
        params = ["workers", "ints", "floats"]
        for leaf in range(self.leaves):
            if leaf in self.array_leaves:
                # (read-only: the same Numba type as writeable, or it compiles again)
                lines += [f"    a{leaf} = values[{leaf}]", f"    if not a{leaf}.flags.writeable:",
                          f"        a{leaf} = read_only_alias(a{leaf})"]
                params.append(f"a{leaf}")
            else:
                params.append(f"float(values[{leaf}])")
        for k, value in enumerate(self.shared):
            names[f"s{k}"] = value
            params.append(f"s{k}")
        if self.transformed:
            lines += ["    operands = []", "    fusion.transformed_operands(values, operands)"]
            params.append("*operands")
        lines += [f"    r = function({', '.join(params)})", "    if not r[0]:",
                  "        return None", "    values.extend(nones)"]
        for n, (slot, kind) in enumerate(self.outputs):
            if type(kind) is tuple:
                names[f"shape{n}"] = kind
                lines.append(f"    values[{slot}] = r[{n + 1}].reshape(shape{n})")
            else:
                names[f"kind{n}"] = kind
                lines.append(f"    values[{slot}] = kind{n}(r[{n + 1}])")
        lines.append("    return True")
        exec(compile("\n".join(lines) + "\n", "<dualbcast fused staged call>", "exec"), names)
        return names["run"]
