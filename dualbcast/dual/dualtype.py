"""The Numba dual-number type: a value plus ``n`` partials.

Modelled on how Numba implements ``complex``: a ``StructModel`` value type (two
fields, passed by value, no heap allocation), never a jitclass.  A dual of ``n``
partials carries the derivatives of its value with respect to the ``n`` *active*
arguments of a kernel call, so ``n`` is the number of differentiated arguments,
not the kernel's arity.

Plain numbers meet duals through :meth:`DualType.unify` and a cast (a number is a
dual with zero partials), which is what lets a kernel write ``y = 0.0`` and later
``y += x`` or return a constant on one branch and a dual on the other.

Nested duals (second order, as ForwardDiff nests its duals): a dual's value type may
itself be a dual, ``Dual(Dual(float64, 1), n)``: the inner partial is a tangent
direction, the outer ``n`` partials the first derivatives, each carrying its own
tangent, so the same rules give second derivatives (every rule's derivative formula is
evaluated on the inner dual, differentiating it).  To a dual, a shallower dual is a
constant like a number.
"""
from llvmlite import ir
from numba import types
from numba.core.typing.templates import AttributeTemplate, infer_getattr
from numba.extending import intrinsic, lower_cast, lower_getattr, models, register_model

#: Numba types a dual meets as a constant (no partials).
REAL = (types.Float, types.Integer, types.Boolean)


class DualType(types.Type):
    """``Dual(dtype, n)``: a ``dtype`` value and a ``UniTuple(dtype, n)`` of partials
    (``dtype`` a float type, or a dual type: a nested dual)."""

    def __init__(self, dtype, n):
        if not isinstance(dtype, (types.Float, DualType)):
            raise TypeError(f"a dual's value type must be a float or dual type, not {dtype}")
        self.dtype = dtype
        self.n = int(n)
        #: 1 for a dual of floats, 2 for a dual of duals of floats...
        self.depth = 1 + getattr(dtype, "depth", 0)
        super().__init__(name=f"Dual({dtype}, {self.n})")

    @property
    def partials_type(self):
        return types.UniTuple(self.dtype, self.n)

    def is_constant(self, other):
        """Whether ``other`` meets this dual as a constant: a number or a shallower dual."""
        return isinstance(other, REAL) or (isinstance(other, DualType)
                                           and other.depth < self.depth)

    def unify(self, typingctx, other):
        # Called when two control-flow paths (or a loop-carried variable) meet with
        # different types.  A plain number joins a dual as a dual with zero partials.
        if isinstance(other, DualType) and other.n == self.n and other.depth == self.depth:
            return DualType(typingctx.unify_pairs(self.dtype, other.dtype), self.n)
        if self.is_constant(other):
            return DualType(typingctx.unify_pairs(self.dtype, as_float(other)), self.n)
        return None

    def can_convert_from(self, typingctx, other):
        # Lets a number be passed where a dual is expected (e.g. the other branch
        # of an ``if`` returning a constant): a safe conversion, no precision lost.
        if self.is_constant(other) or (isinstance(other, DualType) and other.n == self.n
                                       and other.depth == self.depth):
            return types.Conversion.safe
        return None


def as_float(ty):
    """The type a value of type ``ty`` is computed in: a float or a dual type as it is,
    an integer or bool as float64."""
    return ty if isinstance(ty, (types.Float, DualType)) else types.float64


def zero_of(context, builder, ty):
    """Codegen: the zero of a float or dual type."""
    if isinstance(ty, DualType):
        return build_dual(context, builder, ty, zero_of(context, builder, ty.dtype),
                          [zero_of(context, builder, ty.dtype)] * ty.n)
    return context.get_constant(ty, 0.0)


# A dual's LLVM value is the struct {value, partials} of DualModel, its members' values
# (floats, tuples of floats or duals, duals: never a bool, so each the same as data),
# read and built by extract_value and insert_value.  (Numba's struct proxies store it to
# a stack slot and load it back: an alloca per use that LLVM must remove, thousands in
# a nested dual's loop.)
#: DualModel's members, in order: their positions are what extract/insert_value use.
MEMBERS = ("val", "parts")
_VALUE, _PARTS = MEMBERS.index("val"), MEMBERS.index("parts")


def partials_field(builder, value):
    """Codegen: the partials tuple of a dual."""
    return builder.extract_value(value, _PARTS)


def value_field(builder, value):
    """Codegen: the value of a dual."""
    return builder.extract_value(value, _VALUE)


def fields(context, builder, ty, value):
    """Codegen: the value and the list of partials of a dual."""
    parts = partials_field(builder, value)
    return value_field(builder, value), [builder.extract_value(parts, i) for i in range(ty.n)]


