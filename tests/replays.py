"""The replay programs a jitted function keeps, for tests that check which one ran
(recorded, generated, fused)."""
from dualbcast.jit import jitted


def programs_of(vg):
    """The :class:`~dualbcast.jit.jitted.Programs` of ``vg = db.jit(...)``."""
    return next(cell.cell_contents for cell in vg.__closure__
                if type(cell.cell_contents) is jitted.Programs)


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
