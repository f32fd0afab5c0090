"""VJPs of NumPy's elementwise ufuncs, one line each.

Each ``vjp(g, ans, *inputs)`` returns the cotangent at the broadcast shape; the
``elementwise`` wrapper sums it back to the input's own shape (``unbroadcast``).
Inputs may be Python floats (a differentiated float argument stays one, so NumPy's weak
scalar rules apply as they would untraced): local derivatives start from a NumPy call
(``np.divide(1.0, x)``, not ``1.0 / x``): 0 gives inf, never ``ZeroDivisionError``, and an
integer constant divides as a float.
Conventions match the dual-number rules of the kernels (README, "Derivative
conventions"): ``abs`` has derivative 0 at 0, ``maximum``/``minimum`` give half to each
side at a tie, and a zero cotangent meeting an infinite local derivative gives 0, not nan
(every product of a cotangent and a local derivative is ``nan_safe``).
"""
import numpy as np

from ..core.box import SCALARS
from ..core.registry import ScalarForm, define
from ..core.tape import ignore_float_errors, restore_float_errors
from .common import abs_value, nan_safe, positive, shape_of, unbroadcast, where_value

LN2, LN10 = np.log(2.0), np.log(10.0)


def _reduced(vjp, position):
    def vjp_to_input_shape(g, ans, *inputs):
        ct = vjp(g, ans, *inputs)
        if type(ct) in SCALARS:
            return ct                       # a scalar: the input was one too
        return unbroadcast(ct, shape_of(inputs[position]))  # (an array, or a Box: 2nd order)
    return vjp_to_input_shape


def elementwise(ufunc, *vjps, partials=None, form=None):
    """Register an elementwise ufunc's VJPs (None: no gradient through that input),
    its cheap scalar ``partials`` and its scalar ``form`` if it has them (see
    :func:`~dualbcast.core.registry.define`; else its value's form in
    :data:`_VALUES`)."""
    if form is None and ufunc in _VALUES:
        form = ScalarForm(_VALUES[ufunc])
    define(ufunc, vjps=[None if vjp is None else _reduced(vjp, i)
                        for i, vjp in enumerate(vjps)],
           scalar_vjps=vjps, partials=partials, form=form)


# The value per element of these ufuncs, for compiled loops over staged programs
# (dualbcast.jit.loop_forms): operations that IEEE rounds exactly, so that a loop gives
# NumPy's bits.  (Not exp, log, pow and the like: NumPy's vectorised versions round
# otherwise than the C library's, and are as fast as a loop calling those.)
_VALUES = {np.sqrt: "math.sqrt({x})", np.square: "{x} * {x}", np.reciprocal: "1.0 / {x}",
           np.absolute: "abs({x})", np.fabs: "abs({x})"}


def _half_at_ties(wins, ties):
    return wins + 0.5 * ties


# The local derivatives below are differentiated again at second order (``x`` and ``ans``
# traced): each is written so that its own derivative does not cancel either, as the
# kernels' table (dualbcast/dual/table.py) writes it.  Where the formula switches is
# chosen by :func:`.common.where_value`, not by a comparison of traced values (which
# dualbcast.jit would have to guard: a replay on values across the switch would trace
# again).

def _near_zero(bound):
    return lambda x, _: (-bound < x) & (x < bound)


_HALF, _TANH_SWITCH = _near_zero(0.5), _near_zero(0.55)


def _one_minus_square(x):
    # 1 - x^2: (1 - x)(1 + x) near +-1, where 1 - x*x loses what x*x rounded away
    # (arcsin' off by 5.6e-9 of itself at 1 - 2**-27); 1 - x*x for |x| < 0.5, where the
    # derivative of (1 - x)(1 + x), (1 - x) - (1 + x), cancels (arctanh'' was 0 at 1e-17).
    return where_value(_HALF, 1.0 - x * x, (1.0 - x) * (1.0 + x), x)


def _sech_squared(x):
    # 4e / (1 + e)^2, e = exp(-2|x|): a product, and so is its derivative (no cancellation)
    e = np.exp(-2.0 * abs_value(x))
    return 4.0 * e / ((1.0 + e) * (1.0 + e))