def element_type(value, parts_dtype):
    """The value type of a dual made of a ``value`` and partials of ``parts_dtype``: the
    value's (a number's float type), as deep as the deeper of the two."""
    if isinstance(value, DualType) or not isinstance(parts_dtype, DualType):
        return as_float(value)
    return DualType(element_type(value, parts_dtype.dtype), parts_dtype.n)


@register_model(DualType)
class DualModel(models.StructModel):
    def __init__(self, dmm, fe_type):
        types_of = {"val": fe_type.dtype, "parts": fe_type.partials_type}
        members = [(name, types_of[name]) for name in MEMBERS]
        super().__init__(dmm, fe_type, members)

    def traverse(self, builder):
        # What Numba's reference counting walks for meminfos: a dual holds numbers only.
        # (A struct's default emits an extract of every member, recursively, at each
        # incref and decref of a variable: 40 per Dual(Dual(float64, 3), 9), all dead
        # code, which made most of a nested loop's lowering and LLVM's parsing.)
        return []


@infer_getattr
class DualAttributes(AttributeTemplate):
    """``x.val`` and ``x.parts`` in the rules' Numba code."""
    key = DualType

    def resolve_val(self, dual):
        return dual.dtype

    def resolve_parts(self, dual):
        return dual.partials_type


@lower_getattr(DualType, "val")
def _get_value(context, builder, ty, value):
    return value_field(builder, value)


@lower_getattr(DualType, "parts")
def _get_partials(context, builder, ty, value):
    return partials_field(builder, value)


def build_dual(context, builder, dualty, value, parts):
    """Codegen: pack an LLVM value and a list of LLVM partials into a dual."""
    dual = ir.Constant(context.get_value_type(dualty), ir.Undefined)
    dual = builder.insert_value(dual, value, _VALUE)
    return builder.insert_value(dual, context.make_tuple(builder, dualty.partials_type, parts),
                                _PARTS)


def rule_intrinsic(definition):
    """``numba.extending.intrinsic(definition)``, keeping ``definition`` (its typing and
    codegen) on it for the rules lowered in place (:mod:`.builtins`) to call directly."""
    wrapped = intrinsic(definition)
    wrapped.definition = definition
    return wrapped


@rule_intrinsic
def make_dual(typingctx, value, parts):
    """``make_dual(value, parts)``: a dual of ``value``'s float type.

    The partials are cast to the value's type, so a rule may compute a derivative
    in a wider type than its value (a float64 literal times a float32 value).
    """
    if not (isinstance(value, REAL + (DualType,)) and isinstance(parts, types.UniTuple)
            and isinstance(parts.dtype, REAL + (DualType,))):
        return None
    dtype = element_type(value, parts.dtype)
    dualty = DualType(dtype, parts.count)

    def codegen(context, builder, sig, args):
        v, p = args
        v = context.cast(builder, v, value, dtype)
        elems = [context.cast(builder, builder.extract_value(p, i), parts.dtype, dtype)
                 for i in range(parts.count)]
        return build_dual(context, builder, dualty, v, elems)

    return dualty(value, parts), codegen


@lower_cast(types.Float, DualType)
@lower_cast(types.Integer, DualType)
@lower_cast(types.Boolean, DualType)
def _number_to_dual(context, builder, fromty, toty, val):
    value = context.cast(builder, val, fromty, toty.dtype)
    zero = zero_of(context, builder, toty.dtype)
    return build_dual(context, builder, toty, value, [zero] * toty.n)


@lower_cast(DualType, DualType)
def _dual_to_dual(context, builder, fromty, toty, val):
    if fromty.depth < toty.depth:       # a shallower dual is a constant
        return _number_to_dual(context, builder, fromty, toty, val)
    value, parts = fields(context, builder, fromty, val)
    parts = [context.cast(builder, p, fromty.dtype, toty.dtype) for p in parts]
    return build_dual(context, builder, toty, context.cast(builder, value, fromty.dtype,
                                                           toty.dtype), parts)


@intrinsic
def value_of(typingctx, x):
    """The value of a dual, or the number itself (for use inside jitted code).  An
    intrinsic, not an overload: Numba compiles each overload as a function of its own
    first (~0.05 s of a kernel's first compile)."""
    if isinstance(x, DualType):
        def codegen(context, builder, sig, args):
            return value_field(builder, args[0])
        return x.dtype(x), codegen
    if isinstance(x, REAL):
        return types.unliteral(x)(x), lambda context, builder, sig, args: args[0]
    return None
