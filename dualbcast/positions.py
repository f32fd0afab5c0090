"""Which arguments are differentiated: ``argnums`` of ``grad`` and ``wrt`` of a
kernel, checked and normalised by one function (the core and the kernels share it)."""
import operator

import numpy as np


def argument_positions(spec, nargs, name, owner):
    """``(single, positions)`` for ``spec``, an int or a tuple/list of ints naming
    arguments among ``nargs`` (None when not known yet: only the ints are checked);
    negative positions count from the end.  ``name`` (``argnums``, ``wrt``) and
    ``owner`` (the function or kernel) are named in the errors."""
    single = not isinstance(spec, (tuple, list))
    positions = []
    for i in (spec,) if single else spec:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"{owner}: {name} must be an int or a tuple of ints, not {spec!r}")
        i = operator.index(i)
        if nargs is not None:
            if not -nargs <= i < nargs:
                raise ValueError(f"{owner}: {name}={spec!r} is out of range for "
                                 f"{nargs} argument{'s' * (nargs != 1)}")
            i %= nargs
        positions.append(i)
    if len(set(positions)) != len(positions):
        raise ValueError(f"{owner}: {name}={spec!r} repeats an argument")
    return single, tuple(positions)
