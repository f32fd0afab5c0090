"""The plan of a staged program's replay: which records run, which are the same
computation as another, and which run together as one compiled elementwise loop.

A staged trace records everything its function computed, as JAX's jaxpr does: some
of it twice (a jvp of ``nan_safe_product`` forms the same product for two terms), some
of it unused (a Hessian-vector product records the gradient it differentiates), and
most of it elementwise NumPy calls, a pass over memory each.  Three passes over the
records, in the spirit of XLA's:

- **the same computation** (common subexpressions): a record whose function and
  arguments (its traced ones by slot, its constants by value or identity) are another's
  reuses that record's value;
- **dead records**: a view (a slice, a reshape, a broadcast) or a slice's cotangent
  whose value reaches no output, guard or shape check does not run.  Nothing else is
  dropped, used or not: any other operation may raise or warn as the eager call would
  (a logarithm of 0 under ``np.errstate(divide="raise")``, a singular solve, an index
  out of range);
- **elementwise groups** (:mod:`.elementwise`): float64 records that a compiled loop
  computes per element with NumPy's bits (ufuncs with a scalar form,
  ``nan_safe_product``, slices, a slice's cotangent, ``np.where`` by a mask) and that
  give arrays of one shape, joined into one loop that reads each input once and writes
  only the values used outside it.

What a plan keeps is the records' order, but for one thing: a group runs where its
last record was, and closes as soon as anything else reads one of its values (so that
everything it reads is computed before it, and everything reading it after) -- except
a record that reads only its sums, which waits until the group has closed for another
reason (see :class:`_Grouping`).

Records that the outputs, the guards or the shape checks read (``needed``), and the
records an output is a view of, always run in their own slot: they are neither merged
away nor kept only inside a loop (two outputs never share memory that the eager call's
do not).
"""
import operator
import struct

import numpy as np

from ..core.tape import LinearRecord, traced_positions
from ..rules.common import scattered
from . import policy
from .elementwise import ElementwiseGroup
from .loop_forms import loop_form

# Functions whose records give a view of their first argument (or a copy of it, for a
# reshape of a non-contiguous array) and raise nothing that the signature does not fix.
VIEWS = frozenset({np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis,
                   np.expand_dims, np.squeeze, np.broadcast_to, np.flip, operator.getitem})


class Plan:
    """``steps``: in order, ``("record", record, position)`` and ``("group", group,
    position)`` (``position``: the index of the step's last record among the trace's
    records, where the guards before it run); ``rename``: the slot each traced argument
    is read from (see :func:`_same_computations`); ``removed``: how many records do not
    run (dead or the same as another); ``groups``: the groups compiled as loops."""

    __slots__ = ("steps", "rename", "removed", "groups")

    def __init__(self, steps, rename, removed, groups):
        self.steps, self.rename, self.removed, self.groups = steps, rename, removed, groups

    def release(self):
        """Drop the records (they hold the trace's values) once the replay's code is
        written from them."""
        self.steps = None
        for group in self.groups:
            group.records = None


def plan_records(records, values, leaves, needed, guard_reads):
    """The :class:`Plan` of a staged trace's ``records`` (``values``: the trace's, by
    slot, the first ``leaves`` its inputs; ``needed``: the slots read after the records
    run and by guards; ``guard_reads``: what each guard reads, see :func:`_grouped`)."""
    needed = _with_viewed(records, needed)
    rename, unique = _same_computations(records, needed)
    kept = _live(unique, rename, needed)
    steps, groups = _grouped(kept, rename, values, needed, guard_reads, leaves)
    return Plan(steps, rename, len(records) - len(kept), groups)


def operand_slots(record):
    """The slots ``record`` reads (its differentiated and other traced arguments)."""
    if type(record) is LinearRecord:
        return record.parents
    return record.parents + tuple(slot for _, slot in record.others)


def is_view(record):
    """Whether ``record`` is a view of its first argument, the only one traced, by
    constants (``x[1:, :]``, ``np.reshape(x, shape)``; not ``x[i]`` by a traced index)."""
    if type(record) is LinearRecord or record.argnums != (0,) or record.others:
        return False
    try:
        return record.func in VIEWS
    except TypeError:                   # (a record's function need not be hashable)
        return False


def _with_viewed(records, needed):
    """``needed`` and the slots whose arrays a needed record is a view of."""
    needed = set(needed)
    for record in reversed(records):
        if record.out in needed and is_view(record):
            needed.add(record.parents[0])
    return needed


# ------------------------------------------------------------- the same computation

def _same_computations(records, needed):
    """``(rename, unique)``: ``rename[slot]`` is the slot of the first record computing
    what ``slot``'s record computes; ``unique`` the records that stay."""
    rename, seen, unique = {}, {}, []
    for record in records:
        key = _computation(record, rename)
        if key is not None and record.out not in needed:
            first = seen.get(key)
            if first is not None:
                rename[record.out] = first
                continue
            seen[key] = record.out
        unique.append(record)
    return rename, unique


