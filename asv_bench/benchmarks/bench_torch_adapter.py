"""A custom activation in PyTorch (issue 17): a ``@fast_broadcast`` kernel wrapped by
``dualbcast.torch.wrap`` beside the same function written as PyTorch operations,
forward and backward (a cotangent from the layer above), float64, PyTorch's threads and
dualbcast's both on the machine's cores.  Skipped when PyTorch is not installed."""
import importlib
import math

import numpy as np

import dualbcast as db

from .bench_kernels import best_in_turns

SIZES = [10 ** 4, 10 ** 6]


@db.fast_broadcast
def smooth_leaky(x, slope):
    """A smooth leaky unit with a branch: x + log1p(x^2)/4 above 0, a scaled expm1 below."""
    if x > 0.0:
        return x + 0.25 * math.log1p(x * x)
    return slope * (math.exp(x) - 1.0)


def smooth_leaky_torch(torch, x, slope):
    return torch.where(x > 0, x + 0.25 * torch.log1p(x * x), slope * torch.expm1(x))


def _torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise NotImplementedError("torch is not installed") from None


def forward_backward(system, n):
    """A call doing the activation's forward and backward passes at ``n`` elements."""
    torch = _torch()
    dbt = importlib.import_module("dualbcast.torch")
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal(n)).requires_grad_()
    slope = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    cotangent = torch.from_numpy(rng.standard_normal(n))
    if system == "dualbcast":
        op = dbt.wrap(smooth_leaky)
        activation = op
    elif system == "torch_ops":
        def activation(x, slope):
            return smooth_leaky_torch(torch, x, slope)
    else:
        raise NotImplementedError(system)

    def call():
        x.grad = slope.grad = None
        activation(x, slope).backward(cotangent)
    call()
    return call


class TorchActivation:
    params = (["dualbcast", "torch_ops"], SIZES)
    param_names = ["system", "n"]

    def setup(self, system, n):
        self.call = forward_backward(system, n)

    def time_forward_backward(self, system, n):
        self.call()


class TorchActivationRatio:
    """dualbcast.torch / PyTorch ops, forward + backward, timed in turns (target at
    10^6: 0.5 or less)."""
    params = (SIZES,)
    param_names = ["n"]

    def setup(self, n):
        self.ours = forward_backward("dualbcast", n)
        self.theirs = forward_backward("torch_ops", n)

    def track_ratio(self, n):
        ours, theirs = best_in_turns(self.ours, self.theirs)
        return ours / theirs
