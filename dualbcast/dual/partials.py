"""Arithmetic on partials tuples: the chain rule's inner loop, unrolled over ``n``.

A dual's partials are a ``UniTuple(float, n)``.  These intrinsics emit straight-line
LLVM for every ``n`` (no Python-level loop, no generated source per ``n``).

Products are *NaN-safe* (ForwardDiff's convention, README "Derivative conventions"):
a product in which either factor is exactly zero is zero, even when the other is
infinite or NaN.  A zero partial times an infinite local derivative keeps ``sqrt(x) +
y`` at ``x = 0`` from poisoning the partial with respect to ``y``; a zero factor times
an infinite partial keeps ``w * sqrt(r)`` at ``w = r = 0`` at 0 w.r.t. ``r``, as the
reverse-mode rules give (their zero cotangent reaches ``sqrt``).  Sums and negation
need no such care and stay plain.
"""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .dualtype import (REAL, DualType, as_float, build_dual, fields, partials_field,
                       rule_intrinsic, zero_of)

# Nested duals (second order): a partial may itself be a dual.  Each operation below
# then applies to its value and partials recursively, products by the product rule with
# NaN-safe products of the components, so a zero meeting an infinity gives 0 at every
# order (a dual partial that is all zeros times anything is all zeros).


def _elements(context, builder, tupty, tup, dtype):
    return [context.cast(builder, builder.extract_value(tup, i), tupty.dtype, dtype)
            for i in range(tupty.count)]


def _shielded(context):
    """The fast-math flags of the partials' float instructions: none, or in a fastmath
    kernel (the operators' rules are lowered into it, :mod:`.builtins`) ``afn``, which
    only licenses approximate library calls: Numba's fastmath pass gives its flags to
    every float instruction that has none, and under ``nnan``/``nsz`` LLVM folds a
    NaN-safe product into a plain one (0 * inf is NaN again)."""
    return ("afn",) if context.fastmath else ()


def _derivative_is_zero(context, builder, dtype, derivative):
    # Compared once per chain-rule product, not once per partial.
    if isinstance(dtype, DualType):
        return None                     # (the components are compared, recursively)
    return builder.fcmp_ordered("==", derivative, context.get_constant(dtype, 0.0),
                                flags=_shielded(context))


def _safe_product(context, builder, dtype, partial, derivative, derivative_is_zero):
    # 0 if the partial is 0; the derivative itself (a signed zero) if it is 0; else the
    # product.  Written so that LLVM folds it where a partial is a known constant (a
    # seed's 1 or 0): select(d == 0, d, 1 * d) is d, so those products cost nothing.
    if isinstance(dtype, DualType):
        return _dual_product(context, builder, dtype, partial, derivative)
    zero, flags = context.get_constant(dtype, 0.0), _shielded(context)
    product = builder.select(derivative_is_zero, derivative,
                             builder.fmul(partial, derivative, flags=flags))
    return builder.select(builder.fcmp_ordered("==", partial, zero, flags=flags), zero, product)


def _dual_product(context, builder, dtype, a, b):
    # (a0 + a') (b0 + b') = a0 b0 + (a0 b' + a' b0), each product NaN-safe
    inner = dtype.dtype
    av, aparts = fields(context, builder, dtype, a)
    bv, bparts = fields(context, builder, dtype, b)
    bv_is_zero = _derivative_is_zero(context, builder, inner, bv)
    parts = [_plain(context, builder, inner, "fadd",
                    _safe_product(context, builder, inner, av, bp,
                                  _derivative_is_zero(context, builder, inner, bp)),
                    _safe_product(context, builder, inner, ap, bv, bv_is_zero))
             for ap, bp in zip(aparts, bparts)]
    return build_dual(context, builder, dtype,
                      _safe_product(context, builder, inner, av, bv, bv_is_zero), parts)


_FLOAT_OPS = {
    "fadd": lambda builder, x, y, flags: builder.fadd(x, y, flags=flags),
    "fsub": lambda builder, x, y, flags: builder.fsub(x, y, flags=flags),
    # -x as -0.0 - x, which LLVM turns into its fneg on the CPU: CUDA's NVVM reads LLVM 7's
    # IR, which has no fneg (numba-cuda negates so too).
    "fneg": lambda builder, x, flags: builder.fsub(ir.Constant(x.type, -0.0), x, flags=flags),
}


def _plain(context, builder, dtype, op_name, *operands):
    """``fadd``, ``fsub`` or ``fneg`` of floats, or of duals component by component."""
    if not isinstance(dtype, DualType):
        return _FLOAT_OPS[op_name](builder, *operands, flags=_shielded(context))
    split = [fields(context, builder, dtype, x) for x in operands]
    value = _plain(context, builder, dtype.dtype, op_name, *(v for v, _ in split))
    parts = [_plain(context, builder, dtype.dtype, op_name, *components)
             for components in zip(*(p for _, p in split))]
    return build_dual(context, builder, dtype, value, parts)


