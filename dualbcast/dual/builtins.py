"""The dual operators as Numba builtins: typed by a template, lowered in place.

An ``@overload`` rule is compiled as a function of its own for every signature it
meets: ~0.05-0.1 s each, a second of a ten-kernel chain's first gradient and more of a
nested (second-order) loop's.  The operators every kernel uses (``+ - * /``, negation,
comparisons, truth, ``x ** n`` of a literal integer ``n``) are written here once, as a
*rule body* over :class:`Operand`\\ s, and run by two small interpreters:
:class:`Typing` on types alone (the template's result type) and :class:`Lowering` on
LLVM values (the code, emitted inline where the kernel uses the operator: nothing
compiled of its own).

Each step of a body is Numba's own operation on the signature Numba resolves for it
(the value of ``x.val * y.val`` is what Numba's ``*`` gives, in the types an overload's
``x.val * y.val`` is computed in: a nested dual's by these same rules, one level down)
or a partials intrinsic's definition (:mod:`.partials`), so the results are those of
the overloads these replace, bit for bit (but a float32 dual's ``x ** n``: see
:func:`_literal_power`).
"""
import operator
from typing import NamedTuple

from numba.core import types
from numba.core.typing.templates import AbstractTemplate, infer_global, signature
from numba.extending import lower_builtin

from . import partials as P
from .dualtype import REAL, DualType, make_dual, partials_field, value_field
from .rules import mixed_case


class Operand(NamedTuple):
    """A value in a rule body: its Numba type and, when lowering, its LLVM value."""
    ty: types.Type
    llvm: object = None


class _NoRule(Exception):
    """A step of a body has no Numba typing: the operator does not apply (Numba then
    reports the call it could not type, as for any other)."""


class Typing:
    """Runs a rule body on types: each step resolves the type Numba gives it."""

    def __init__(self, typingctx):
        self.typingctx = typingctx

    def call(self, fn, *args):
        """``fn(*args)`` as Numba computes it: an operator of numbers, or of duals."""
        sig = self.typingctx.resolve_function_type(fn, tuple(a.ty for a in args), {})
        if sig is None:
            raise _NoRule
        return self._emit_call(fn, sig, args)

    def partials(self, intrinsic, *args):
        """A partials intrinsic (:mod:`.partials`, ``make_dual``) on ``args`` (literal
        types as they are: the definitions accept a number's literal as the number)."""
        template = intrinsic.definition(self.typingctx, *(a.ty for a in args))
        if template is None:
            raise _NoRule
        sig, codegen = template
        return self._emit_intrinsic(sig, codegen, args)

    def constant(self, number):
        """A literal of a rule's formula: a Python float is a float64 to Numba."""
        return Operand(types.float64 if isinstance(number, float) else types.int64)

    def literal(self, integer):
        """An integer known when compiling (``n - 1`` of a literal ``n``)."""
        return Operand(types.literal(integer))

    def cast(self, x, ty):
        """``x`` as a ``ty`` (a number rounded to another float type)."""
        return Operand(ty)

    def value(self, x):
        """``value_of(x)``: a dual's value (one level down), a number itself."""
        return Operand(x.ty.dtype) if isinstance(x.ty, DualType) else x

    def parts(self, x):
        return Operand(x.ty.partials_type)

    def _emit_call(self, fn, sig, args):
        return Operand(sig.return_type)

    def _emit_intrinsic(self, sig, codegen, args):
        return Operand(sig.return_type)


class Lowering(Typing):
    """Runs a rule body on LLVM values, emitting each step where the rule is used."""

    def __init__(self, context, builder):
        super().__init__(context.typing_context)
        self.context, self.builder = context, builder

    def constant(self, number):
        ty = super().constant(number).ty
        return Operand(ty, self.context.get_constant(ty, number))

    def literal(self, integer):
        ty = super().literal(integer).ty
        return Operand(ty, self.context.get_constant(ty.literal_type, integer))

    def cast(self, x, ty):
        return Operand(ty, self.context.cast(self.builder, x.llvm, x.ty, ty))

    def value(self, x):
        if isinstance(x.ty, DualType):
            return Operand(x.ty.dtype, value_field(self.builder, x.llvm))
        return x

    def parts(self, x):
        return Operand(x.ty.partials_type, partials_field(self.builder, x.llvm))

    def _emit_call(self, fn, sig, args):
        # As Numba lowers a call: each argument cast to the signature's type first.
        values = [self.context.cast(self.builder, a.llvm, a.ty, ty)
                  for a, ty in zip(args, sig.args)]
        return Operand(sig.return_type, self.context.get_function(fn, sig)(self.builder, values))

    def _emit_intrinsic(self, sig, codegen, args):
        return Operand(sig.return_type, codegen(self.context, self.builder, sig,
                                                [a.llvm for a in args]))


# ---- the rule bodies: (interpreter, case, *operands) -> Operand ----------------------------
# ``case`` is mixed_case's "dd", "dn" or "nd" for two operands, "d" for one.

def _add(r, case, x, y):
    if case == "dd":
        parts = r.partials(P.add, r.parts(x), r.parts(y))
    else:
        parts = r.parts(x if case == "dn" else y)
    return r.partials(make_dual, r.call(operator.add, r.value(x), r.value(y)), parts)


def _sub(r, case, x, y):
    if case == "dd":
        parts = r.partials(P.sub, r.parts(x), r.parts(y))
    elif case == "dn":
        parts = r.parts(x)
    else:
        parts = r.partials(P.neg, r.parts(y))
    return r.partials(make_dual, r.call(operator.sub, r.value(x), r.value(y)), parts)


