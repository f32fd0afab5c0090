"""dualbcast kernels as differentiable PyTorch operations (the optional ``[torch]`` extra).

For a model written in PyTorch that applies a scalar function elementwise (a custom
activation, a pair potential, a loss): written as a ``@dualbcast.fast_broadcast``
kernel and wrapped here, it runs as one compiled loop instead of a chain of ``torch``
operations that saves a tensor per operation for the backward pass.
``op = dualbcast.torch.wrap(k)`` makes the kernel a PyTorch function: ``op(*tensors)``
maps it (NumPy/PyTorch broadcasting) and ``op.sum(*tensors)`` sums the map without
materialising it.  The forward pass runs the kernel's dual-number loop once and gets
the value and the partials for exactly the inputs that ``requires_grad``; the backward
pass is one multiply (and a reduction for broadcast inputs).

Second order (``create_graph=True``, double backward, ``torch.autograd.gradgradcheck``)
comes from the kernel's second-order loop (nested duals); a third derivative raises a
RuntimeError saying so.  A backward pass is differentiable in its ``grad_outputs`` as
well (linear in them): a Hessian-vector product differentiated by its vector
(``torch.autograd.functional.hvp``'s double-backward trick) gives H times the cotangent.

Tensors must live on the CPU and be float32 or float64 (integer and bool tensors are
constants); the kernel reads them in place, without a copy.
"""
from __future__ import annotations

from typing import Any

import numpy as np

try:
    import torch
except ImportError as err:          # pragma: no cover (the extra is installed in CI)
    raise ImportError('dualbcast.torch needs PyTorch: pip install "dualbcast[torch]"') from err

from .kernel import FastBroadcast

__all__ = ["wrap", "TorchOp"]

_FLOATS = (torch.float32, torch.float64)
_CONSTANTS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def wrap(kernel: FastBroadcast) -> "TorchOp":
    """Make a kernel a differentiable PyTorch operation.

    ``op(*args)`` maps the kernel over its arguments with broadcasting and
    ``op.sum(*args)`` sums the map without storing it; the arguments are CPU tensors
    or Python numbers.  The forward pass gets the value and the partials of exactly
    the inputs that ``requires_grad`` from one loop of the kernel; the backward pass
    multiplies by them.  Second derivatives (``create_graph=True``, double backward,
    ``torch.autograd.gradgradcheck``) come from the kernel's second-order loop.

    Parameters
    ----------
    kernel : FastBroadcast
        A kernel made by ``@dualbcast.fast_broadcast``.

    Returns
    -------
    TorchOp
        The operation.

    Raises
    ------
    TypeError
        If ``kernel`` is not a ``@fast_broadcast`` kernel.

    See Also
    --------
    TorchOp : The operation's arguments, results and errors.

    Examples
    --------
    >>> import math, torch, dualbcast as db, dualbcast.torch
    >>> @db.fast_broadcast
    ... def softplus(x, beta):
    ...     return math.log1p(math.exp(beta * x)) / beta
    >>> op = dualbcast.torch.wrap(softplus)
    >>> x = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> op.sum(x, 2.0).backward()
    >>> torch.allclose(x.grad, torch.sigmoid(2.0 * x.detach()))
    True
    """
    if not isinstance(kernel, FastBroadcast):
        raise TypeError(f"dualbcast.torch.wrap takes a @fast_broadcast kernel, not "
                        f"{type(kernel).__name__}")
    return TorchOp(kernel)