def _tanh_d(x, ans):
    # 1 - tanh(x)^2.  1 - ans*ans cancels as ans -> 1 (tanh'(20) was 0 for 1.7e-17): past
    # |x| = 0.55 sech^2 as a product.  Near 0 the derivative of that product cancels, the
    # one of 1 - ans*ans, -2 ans ans', does not.
    return where_value(_TANH_SWITCH, 1.0 - ans * ans, _sech_squared(x), x)


def _far_from_the_origin(x, y):
    return (np.abs(y) < np.abs(x)) & (np.abs(x) < np.inf)


def _hypot_d(x, y, ans):
    # d hypot(x, y) / dx = x / r, 0 at the origin.  Where |y| < |x| < inf as
    # sign(x) / sqrt(1 + (y/x)^2): the derivative of x / r, 1/r - x^2/r^3, cancels as
    # y/x -> 0 (hypot(x, 2)'' was 0 at 1e10), this one's, a product, does not.  x = +-inf
    # keeps x / r: nan, as JAX and PyTorch give.  (Elsewhere the far formula runs on
    # x = 1, so that it computes no 0/0 that its derivatives would meet; the sign is
    # chosen, not computed as x / |x|, whose derivative overflows at subnormal x.)
    far_x = where_value(_far_from_the_origin, x, 1.0, x, y)
    t = y / far_x
    magnitude = 1.0 / np.sqrt(1.0 + t * t)
    far = where_value(positive, magnitude, -magnitude, far_x)
    near = np.where(ans == 0, 0.0, x / np.where(ans == 0, 1.0, ans))
    return where_value(_far_from_the_origin, far, near, x, y)


elementwise(np.negative, lambda g, ans, x: -g,
            form=ScalarForm("-{x}", cotangents=("-{g}",)))
elementwise(np.positive, lambda g, ans, x: g)
elementwise(np.conjugate, lambda g, ans, x: g)       # real inputs only (complex: no rules)
elementwise(np.exp, lambda g, ans, x: nan_safe(g, ans))
elementwise(np.exp2, lambda g, ans, x: nan_safe(g, ans * LN2))
elementwise(np.expm1, lambda g, ans, x: nan_safe(g, np.exp(x)))    # (ans + 1 cancels below -1)
elementwise(np.log, lambda g, ans, x: nan_safe(g, np.divide(1.0, x)))
elementwise(np.log2, lambda g, ans, x: nan_safe(g, np.divide(1.0, x * LN2)))
elementwise(np.log10, lambda g, ans, x: nan_safe(g, np.divide(1.0, x * LN10)))
elementwise(np.log1p, lambda g, ans, x: nan_safe(g, np.divide(1.0, 1.0 + x)))
elementwise(np.sqrt, lambda g, ans, x: nan_safe(g, 0.5 / ans))
elementwise(np.cbrt, lambda g, ans, x: nan_safe(g, np.divide(1.0, 3.0 * ans * ans)))
elementwise(np.square, lambda g, ans, x: nan_safe(g, 2.0 * x))
elementwise(np.reciprocal, lambda g, ans, x: nan_safe(-g, ans * ans))
elementwise(np.sin, lambda g, ans, x: nan_safe(g, np.cos(x)))
elementwise(np.cos, lambda g, ans, x: nan_safe(g, -np.sin(x)))
elementwise(np.tan, lambda g, ans, x: nan_safe(g, 1.0 + ans * ans))
elementwise(np.arcsin,
            lambda g, ans, x: nan_safe(g, np.divide(1.0, np.sqrt(_one_minus_square(x)))))
elementwise(np.arccos,
            lambda g, ans, x: nan_safe(g, -np.divide(1.0, np.sqrt(_one_minus_square(x)))))
elementwise(np.arctan, lambda g, ans, x: nan_safe(g, 1.0 / (1.0 + x * x)))
elementwise(np.sinh, lambda g, ans, x: nan_safe(g, np.cosh(x)))
elementwise(np.cosh, lambda g, ans, x: nan_safe(g, np.sinh(x)))
elementwise(np.tanh, lambda g, ans, x: nan_safe(g, _tanh_d(x, ans)))
elementwise(np.arcsinh, lambda g, ans, x: nan_safe(g, 1.0 / np.hypot(x, 1.0)))
# (two square roots, as the kernels' table: no overflow of x * x, and nan below -1
# where the value is nan, not 1 / sqrt(-0.0) = -inf at -1)
elementwise(np.arccosh,
            lambda g, ans, x: nan_safe(g, np.divide(1.0, np.sqrt(x - 1.0) * np.sqrt(x + 1.0))))