def _computation(record, rename):
    """What ``record`` computes, as a hashable key (None: not to be compared)."""
    traced = traced_positions(record)
    try:
        arguments = tuple(("slot", rename.get(traced[i], traced[i])) if i in traced
                          else _constant_key(value) for i, value in enumerate(record.args))
        if type(record) is LinearRecord:
            return ("linear", id(record.op), arguments)
        keywords = tuple(sorted((name, _constant_key(value))
                                for name, value in record.kwargs.items()))
        return (id(record.func), arguments, keywords)
    except TypeError:               # (an unhashable constant: compared by identity below)
        return None


_BY_VALUE = (int, bool, str, bytes, type(None), type(Ellipsis), np.dtype, type)


def _constant_key(value):
    """A constant as part of a key: numbers and strings by value (a float by its bits:
    0.0 and -0.0 differ, and NaNs of other signs), slices and tuples by their parts,
    anything else (an array, a function) by identity -- the records keep it alive
    while the plan is made."""
    kind = type(value)
    if kind is float or kind is np.float64 or kind is np.float32:
        return (kind, struct.pack("<d", float(value)))
    if kind in _BY_VALUE or isinstance(value, np.integer) or kind is np.bool_:
        return (kind, value)
    if kind is slice:
        return (slice, _constant_key(value.start), _constant_key(value.stop),
                _constant_key(value.step))
    if kind is tuple or kind is list:
        return (kind,) + tuple(map(_constant_key, value))
    return ("object", id(value))


# ------------------------------------------------------------------- dead records

def _live(records, rename, needed):
    """The records that run: all but the views and slices' cotangents whose values
    reach nothing ``needed`` (see the module's docstring)."""
    live = set(needed)
    kept = []
    for record in reversed(records):
        if record.out in live or not _removable(record):
            kept.append(record)
            live.update(rename.get(slot, slot) for slot in operand_slots(record))
    kept.reverse()
    return kept


def _removable(record):
    """Whether ``record`` may be left out when nothing reads it: a view, or a slice's
    cotangent without repeats (zeros plus the cotangent: nothing overflows)."""
    if is_view(record):
        return True
    return type(record) is not LinearRecord and record.func is scattered \
        and not record.args[2] and not record.others


# ------------------------------------------------------------- elementwise groups

def _grouped(records, rename, values, needed, guard_reads, leaves):
    """``(steps, groups)``: ``records`` in order, elementwise ones joined into groups.
    ``guard_reads``: ``(position, slots)`` of each guard, in order (a guard before
    record ``position`` reads ``slots``)."""
    grouping = _Grouping(rename, values, needed)
    guard_reads = list(guard_reads)
    for record in records:
        position = record.out - leaves
        while guard_reads and guard_reads[0][0] <= position:
            for slot in guard_reads.pop(0)[1]:
                grouping.read_outside(slot)
        grouping.take(record, position)
    grouping.flush()
    for _, slots in guard_reads:
        for slot in slots:
            grouping.read_outside(slot)
    for group in grouping.groups:
        group.finish()
    return ([step for step in grouping.steps if step is not None],
            [group for group in grouping.groups if group.fused])


