"""What the vectorisable functions share: how they are compiled, the error-free
transformations their extra precision is built from, and the float32 entry convention.

Error-free transformations return a rounded result and its exact rounding error:
``two_prod(a, b) = (p, e)`` with ``p + e == a * b`` exactly.  With an FMA (one
instruction on this hardware) the error of a product is ``fma(a, b, -p)``; without one,
Dekker's splitting gives the same bits (tested in both test files).

float32 arguments are computed in float64 and rounded once: ``in_precision_of(x,
f64(x))`` — which is also where a non-float argument is refused, naming the types taken.
"""
from numba import types
from numba.core import codegen, config
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ..safe_cache import guarded_njit

# numpy error model: float division never raises (no branches).  forceinline (LLVM
# alwaysinline): a loop calling these sees straight-line machine code to vectorise.  Not
# inline="always" (Numba inlining the IR into every caller): each kernel's first compile
# then type-inferred every helper again; compiled once as functions of their own, the
# ten-kernel chain's first gradient took 4.5 s instead of 6.5-7 s, with the same loop
# times (measured in turns: chain partials at 10^3 and 10^5, the EAM loop).  Cached on
# disk (once per installation, stamped with the library's fingerprint: see safe_cache):
# compiling them took ~2.5 s of the first process's first gradients (sin 0.8 s).
jit = guarded_njit(error_model="numpy", forceinline=True, cache=True)

#: The options of the overloads (vector math's stand-ins, dual rules) kernels call:
#: NumPy's error model and LLVM inlining as above; only jitted code calls them, so no
#: C-function wrapper is made.
OVERLOAD_OPTIONS = {"error_model": "numpy", "forceinline": True, "no_cfunc_wrapper": True}


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


@intrinsic
def div(typingctx, a, b):
    """a / b as IEEE division, inf or nan for b == 0, whatever the error model of the
    function it is inlined into (Python's would test b and raise: no vectorising)."""
    if not (a == b == types.float64):
        return None

    def codegen(context, builder, signature, args):
        return builder.fdiv(*args)
    return types.float64(a, b), codegen


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

@intrinsic
def f64(typingctx, x):
    """x as a float64.  (Intrinsics, not overloads: an overload compiles a function of
    its own for every type, a tenth of a second each in a kernel's first compile.)"""
    if x not in (types.float32, types.float64):
        raise TypingError(f"dualbcast.vmath takes float32 or float64 arguments, not {x}")

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], x, types.float64)
    return types.float64(x), codegen


@intrinsic
def in_precision_of(typingctx, x, r):
    """The float64 result r in x's precision."""
    return _rounded_result(x)


@intrinsic
def in_precision_of_both(typingctx, x, y, r):
    """The float64 result r as float32 if x and y are both float32."""
    return _rounded_result(x, y)


def _rounded_result(*arguments):
    """Signature and codegen of ``f(*arguments, r)``: the float64 r as float32 when every
    argument is float32."""
    result = types.float32 if all(a == types.float32 for a in arguments) else types.float64

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[-1], types.float64, result)
    return result(*arguments, types.float64), codegen
