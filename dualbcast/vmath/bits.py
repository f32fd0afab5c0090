"""Reinterpret a float's bits as an integer and back (for Numba code).

Branch-free math needs the exponent and mantissa of a float as integers: frexp and
ldexp done with shifts and masks, which LLVM vectorises (libm's frexp/ldexp are calls,
which it does not).  These are single ``bitcast`` instructions.
"""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_INT_FOR = {types.float64: types.int64, types.float32: types.int32}
_FLOAT_FOR = {types.int64: types.float64, types.int32: types.float32}


@intrinsic
def float_bits(typingctx, x):
    """The IEEE bits of a float64 (float32) as an int64 (int32)."""
    if x not in _INT_FOR:
        return None
    result = _INT_FOR[x]

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(result.bitwidth))
    return result(x), codegen


@intrinsic
def bits_float(typingctx, i):
    """The float64 (float32) whose IEEE bits are the int64 (int32) ``i``."""
    if i not in _FLOAT_FOR:
        return None
    result = _FLOAT_FOR[i]
    llvm_type = ir.DoubleType() if result == types.float64 else ir.FloatType()

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llvm_type)
    return result(i), codegen
