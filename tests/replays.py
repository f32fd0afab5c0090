"""The replay programs a jitted function keeps, for tests that check which one ran
(recorded, generated, fused)."""
import numpy as np

from dualbcast.jit import jitted
from dualbcast.jit.gradient import GradientPrograms

jitted_module = jitted


def programs_of(vg):
    """The :class:`~dualbcast.jit.gradient.GradientPrograms` of ``vg = db.jit(...)``."""
    return next(cell.cell_contents for cell in vg.__closure__
                if type(cell.cell_contents) is GradientPrograms)


def staged_programs_of(jitted):
    """The :class:`~dualbcast.jit.staged.StagedPrograms` of ``jitted = db.jit(f)``, ``f``
    not a gradient function."""
    from dualbcast.jit.staged import StagedPrograms
    return next(cell.cell_contents for cell in jitted.__closure__
                if type(cell.cell_contents) is StagedPrograms)


def staged_counts(jitted):
    """``(traces, replays)`` over every signature of a staged ``jitted``."""
    entries = staged_programs_of(jitted).entries.values()
    return sum(e.traces for e in entries), sum(e.replays for e in entries)


def staged_plans(jitted):
    """The plans (:class:`~dualbcast.jit.staged_plan.Plan`) of the staged programs of
    ``jitted = db.jit(f)``: ``f`` not a gradient, or a gradient with other inputs."""
    from dualbcast.jit.staged import StagedPrograms
    for cell in jitted.__closure__:
        found = cell.cell_contents
        if type(found) is jitted_module.StagedGradients:
            found = found.programs
        if type(found) is StagedPrograms:
            return [entry.program.plan for entry in found.entries.values()
                    if entry.program is not None and entry.program.plan is not None]
    raise LookupError("no staged programs")


def same_bits(got, want):
    """Same type, dtype, shape and bits (nested tuples of arrays and scalars)."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same_bits(g, w)
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    else:
        assert np.array(got).tobytes() == np.array(want).tobytes(), (got, want)