def _is_partials(ty):
    return isinstance(ty, types.UniTuple) and isinstance(ty.dtype, (types.Float, DualType))


@rule_intrinsic
def scale(typingctx, parts, d):
    """``parts * d``, NaN-safe (0 where a partial or ``d`` is 0)."""
    if not (_is_partials(parts) and isinstance(d, REAL + (DualType,))):
        return None
    dtype = typingctx.unify_pairs(parts.dtype, as_float(d))
    rettype = types.UniTuple(dtype, parts.count)

    def codegen(context, builder, sig, args):
        p, dv = args
        dv = context.cast(builder, dv, d, dtype)
        dv_is_zero = _derivative_is_zero(context, builder, dtype, dv)
        out = [_safe_product(context, builder, dtype, pi, dv, dv_is_zero)
               for pi in _elements(context, builder, parts, p, dtype)]
        return context.make_tuple(builder, rettype, out)

    return rettype(parts, d), codegen


@rule_intrinsic
def lincomb(typingctx, pa, da, pb, db):
    """``pa * da + pb * db``, each product NaN-safe (the two-argument chain rule)."""
    real = REAL + (DualType,)
    if not (_is_partials(pa) and _is_partials(pb) and pa.count == pb.count
            and isinstance(da, real) and isinstance(db, real)):
        return None
    dtype = typingctx.unify_types(pa.dtype, pb.dtype, as_float(da), as_float(db))
    rettype = types.UniTuple(dtype, pa.count)

    def codegen(context, builder, sig, args):
        a, dav, b, dbv = args
        dav = context.cast(builder, dav, da, dtype)
        dbv = context.cast(builder, dbv, db, dtype)
        da_is_zero = _derivative_is_zero(context, builder, dtype, dav)
        db_is_zero = _derivative_is_zero(context, builder, dtype, dbv)
        out = []
        for ai, bi in zip(_elements(context, builder, pa, a, dtype),
                          _elements(context, builder, pb, b, dtype)):
            out.append(_plain(context, builder, dtype, "fadd",
                              _safe_product(context, builder, dtype, ai, dav, da_is_zero),
                              _safe_product(context, builder, dtype, bi, dbv, db_is_zero)))
        return context.make_tuple(builder, rettype, out)

    return rettype(pa, da, pb, db), codegen


def _make_pairwise(op_name):
    @rule_intrinsic
    def pairwise(typingctx, pa, pb):
        if not (_is_partials(pa) and _is_partials(pb) and pa.count == pb.count):
            return None
        dtype = typingctx.unify_pairs(pa.dtype, pb.dtype)
        rettype = types.UniTuple(dtype, pa.count)

        def codegen(context, builder, sig, args):
            pairs = zip(_elements(context, builder, pa, args[0], dtype),
                        _elements(context, builder, pb, args[1], dtype))
            out = [_plain(context, builder, dtype, op_name, ai, bi) for ai, bi in pairs]
            return context.make_tuple(builder, rettype, out)

        return rettype(pa, pb), codegen

    return pairwise


add = _make_pairwise("fadd")
add.__doc__ = "``pa + pb``."
sub = _make_pairwise("fsub")
sub.__doc__ = "``pa - pb``."


@rule_intrinsic
def neg(typingctx, parts):
    """``-parts``."""
    if not _is_partials(parts):
        return None

    def codegen(context, builder, sig, args):
        out = [_plain(context, builder, parts.dtype, "fneg", pi)
               for pi in _elements(context, builder, parts, args[0], parts.dtype)]
        return context.make_tuple(builder, parts, out)

    return parts(parts), codegen


@rule_intrinsic
def zeros(typingctx, parts):
    """Zero partials shaped like ``parts`` (piecewise-constant functions)."""
    if not _is_partials(parts):
        return None

    def codegen(context, builder, sig, args):
        zero = zero_of(context, builder, parts.dtype)
        return context.make_tuple(builder, parts, [zero] * parts.count)

    return parts(parts), codegen


@intrinsic
def partials_of(typingctx, x, like):
    """The partials of a dual, or zeros shaped like the tuple ``like`` for a number
    (a kernel whose result does not depend on its active arguments)."""
    if isinstance(x, DualType):
        def codegen(context, builder, sig, args):
            return partials_field(builder, args[0])
        return x.partials_type(x, like), codegen
    if isinstance(x, REAL) and _is_partials(like):
        def codegen(context, builder, sig, args):
            zero = zero_of(context, builder, like.dtype)
            return context.make_tuple(builder, like, [zero] * like.count)
        return like(x, like), codegen
    return None
