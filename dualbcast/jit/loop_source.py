"""How an elementwise loop's source is written (:class:`LoopSource`, the part of
:class:`.elementwise.ElementwiseGroup` that writes it): the checks of its inputs'
shapes, then a loop over the elements in the group's mode (one flat row; short rows
by a loop per axis; long rows as 1-d views, cut at slices' cotangents' bounds), the
records' lines per element, the values read outside stored, the scatter-adds added
in; then the sums added up (:mod:`.loop_sums`)."""

from .loop_kernels import KERNELS_HEADER
from .loop_sums import SUMS_HEADER

_HEADER = ("import math\n"
           "import numpy as np\n\n")


class LoopSource:
    """The source of a group's loop, from the group's attributes (see
    :class:`.elementwise.ElementwiseGroup`: ``shape``, ``mode``, ``reads``, ``element``,
    ``written``, ``buffers``, ``sums``, ``scatters``, ``kernels``, ``checks``)."""

    def _source(self):
        buffers = self.buffers
        ndim = len(self.shape)
        params = (["n"] + [f"o{k}" for k in range(len(self.written))]
                  + [f"q{m}" for m in range(len(self.sums) + len(self.scatters))]
                  + [read.array for read in self.reads]
                  + [f"s{k}" for k in range(len(self.scalars))])
        lines = [f"def loop({', '.join(params)}):"]
        lines += [f"    n{axis} = n[{axis}]" for axis in range(ndim)]
        # (a read of shape 1 along an axis broadcasts: part "0")
        checks = self.checks + [f"{read.array}.shape[{axis}] != "
                                f"{'1' if part == '0' else 'n' + part[1:]}"
                                for read in self.reads if read.kind == "full"
                                for axis, part in enumerate(read.parts)]
        if checks:
            lines.append(f"    if {' or '.join(checks)}:")
            lines.append("        return 1")
        lines.append("    bad = False")
        if self.ties:
            lines.append("    tie = False")
        for call in self.kernels:
            lines += call.head()
        shape = ", ".join(f"n{axis}" for axis in range(ndim))
        lines += [f"    o{k} = np.empty(({shape},))"       # (the terms of sums only)
                  for k in range(len(self.written), len(buffers))]
        if self.mode in ("flat", "expanded"):
            indent, element, store = self._flat(lines, len(buffers))
        elif self.mode == "rows":
            indent, element, store = self._rows(lines, len(buffers))
        else:
            indent, element, store = self._short(lines)
        offset = {"flat": "jj", "expanded": "jj", "short": "i1", "rows": "lo + j"}[self.mode]
        if self.scatters and ndim == 1 and self.mode in ("short", "rows"):
            # (1-d over rows or slices: each element is a row, sent where it goes)
            offset = "0"
            element = (["i0 = lo + j"] if self.mode == "rows" else []) \
                + self._scattered_rows("") + element
        lines += [indent + line for line in element + self.element]
        lines += [f"{indent}{store(k)} = v{slot}" for k, slot in enumerate(buffers)]
        lines += [indent + scatter.element(s, f"q{len(self.sums) + s}", offset)
                  for s, scatter in enumerate(self.scatters)]
        for m, reduction in enumerate(self.sums):
            lines += reduction.source(f"q{m}", f"o{buffers.index(reduction.operand)}", ndim)
        lines.append("    return 3 if tie else 2 if bad else 0" if self.ties
                     else "    return 2 if bad else 0")
        header = "".join(call.key() for call in self.kernels) + _HEADER \
            + (SUMS_HEADER if self.sums else "") + (KERNELS_HEADER if self.kernels else "")
        return header + "\n".join(lines) + "\n"

    def _flat(self, lines, outputs):
        """Every array of the group's shape (C-contiguous, as the caller makes them):
        one row of them all."""
        lines.append(f"    size = {' * '.join(f'n{axis}' for axis in range(len(self.shape)))}")
        reads = [read for read in self.reads if read.kind != "index"]
        lines += [f"    r{read.name} = {read.array}.reshape(size)" for read in reads]
        lines += [f"    p{k} = o{k}.reshape(size)" for k in range(outputs)]
        element = [f"{read.name} = r{read.name}[j]" for read in reads]
        if not self.scatters:
            lines.append("    for j in range(size):")
            return "        ", element, lambda k: f"p{k}[j]"
        # (scatter-adds: a row's index read once, then its elements)
        inner = " * ".join(f"n{axis}" for axis in range(1, len(self.shape))) or "1"
        lines += [f"    inner = {inner}", "    for i0 in range(n0):"]
        lines += self._scattered_rows("        ")
        lines.append("        for jj in range(inner):")
        return "            ", ["j = i0 * inner + jj"] + element, lambda k: f"p{k}[j]"

    def _short(self, lines):
        """Short rows: a loop per axis in order, the last one's length written in the
        source (one compile per length below :data:`.policy.LOOP_SHORT_ROWS`), so that
        LLVM unrolls it: a loop of a run-time length of 4 costs its setup per row (the
        checks that its arrays do not overlap): slices along 20000 rows of 4, 148 µs
        against 174 with the long axis innermost.  Gathers read their row here."""
        indent, last = "    ", len(self.shape) - 1
        for axis in range(last):
            lines.append(f"{indent}for i{axis} in range(n{axis}):")
            indent += "    "
            if axis == 0:
                lines += self._gathered_rows(indent)     # (gathers: 2-d or more)
                lines += self._scattered_rows(indent)
        lines.append(f"{indent}for i{last} in range({self.shape[-1]}):")
        indent += "    "
        element = []
        for read in self.reads:
            if read.kind == "index":
                continue
            index = read.parts if read.kind in ("full", "gather") else [
                f"i{axis} + {offset}" for axis, offset in enumerate(read.parts)]
            element.append(f"{read.name} = {read.array}[{', '.join(index)}]")
        index = ", ".join(f"i{axis}" for axis in range(len(self.shape)))
        return indent, element, lambda k: f"o{k}[{index}]"

    def _scattered_rows(self, indent):
        """Per row ``i0``, where each scatter-add sends it."""
        return [line for s, scatter in enumerate(self.scatters)
                for line in scatter.row(s, indent)]

    def _gathered_rows(self, indent):
        """Per row ``i0``, the row each gather reads: its index array's entry, wrapped
        once if negative; out of range, the group is handed back (NumPy raises)."""
        lines = []
        for read in self.reads:
            if read.kind == "gather":
                row = read.parts[0]
                lines += [f"{indent}{row} = {read.rows}[i0]",
                          f"{indent}if {row} < 0:",
                          f"{indent}    {row} = {row} + {read.array}.shape[0]",
                          f"{indent}if {row} < 0 or {row} >= {read.array}.shape[0]:",
                          f"{indent}    return 1"]
        return lines

    def _rows(self, lines, outputs):
        """The rows of the last axis, cut at slices' cotangents' bounds on it, read as
        1-d views (zeros outside a slice)."""
        last = len(self.shape) - 1
        cuts = [bound for read in self.reads if read.kind == "scatter"
                for bound in (read.parts[0][-1], read.parts[1][-1])]
        if cuts:
            lines.append(f"    zeros = np.zeros(n{last})")
            lines.append(f"    cuts = np.array([0, n{last}, {', '.join(cuts)}])")
            lines.append("    cuts.sort()")
        indent = "    "
        for axis in range(last):
            lines.append(f"{indent}for i{axis} in range(n{axis}):")
            indent += "    "
            if axis == 0:
                lines += self._scattered_rows(indent)    # (2-d: see finish)
        if cuts:
            lines.append(f"{indent}for c in range({len(cuts) + 1}):")
            indent += "    "
            lines += [f"{indent}lo, hi = cuts[c], cuts[c + 1]", f"{indent}if lo >= hi:",
                      f"{indent}    continue"]
        else:
            lines.append(f"{indent}lo, hi = 0, n{last}")
        element = []
        for read in self.reads:
            if read.kind == "index":
                continue                # (a scatter-add's: read per row)
            kind, name, array, parts = read.kind, read.name, read.array, read.parts
            if kind == "full" and parts[-1] == "0":     # (constant along the row)
                lines.append(f"{indent}{name} = {array}[{', '.join(parts)}]")
                continue
            if kind == "full":
                row = f"{array}[{', '.join(parts[:-1] + ['lo:hi'])}]"
            elif kind == "read":
                index = [f"i{axis} + {offset}" for axis, offset in enumerate(parts[:-1])]
                row = f"{array}[{', '.join(index + [f'{parts[-1]} + lo:{parts[-1]} + hi'])}]"
            else:
                lows, highs = parts
                index = [f"i{axis} - {lo}" for axis, lo in enumerate(lows[:-1])]
                inside = [f"{lo} <= i{axis} < {hi}"
                          for axis, (lo, hi) in enumerate(zip(lows[:-1], highs[:-1]))]
                inside.append(f"{lows[-1]} <= lo and hi <= {highs[-1]}")
                row = (f"{array}[{', '.join(index + [f'lo - {lows[-1]}:hi - {lows[-1]}'])}] "
                       f"if {' and '.join(inside)} else zeros[:hi - lo]")
            lines.append(f"{indent}r{name} = {row}")
            # (a slice's cotangent is zeros plus the cotangent: -0.0 comes out 0.0)
            element.append(f"{name} = r{name}[j] + 0.0" if kind == "scatter" else
                           f"{name} = r{name}[j]")
        lead = "".join(f"i{axis}, " for axis in range(last))
        lines += [f"{indent}p{k} = o{k}[{lead}lo:hi]" for k in range(outputs)]
        lines.append(f"{indent}for j in range(hi - lo):")
        return indent + "    ", element, lambda k: f"p{k}[j]"
