"""dualbcast.testing.check_grads: passes on correct rules, catches wrong ones."""
import numpy as np
import pytest

import dualbcast as db
from dualbcast.core.registry import PRIMITIVES
from dualbcast.testing import check_grads


def test_passes_on_correct_gradients_of_structured_functions():
    x = np.linspace(0.1, 1.0, 4)
    check_grads(lambda p, s: {"y": np.sin(p["x"]) * s, "z": [np.sum(p["x"] ** 3)]},
                {"x": x}, 2.0)
    check_grads(lambda x: np.exp(x) * 2.0, x.astype(np.float32))
    check_grads(lambda x, n: x ** n, x, 3, argnums=0)


def test_catches_a_wrong_rule(monkeypatch):
    monkeypatch.setattr(PRIMITIVES[np.sin], "vjps", (lambda g, ans, x: g * np.sin(x),))
    with pytest.raises(AssertionError, match="central differences"):
        check_grads(lambda x: np.sin(x), np.linspace(0.1, 1.0, 4))


def test_catches_a_wrong_kernel_derivative(monkeypatch):
    @db.fast_broadcast
    def cube(x):
        return x * x * x
    class Skewed:                       # the kernel's partials, 1% off
        def __init__(self, call):
            self.call = call

        def __getattr__(self, name):
            return getattr(self.call, name)

        def value_and_partials(self, args):
            value, partials = self.call.value_and_partials(args)
            return value, tuple(p * 1.01 for p in partials)

    real = cube._prepare
    monkeypatch.setattr(cube, "_prepare", lambda *a, **k: Skewed(real(*a, **k)))
    with pytest.raises(AssertionError):
        check_grads(lambda x: cube(x), np.linspace(0.1, 1.0, 4))
