"""The dual operators as Numba builtins: typed by a template, lowered in place.

An ``@overload`` rule is compiled as a function of its own for every signature it
meets: ~0.05-0.1 s each, a second of a ten-kernel chain's first gradient and more of a
nested (second-order) loop's.  The operators every kernel uses (``+ - * /``, negation,
comparisons, truth) are written here once, as a *rule body* over :class:`Operand`\\ s,
and run by two small interpreters: :class:`Typing` on types alone (the template's
result type) and :class:`Lowering` on LLVM values (the code, emitted inline where the
kernel uses the operator: nothing compiled of its own).

Each step of a body is Numba's own operation on the signature Numba resolves for it
(the value of ``x.val * y.val`` is what Numba's ``*`` gives, in the types an overload's
``x.val * y.val`` is computed in: a nested dual's by these same rules, one level down)
or a partials intrinsic's definition (:mod:`.partials`), so the results are those of
the overloads these replace, bit for bit.
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
        """A partials intrinsic (:mod:`.partials`, ``make_dual``) on ``args``."""
        template = intrinsic.definition(self.typingctx, *(a.ty for a in args))
        if template is None:
            raise _NoRule
        sig, codegen = template
        return self._emit_intrinsic(sig, codegen, args)

    def constant(self, number):
        """A literal of a rule's formula: a Python float is a float64 to Numba."""
        return Operand(types.float64 if isinstance(number, float) else types.int64)

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
    parts = {"dd": lambda: r.partials(P.add, r.parts(x), r.parts(y)),
             "dn": lambda: r.parts(x),
             "nd": lambda: r.parts(y)}[case]()
    return r.partials(make_dual, r.call(operator.add, r.value(x), r.value(y)), parts)


def _sub(r, case, x, y):
    parts = {"dd": lambda: r.partials(P.sub, r.parts(x), r.parts(y)),
             "dn": lambda: r.parts(x),
             "nd": lambda: r.partials(P.neg, r.parts(y))}[case]()
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
    if case == "dd":        # (x/y)' = x'/y - y' (x/y)/y: reuses the quotient
        reciprocal = r.call(operator.truediv, r.constant(1.0), yv)
        slope = r.call(operator.truediv, r.call(operator.neg, q), yv)
        parts = r.partials(P.lincomb, r.parts(x), reciprocal, r.parts(y), slope)
    elif case == "dn":
        parts = r.partials(P.scale, r.parts(x), r.call(operator.truediv, r.constant(1.0), y))
    else:
        slope = r.call(operator.truediv, r.call(operator.neg, q), yv)
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


def _truth(r, case, x):
    # ``if d:`` and ``while d:`` look at the value, like every comparison.
    return r.call(operator.ne, r.value(x), r.constant(0))


# ---- registration ---------------------------------------------------------------------------

def _case(args):
    if len(args) == 1:
        return "d" if isinstance(args[0], DualType) else None
    return mixed_case(*args)


def register(fn, body, arity):
    """``fn`` on duals: typed by running ``body`` on types, lowered by running it on
    values."""
    class DualRule(AbstractTemplate):
        key = fn

        def generic(self, args, kws):
            case = None if kws or len(args) != arity else _case(args)
            if case is None:
                return None
            try:
                result = body(Typing(self.context), case, *map(Operand, args))
            except _NoRule:
                return None
            return signature(result.ty, *args)

    infer_global(fn)(DualRule)

    def lower(context, builder, sig, args):
        operands = [Operand(ty, value) for ty, value in zip(sig.args, args)]
        return body(Lowering(context, builder), _case(sig.args), *operands).llvm

    if arity == 1:
        lower_builtin(fn, DualType)(lower)
        return
    for number in REAL:
        lower_builtin(fn, DualType, number)(lower)
        lower_builtin(fn, number, DualType)(lower)
    lower_builtin(fn, DualType, DualType)(lower)


for _op, _iop, _body in ((operator.add, operator.iadd, _add),
                         (operator.sub, operator.isub, _sub),
                         (operator.mul, operator.imul, _mul),
                         (operator.truediv, operator.itruediv, _truediv)):
    register(_op, _body, 2)
    register(_iop, _body, 2)    # (``x += y`` on a dual is ``x + y``: a dual is a value)
for _op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
    register(_op, _comparison(_op), 2)
register(operator.neg, _neg, 1)
register(operator.pos, _pos, 1)
register(bool, _truth, 1)
