"""The rules the core looks up, and the one way to register them: :func:`defrule`.

The core holds no math: each NumPy function or ufunc it can trace is described here by
a rule module (:mod:`dualbcast.rules`) through :func:`defrule`, and the core's boxes
look the description up by function.  The tables below are what ``defrule`` fills;
nothing else writes them.
"""
from typing import NamedTuple, Optional

UFUNC_VJPS = {}             # ufunc -> a vjp (or None) per input
SCALAR_UFUNC_VJPS = {}      # ufunc -> the same for an all-scalar call
SCALAR_LINEAR_PARTIALS = {}  # ufunc -> partials(x, y) -> (dx, dy), or the constant pair
FUNCTION_RULES = {}         # function -> its trace(*args, **kwargs)
CONSTANTS = set()           # functions and ufuncs whose results are constants
SHAPE_ONLY_FUNCTIONS = set()  # those of them that depend on shapes and dtypes only
SCALAR_FORMS = {}           # ufunc -> its ScalarForm (the core only keeps it)
JVP_RULES = {}              # a record's func -> jvp(tangents, ans, *args, **kwargs)
DIAGONAL = set()            # funcs whose vjps are g times a local derivative, elementwise
BATCH_RULES = {}            # function (np.ufunc: every ufunc's call) -> its batching rule
BATCH_ITEMWISE = {}         # function -> the types of argument its batching rule takes item by item


class BackwardOperations:
    """The two operations a traced backward pass and a forward sweep perform on
    cotangents and tangents themselves (:func:`.tape.traced_backward`), supplied by the
    rules: ``product(g, local)``, the NaN-safe product of a cotangent (or tangent) and
    a local partial; ``dense(sparse, primal)``, a :class:`.tape.SparseCotangent` as a
    dense cotangent of ``primal``'s shape and dtype.  Both differentiable."""

    __slots__ = ("product", "dense")

    def __init__(self):
        self.product = self.dense = None


BACKWARD_OPERATIONS = BackwardOperations()


class ScalarForm(NamedTuple):
    """A scalar rule written as expressions over ``{x}`` and ``{y}`` (the operands),
    ``{g}`` (the output's cotangent), ``pow`` (the C library's) and ``math``, for code
    that compiles a program (``dualbcast.jit``'s fusion and elementwise loops).  They
    must be the IEEE operations, in the same order, that the rule's Python functions
    perform on float64 scalars (``value``: and NumPy's loop on float64 arrays), so that
    compiled code gives the replay's bits.

    ``value``: the output; then either ``partials``, the local partial per input that
    the rule's ``partials`` form (None: no form), or ``cotangents``, the cotangent per
    input that its scalar vjps give (NaN-safe: 0 wherever ``{g}`` is 0)."""
    value: str
    partials: Optional[tuple] = None
    cotangents: Optional[tuple] = None


def defjvp(func, jvp):
    """Tell the forward mode how to push tangents through records of ``func`` (the
    function a rule records: a ufunc, a NumPy function, or a rule's own closure):
    ``jvp(tangents, ans, *args, **kwargs)``, ``tangents`` one per argument (None where
    the argument is a constant or has no tangent), returns the output's tangent.
    Without one, a record's tangent comes from its vjps: elementwise ones (ufuncs)
    directly, any other by transposing the vjp (a reverse pass over it, slower)."""
    JVP_RULES[func] = jvp


def defbatch(rule, *funcs, itemwise=()):
    """Tell ``vmap`` how to compute each of ``funcs`` on batched values (see
    :mod:`.batching`): ``rule(size, func, args, batched, **kwargs)``, ``args`` the
    arguments with each batched value as its stack of ``size`` examples along axis 0,
    ``batched`` a bool per argument, returns the result with the batch along axis 0
    (or a :class:`.batching.Unbatched`).  An argument whose type is in ``itemwise``
    (``(list, tuple)`` for np.stack's arrays, ``(tuple,)`` for an index's parts) is
    taken item by item, with a tuple of flags; any other list is an array constant.
    ``np.ufunc`` stands for every ufunc's call, ``(np.ufunc, method)`` for a ufunc
    method (``reduce``: ``ufunc=`` among the keywords)."""
    for func in funcs:
        BATCH_RULES[func] = rule
        if itemwise:
            BATCH_ITEMWISE[func] = itemwise


def deflinear(*funcs):
    """Each of ``funcs`` is linear in its differentiable arguments jointly (a reshape,
    a sum, an index, a concatenation): its tangent is the function of the tangents,
    a constant among those arguments as zeros, the others (shapes, indices) kept."""
    for func in funcs:
        JVP_RULES[func] = LINEAR


LINEAR = "linear"           # a JVP_RULES entry: see deflinear


def defrule(func, *, vjps=None, scalar_vjps=None, partials=None, form=None, trace=None,
            constant=False, shape_only=False, diagonal=None):
    """Tell the core how to trace ``func``.  One of:

    - ``vjps`` (a ufunc called on traced values, or reached through an operator): one
      ``vjp(g, ans, *inputs)`` per input, giving that input's cotangent at its own
      shape, or None where no gradient flows.  ``scalar_vjps``: the same for a call
      whose inputs are all scalars (nothing to unbroadcast: the hot path of scalar
      code; default ``vjps``).  ``partials``: for a two-input ufunc whose local
      partials cost little, ``partials(x, y) -> (dx, dy)`` on scalars (either may be
      None: no cheap form), or the pair itself when it is constant (``add``): the
      record keeps them and the backward pass only multiplies.  ``form``: the same
      rule as a :class:`ScalarForm`, for code that compiles it;
    - ``trace`` (a NumPy function reached through ``__array_function__``, or a method):
      called with ``func``'s arguments, boxes among them, it checks them and records
      the call (:func:`dualbcast.core.box.apply`), or builds it from other traced
      operations;
    - ``constant=True``: ``func``'s result does not depend differentiably on its
      inputs (a comparison, ``np.floor``, ``np.argmax``): computed on the values, it is
      a constant, which a replay must check again — unless ``shape_only=True``: it
      depends on the inputs' shapes and dtypes only (``np.shape``, ``np.zeros_like``).
    """
    given = (vjps is not None) + (trace is not None) + bool(constant)
    if given != 1:
        raise TypeError(f"defrule({func!r}): give exactly one of vjps=, trace=, constant=True")
    if (scalar_vjps is not None or partials is not None or form is not None) and vjps is None:
        raise TypeError(f"defrule({func!r}): scalar_vjps=, partials= and form= go with vjps=")
    if shape_only and not constant:
        raise TypeError(f"defrule({func!r}): shape_only=True goes with constant=True")
    if vjps is not None:
        if diagonal or diagonal is None and scalar_vjps is not None:
            DIAGONAL.add(func)
        UFUNC_VJPS[func] = tuple(vjps)
        SCALAR_UFUNC_VJPS[func] = tuple(vjps if scalar_vjps is None else scalar_vjps)
        if partials is not None:
            SCALAR_LINEAR_PARTIALS[func] = partials
        if form is not None:
            SCALAR_FORMS[func] = form
    elif trace is not None:
        FUNCTION_RULES[func] = trace
    else:
        CONSTANTS.add(func)
        if shape_only:
            SHAPE_ONLY_FUNCTIONS.add(func)