elementwise(np.arctanh, lambda g, ans, x: nan_safe(g, np.divide(1.0, _one_minus_square(x))))
elementwise(np.absolute, lambda g, ans, x: nan_safe(g, np.sign(x)))    # 0 at 0, as PyTorch
elementwise(np.fabs, lambda g, ans, x: nan_safe(g, np.sign(x)))
elementwise(np.deg2rad, lambda g, ans, x: g * (np.pi / 180.0))
elementwise(np.rad2deg, lambda g, ans, x: g * (180.0 / np.pi))

elementwise(np.add, lambda g, ans, x, y: g, lambda g, ans, x, y: g, partials=(1.0, 1.0),
            form=ScalarForm("{x} + {y}", partials=("1.0", "1.0")))
elementwise(np.subtract, lambda g, ans, x, y: g, lambda g, ans, x, y: -g, partials=(1.0, -1.0),
            form=ScalarForm("{x} - {y}", partials=("1.0", "-1.0")))
elementwise(np.multiply, lambda g, ans, x, y: nan_safe(g, y), lambda g, ans, x, y: nan_safe(g, x),
            partials=lambda x, y: (y, x), form=ScalarForm("{x} * {y}", partials=("{y}", "{x}")))
elementwise(np.true_divide, lambda g, ans, x, y: nan_safe(g, np.divide(1.0, y)),
            lambda g, ans, x, y: nan_safe(-g, np.divide(x, y) / y),
            form=ScalarForm("{x} / {y}",
                            cotangents=("{g} * (1.0 / {y})", "-{g} * (({x} / {y}) / {y})")))
_NUMPY_FLOATS = (np.float64, np.float32)


def _power_dx(g, ans, x, y):
    # d/dx x**y: y * x**(y-1), 0 for y == 0 (never 0 * inf at x == 0).  A scalar
    # exponent (x ** 2, the common case) needs no np.where.
    if type(x) in _NUMPY_FLOATS and type(y) in (int, float):
        # NumPy scalar arithmetic: np.power's results (inf at 0, no exception) without
        # a ufunc call.
        return nan_safe(g, y * x ** (y - 1.0) if y != 0 else type(x)(0.0))
    if isinstance(y, (int, float, np.number)):
        # (the operator, as the branch above: a traced NumPy float then computes what
        # the untraced one does -- NumPy's scalar power -- and not the ufunc's, whose
        # vectorised pow may round differently)
        local = y * x ** (y - 1.0) if y != 0 else np.zeros_like(np.multiply(x, 0.0))
        return nan_safe(g, local)
    # At y == 0 the 0 is y / x where x is nonzero and not nan (the kernels' table): its
    # derivative in y, the mixed second derivative 1/x, is kept (a constant 0 made the
    # Hessian of x ** y at y = 0 asymmetric; JAX gives 1/x on both sides).
    usable = (x != 0) & (x == x)
    at_zero = np.where(usable, y / np.where(usable, x, 1.0), 0.0)
    return nan_safe(g, np.where(y == 0, at_zero, y * np.power(x, y - 1.0)))


def _power_partials(x, y):
    # p ** 2 of a kernel's sum, the common case: d/dx of a NumPy float to a constant
    # power, exactly as _power_dx forms it; d/dy has no cheap form (a log).
    if type(x) not in _NUMPY_FLOATS or type(y) not in (int, float):
        return None
    if y == 0:
        return type(x)(0.0), None
    if x > 0:
        return y * x ** (y - 1.0), None
    # 0 ** negative or a negative base: the forward pass must not warn about the
    # derivative (the backward pass, where it used to be formed, does not).
    errors = ignore_float_errors()
    try:
        return y * x ** (y - 1.0), None
    finally:
        restore_float_errors(errors)


