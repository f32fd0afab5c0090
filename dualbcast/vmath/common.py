"""What the vectorisable functions share: how they are compiled, the error-free
transformations their extra precision is built from, and the float32 entry convention.

Error-free transformations return a rounded result and its exact rounding error:
``two_prod(a, b) = (p, e)`` with ``p + e == a * b`` exactly.  With an FMA (one
instruction on this hardware) the error of a product is ``fma(a, b, -p)``; without one,
Dekker's splitting gives the same bits (tested in both test files).

float32 arguments are computed in float64 and rounded once: ``in_precision_of(x,
f64(x))`` — which is also where a non-float argument is refused, naming the types taken.
"""
import numpy as np
from numba import njit, types
from numba.core import codegen, config
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

# numpy error model: float division never raises (no branches); forceinline: LLVM inlines
# every call (alwaysinline), so a loop calling these sees straight-line code to vectorise.
jit = njit(error_model="numpy", forceinline=True)


def _target_has_fma():
    features = config.CPU_FEATURES
    if features is None:
        features = codegen.get_host_cpu_features()
    return "+fma" in features.split(",")


HAS_FMA = _target_has_fma()


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma: one instruction on FMA hardware)."""
    if not (a == b == c == types.float64):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return types.float64(a, b, c), codegen


@jit
def mul_add(a, b, c):
    return a * b + c


# Polynomials: fused where the hardware fuses (faster; the accuracy does not need it).
mla = fma if HAS_FMA else mul_add


@jit
def two_prod_fma(a, b):
    """(p, e) with p = fl(a * b) and p + e = a * b exactly."""
    p = a * b
    return p, fma(a, b, -p)


@jit
def two_prod_dekker(a, b):
    """two_prod_fma without an FMA (Dekker/Veltkamp splitting; |a|, |b| < 2**995)."""
    p = a * b
    t = 134217729.0 * a
    ah = t - (t - a)
    al = a - ah
    t = 134217729.0 * b
    bh = t - (t - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


two_prod = two_prod_fma if HAS_FMA else two_prod_dekker


@jit
def two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@jit
def fast_two_sum(a, b):
    """two_sum for a == 0 or exponent(a) >= exponent(b)."""
    s = a + b
    return s, b - (s - a)


# --- float32 / float64 entry points ---------------------------------------------------

def f64(x):
    """x as a float64 (typing stub)."""


@overload(f64, inline="always")
def _ol_f64(x):
    if x in (types.float32, types.float64):
        return lambda x: np.float64(x)
    raise TypingError(f"dualbcast.vmath takes float32 or float64 arguments, not {x}")


def in_precision_of(x, r):
    """The float64 result r in x's precision (typing stub)."""


@overload(in_precision_of, inline="always")
def _ol_in_precision_of(x, r):
    if x == types.float32:
        return lambda x, r: np.float32(r)
    return lambda x, r: r


def in_precision_of_both(x, y, r):
    """The float64 result r as float32 if x and y are both float32 (typing stub)."""


@overload(in_precision_of_both, inline="always")
def _ol_in_precision_of_both(x, y, r):
    if x == y == types.float32:
        return lambda x, y, r: np.float32(r)
    return lambda x, y, r: r