def _mul(r, case, x, y):
    xv, yv = r.value(x), r.value(y)
    if case == "dd":        # product rule: x' y + y' x
        parts = r.partials(P.lincomb, r.parts(x), yv, r.parts(y), xv)
    elif case == "dn":
        parts = r.partials(P.scale, r.parts(x), y)
    else:
        parts = r.partials(P.scale, r.parts(y), x)
    return r.partials(make_dual, r.call(operator.mul, xv, yv), parts)


def _truediv(r, case, x, y):
    xv, yv = r.value(x), r.value(y)
    q = r.call(operator.truediv, xv, yv)
    if case == "dn":
        return r.partials(make_dual, q, r.partials(
            P.scale, r.parts(x), r.call(operator.truediv, r.constant(1.0), y)))
    # (x/y)' = x'/y - y' (x/y)/y: reuses the quotient
    slope = r.call(operator.truediv, r.call(operator.neg, q), yv)
    if case == "dd":
        reciprocal = r.call(operator.truediv, r.constant(1.0), yv)
        parts = r.partials(P.lincomb, r.parts(x), reciprocal, r.parts(y), slope)
    else:
        parts = r.partials(P.scale, r.parts(y), slope)
    return r.partials(make_dual, q, parts)


def _neg(r, case, x):
    return r.partials(make_dual, r.call(operator.neg, r.value(x)),
                      r.partials(P.neg, r.parts(x)))


def _pos(r, case, x):
    return x


def _comparison(op):
    def compare(r, case, x, y):
        return r.call(op, r.value(x), r.value(y))
    return compare


def _literal_power(r, case, x, n):
    # x ** n for a literal integer n (a kernel's r ** 2, (s / r) ** 6): arithmetic.py's _pow
    # written out for that n and lowered in place, where _pow is compiled per dual type.
    # Its value is the value mode's x ** n (for n < 0, 1.0 / x ** -n: Numba's power raises
    # at 0), in x's precision: _pow's branches unify a float32 dual's value to float64.
    k = n.ty.literal_value
    xv = r.value(x)
    if k >= 0 or isinstance(xv.ty, DualType):
        value = r.call(operator.pow, xv, n)
    else:
        reciprocal = r.call(operator.truediv, r.constant(1.0),
                            r.call(operator.pow, xv, r.literal(-k)))
        value = r.cast(reciprocal, xv.ty)
    if k == 0:
        slope = r.constant(0.0)
    elif k > 0:
        slope = r.call(operator.mul, r.constant(k),
                       r.call(operator.pow, xv, r.literal(k - 1)))
    else:
        slope = r.call(operator.mul, r.constant(k), r.call(operator.truediv, value, xv))
    return r.partials(make_dual, value, r.partials(P.scale, r.parts(x), slope))


def _truth(r, case, x):
    # ``if d:`` and ``while d:`` look at the value, like every comparison.
    return r.call(operator.ne, r.value(x), r.constant(0))


# ---- registration ---------------------------------------------------------------------------

def _binary(args):
    return mixed_case(*args) if len(args) == 2 else None


def _unary(args):
    return "d" if len(args) == 1 and isinstance(args[0], DualType) else None


def _literal_power_args(args):
    # (``x ** n`` with any other ``n`` is arithmetic.py's _pow)
    if len(args) == 2 and isinstance(args[0], DualType) \
            and isinstance(args[1], types.IntegerLiteral):
        return "dn"
    return None


#: What the binary rules are lowered for: the operands mixed_case admits (a dual, and a
#: dual or a number of REAL's classes, literals among them).
BINARY = [(DualType, DualType)] + [(DualType, n) for n in REAL] + [(n, DualType) for n in REAL]


def register(fn, body, case, lowered_for, prefer_literal=False):
    """``fn`` on duals: for the arguments ``case`` gives a case of (not None), typed by
    running ``body`` on types and lowered (for each tuple of type classes in
    ``lowered_for``) by running it on values."""
    class DualRule(AbstractTemplate):
        key = fn

        def generic(self, args, kws):
            which = None if kws else case(args)
            if which is None:
                return None
            try:
                result = body(Typing(self.context), which, *map(Operand, args))
            except _NoRule:
                return None
            return signature(result.ty, *args)

    # Numba tries a function's templates in the order they were registered and takes the
    # first that types the call: its own (for numbers, bool's for any object) decline a
    # dual, which converts to no number type, and these come before the overloads
    # registered after them (arithmetic's _pow).
    DualRule.prefer_literal = prefer_literal
    infer_global(fn)(DualRule)

    def lower(context, builder, sig, args):
        operands = [Operand(ty, value) for ty, value in zip(sig.args, args)]
        result = body(Lowering(context, builder), case(sig.args), *operands)
        return context.cast(builder, result.llvm, result.ty, sig.return_type)

    for types_ in lowered_for:
        lower_builtin(fn, *types_)(lower)


for _op, _iop, _body in ((operator.add, operator.iadd, _add),
                         (operator.sub, operator.isub, _sub),
                         (operator.mul, operator.imul, _mul),
                         (operator.truediv, operator.itruediv, _truediv)):
    register(_op, _body, _binary, BINARY)
    register(_iop, _body, _binary, BINARY)  # (``x += y`` on a dual is ``x + y``: a value)
for _op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
    register(_op, _comparison(_op), _binary, BINARY)
register(operator.neg, _neg, _unary, [(DualType,)])
register(operator.pos, _pos, _unary, [(DualType,)])
register(bool, _truth, _unary, [(DualType,)])
# Typed here before arithmetic.py's _pow overload (which this module is imported before:
# of two templates that both type x ** 2, Numba takes the first), with literals first.
for _op in (operator.pow, operator.ipow):
    register(_op, _literal_power, _literal_power_args, [(DualType, types.IntegerLiteral)],
             prefer_literal=True)
