"""A replay as Python source: a traced program's forward and backward passes written
out as two straight-line functions, compiled once for a program replayed often
(:data:`.policy.GENERATE_AFTER` times: compiling costs ~150 µs per record).

Interpreting a tape costs ~1 µs per record (unpacking the record, binding arguments,
appending a new record, then the backward loop's dispatch); for the small programs
where that matters (a kernel's sum and a few scalar operations) it is most of the
time.  The generated functions do exactly what :func:`.tape.backward` and the rules do
for those records — the same functions called on the same arguments, cotangents added
up by the same :func:`.tape.accumulate` — without the interpretation.  Values live in
the tape's ``values`` list (slot ``n`` is ``values[n]``); constants, functions and
vjps are names bound in the functions' namespace.

    forward(tape, values) -> residuals     appends each record's value; runs the
                                           guards; residuals: fresh vjps of the fast
                                           rules and local partials of x + y, x * y
    backward(values, grads, owned, residuals) -> grads

A staged program's plan (:mod:`.staged_plan`: the records that run, its elementwise
loops) is written out as one function, ``forward(values)``.
"""
import numpy as np

from ..core.tape import (LinearRecord, RuleRecord, SparseCotangent, accumulate,
                         traced_positions, underflow_ignored)


def generate(records, guards, leaves, output):
    """``(forward, backward)`` for ``records`` (whose slots follow the ``leaves``
    input slots in order), ``guards`` (``(record count, check)``, ``check(values)``
    raising when an outcome differs, in trace order) and the ``output`` slot (None
    when the output is a constant)."""
    namespace = {"ndarray": np.ndarray, "Sparse": SparseCotangent, "accumulate": accumulate}
    forward = ["def forward(tape, values):", "    append = values.append"]
    residuals = []
    bodies = []                 # per record: (out slot, parents, backward lines)
    for k, record in _with_guards(records, guards, namespace, forward):
        out = leaves + k
        if type(record) is LinearRecord:
            bodies.append(_linear(k, record, out, namespace, forward, residuals))
        else:
            bodies.append(_general(k, record, out, namespace, forward, residuals))
    forward.append(f"    return ({''.join(name + ', ' for name in residuals)})")

    backward = ["def backward(values, grads, owned, residuals):"]
    if residuals:
        backward.append(f"    {''.join(name + ', ' for name in residuals)}= residuals")
    reaching = {output}
    for out, parents, lines in reversed(bodies):
        if out not in reaching:
            continue                    # no cotangent can reach this record
        reaching.update(parents)
        backward += [f"    g = grads[{out}]", "    if g is not None:",
                     f"        grads[{out}] = None"] + lines
    backward.append("    return grads")
    source = "\n".join(forward) + "\n\n" + "\n".join(backward) + "\n"
    exec(compile(source, "<dualbcast replay>", "exec"), namespace)
    return namespace["forward"], namespace["backward"]


def generate_staged(plan, guards, records):
    """``forward(values)`` for a staged program's :class:`.staged_plan.Plan` (of
    ``records`` records): ``values`` extended by a slot per record, each step's values
    written into their slots, the guards run where the trace met them.  A group runs as
    its loop where it can (underflow ignored: a loop cannot detect it), else as its
    records' calls."""
    namespace = {"nones": [None] * records, "underflow_ignored": underflow_ignored}
    forward = ["def forward(values):", "    values.extend(nones)",
               "    fast = underflow_ignored()"]
    guards = list(enumerate(guards))
    rename = plan.rename

    def guards_before(position):
        while guards and guards[0][1][0] <= position:
            number, (_, check) = guards.pop(0)
            namespace[f"guard{number}"] = check
            forward.append(f"    guard{number}(values)")

    for kind, step, position in plan.steps:
        guards_before(position)
        if kind == "record":
            call = _call(step.out, step, namespace, rename)[0]
            forward.append(f"    values[{step.out}] = {call}")
            continue
        indent = "    "
        if step.fused:
            namespace[f"group{step.records[0].out}"] = step
            forward.append(f"    if not (fast and group{step.records[0].out}(values)):")
            indent += "    "
        for record in step.records:
            call = _call(record.out, record, namespace, rename)[0]
            forward.append(f"{indent}values[{record.out}] = {call}")
    guards_before(float("inf"))
    exec(compile("\n".join(forward) + "\n", "<dualbcast staged replay>", "exec"), namespace)
    return namespace["forward"]


