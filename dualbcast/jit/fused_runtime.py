"""What a fused program's compiled code calls (:mod:`.fusion` writes the code): the C
library's ``pow`` as NumPy's scalar power calls it, ``math.fsum`` for the chunks'
partial sums, a select, and the small steps of the backward pass — each a choice a
record's backward pass makes, as a call, so the fused function stays one block of
straight-line code (Numba compiles that in time linear in its length).  The
``GRADIENT_SOURCE`` helpers are compiled with the fused module itself, from a rule's
form."""
import numpy as np
from llvmlite import ir
from numba import types
from numba import uint64 as _u
from numba.core import cgutils
from numba.extending import intrinsic

from ..kernel.products import nan_safe_product
from ..rules.fast import SUM_COTANGENT_FORM
from ..safe_cache import guarded_njit


@intrinsic
def libm_pow(typingctx, x, y):
    """The C library's ``pow``, as NumPy's scalar power calls it; declared
    ``nobuiltin`` so that LLVM keeps the call (it would rewrite pow(x, 2.0) as x * x)."""
    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        pow_ = cgutils.get_or_insert_function(builder.module,
                                              ir.FunctionType(double, [double, double]), "pow")
        pow_.attributes.add("nobuiltin")
        return builder.call(pow_, args)
    return types.float64(types.float64, types.float64), codegen


@guarded_njit(error_model="numpy", cache=True)
def exact_sum(values):
    """``math.fsum(values)`` for finite values whose partial sums stay finite (else
    inf or nan, which a fused program hands back): CPython's algorithm, Shewchuk's
    exact partials, then their sum correctly rounded (half to even)."""
    partials = np.empty(64)     # non-overlapping: at most ~2100 / 53 of them
    n = 0
    for x in values:
        if x - x != 0.0:
            return x - x            # nan: the caller hands the call back
        i = 0
        for j in range(n):
            y = partials[j]
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            if hi - hi != 0.0:
                return hi           # the partial sums overflow: inf (handed back too)
            lo = y - (hi - x)
            if lo != 0.0:
                partials[i] = lo
                i += 1
            x = hi
        n = i
        if x != 0.0:
            partials[n] = x
            n += 1
    hi = 0.0
    if n > 0:
        n -= 1
        hi = partials[n]
        lo = 0.0
        while n > 0:
            x = hi
            n -= 1
            y = partials[n]
            hi = x + y
            lo = y - (hi - x)
            if lo != 0.0:
                break
        # hi + lo is exactly halfway between two doubles only if the partials below
        # do not push it one way: round half to even as fsum does.
        if n > 0 and (lo < 0.0 and partials[n - 1] < 0.0 or
                      lo > 0.0 and partials[n - 1] > 0.0):
            y = lo * 2.0
            x = hi + y
            if y == x - hi:
                hi = x
    return hi


@guarded_njit(error_model="numpy", cache=True)
def chunk_sum(totals, column):
    """A kernel sum's loop's result (the sum, or a register gradient: ``column``) from
    its chunks' rows of ``totals``, added up as the replay adds them: one chunk's as it
    is (``exact_sum`` of one -0.0 would be 0.0), several exactly."""
    if totals.shape[0] == 1:
        return totals[0, column]
    return exact_sum(totals[:, column])


@guarded_njit(error_model="numpy", cache=True)
def numpy_sum(values):
    """``np.add.reduce(values)`` of a 1-d C-contiguous float64 array, as NumPy adds it
    up (:func:`pairwise_sum`); tests hold it to NumPy."""
    return pairwise_sum(values, 0, values.size)


