"""The reverse-mode core: a linear tape, boxes that record onto it, and the
``grad``/``value_and_grad``/``vjp`` drivers.  No math here (see :mod:`dualbcast.rules`),
and nothing of replay (see :mod:`dualbcast.jit`, which records through the tape's
recorder hook)."""
from .api import grad, jvp, stop_gradient, value_and_grad, vjp
from .box import Box
from .matrices import hessian, jacfwd, jacobian, jacrev
from .mapped import vmap

__all__ = ["Box", "grad", "hessian", "jacfwd", "jacobian", "jacrev", "jvp", "stop_gradient",
           "value_and_grad", "vjp", "vmap"]