class TorchOp:
    """A kernel as a differentiable PyTorch operation, made by :func:`wrap`.

    ``op(*args)`` is the kernel's map and ``op.sum(*args)`` its sum, each a
    ``torch.autograd.Function``: differentiable by ``backward`` and
    ``torch.autograd.grad``, twice (the second time from the kernel's second-order
    loop), and in the ``grad_outputs`` of a backward pass (a Hessian-vector product
    differentiated by its vector).  The adapter is reverse mode: ``torch.func``
    transforms and ``torch.autograd.forward_ad`` are not supported (PyTorch raises
    for them).

    The arguments, one per parameter of the kernel (positionally or by name), are
    CPU tensors, dense, float32 or float64 (integer and bool tensors are constants,
    never differentiated), or Python numbers.  The kernel reads the tensors in
    place, without a copy.  The result's dtype is the kernel's (NumPy's promotion:
    float32 tensors and Python numbers give float32), each gradient its input's.

    Parameters
    ----------
    kernel : FastBroadcast
        The kernel.

    Attributes
    ----------
    kernel : FastBroadcast
        The kernel.

    Raises
    ------
    TypeError
        When called: if an argument is neither a tensor nor a Python number (a NumPy
        array), or a tensor that is sparse, complex, or of another dtype than
        float32, float64, integer or bool (float16, bfloat16); or if the arguments
        do not fit the kernel's parameters.
    ValueError
        When called: if a tensor is not on the CPU, or the shapes do not broadcast
        together.
    RuntimeError
        In a backward pass that asks for a third derivative.

    Examples
    --------
    >>> import math, torch, dualbcast as db, dualbcast.torch
    >>> @db.fast_broadcast
    ... def smooth_leaky(x, slope):
    ...     if x > 0.0:
    ...         return x + 0.25 * math.log1p(x * x)
    ...     return slope * (math.exp(x) - 1.0)
    >>> act = dualbcast.torch.wrap(smooth_leaky)
    >>> x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    >>> slope = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    >>> act(x, slope).pow(2).sum().backward()      # x and slope get their .grad
    >>> slope.grad.shape
    torch.Size([])
    >>> torch.autograd.gradgradcheck(act.sum, (x, slope))
    True
    """

    def __init__(self, kernel: FastBroadcast):
        self.kernel = kernel
        self.__name__ = kernel.__name__
        self.__doc__ = kernel.__doc__

    def __repr__(self):
        return f"<dualbcast.torch op {self.__name__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> "torch.Tensor":
        """The kernel elementwise, at the broadcast shape of the arguments.

        Parameters
        ----------
        *args, **kwargs
            One per parameter of the kernel: tensors or Python numbers (see
            :class:`TorchOp`).

        Returns
        -------
        torch.Tensor
            The values, at the broadcast shape, differentiable in the inputs that
            ``requires_grad``.
        """
        return _First.apply(_Mode(self.kernel, "map"), *_checked(self.kernel, args, kwargs))

    def sum(self, *args: Any, **kwargs: Any) -> "torch.Tensor":
        """The sum of the map, in one loop that never stores the map.

        Parameters
        ----------
        *args, **kwargs
            One per parameter of the kernel: tensors or Python numbers (see
            :class:`TorchOp`).

        Returns
        -------
        torch.Tensor
            The sum, a 0-d tensor, differentiable in the inputs that
            ``requires_grad`` (each gradient from the same loop as the sum).
        """
        return _First.apply(_Mode(self.kernel, "sum"), *_checked(self.kernel, args, kwargs))


class _Mode:
    """A kernel and what the operation returns: the map, or its sum."""

    def __init__(self, kernel, name):
        self.kernel, self.name = kernel, name

    def value(self, arrays):
        return self.kernel(*arrays) if self.name == "map" else self.kernel.sum(*arrays)

    def value_and_partials(self, arrays, wrt):
        """The value and the partials for ``wrt``: at the broadcast shape for the map,
        summed to each argument's own shape for the sum."""
        if self.name == "map":
            return self.kernel.value_and_partials(*arrays, wrt=wrt)
        return self.kernel.sum_and_partials(*arrays, wrt=wrt)

    def second_order(self, arrays, wrt, tangents):
        """sum_i d2k/(dx_j dx_i) t_i for each j in ``wrt`` (the partials' tangents; for
        the sum, each reduced to argument j's shape), from one second-order loop."""
        if self.name == "map":
            return self.kernel.value_and_partials(*arrays, wrt=wrt, tangents=tangents)[3]
        return self.kernel.sum_and_partials(*arrays, wrt=wrt, tangents=tangents)[3]


def _checked(kernel, args, kwargs):
    """The arguments bound to the kernel's parameters (keywords and defaults applied),
    each CPU tensor checked (device, layout, dtype) before any work."""
    args = kernel._bind(args, kwargs)
    for position, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor):
            if isinstance(arg, (np.ndarray, np.generic)) or not isinstance(arg, (int, float, bool)):
                raise TypeError(f"{kernel.__name__}: argument {position} is a "
                                f"{type(arg).__name__}; dualbcast.torch operations take "
                                f"tensors and Python numbers")
            continue
        where = f"{kernel.__name__}: argument {position}"
        if arg.device.type != "cpu":
            raise ValueError(f"{where} is on device {arg.device}; dualbcast kernels run on "
                             f"the CPU: move it there with .cpu()")
        if arg.layout != torch.strided:
            raise TypeError(f"{where} has layout {arg.layout}; only dense tensors are "
                            f"supported (use .to_dense())")
        if arg.dtype.is_complex:
            raise TypeError(f"{where} has complex dtype {arg.dtype}; kernels take real "
                            f"numbers")
        if arg.dtype not in _FLOATS + _CONSTANTS:
            raise TypeError(f"{where} has dtype {arg.dtype}; dualbcast.torch takes float32 "
                            f"and float64 tensors (integer and bool tensors as constants)")
    return args


