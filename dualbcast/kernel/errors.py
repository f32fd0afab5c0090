"""One line that says why Numba could not compile a kernel, ahead of Numba's own report.

Numba's typing errors run to dozens of lines (candidate overloads, passes, the generated
loop's file); what a user needs first is what their kernel used and what to use
instead.  :func:`summary` reads that out of the report: the failing call (``>>> round(
Dual(float64, 1))``) or the first message line (``NameError: name 'f' is not defined``),
and the kernel's own source line Numba points at.  The full report stays chained.
"""
import re

_SIGNATURE = re.compile(r"^\s*>>> (.+)$", re.MULTILINE)
_LOCATION = re.compile(r'^File "[^"]*", line (\d+):\n((?:.*\n)*?)\s*\^', re.MULTILINE)
_PIPELINE = re.compile(r"^Failed in .* pipeline .*$")
_NOT_SCALAR = re.compile(r"str|unicode|array|List|list|Tuple|tuple|Dict|dict|Set|set")

_ADVICE_DUAL = ("a differentiated argument is a dual number, which takes arithmetic, "
                "comparisons, math.* functions and their np.* scalar forms; write the "
                "operation with those, or leave that argument out of what is differentiated")
_ADVICE_PLAIN = ("a kernel works on scalars: arithmetic, comparisons, math.* functions and "
                 "Python control flow, not arrays, strings or containers of them")


def summary(numba_error):
    """``"it calls norm(Dual(float64, 1)), which has no implementation for these types
    (line 10: return np.linalg.norm(x)); a differentiated argument is ..."``, or ``""``
    when the report has no recognisable shape (the chained report then says it all)."""
    report = str(numba_error)
    call = _SIGNATURE.search(report)
    if call is not None:
        what = (f"it calls {call.group(1).strip()}, which has no implementation for these "
                f"types")
        # (a string or array beside the dual is the problem, not the dual)
        duals_only = "Dual(" in call.group(1) and not _NOT_SCALAR.search(call.group(1))
        advice = _ADVICE_DUAL if duals_only else _ADVICE_PLAIN
    else:
        lines = [line.strip() for line in report.splitlines() if line.strip()]
        lines = [line for line in lines if not _PIPELINE.match(line)]
        if not lines or lines[0].startswith("During:"):
            return ""
        what, advice = lines[0].rstrip(":"), ""
    location = _LOCATION.search(report)
    if location is not None:
        source = location.group(2).rstrip("\n").splitlines()
        where = f"line {location.group(1)}: {source[-1].strip()}" if source else ""
        what += f" ({where})" if where else ""
    return f"{what}; {advice}" if advice else what
