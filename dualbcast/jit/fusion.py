"""A replayed program compiled whole: kernel sums and the scalar code around them as
one Numba function.

A small gradient such as the EAM energy at 10^2 elements, ``p = rho.sum(x); p ** 2 +
p ** 3 + p ** 4 / 4``, is mostly Python: even replayed as generated code
(:mod:`.codegen`) it is twenty calls — the kernel's prepared call,
six scalar operations and their vjps, the gradient's scaling — around a loop of well
under a microsecond.  A program made only of

- kernel sums ``k.sum(...)`` whose arguments are the differentiated arguments or
  constants, below the size where their loops run on several threads
  (``config.parallel_threshold``: larger loops dwarf the Python), every gradient
  float64 and either stored whole (an array argument) or summed in a register (a
  scalar argument);
- scalar ``x + y``, ``x - y``, ``x * y``, ``x / y``, ``-x`` and ``x ** c`` (``c`` a
  constant) on float64;
- no guards (no control flow on traced values), a float64 scalar output,

is written out as one function: each sum's loop (the kernel's own compiled loop), the
scalar forward pass, and the backward pass with every cotangent in a local variable.
Python is left with the operands, the gradient arrays and one call (~2 µs).

Exactly the replay's bits: the same IEEE operations in the same order (no fast-math;
the chunks' partial sums added up correctly rounded, as ``math.fsum`` does);
``x ** c`` calls the C library's ``pow`` as NumPy does (LLVM would turn ``x ** 2.0``
into ``x * x``, which rounds differently for about 0.1% of inputs).  NumPy warns
about an overflow or an invalid operation in scalar code, so any non-finite scalar, or
a non-finite element of a scaled gradient, hands the call back to the generated
replay, which meets the warning as a trace would.

Compiling costs about a second, so a program is fused only after
:attr:`Program.FUSE_AFTER <.program.Program>` replays, and the function is
cached on disk next to the kernels' loops (its file is named by a hash of its source,
which names the loops' files, which are named by the kernels' fingerprints).
"""
import hashlib
import operator

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..core.operators import OPERATOR_UFUNCS
from ..core.registry import SCALAR_FORMS, SCALAR_UFUNC_VJPS
from ..core.tape import LinearRecord
from ..kernel.cache import load_loop
from ..kernel.loops import REGISTER, STORE
from ..rules.fast import SUM_COTANGENT_FORM, kernel_sum_loop

_FLOAT64 = np.dtype(np.float64)
_SCALARS = (float, np.float64)
_CONSTANTS = (float, int, np.float64)


@intrinsic
def _libm_pow(typingctx, x, y):
    """The C library's ``pow``, as NumPy's scalar power calls it; declared
    ``nobuiltin`` so that LLVM keeps the call (it would rewrite pow(x, 2.0) as x * x)."""
    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        pow_ = cgutils.get_or_insert_function(builder.module,
                                              ir.FunctionType(double, [double, double]), "pow")
        pow_.attributes.add("nobuiltin")
        return builder.call(pow_, args)
    return types.float64(types.float64, types.float64), codegen


@numba.njit(error_model="numpy", cache=True)
def exact_sum(values):
    """``math.fsum(values)`` for finite values whose partial sums stay finite (else
    inf or nan, which a fused program hands back): CPython's algorithm, Shewchuk's
    exact partials, then their sum correctly rounded (half to even)."""
    partials = np.empty(64)     # non-overlapping: at most ~2100 / 53 of them
    n = 0
    for x in values:
        if x - x != 0.0:
            return x - x            # nan: the caller hands the call back
        i = 0
        for j in range(n):
            y = partials[j]
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            if hi - hi != 0.0:
                return hi           # the partial sums overflow: inf (handed back too)
            lo = y - (hi - x)
            if lo != 0.0:
                partials[i] = lo
                i += 1
            x = hi
        n = i
        if x != 0.0:
            partials[n] = x
            n += 1
    hi = 0.0
    if n > 0:
        n -= 1
        hi = partials[n]
        lo = 0.0
        while n > 0:
            x = hi
            n -= 1
            y = partials[n]
            hi = x + y
            lo = y - (hi - x)
            if lo != 0.0:
                break
        # hi + lo is exactly halfway between two doubles only if the partials below
        # do not push it one way: round half to even as fsum does.
        if n > 0 and (lo < 0.0 and partials[n - 1] < 0.0 or
                      lo > 0.0 and partials[n - 1] > 0.0):
            y = lo * 2.0
            x = hi + y
            if y == x - hi:
                hi = x
    return hi