def _with_guards(records, guards, namespace, forward):
    """``(k, record)`` for each record, with the line calling each guard appended to
    ``forward`` where the trace met it (before the record it preceded)."""
    guards = list(guards)
    for k in range(len(records) + 1):
        while guards and guards[0][0] == k:
            name = f"guard{len(guards)}"
            namespace[name] = guards.pop(0)[1]
            forward.append(f"    {name}(values)")
        if k < len(records):
            yield k, records[k]


def _call(k, record, namespace, rename=None):
    """``(source of the call computing the record's value, its argument list,
    its keywords)``, the function and constants bound in ``namespace``; its traced
    arguments read from the slots ``rename`` gives, if given (a staged plan's: a
    record computing the same as another reads that one's)."""
    namespace[f"f{k}"] = record.op if type(record) is LinearRecord else record.func
    traced = traced_positions(record)
    if rename:
        traced = {i: rename.get(slot, slot) for i, slot in traced.items()}
    args = ", ".join(_arguments(k, record.args, traced, namespace))
    keywords = ""
    if type(record) is not LinearRecord and record.kwargs:
        namespace[f"w{k}"] = record.kwargs
        keywords = f", **w{k}"
    return f"f{k}({args}{keywords if args else keywords[2:]})", args, keywords


def _arguments(k, saved, traced, namespace):
    """Source for each argument: ``values[slot]`` for a traced one, else a constant
    bound as ``c{k}_{i}``."""
    exprs = []
    for i, value in enumerate(saved):
        if i in traced:
            exprs.append(f"values[{traced[i]}]")
        else:
            namespace[f"c{k}_{i}"] = value
            exprs.append(f"c{k}_{i}")
    return exprs


def _general(k, record, out, namespace, forward, residuals):
    parents, argnums = record.parents, record.argnums
    call, args, keywords = _call(k, record, namespace)
    if type(record) is RuleRecord:
        # A fast rule runs its kernel and hands back fresh vjps.
        namespace[f"p{k}"] = parents
        forward.append(f"    value, j{k} = f{k}(tape, [{args}], p{k})")
        forward.append("    append(value)")
        residuals.append(f"j{k}")
        vjp = f"j{k}[{{i}}]"
    else:
        forward.append(f"    append({call})")
        for i in argnums:
            namespace[f"v{k}_{i}"] = record.vjps[i]
        vjp = f"v{k}_{{i}}"
    lines = []
    for slot, i in zip(parents, argnums):
        lines += [f"        ct = {vjp.format(i=i)}(g, values[{out}]{', ' if args else ''}"
                  f"{args}{keywords})",
                  f"        if grads[{slot}] is None and type(ct) is not Sparse:",
                  f"            grads[{slot}] = ct",
                  "        else:",
                  f"            accumulate(grads, owned, values, {slot}, ct)"]
    return out, parents, lines


def _linear(k, record, out, namespace, forward, residuals):
    # A scalar x + y, x - y, x * y: local partials from the forward pass, and a
    # backward that only multiplies (and skips a zero cotangent: NaN-safe).
    parents, partials_of, argnums = record.parents, record.partials_of, record.argnums
    call, args, _ = _call(k, record, namespace)
    forward.append(f"    append({call})")
    if type(partials_of) is tuple:
        namespace[f"q{k}"] = partials_of            # constant: nothing to form
    else:
        namespace[f"m{k}"] = partials_of
        forward.append(f"    q{k} = m{k}({args})")
        residuals.append(f"q{k}")
    lines = ["        if g != 0:"]
    for slot, i in zip(parents, argnums):
        lines += [f"            ct = g * q{k}[{i}]",
                  f"            if ct != ct and q{k}[{i}] == 0:",     # (as backward's)
                  "                ct = type(ct)(0.0)",
                  f"            current = grads[{slot}]",
                  "            if current is None:",
                  f"                grads[{slot}] = ct",
                  "            elif type(current) is not ndarray:",
                  f"                grads[{slot}] = current + ct",
                  "            else:",
                  f"                accumulate(grads, owned, values, {slot}, ct)"]
    return out, parents, lines
