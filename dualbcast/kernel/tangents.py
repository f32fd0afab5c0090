"""Forward mode and second order from one loop: the tangent modes of a kernel.

``kernel._prepare(mode, values, positions)`` with ``values`` the arguments (bound:
positional and complete, no boxes) gives for these modes a :class:`TangentCall`:

- ``_prepare("tangent", values, tangent_positions).tangent(values, tangents)``
  -> ``(value, value_tangent)``, both at the broadcast shape;
- ``_prepare("sum_tangent", values, tangent_positions).sum_tangent(values, tangents)``
  -> ``(total, total_tangent)``;
- ``_prepare("partials_tangent", values, (wrt, tangent_positions))
  .partials_tangent(values, tangents)``
  -> ``(value, value_tangent, partials, partial_tangents)``, all at the broadcast
  shape: ``partials[i]`` = dk/darg[wrt[i]], ``partial_tangents[i]`` = sum over j of
  d2k/(darg[wrt[i]] darg[j]) * t[j];
- ``_prepare("sum_partials_tangent", values, (wrt, tangent_positions))
  .sum_partials_tangent(values, tangents)``
  -> ``(total, total_tangent, gradients, gradient_tangents)``: each gradient (and its
  tangent: a Hessian-vector product) reduced to its argument's shape and dtype, as
  ``sum_and_partials`` gives it.

``_prepare("sum_partials_tangent", values, (wrt, tangent_positions, width))`` carries
``width`` tangent directions in one loop (:mod:`.loops`): ``tangents`` then holds
``width`` tangents per position (position by position), and the tangent of the total
and of each gradient is given per direction (``PreparedCall.sum_partials_tangent``).

``tangents`` is a tuple aligned with ``tangent_positions`` (sorted or not, no
repeats), each a float scalar or an array broadcastable to the broadcast shape of the
arguments (it may not enlarge it).  Partials are tuples always.  Results are in the
arguments' result dtype (a float64 tangent of a float32 call is computed in float32).
Integer and bool arguments take no tangent (they are never differentiated).

The tangents are operands of the loop, broadcast like the arguments, so a loop is
specialised on their types, shapes and strides too: the call prepared for one tuple of
tangents' signature is kept per signature.  First order: each argument with a tangent is
a ``Dual(float, 1)`` seeded with it.  Second order: nested duals
``Dual(Dual(float, 1), n)`` (see :mod:`dualbcast.dual.dualtype`): the inner partial
carries the tangent, the outer ``n`` the partials w.r.t. the ``wrt`` arguments.
"""
from ..positions import argument_positions
from .arguments import plan_call, signature_key
from .loops import LoopSpec
from .tracing import traced

_MAX_SIGNATURES = 64


class TangentCall:
    """The calls of one tangent mode over arguments of one signature, each prepared at
    the first call with its tangents' signature."""

    __slots__ = ("kernel", "mode", "values_plan", "wrt", "positions", "width", "_calls")

    def __init__(self, kernel, mode, values, positions):
        name = kernel.__name__
        self.kernel, self.mode = kernel, mode
        self.values_plan = plan = plan_call(name, values)
        nargs = len(plan.kinds)
        self.width = 1
        if mode in ("partials_tangent", "sum_partials_tangent"):
            if not (isinstance(positions, (tuple, list)) and len(positions) in (2, 3)):
                raise TypeError(f"{name}: {mode} takes (wrt, tangent_positions), "
                                f"not {positions!r}")
            wrt, positions, *width = positions
            if width:
                self.width = width[0]
                if mode != "sum_partials_tangent" or type(self.width) is not int \
                        or self.width < 1:
                    raise TypeError(f"{name}: {mode} takes no tangent width {width[0]!r} "
                                    f"(sum_partials_tangent: an int >= 1)")
            self.wrt = kernel._active(wrt, plan)[0]
        else:
            self.wrt = ()
        positions = argument_positions(positions, nargs, "tangent positions", name)[1]
        if not positions:
            raise ValueError(f"{name}: {mode} needs at least one argument with a tangent")
        _differentiable(kernel, plan, positions)
        self.positions = positions
        self._calls = {}

    def _prepared(self, values, tangents):
        key = signature_key(tangents) if type(tangents) is tuple else None
        call = self._calls.get(key) if key is not None else None
        if call is None:
            count = len(self.positions) * self.width
            if not isinstance(tangents, (tuple, list)) or len(tangents) != count:
                raise TypeError(f"{self.kernel.__name__}: tangents must be a tuple of "
                                f"{count} ({self.width} per tangent position "
                                f"{self.positions}), not {tangents!r}")
            call = self._make(values, tangents)
            if key is not None:
                if len(self._calls) >= _MAX_SIGNATURES:
                    self._calls.clear()
                self._calls[key] = call
        return call

    def _make(self, values, tangents):
        kernel, plan = self.kernel, self.values_plan
        name = kernel.__name__
        if traced(tangents):
            # (the public tangent methods; the fast rules never pass one: see
            # dualbcast.rules.fast_nested.run_loop)
            raise TypeError(
                f"{name}: a tangent traced by grad/jvp was passed to {name}'s own tangent "
                f"methods (jvp, sum_jvp, tangents=), which compute on plain arrays and are "
                f"not differentiated through; write db.jvp({name}, primals, tangents) "
                f"(or {name}.sum) instead: it is differentiated in its tangents to any order")
        joint = plan_call(name, tuple(values) + tuple(tangents))
        if joint.shape != plan.shape:
            positions = [i for i in self.positions for _ in range(self.width)]
            described = ", ".join(f"{i}: {shape}" for i, (shape, _, _) in
                                  zip(positions, joint.described[len(values):]))
            raise ValueError(f"{name}: tangents of shapes {{{described}}} do not broadcast "
                             f"to the arguments' broadcast shape {plan.shape}")
        # The tangents are cast to the arguments' dtype: they never change the result's.
        joint.dtype = plan.dtype
        spec = LoopSpec(self.mode, joint.kinds, self.wrt, joint.ndim, (), plan.dtype.name,
                        self.positions, self.width)
        return kernel._prepared_call(spec, joint)

    def prepared_for(self, operands):
        """The prepared call that runs ``operands`` (the arguments, then the
        tangents): one of this mode's kernel loops, for code that calls it itself."""
        nargs = len(self.values_plan.kinds)
        return self._prepared(tuple(operands[:nargs]), tuple(operands[nargs:]))

    def _run(self, mode, values, tangents):
        if mode != self.mode:
            raise TypeError(f"{self.kernel.__name__}: a call prepared for {self.mode} "
                            f"cannot run {mode}")
        return getattr(self._prepared(values, tangents), mode)((*values, *tangents))

    def tangent(self, values, tangents):
        return self._run("tangent", values, tangents)

    def sum_tangent(self, values, tangents):
        return self._run("sum_tangent", values, tangents)

    def partials_tangent(self, values, tangents):
        return self._run("partials_tangent", values, tangents)

    def sum_partials_tangent(self, values, tangents):
        return self._run("sum_partials_tangent", values, tangents)


def _differentiable(kernel, plan, positions):
    for i in positions:
        dtype = plan.described[i][1]
        if dtype.kind != "f":
            raise TypeError(f"{kernel.__name__}: argument {i} of dtype {dtype} cannot take "
                            f"a tangent: integer and bool arguments are promoted to float "
                            f"for values but never differentiated")