def plan_fusion(records, values, leaves, output, guards):
    """A :class:`Fusion` of the program (its records as one run made them, with that
    run's ``values``), or None if it is not of the kind described above."""
    if guards or output is None or type(values[output]) not in _SCALARS:
        return None
    try:
        return _Writer(records, values, leaves, output).fusion()
    except _NotFusable:
        return None


class _NotFusable(Exception):
    pass


def _require(condition):
    if not condition:
        raise _NotFusable


class _Writer:
    """Writes the fused function's source, record by record."""

    def __init__(self, records, values, leaves, output):
        self.values, self.leaves, self.output = values, leaves, output
        self.namespace = {"pow": _libm_pow,
                          "_exact_sum": exact_sum}
        self.params = []                # the fused function's parameters
        self.forward, self.backward = [], []
        self.kernels = []               # per kernel sum: (inputs, prepared, stored shapes)
        self.array_gradients = {}       # array leaf slot -> its STORE buffers' parameters
        self.buffer_count = 0           # STORE buffers so far (their order: the call's)
        for leaf in range(leaves):
            value = values[leaf]
            if type(value) is np.ndarray:
                _require(value.dtype == _FLOAT64)
            else:
                _require(type(value) in _SCALARS)
                self.params.append(f"v{leaf}")
        for k, record in enumerate(records):
            if type(record) is LinearRecord:
                self._linear(record)
            elif kernel_sum_loop(record.func) is not None:
                self._kernel_sum(k, record)
            else:
                self._scalar(record)

    def fusion(self):
        # Every value that must be finite adds ``value * 0.0`` to ``bad``: nan once
        # one is not.  (One check at the end: a return per check, each building the
        # whole result tuple, made Numba's compile time grow as the square of the
        # program's length, ~50 s for a 32-term fold.)
        lines = [f"def fused({', '.join(self.params)}):", "    bad = 0.0"]
        for line in self.forward:
            lines.append("    " + line)
        # Cotangents: g<slot> and whether one reached the slot yet, h<slot> (a slot no
        # cotangent reaches gets None in the replay: here zeros).
        scalar_slots = [slot for slot in range(len(self.values))
                        if type(self.values[slot]) is not np.ndarray]
        lines += [f"    g{slot} = 0.0; h{slot} = False" for slot in scalar_slots]
        lines.append(f"    g{self.output} = 1.0; h{self.output} = True")
        # An array's cotangent: a<slot> whether one reached it, c<slot> the buffer
        # holding it (the first that reached it: later ones are added into it, as the
        # replay adds them up), w<slot> that buffer's number.
        lines += [f"    a{slot} = False; c{slot} = {buffers[0][0]}; w{slot} = 0.0"
                  for slot, buffers in self.array_gradients.items()]
        for line in reversed(self.backward):        # record by record, last first
            for text in line:
                lines.append("    " + text)
        failed = "(False, 0.0" + ", False, 0.0" * self.leaves + ")"
        lines.append(f"    if bad != 0.0: return {failed}")
        result = [f"v{self.output}"]
        for leaf in range(self.leaves):
            if leaf in self.array_gradients:
                result.append(f"a{leaf}, w{leaf}")
            elif type(self.values[leaf]) is np.ndarray:
                result.append("False, 0.0")        # an array nothing differentiated
            else:
                result.append(f"h{leaf}, g{leaf}")
        lines.append(f"    return (True, {', '.join(result)})")
        scalar_leaves = [slot for slot in scalar_slots if slot < self.leaves]
        return Fusion("\n".join(lines) + "\n", self.namespace, self.kernels, self.leaves,
                      scalar_leaves, type(self.values[self.output]))

    # ------------------------------------------------------------------ records

    def _operand(self, k, i, value, traced):
        if i in traced:
            _require(type(self.values[traced[i]]) in _SCALARS)
            return f"v{traced[i]}"
        _require(type(value) in _CONSTANTS and (type(value) is not int or abs(value) < 2 ** 53))
        name = f"c{k}_{i}"
        self.namespace[name] = float(value)
        return name

    def _form(self, op):
        # The rule's scalar form, declared beside the rule (dualbcast.rules.elementwise).
        try:
            ufunc = OPERATOR_UFUNCS.get(op) if type(op) is not np.ufunc else op
        except TypeError:               # a record's func need not be hashable
            raise _NotFusable from None
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
        self.forward += [f"v{out} = {form.value.format(x=x, y=y)}", f"bad += v{out} * 0.0"]
        names = []
        for j, i in enumerate(argnums):
            _require(form.partials[i] is not None)
            names.append(f"q{out}_{j}")
            self.forward += [f"{names[-1]} = {form.partials[i].format(x=x, y=y)}",
                             f"bad += {names[-1]} * 0.0"]
        lines = [f"if h{out} and g{out} != 0.0:"]
        for slot, name in zip(parents, names):
            lines += [f"    ct = g{out} * {name}"] + ["    " + line for line in _add_scalar(slot)]
        self.backward.append(lines)

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
        self.forward += [f"v{out} = {form.value.format(**names)}", f"bad += v{out} * 0.0"]
        lines = [f"if h{out}:"]
        for slot, i in zip(parents, argnums):
            lines += [f"    ct = {form.cotangents[i].format(g=f'g{out}', **names)}",
                      f"    if ct != ct and g{out} == 0.0: ct = 0.0"]
            lines += ["    " + line for line in _add_scalar(slot)]
        self.backward.append(lines)

    def _kernel_sum(self, k, record):
        out, parents, argnums, saved = record.out, record.parents, record.argnums, record.args
        prepared = kernel_sum_loop(record.func)
        _require(prepared is not None and not record.kwargs and not record.others
                 and not prepared.threaded and prepared.dtype == _FLOAT64)
        traced = dict(zip(argnums, parents))
        inputs = []                     # per argument: a leaf slot, or a constant
        for i, value in enumerate(saved):
            if i in traced:
                _require(traced[i] < self.leaves)     # kernels of the arguments only
                inputs.append(traced[i])
            else:
                inputs.append(_Constant(value))
        operands = [f"o{k}_{m}" for m in range(len(saved))]
        buffers, registers = [], []
        for (slot, i), (kind, _, dtype, is_array) in zip(zip(parents, argnums),
                                                         prepared.gradients):
            _require(dtype == _FLOAT64)
            if kind == STORE and is_array:
                buffers.append((f"b{k}_{len(buffers)}", self.buffer_count))
                self.buffer_count += 1
                self.array_gradients.setdefault(slot, []).append(buffers[-1])
            else:
                _require(kind == REGISTER and not is_array)
                registers.append(slot)
        stored = iter(buffers)
        buffers = [name for name, _ in buffers]
        self.params += operands + buffers
        self.kernels.append((inputs, prepared, _stored_shapes(prepared)))
        self.namespace.update({f"_loop{k}": prepared.loop, f"_shape{k}": prepared.loop_shape,
                               f"_rows{k}": prepared.rows, "_empty": np.empty})
        width, chunks = prepared.totals_width, prepared.nchunks
        # The chunks' sums (row c of t: the sum and the register gradients of chunk c)
        # added up as the replay adds them: one chunk as it is, several exactly.
        total = (lambda column: f"t{k}[0, {column}]") if chunks == 1 else \
            (lambda column: f"_exact_sum(t{k}[:, {column}])")
        self.forward += [f"t{k} = _empty(({chunks}, {width}))",
                         f"r{k} = _empty(({width}, {prepared.chunk_size}))",
                         f"_loop{k}(_shape{k}, 0, {chunks}, _rows{k}, "
                         f"{', '.join(operands + buffers)}, t{k}, r{k})",
                         f"v{out} = {total(0)}",
                         f"bad += v{out} * 0.0"]
        # The sum rule's vjp, from its form (beside the rule): each gradient element
        # times the cotangent, 0 for a zero cotangent; a cotangent of 1 leaves a
        # stored gradient as it is.
        lines = [f"if h{out}:"]
        column = 0
        for slot in parents:
            if slot in registers:
                column += 1
                lines += [f"    ct = {SUM_COTANGENT_FORM.format(x=total(column), g=f'g{out}')}"]
                lines += ["    " + line for line in _add_scalar(slot)]
            else:
                buffer, number = next(stored)
                scaled = SUM_COTANGENT_FORM.format(x=f"{buffer}[i]", g=f"g{out}")
                lines += [f"    if g{out} != 1.0:",
                          "        check = 0.0",
                          f"        for i in range({buffer}.size):",
                          f"            scaled = {scaled}",
                          f"            {buffer}[i] = scaled",
                          "            check += scaled * 0.0      # nan once one is not finite",
                          "        bad += check",
                          f"    if a{slot}:",
                          "        check = 0.0",
                          f"        for i in range({buffer}.size):",
                          f"            total = c{slot}[i] + {buffer}[i]",
                          f"            c{slot}[i] = total",
                          "            check += total * 0.0",
                          "        bad += check",
                          "    else:",
                          f"        c{slot} = {buffer}; w{slot} = {number}.0; a{slot} = True"]
        self.backward.append(lines)


