"""``out=`` buffers: the check every layer that writes into its caller's arrays makes."""
import numpy as np


def refuse_overlapping_out(caller, targets, arrays):
    """``ValueError``, naming ``caller``, unless the ``targets`` (out arrays, None where
    there is none) overlap neither each other nor any of ``arrays``, ``(position,
    array)`` pairs of the call's arguments: an out array is written while the
    arguments are still read (a kernel's loop stores gradients as it goes)."""
    given = [target for target in targets if target is not None]
    arrays = list(arrays)
    for k, target in enumerate(given):
        if any(np.may_share_memory(target, other) for other in given[k + 1:]):
            raise ValueError(f"{caller}: two out arrays overlap (each gradient needs its "
                             f"own array)")
        for position, array in arrays:
            if np.may_share_memory(target, array):
                raise ValueError(f"{caller}: an out array overlaps argument {position} (it "
                                 f"would be overwritten while it is read)")
