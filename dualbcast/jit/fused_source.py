"""What a fused function's source (:mod:`.fusion`) is written from besides the records:
why a program is not fused, and a rule's scalar form as straight-line code."""
import ast


class NotFusable(Exception):
    """Why a program is not fused (its message, for ``explain()`` and the log)."""


def require(condition, why=""):
    """:class:`NotFusable` (saying ``why``) unless ``condition``."""
    if not condition:
        raise NotFusable(why)


class _Select(ast.NodeTransformer):
    """``x if c else y`` as ``_where(c, x, y)``, ``a or b`` and ``a and b`` of
    comparisons as ``a | b`` and ``a & b``: the fused function stays one block."""

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return ast.Call(ast.Name("_where", ast.Load()), [node.test, node.body, node.orelse], [])

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        op = ast.BitOr() if type(node.op) is ast.Or else ast.BitAnd()
        combined = node.values[0]
        for value in node.values[1:]:
            combined = ast.BinOp(combined, op, value)
        return combined


# What a rule's form may be made of: float arithmetic and comparisons of names and
# constants, pow, conditional expressions and ``and``/``or`` of comparisons (evaluated
# all ways: pure, nothing raises under the NumPy error model).
_PURE = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.IfExp,
         ast.Call, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


_CONDITIONS = (ast.Compare, ast.BoolOp)


def branch_free(expression):
    """``expression`` (a form filled in) with no branch: conditional expressions as
    calls of ``_where``."""
    tree = ast.parse(expression, mode="eval")
    for node in ast.walk(tree):
        require(isinstance(node, _PURE) or type(node) is ast.Compare and len(node.ops) == 1
                or type(node) is ast.BoolOp and all(type(value) in _CONDITIONS
                                                    for value in node.values))
        require(type(node) is not ast.Call or
                type(node.func) is ast.Name and node.func.id == "pow")
    return ast.unparse(_Select().visit(tree))