def _add_scalar(slot):
    """Source adding ``ct`` into the cotangent of scalar ``slot`` (the first one is
    kept as it is: None + ct is ct, where 0.0 + -0.0 would not be -0.0)."""
    return ["bad += ct * 0.0",
            f"if h{slot}:",
            f"    g{slot} = g{slot} + ct",
            f"    bad += g{slot} * 0.0",
            "else:",
            f"    g{slot} = ct; h{slot} = True"]


class _Constant:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Fusion:
    """A fused program: ``fusion(values)`` gives ``(value, cotangents by leaf)`` (None
    where no cotangent reached a leaf), or None when the replay must run instead."""

    def __init__(self, source, namespace, kernels, leaves, scalar_leaves, output_type):
        self.source, self.namespace, self.kernels = source, namespace, kernels
        self.output_type = output_type
        self.function = None
        self.scalar_leaves = scalar_leaves     # the function's first parameters
        self.is_array = [leaf not in scalar_leaves for leaf in range(leaves)]
        # Per kernel, whether its loop takes its arguments as they are (1-d float64
        # arrays, Python floats): found at the first call, and true of every later one,
        # whose leaves have the signature's types, shapes and strides (and whose
        # constants are the same objects).
        self.as_they_are = [None] * len(kernels)

    def compile(self):
        """Compile (or load from the disk cache) the fused function."""
        # The source's name (the file's) must change with anything it is compiled
        # from: the loops' files (named by their kernels' fingerprints), and the
        # constants, shapes and row counts bound in its namespace (listed on top).
        loops = "".join(f"# _loop{k}: {prepared.source}\n"
                        for k, (_, prepared, _) in enumerate(self.kernels))
        constants = "".join(f"# {name} = {_exact(value)}\n"
                            for name, value in sorted(self.namespace.items())
                            if type(value) in (float, int, tuple))
        source = "# dualbcast: a fused replay\n" + loops + constants + self.source
        name = hashlib.sha256(source.encode()).hexdigest()[:24]
        module = load_loop(source, self.namespace, "fused", name)
        if module is None:
            exec(compile(source, "<dualbcast fused replay>", "exec"), self.namespace)
            python_function, cache = self.namespace["fused"], False
        else:
            python_function, cache = module.fused, True
        self.function = numba.njit(error_model="numpy", cache=cache)(python_function)

    def __call__(self, values):
        # (loops, not comprehensions: this is most of a small fused call's Python time)
        args = []
        for leaf in self.scalar_leaves:
            args.append(float(values[leaf]))
        gradient_arrays = []
        as_they_are = self.as_they_are
        for k, (inputs, prepared, shapes) in enumerate(self.kernels):
            kernel_args = []
            for item in inputs:
                kernel_args.append(item.value if type(item) is _Constant else values[item])
            if as_they_are[k]:
                args += kernel_args
            else:
                operands = prepared.operands_for(kernel_args)
                as_they_are[k] = all(map(operator.is_, operands, kernel_args))
                args += operands
            for shape in shapes:
                gradient = np.empty(shape)
                gradient_arrays.append(gradient)
                args.append(gradient if len(shape) == 1 else gradient.reshape(-1))
        result = self.function(*args)
        if not result[0]:
            return None
        # per leaf: None where no cotangent reached it, else its float, or for an array
        # the number of the buffer its cotangent was added up in
        grads = []
        for reached, found, is_array in zip(result[2::2], result[3::2], self.is_array):
            grads.append(None if not reached else
                         gradient_arrays[int(found)] if is_array else found)
        return self.output_type(result[1]), grads


def _exact(value):
    return value.hex() if type(value) is float else repr(value)


def _stored_shapes(prepared):
    return tuple(shape for kind, shape, _, is_array in prepared.gradients
                 if kind == STORE and is_array)