@guarded_njit(error_model="numpy", cache=True)
def pairwise_sum(values, start, size):
    """``np.add.reduce(values[start:start + size])``, as NumPy adds up a contiguous
    run (the whole of a C-contiguous array, or one row of the trailing axes it
    reduces): 0.0 plus the pairwise sum (halves split at a multiple of 8, down to
    blocks of at most 128 elements, each added in eight running sums).  The recursion
    is walked with a stack of its own (a recursive Numba function cannot be linked
    into another's cached code)."""
    if size <= 128:
        return 0.0 + block_sum(values, start, size)
    lo = np.empty(64, np.int64)         # per pending call: its block,
    count = np.empty(64, np.int64)
    left = np.empty(64)                 # its left half's sum once known,
    state = np.empty(64, np.int64)      # 0: split next, 1: left pending, 2: right pending
    lo[0], count[0], state[0] = start, size, 0
    depth = 1
    total = 0.0
    while depth > 0:
        top = depth - 1
        n = count[top]
        if n <= 128:
            found = block_sum(values, lo[top], n)
            depth -= 1
            # hand the sum to the calls waiting for it
            while depth > 0 and state[depth - 1] == 2:
                found = left[depth - 1] + found
                depth -= 1
            if depth == 0:
                total = found
            else:
                left[depth - 1] = found
                state[depth - 1] = 2
                half = count[depth - 1] // 2
                half -= half % 8
                lo[depth] = lo[depth - 1] + half
                count[depth] = count[depth - 1] - half
                state[depth] = 0
                depth += 1
        else:
            half = n // 2
            half -= half % 8
            state[top] = 1
            lo[depth], count[depth], state[depth] = lo[top], half, 0
            depth += 1
    return 0.0 + total


@guarded_njit(error_model="numpy", cache=True)
def block_sum(a, lo, n):
    """``a[lo:lo + n]`` added up as NumPy adds a block of at most 128 elements: in
    order below 8, else in eight running sums, then the rest in order.  (Unsigned
    indices: no wraparound of negative ones, a third faster.)"""
    if n < 8:
        total = 0.0
        for i in range(lo, lo + n):
            total += a[i]
        return total
    start, size = _u(lo), _u(n)
    r0, r1, r2, r3 = a[start], a[start + _u(1)], a[start + _u(2)], a[start + _u(3)]
    r4, r5, r6, r7 = a[start + _u(4)], a[start + _u(5)], a[start + _u(6)], a[start + _u(7)]
    i = _u(8)
    whole = size - size % _u(8)
    while i < whole:
        j = start + i
        r0 += a[j]
        r1 += a[j + _u(1)]
        r2 += a[j + _u(2)]
        r3 += a[j + _u(3)]
        r4 += a[j + _u(4)]
        r5 += a[j + _u(5)]
        r6 += a[j + _u(6)]
        r7 += a[j + _u(7)]
        i += _u(8)
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < size:
        total += a[start + i]
        i += _u(1)
    return total


# The fused function is straight-line code: one basic block, every name assigned once.
# Numba's passes before type inference (SSA reconstruction, liveness, dead-code
# analysis) cost, for each name assigned more than once, a walk over every block, and
# per block a set of every live name: written with branches (an ``if`` per record for
# a cotangent that may not reach it) and one ``bad``, ``ct``, ``g<slot>`` reassigned
# per record, the compile took time and memory growing as the square of the program
# (a degree-80 Horner polynomial, 161 records: 16 s, 640 MB).  So each choice a
# record's backward pass makes is a call of one of these small functions (inlined by
# LLVM, not by Numba: Numba sees one statement), each loop is inside one, and every
# value has a name of its own.

@guarded_njit(error_model="numpy", cache=True)
def where(condition, x, y):
    """``x if condition else y``; both already computed (pure float expressions:
    evaluating the branch not taken changes nothing)."""
    return x if condition else y


@guarded_njit(error_model="numpy", cache=True)
def add_to(live, reached, g, ct, bad):
    """``(g, reached, bad)`` once ``ct`` is added to a scalar's cotangent ``g`` where
    ``live`` (the first is kept as it is: None + ct is ct, where 0.0 + -0.0 would not
    be -0.0), and the sum checked: ``bad`` is nan once one is not finite (nor then is
    the sum, ``g`` being finite)."""
    if live:
        total = g + ct if reached else ct
        return total, True, bad + total * 0.0
    return g, reached, bad