def _power_dy(g, ans, x, y):
    # d/dy x**y: log(x) * x**y, 0 at x == 0 (JAX's limit), nan for x < 0.
    return nan_safe(g, np.where(x == 0, 0.0, ans * np.log(np.where(x == 0, 1.0, x))))


# (x ** c, c a constant: d/dy has no cheap form; y * x ** (y - 1.0), or 0.0 for y == 0,
# as _power_partials forms it)
elementwise(np.power, _power_dx, _power_dy, partials=_power_partials,
            form=ScalarForm("pow({x}, {y})",
                            partials=("(0.0 if {y} == 0.0 else {y} * pow({x}, {y} - 1.0))",
                                      None)))
elementwise(np.float_power, _power_dx, _power_dy)
elementwise(np.arctan2,
            # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2), with hypot: no overflow.
            lambda g, ans, y, x: nan_safe(g, (x / np.hypot(x, y)) / np.hypot(x, y)),
            lambda g, ans, y, x: nan_safe(g, -(y / np.hypot(x, y)) / np.hypot(x, y)))
elementwise(np.hypot,
            lambda g, ans, x, y: nan_safe(g, _hypot_d(x, y, ans)),
            lambda g, ans, x, y: nan_safe(g, _hypot_d(y, x, ans)))
elementwise(np.maximum,
            lambda g, ans, x, y: nan_safe(g, _half_at_ties(x > y, x == y)),
            lambda g, ans, x, y: nan_safe(g, _half_at_ties(y > x, x == y)))
elementwise(np.minimum,
            lambda g, ans, x, y: nan_safe(g, _half_at_ties(x < y, x == y)),
            lambda g, ans, x, y: nan_safe(g, _half_at_ties(y < x, x == y)))
# fmax/fmin ignore a nan: the other input wins outright.
elementwise(np.fmax,
            lambda g, ans, x, y: nan_safe(g, _half_at_ties((x > y) | np.isnan(y) & ~np.isnan(x),
                                                           x == y)),
            lambda g, ans, x, y: nan_safe(g, _half_at_ties((y > x) | np.isnan(x) & ~np.isnan(y),
                                                           x == y)))
elementwise(np.fmin,
            lambda g, ans, x, y: nan_safe(g, _half_at_ties((x < y) | np.isnan(y) & ~np.isnan(x),
                                                           x == y)),
            lambda g, ans, x, y: nan_safe(g, _half_at_ties((y < x) | np.isnan(x) & ~np.isnan(y),
                                                           x == y)))
elementwise(np.logaddexp,
            lambda g, ans, x, y: nan_safe(g, np.exp(x - ans)),
            lambda g, ans, x, y: nan_safe(g, np.exp(y - ans)))
elementwise(np.logaddexp2,
            lambda g, ans, x, y: nan_safe(g, np.exp2(x - ans)),
            lambda g, ans, x, y: nan_safe(g, np.exp2(y - ans)))
# d/dy of x % y and fmod(x, y) is minus the quotient the remainder was computed with
# (as the kernels' table): floor_divide comes from the same divmod as remainder; fmod's
# quotient is (x - fmod(x, y)) / y, exact up to rounding to the integer it is.  Not
# floor(x / y): 0.5 / 0.1 rounds to 5.0, but 0.5 % 0.1 = 0.0999... says 4.
elementwise(np.remainder, lambda g, ans, x, y: g,
            lambda g, ans, x, y: nan_safe(g, -np.floor_divide(x, y)))
elementwise(np.fmod, lambda g, ans, x, y: g,
            lambda g, ans, x, y: nan_safe(g, -np.rint((x - ans) / y)))
elementwise(np.copysign, lambda g, ans, x, y: nan_safe(g, np.sign(x) * np.sign(ans)), None)

# Piecewise constant, boolean or integer results: computed on values, never traced.
for _ufunc in (np.floor, np.ceil, np.trunc, np.rint, np.sign, np.signbit, np.floor_divide,
               np.heaviside, np.isnan, np.isinf, np.isfinite, np.less, np.less_equal,
               np.greater, np.greater_equal, np.equal, np.not_equal, np.logical_and,
               np.logical_or, np.logical_xor, np.logical_not, np.invert, np.bitwise_and,
               np.bitwise_or, np.bitwise_xor):
    define(_ufunc, constant=True)
