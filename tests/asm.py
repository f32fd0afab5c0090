"""The machine code of a compiled Numba loop, for tests that check how it was
vectorised (which instructions, no calls into libm)."""


def loop_asm(dispatcher, sig):
    """Assembly of the compiled loop itself (not of the CPython wrapper around it)."""
    tag = f"{len(dispatcher.py_func.__name__)}{dispatcher.py_func.__name__}"
    body, inside = [], False
    for line in dispatcher.inspect_asm(sig).splitlines():
        if line.startswith("_Z") and line.endswith(":"):
            inside = tag in line and not line.startswith("_ZN7cpython")
        elif inside:
            body.append(line)
    assert body
    return "\n".join(body)
