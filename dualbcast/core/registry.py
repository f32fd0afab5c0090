"""Where rules register themselves; the core looks them up here and holds no math.

- ``UFUNC_VJPS[ufunc]``: a tuple with one ``vjp(g, ans, *inputs)`` per ufunc input, or
  None for an input no gradient flows through.
- ``SCALAR_UFUNC_VJPS[ufunc]``: the same vjps for a call whose result is a scalar (so
  every input was one): nothing to unbroadcast, the hot path of scalar code.
- ``SCALAR_LINEAR_PARTIALS[ufunc]``: for the two-argument ufuncs whose local partials
  cost little to form (``add``, ``subtract``, ``multiply``, ``power`` by a constant),
  ``partials(x, y) -> (dx, dy)`` on scalars, or the pair itself when it is constant
  (``add``, ``subtract``): the record keeps them and the backward pass only
  multiplies.  A partial may be None (no cheap form: the call is recorded with its
  vjps instead), and so may the whole result.
- ``CONSTANT_UFUNCS``: ufuncs whose derivative is zero almost everywhere (comparisons,
  ``floor``, ``sign``...): computed on the values, the result is a plain constant.
- ``FUNCTION_RULES[func]``: a callable taking ``func``'s arguments (traced or not) for
  NumPy functions reached through ``__array_function__``.
- ``CONSTANT_FUNCTIONS``: functions whose result does not depend differentiably on the
  values (``np.shape``, ``np.argmax``, ``np.zeros_like``...).
- ``SHAPE_ONLY_FUNCTIONS``: those of them whose result depends on shapes and dtypes
  only (``np.shape``, ``np.zeros_like``): a replay need not check it again.
"""
UFUNC_VJPS = {}
SCALAR_UFUNC_VJPS = {}
SCALAR_LINEAR_PARTIALS = {}
CONSTANT_UFUNCS = set()
FUNCTION_RULES = {}
CONSTANT_FUNCTIONS = set()
SHAPE_ONLY_FUNCTIONS = set()