class _Grouping:
    """The steps of a plan so far: records, and groups of records one loop computes.

    A record that reads only sums of open groups (the energy from the sums of a
    stencil's squares) waits: it is placed after those groups, which stay open to the
    records of their shapes that follow (the backward pass of the same stencil, which
    reads its values again).  So do the records that read what a waiting one computes,
    until a group's record reads it, or a guard: then the groups close and the waiting
    records are placed.  Only the replay's order changes, of operations that write
    nothing but their own slots (an error in a replay traces the call again, which
    meets it as the eager call does)."""

    def __init__(self, rename, values, needed):
        self.rename, self.values, self.needed = rename, values, needed
        self.steps, self.groups = [], []
        self.open_groups = {}       # shape -> the group records of that shape may join
        self.member_of = {}         # slot -> its group
        self.placed = {}            # group -> its step's index in steps
        self.waiting = []           # the steps of the records that wait (see above)
        self.waited = set()         # the slots they compute
        self.awaited = set()        # the groups they wait for

    def flush(self):
        """Close the groups that records wait for, and place those records after them."""
        for group in self.awaited:
            if self.open_groups.get(group.shape) is group:
                del self.open_groups[group.shape]
        self.steps += self.waiting
        self.waiting, self.waited, self.awaited = [], set(), set()

    def _summed_groups(self, slots):
        """The open groups whose sums ``slots`` are, if every slot of an open group
        among them is a sum (else, or if there is none, None)."""
        groups = set()
        for slot in slots:
            group = self.member_of.get(slot)
            if group is None or self.open_groups.get(group.shape) is not group:
                continue                    # (computed before: by a step, a closed group)
            if slot not in group.reductions:
                return None
            groups.add(group)
        return groups or None

    def _wait(self, record, position, slots):
        """``record`` waits (see the class) for the open groups whose sums it reads;
        what else it reads is computed before it: written by its group, which closes
        (a value of a group that closed, of one still open that a waiting record's
        reader takes)."""
        for slot in slots:
            if slot in self.waited:
                continue
            group = self.member_of.get(slot)
            if group is not None and self.open_groups.get(group.shape) is group \
                    and slot in group.reductions:
                self.awaited.add(group)
            else:
                self.read_outside(slot)
        self.waiting.append(("record", record, position))
        self.waited.add(record.out)

    def read_outside(self, slot, reader=None):
        """A value read outside its group: the group writes it, and takes no more
        records (it runs before whatever reads it).  A sum is never read inside: the
        loop adds it up after its elements."""
        if slot in self.waited:
            self.flush()                    # (a waiting record's value is read: placed)
        group = self.member_of.get(slot)
        if group is not None and (group is not reader or slot in group.reductions):
            if slot not in group.reductions:
                group.outputs.add(slot)
            if self.open_groups.get(group.shape) is group:
                del self.open_groups[group.shape]

    def take(self, record, position):
        """Place ``record``: in a group (a new one or an open one of its shape; a sum,
        in the group that computes its operand), or as a step of its own."""
        rename, values = self.rename, self.values
        slots = [rename.get(slot, slot) for slot in operand_slots(record)]
        form = loop_form(record, values)
        if form is not None and form[0] in ("sum", "scatter_add"):
            form = self._sum_joins(record, form)
        elif form is not None and form[0] == "part":
            form = self._part_joins(slots[0], form)
        if form is None:
            summed = self._summed_groups(slots)
            if summed is not None or self.waited.intersection(slots):
                self._wait(record, position, slots)
                return
            for slot in slots:
                self.read_outside(slot)
            self.steps.append(("record", record, position))
            return
        if self.waited.intersection(slots):
            self.flush()                    # (a group's record reads a waiting value)
        offset = form[0] in ("read", "scatter", "gather")
        if offset:
            # (read at an offset or by an index: from memory, never from the loop's own
            # values)
            for slot in slots:
                self.read_outside(slot)
        if form[0] == "read":
            # A slice runs as the view it is too (cheap, and what any reader outside
            # the loop must get: a view, not the loop's copy); the loop reads its base.
            self.steps.append(("record", record, position))
        for slot in slots:
            if slot in getattr(self.member_of.get(slot), "reductions", ()):
                self.read_outside(slot)         # (a sum read: its group closes)
        if form[0] in ("sum", "scatter_add"):
            # (added up where the group runs: its step stays, before whatever read its
            # values since)
            group = self.member_of[slots[0]]
            group.add(record, form, rename, values)
            self.member_of[record.out] = group
            return
        shape = form[2] if form[0] == "kernel" else values[record.out].shape
        group = self.open_groups.get(shape)
        # (a kernel's parts join after it, its group's: room is kept for them)
        room = 1 + (form[1].outputs or 0) if form[0] == "kernel" else 1
        if form[0] != "part" and (
                group is None or len(group.records) + room > policy.LOOP_MAX_RECORDS
                or form[0] == "kernel" and len(group.kernels) >= policy.LOOP_MAX_KERNELS):
            group = self.open_groups[shape] = ElementwiseGroup(shape)
            self.groups.append(group)
        if not offset:
            for slot in slots:
                self.read_outside(slot, group)
        group.add(record, form, rename, values)
        if form[0] != "read":
            self.member_of[record.out] = group
            if record.out in self.needed:
                group.outputs.add(record.out)
        # The group runs where its last record is: its step moves there.
        if group in self.placed:
            self.steps[self.placed[group]] = None
        self.placed[group] = len(self.steps)
        self.steps.append(("group", group, position))

    def _part_joins(self, parts, form):
        """A kernel's output's form if its kernel's group is open to it (room was kept
        for it), else None (a NumPy call: the group then writes the kernel's outputs,
        so it is no loop)."""
        group = self.member_of.get(parts)
        if group is None or self.open_groups.get(group.shape) is not group:
            return None
        return form

    def _sum_joins(self, record, form):
        """A sum's or scatter-add's form if a group computes its operand (it joins the
        group, open or not: it needs only the group's elements), else None (a NumPy
        call)."""
        operand = self.rename.get(record.parents[0], record.parents[0])
        group = self.member_of.get(operand)
        if group is None or operand not in group.slots or operand in group.reductions \
                or len(group.records) >= policy.LOOP_MAX_RECORDS:
            return None
        return form
