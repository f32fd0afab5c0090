"""What the transformations know of each operation: one :class:`Primitive` per function,
and the one way to describe it, :func:`define`.

The core holds no math: each NumPy function or ufunc it can trace (and each function a
rule records) is described by a rule module (:mod:`dualbcast.rules`) through
:func:`define` -- how a tape traces it and its vjps, its jvp for forward mode, its
batching rule for ``vmap``, its scalar form for compiled code -- and the traces look
the description up by function (:data:`PRIMITIVES`).
"""
from typing import NamedTuple, Optional


class Primitive:
    """One operation (``func``: a ufunc, a NumPy function, or a function a rule records)
    and what each transformation needs of it; every field None (or False) where the
    operation has no such rule.

    Tracing (a tape): at most one of
      ``vjps``: a ufunc's ``vjp(g, ans, *inputs)`` per input (None: no gradient flows),
      with ``scalar_vjps`` for an all-scalar call, ``partials`` (cheap local partials
      of a two-input ufunc on scalars, or the constant pair), ``form`` (a
      :class:`ScalarForm`, for code that compiles it), ``diagonal`` (each vjp is ``g``
      times a local derivative, elementwise);
      ``trace``: a NumPy function's rule, called with its arguments (boxes among them),
      which records the call (:func:`.box.apply`) or builds it from other operations;
      ``constant``: its result does not depend differentiably on its inputs (and
      ``shape_only``: it depends on their shapes and dtypes alone).
    Forward mode (a record of ``func``): ``jvp(tangents, ans, *args, **kwargs)``,
      ``tangents`` one per argument (None where it has none), giving the output's
      tangent; or ``linear``: its tangent is ``func`` of the tangents.  Without either,
      an elementwise rule's vjps push the tangent, any other's are transposed.
    ``vmap``: ``batch(size, func, args, batched, **kwargs)``, ``args`` with each batched
      value as its stack of ``size`` examples along axis 0, ``batched`` a flag per
      argument (a tuple of flags for an argument of a type in ``itemwise``, taken item
      by item), giving the result with the batch along axis 0 (or a
      :class:`.batching.Unbatched`).
    Compiled loops (``dualbcast.jit``, which defines it): ``loop_form``, ``(any_layout,
      maker)`` for a record that is no ufunc's scalar ``form``.
    """

    # (class attributes: the defaults, which ``define`` overrides per primitive; a
    # subclass may give a method instead, a per-call primitive's jvp)
    vjps = scalar_vjps = partials = form = trace = jvp = batch = loop_form = None
    diagonal = constant = shape_only = linear = False
    itemwise = ()

    def __init__(self, func=None):
        self.func = func

    def __repr__(self):
        return f"Primitive({getattr(self.func, '__name__', self.func)!r})"


# What a function without rules has: every field None (``PRIMITIVES.get(f, NO_RULES)``).
NO_RULES = Primitive()

# function -> its Primitive.  ``np.ufunc`` stands for every ufunc's call and
# ``(np.ufunc, method)`` for a ufunc method, where a batching rule serves them all.
PRIMITIVES = {}


def primitive_of(func):
    """``func``'s :class:`Primitive`: registered, or ``func`` itself when it is one (a
    rule's per-call closure with rules of its own), else None."""
    found = PRIMITIVES.get(func)
    if found is None and isinstance(func, Primitive):
        return func
    return found


_TRACING = ("vjps", "trace", "constant")


def define(*funcs, vjps=None, scalar_vjps=None, partials=None, form=None, diagonal=None,
           trace=None, constant=False, shape_only=False, jvp=None, linear=False,
           batch=None, itemwise=(), loop_form=None):
    """Describe each of ``funcs`` (the fields of :class:`Primitive`); a rule module
    describes what it knows, another module may add another transformation's rule
    later.  ``diagonal`` defaults to True where ``scalar_vjps`` are given (elementwise
    ufuncs)."""
    if (scalar_vjps is not None or partials is not None or form is not None) and vjps is None:
        raise TypeError("define: scalar_vjps=, partials= and form= go with vjps=")
    if shape_only and not constant:
        raise TypeError("define: shape_only=True goes with constant=True")
    if jvp is not None and linear:
        raise TypeError("define: give jvp= or linear=True, not both")
    given = {kind for kind, value in zip(_TRACING, (vjps, trace, constant))
             if value is not None and value is not False}
    for func in funcs:
        p = PRIMITIVES.get(func)
        if p is None:
            p = PRIMITIVES[func] = Primitive(func)
        had = {kind for kind in _TRACING if getattr(p, kind) not in (None, False)}
        if len(given | had) > 1:
            raise TypeError(f"define({func!r}): at most one of vjps=, trace=, constant=True "
                            f"(given {sorted(given)}, defined before: {sorted(had)})")
        if vjps is not None:
            p.vjps = tuple(vjps)
            p.scalar_vjps = tuple(vjps if scalar_vjps is None else scalar_vjps)
            p.partials, p.form = partials, form
            p.diagonal = bool(diagonal or diagonal is None and scalar_vjps is not None)
        if trace is not None:
            p.trace = trace
        if constant:
            p.constant, p.shape_only = True, shape_only
        if jvp is not None or linear:
            p.jvp, p.linear = jvp, linear
        if batch is not None:
            p.batch, p.itemwise = batch, itemwise
        if loop_form is not None:
            p.loop_form = loop_form


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
