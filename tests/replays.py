"""The replay programs a jitted function keeps, for tests that check which one ran
(recorded, generated, fused)."""
from dualbcast.jit import jitted


def programs_of(vg):
    """The :class:`~dualbcast.jit.jitted.Programs` of ``vg = db.jit(...)``."""
    return next(cell.cell_contents for cell in vg.__closure__
                if type(cell.cell_contents) is jitted.Programs)