def _arrays(inputs):
    """The inputs as the kernel reads them: tensors as NumPy views of their memory."""
    return tuple(x.detach().resolve_conj().resolve_neg().numpy()
                 if isinstance(x, torch.Tensor) else x for x in inputs)


def _tensor(value):
    return torch.from_numpy(np.asarray(value))


def _needed(ctx, skip):
    """Positions of the kernel's arguments whose gradient PyTorch asks for
    (``needs_input_grad`` also lists the ``skip`` leading non-tensor arguments)."""
    return tuple(i for i, need in enumerate(ctx.needs_input_grad[skip:]) if need)


def _sum_to(gradient, shape):
    """``gradient`` (at the broadcast shape) summed over the dimensions along which an
    argument of ``shape`` was broadcast."""
    if gradient.shape == shape:
        return gradient
    lead = gradient.ndim - len(shape)
    if lead:
        gradient = gradient.sum(dim=tuple(range(lead)))
    dims = tuple(d for d, n in enumerate(shape) if n == 1 and gradient.shape[d] != 1)
    return gradient.sum(dim=dims, keepdim=True) if dims else gradient


def _as_gradient_of(mode, gradient, x):
    """A gradient term of input ``x``: summed to its shape (a map's terms are at the
    broadcast shape; a sum's already at the input's), in its dtype."""
    if mode.name == "map":
        gradient = _sum_to(gradient, x.shape)
    return gradient.to(x.dtype)


def _gradients(mode, inputs, wrt, cotangent, partials):
    """Each input's gradient (None where not asked for): the cotangent times its
    partials, summed to the input's shape, in the input's dtype."""
    grads = [None] * len(inputs)
    for i, partial in zip(wrt, partials):
        grads[i] = _as_gradient_of(mode, cotangent * partial, inputs[i])
    return grads


class _First(torch.autograd.Function):
    """The kernel's map or sum; its backward pass multiplies by the partials the
    forward pass computed in the same loop as the value."""

    @staticmethod
    def forward(ctx, mode, *inputs):
        wrt = _needed(ctx, 1)
        arrays = _arrays(inputs)
        ctx.mode, ctx.wrt = mode, wrt
        if not wrt:
            return _tensor(mode.value(arrays))
        value, partials = mode.value_and_partials(arrays, wrt)
        ctx.partials = tuple(_tensor(p) for p in partials)
        _save_inputs(ctx, inputs)
        return _tensor(value)

    @staticmethod
    def backward(ctx, cotangent):
        inputs = _inputs(ctx)
        if torch.is_grad_enabled():
            # create_graph=True: the partials as a differentiable function of the inputs
            # (its own backward pass is the kernel's second-order loop).
            partials = _Partials.apply(ctx.mode, ctx.wrt, *inputs)
        else:
            partials = ctx.partials
        return (None, *_gradients(ctx.mode, inputs, ctx.wrt, cotangent, partials))


def _save_inputs(ctx, inputs):
    """Tensors saved as PyTorch checks them (an input changed in place before the
    backward pass is an error), numbers as they are."""
    ctx.save_for_backward(*(x if isinstance(x, torch.Tensor) else None for x in inputs))
    ctx.numbers = inputs


def _inputs(ctx):
    """The forward pass's inputs: saved tensors where they were tensors, else the numbers."""
    return tuple(saved if saved is not None else number
                 for saved, number in zip(ctx.saved_tensors, ctx.numbers))


