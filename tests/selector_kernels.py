"""Test kernels that hold many expressions: ``k(x, ..., w)`` computes expression number
``w``, so that one compiled kernel checks a whole table of rules (a kernel per rule
would be a compile per rule)."""
import math

import numpy as np


def selector(name, expressions, params=("x",)):
    """The Python function ``name(*params, w)``: the expression number ``w`` (a float)
    of the ``params``, 0.0 past the last."""
    lines = [f"def {name}({', '.join(params)}, w):"]
    for k, expression in enumerate(expressions):
        lines.append(f"    {'if' if k == 0 else 'elif'} w == {k}.0:")
        lines.append(f"        return {expression}")
    lines.append("    return 0.0")
    namespace = {"math": math, "np": np}
    exec("\n".join(lines), namespace)
    return namespace[name]