@guarded_njit(error_model="numpy", cache=True)
def nan_safe(ct, g):
    """A vjp's cotangent, 0 where the cotangent ``g`` it came from is 0 (NaN-safe as
    the vjps are)."""
    return 0.0 if ct != ct and g == 0.0 else ct


# A stored gradient's cotangent, where ``live``: the gradient scaled in place by its
# sum's cotangent ``g`` (the sum rule's vjp, from its form beside the rule,
# SUM_COTANGENT_FORM; a cotangent of 1 leaves it as it is), then added into its leaf's
# cotangent so far, ``total``, if one had ``reached`` it, else copied there: ``total``
# is one of the leaf's buffers, the one whose cotangent the backward pass meets first,
# and that one is scaled in place by ``_first_gradient``.  (The replay keeps the
# first cotangent that reaches a leaf and adds the others into it: the same bits.)
# ``bad`` nan once an element is not finite.  Written into the fused module's source
# (compiled with it, from the form).
def _each(name, element):
    """The source of ``name(a, b)``: ``a[i] = element`` (a format of ``{x}``, which is
    ``a[i]``, ``{i}`` and ``b``) for every ``i``; nan if a new ``a[i]`` is not finite,
    else 0.0.  Whether one is not finite is or-ed up as a bool: an integer reduction,
    which LLVM vectorises (a float sum ``check += s * 0.0`` made each iteration wait for
    the last: 6x slower than the product itself)."""
    return (f"def {name}(a, b):\n"
            f"    bad = False\n"
            f"    for i in range(a.size):\n"
            f"        s = {element.format(x='a[i]', i='i')}\n"
            f"        a[i] = s\n"
            f"        bad = bad | (s - s != 0.0)\n"
            f"    return _NAN if bad else 0.0\n\n")


GRADIENT_SOURCE = (
    _each("_scale_all", SUM_COTANGENT_FORM.format(x="{x}", g="b"))
    + _each("_add_all", "{x} + b[{i}]")
    + """
def _scaled(gradient, g):
    if g == 1.0:
        return 0.0
    return _scale_all(gradient, g)

def _first_gradient(live, gradient, g, bad):
    if not live:
        return False, bad
    return True, bad + _scaled(gradient, g)

def _add_gradient(live, reached, total, gradient, g, bad):
    if not live:
        return reached, bad
    check = _scaled(gradient, g)
    if reached:
        check += _add_all(total, gradient)
    else:
        for i in range(total.size):     # (a loop: total[:] = ... compiles for seconds)
            total[i] = gradient[i]
    return True, bad + check

""")


# A staged program's elementwise passes (:mod:`.staged_fusion`): NaN-safe products of
# a scalar or an array and an array, and the sum of two (the tangent of a NaN-safe
# product: ``nan_safe_sum``), each a new 1-d array and its finiteness check (0.0, or
# nan when an element is not finite).  The rules' own per-element products: NumPy's
# bits, and the eager passes' (``nan_safe``, ``scaled_sum``).

@guarded_njit(error_model="numpy", cache=True, nogil=True)
def nan_safe_scaled(a, x):
    out = np.empty(x.size)
    finite = True
    for i in range(x.size):
        out[i] = nan_safe_product(a, x[i])
        finite &= out[i] - out[i] == 0.0      # (an and: the loop vectorises)
    return out, 0.0 if finite else np.nan


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def nan_safe_products(x, y):
    out = np.empty(x.size)
    finite = True
    for i in range(x.size):
        out[i] = nan_safe_product(x[i], y[i])
        finite &= out[i] - out[i] == 0.0      # (an and: the loop vectorises)
    return out, 0.0 if finite else np.nan


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def nan_safe_scaled_sum(a, x, b, y):
    out = np.empty(x.size)
    finite = True
    for i in range(x.size):
        out[i] = nan_safe_product(a, x[i]) + nan_safe_product(b, y[i])
        finite &= out[i] - out[i] == 0.0      # (an and: the loop vectorises)
    return out, 0.0 if finite else np.nan