class _Partials(torch.autograd.Function):
    """The partials of the kernel (the map's, or the sum's gradients) for ``wrt``, as a
    function of the inputs: only built for double backward."""

    @staticmethod
    def forward(ctx, mode, wrt, *inputs):
        ctx.mode, ctx.wrt = mode, wrt
        _save_inputs(ctx, inputs)
        partials = mode.value_and_partials(_arrays(inputs), wrt)[1]
        return tuple(_tensor(p) for p in partials)

    @staticmethod
    def backward(ctx, *cotangents):
        inputs = _inputs(ctx)
        needed = _needed(ctx, 2)
        tangents = {i: ct for i, ct in zip(ctx.wrt, cotangents) if ct is not None}
        grads = [None] * len(inputs)
        if not (needed and tangents):
            return (None, None, *grads)
        # By the symmetry of second derivatives, sum_i ct_i d2k/(dx_i dx_j) is the
        # tangent of partial j along the cotangents: one loop for every j.
        terms = _hessian_products(ctx.mode, inputs, needed, tangents)
        for j, term in zip(needed, terms):
            grads[j] = _as_gradient_of(ctx.mode, term, inputs[j])
        return (None, None, *grads)


def _hessian_products(mode, inputs, outs, tangents):
    """For each j in ``outs``, sum_i d2k/(dx_j dx_i) t_i over the ``tangents``
    ``{i: t_i}`` (tensors shaped as the partials: the map's at the broadcast shape, the
    sum's at argument i's), each shaped as partial j.

    With create_graph=True the products are differentiable.  They are linear in the
    tangents (a double backward's grad_outputs, which a Hessian-vector product is
    differentiated by): that derivative is the Hessian again, available.  In the
    inputs it is a third derivative, refused by the anchor: a node that the products
    depend on and whose backward pass raises.  Autograd runs only the nodes on a path
    to what is differentiated, so the anchor raises exactly when an input's gradient
    is asked for.  (A constant in the products' place would silently drop the
    tangents' terms: d hv / dv "not used in the graph".)"""
    live = tuple(x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad)
    anchor = _Refused.apply(mode, *live) if torch.is_grad_enabled() and live else None
    # Detached views share their version counters: an input changed in place before
    # the products' own backward pass is still an error.
    detached = tuple(x.detach() if isinstance(x, torch.Tensor) else x for x in inputs)
    return _HessianProducts.apply(mode, outs, tuple(tangents), anchor, *detached,
                                  *tangents.values())


class _HessianProducts(torch.autograd.Function):
    """``_hessian_products`` as a Function of the tangents and of the anchor; the
    inputs come detached (their derivative is the anchor's business)."""

    @staticmethod
    def forward(ctx, mode, outs, positions, anchor, *args):
        inputs, tangents = args[:-len(positions)], args[-len(positions):]
        ctx.mode, ctx.outs, ctx.positions = mode, outs, positions
        ctx.save_for_backward(anchor, *(x if isinstance(x, torch.Tensor) else None
                                        for x in inputs))
        ctx.numbers, ctx.dtypes = inputs, tuple(t.dtype for t in tangents)
        arrays = _arrays(inputs)
        terms = mode.second_order(arrays, outs, dict(zip(positions, _arrays(tangents))))
        return tuple(_tensor(t) for t in terms)

    @staticmethod
    def backward(ctx, *cotangents):
        anchor, *saved = ctx.saved_tensors
        inputs = tuple(s if s is not None else n for s, n in zip(saved, ctx.numbers))
        skip = 4 + len(inputs)
        grads = [None] * len(ctx.positions)
        anchor_grad = torch.zeros_like(anchor) if ctx.needs_input_grad[3] else None
        upstream = {j: ct for j, ct in zip(ctx.outs, cotangents) if ct is not None}
        if upstream and any(ctx.needs_input_grad[skip:]):
            # The transpose of t -> H t is w -> H w (H symmetric): the same products
            # with the roles of outs and tangent positions swapped.
            terms = _HessianProducts.apply(ctx.mode, ctx.positions, tuple(upstream),
                                           anchor, *inputs, *upstream.values())
            grads = [term.to(dtype) for term, dtype in zip(terms, ctx.dtypes)]
        return (None, None, None, anchor_grad, *([None] * len(inputs)), *grads)


class _Refused(torch.autograd.Function):
    """A zero that second derivatives depend on through the inputs: a third
    derivative (differentiating one again with respect to an input) raises."""

    @staticmethod
    def forward(ctx, mode, *inputs):
        ctx.name = mode.kernel.__name__
        return torch.zeros(())

    @staticmethod
    def backward(ctx, cotangent):
        raise RuntimeError(f"dualbcast.torch: {ctx.name} has derivatives up to second "
                           f"order (its kernel's nested duals); a third derivative was "
                           f"asked for")
