"""What an elementwise loop (:mod:`.elementwise`) adds up, in the order NumPy adds it:

- sums (:class:`Reduction`, :func:`.loop_forms._sum_form` says which): the loop
  writes the terms, then adds them up -- a whole array or a row of trailing axes
  pairwise (:func:`.fused_runtime.pairwise_sum`), leading axes row after row from 0.0;
- scatter-adds, a gather's cotangent (:class:`ScatterAdd`): each element added in
  where its row's index sends it, as it is computed, in the order of the rows, as
  ``np.add.at`` adds them (into zeros: a term of -0.0 comes out 0.0, as there).

Checked against NumPy bit for bit in tests (terms of -0.0 included)."""
import numpy as np

# (a loop's cached code inlines it: the cache's directory is named by the library's
# fingerprint, kernel.cache.library_directory)
SUMS_HEADER = "from dualbcast.jit.fused_runtime import pairwise_sum as _pairwise_sum\n\n"


class Reduction:
    """A sum the loop adds up after its elements (:func:`.loop_forms._sum_form`): of
    the value of ``operand`` (a slot the loop computes, its terms written to a buffer),
    ``kind`` ``"whole"``, ``"leading"`` or ``"trailing"`` at axis ``split``, into
    ``slot``, whose value is an array of ``shape`` (``array``) or a float64 scalar;
    a mean's divided by ``count`` (the name of its count in the loop; None: a sum)."""

    __slots__ = ("slot", "operand", "kind", "split", "shape", "array", "count")

    def __init__(self, slot, operand, kind, split, answer, count=None):
        self.slot, self.operand, self.kind, self.split = slot, operand, kind, split
        self.shape, self.array = np.shape(answer), type(answer) is np.ndarray
        self.count = count

    def source(self, q, buffer, ndim):
        """The lines adding ``buffer`` (the terms, of the group's shape) up into the
        1-d array ``q``, as NumPy adds them (see :func:`.loop_forms._sum_form`)."""
        size = " * ".join(f"n{axis}" for axis in range(ndim))
        rest = " * ".join(f"n{axis}" for axis in range(self.split, ndim)) or "1"
        lines = [f"    t{q} = {buffer}.reshape({size})"]
        if self.kind == "whole":
            lines.append(f"    {q}[0] = _pairwise_sum(t{q}, 0, {size})")
        elif self.kind == "trailing":
            # (rows shorter than 8 -- x, y, z -- added in order, as NumPy does, inline:
            # a call per row cost more than the loop)
            lines += [f"    rest = {rest}",
                      f"    for r in range(({size}) // rest):",
                      "        if rest < 8:",
                      "            total = 0.0",
                      "            for c in range(r * rest, r * rest + rest):",
                      f"                total += t{q}[c]",
                      f"            {q}[r] = 0.0 + total",
                      "        else:",
                      f"            {q}[r] = _pairwise_sum(t{q}, r * rest, rest)"]
        else:
            lines += [f"    rest = {rest}",
                      "    for c in range(rest):",
                      f"        {q}[c] = 0.0",
                      f"    for r in range(({size}) // rest):",
                      "        for c in range(rest):",
                      f"            {q}[c] += t{q}[r * rest + c]"]
        if self.count is not None:
            # (np.mean: the sum divided by the count, a float64 by an int, as NumPy's)
            lines += [f"    for c in range({q}.size):",
                      f"        {q}[c] = {q}[c] / {self.count}"]
        # (a sum that is not finite of finite terms: NumPy warns of the overflow)
        return lines + [f"    for c in range({q}.size):",
                        f"        bad |= {q}[c] - {q}[c] != 0.0"]


class ScatterAdd:
    """``np.add.at(zeros(shape), index, value)`` of ``operand``'s value (a slot the loop
    computes, of one or two axes), the rows' ``index`` read by the loop as ``rows``
    (its argument), into ``slot``; ``count``, ``inner``: the names of ``shape[0]`` and
    of its rows' length in the loop (its integer arguments: a size is never written
    in the source)."""

    __slots__ = ("slot", "operand", "rows", "shape", "count", "inner")

    def __init__(self, slot, operand, rows, shape, count, inner):
        self.slot, self.operand, self.rows, self.shape = slot, operand, rows, shape
        self.count, self.inner = count, inner

    def row(self, number, indent):
        """Per row ``i0``: where it goes (``kq<number>``), wrapped once if negative; out
        of range, the group is handed back (NumPy raises)."""
        k, n = f"kq{number}", self.count
        return [f"{indent}{k} = {self.rows}[i0]",
                f"{indent}if {k} < 0:",
                f"{indent}    {k} = {k} + {n}",
                f"{indent}if {k} < 0 or {k} >= {n}:",
                f"{indent}    return 1"]

    def element(self, number, q, offset):
        """Per element at ``offset`` in its row: the element added in."""
        return f"{q}[kq{number} * {self.inner} + {offset}] += v{self.operand}"
