"""Python-side argument handling for a kernel call, done once per call, before any loop.

``plan_call`` turns the user's arguments into a :class:`CallPlan`: the broadcast shape,
the compute dtype (ufunc rules), and per argument either a scalar or an array view laid
out over a (possibly coalesced) loop shape.  All validation happens here, so a bad call
raises before any work is done, naming the kernel and what was wrong.
"""
import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

# Per argument, how a loop reads it: once (a scalar), per element, or per element from a
# strided array of a one-dimensional loop, which the loop copies a chunk at a time into
# a contiguous piece first (a column d[:, 0]: strided loads kept the loop from being
# vectorised, 3-4x slower).
SCALAR, ARRAY, STRIDED = "s", "a", "t"
PYTHON_SCALARS = (float, int, bool)
_FLOAT64 = np.dtype(np.float64)
_SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64))


# Dtypes a loop loads as they are (not float16, native byte order).
_LOADABLE = frozenset(np.dtype(t) for t in (np.float64, np.float32))

# How ``CallPlan.operands_for`` turns an argument into its loop operand.
AS_SCALAR, FIRST_ELEMENT, FLAT, LOOP_VIEW = range(4)


@dataclass(slots=True)
class CallPlan:
    shape: tuple        # broadcast shape of the result
    dtype: np.dtype     # compute and result dtype (float32 or float64)
    groups: tuple       # loop dims as groups of result dims (size-1 dims dropped, neighbours merged)
    loop_shape: tuple   # the size of each loop dim
    kinds: tuple        # per argument: SCALAR, ARRAY or STRIDED
    described: tuple    # per argument: (shape, dtype, whether an ndarray) as it was taken
    # Per argument: None, or what it became where a later call's argument would not be
    # taken as it is (a list, an ndarray subclass, an array-like: such a call is never
    # looked up by signature, so this is that very argument).  No array of a call
    # looked up by signature is kept: a plan outlives its call.
    converted: tuple
    recipes: tuple      # per argument: how its operand is made (AS_SCALAR, ... LOOP_VIEW)

    def operands_for(self, args):
        """The loop operands of ``args``, a call with the same signature (types,
        dtypes, shapes and strides) as the one this plan was made for: the planning
        (validation, promotion, coalescing) is not repeated."""
        dtype = self.dtype
        # A Python float already is what Numba types as float64: no conversion needed.
        exact = float if dtype == _FLOAT64 else None
        operands = []
        for arg, recipe, converted in zip(args, self.recipes, self.converted):
            if converted is not None:
                arg = converted         # (in a replay: the same checked content)
            kind = type(arg)
            if recipe == FLAT and kind is np.ndarray and arg.ndim == 1 \
                    and arg.dtype in _LOADABLE and arg.flags.writeable:
                operands.append(arg)            # the common case, first
            elif recipe == AS_SCALAR:
                operands.append(arg if kind is exact else dtype.type(arg))
            elif recipe == FIRST_ELEMENT:
                operands.append(dtype.type(arg.reshape(-1)[0]))
            else:
                if arg.dtype.char == "e" or not arg.dtype.isnative:
                    arg = _loadable(arg)
                if recipe == FLAT:
                    flat = arg if arg.ndim == 1 else arg.reshape(-1)
                    operands.append(flat if flat.flags.writeable else read_only_alias(flat))
                else:
                    operands.append(_loop_view(arg, self.shape, self.groups))
        return tuple(operands)

    @property
    def ndim(self):
        """Number of nested loops the driver runs."""
        return len(self.groups)

    def loop_view(self, array):
        """A writeable view of an array of an argument's own shape, as the loop walks
        it (zero strides where it is broadcast): gradients accumulate through it."""
        return _loop_view(array, self.shape, self.groups, writeable=True)


def _loadable(array):
    """``array`` as Numba can load it: native byte order, and float16 (which Numba
    cannot load) as float32.  The only copies a call ever makes of its inputs."""
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    return array


def _as_numeric(kernel_name, position, value):
    """An ndarray or NumPy scalar for ``value``, or a TypeError saying why not."""
    if type(value) is np.ndarray or isinstance(value, np.generic):
        arr = value
    elif isinstance(value, np.ndarray):
        arr = value.view(np.ndarray)    # a subclass (np.memmap...): its data, as NumPy's
    elif hasattr(value, "__array_function__") or hasattr(value, "__array_ufunc__"):
        # An array library of its own (Dask, CuPy, a JAX or PyTorch array...): converting
        # could compute or copy it all; the caller decides.
        kind = type(value)
        raise TypeError(f"{kernel_name}: argument {position} is a {kind.__module__}."
                        f"{kind.__qualname__}; kernels take NumPy and Dask arrays and "
                        f"scalars (convert it with np.asarray; for PyTorch and JAX see "
                        f"dualbcast.torch and dualbcast.jax)")
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as err:   # ragged nested sequences
            raise TypeError(f"{kernel_name}: argument {position} is not a numeric array "
                            f"({err})") from err
    if arr.dtype.newbyteorder("=") not in _SUPPORTED_DTYPES:
        kind = arr.dtype.kind
        what = {"c": "complex", "O": "object", "U": "string", "S": "bytes",
                "f": "extended precision"}.get(kind, str(arr.dtype))
        raise TypeError(f"{kernel_name}: argument {position} has unsupported dtype {arr.dtype} "
                        f"({what}); kernels take real numbers: float16/32/64, int or bool")
    if arr.ndim == 0 and not isinstance(value, np.ndarray):
        arr = arr[()]   # a scalar stays a scalar: its gradient is one too
    return arr


def compute_dtype(arrays):
    """The ufunc-style result dtype of a call whose non-Python-scalar arguments are
    ``arrays``: NumPy promotion, with integers and bools promoted to float64 and float16
    computed in float32.  Python scalars are weak (NEP 50): they never change a float
    result, and without any float argument the result is float64 anyway."""
    if not arrays:
        return _FLOAT64
    dtype = np.result_type(*arrays).newbyteorder("=")
    if dtype.kind in "biu":
        return _FLOAT64
    if dtype == np.float16:
        return np.dtype(np.float32)
    return dtype


def _broadcast_shape(kernel_name, originals, shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        listed = " ".join(str(np.shape(o)) for o in originals)
        raise ValueError(f"{kernel_name}: operands could not be broadcast together "
                         f"with shapes {listed}") from None


def _broadcast_strides(own_shape, own_strides, shape):
    pad = len(shape) - len(own_shape)
    strides = [0] * pad
    for size, stride, out in zip(own_shape, own_strides, shape[pad:]):
        strides.append(stride if size == out and size != 1 else 0)
    return strides


def _coalesce(shape, strides_per_operand):
    """Group the dims of ``shape`` into loop dims: size-1 dims are dropped, and a dim
    joins the previous group when every operand (and the C-ordered output) steps over
    the pair as one.  Fewer, longer loops; the same element order."""
    groups = []
    for d, size in enumerate(shape):
        if size == 1:
            continue
        if groups and all(s[groups[-1][-1]] == s[d] * size for s in strides_per_operand):
            groups[-1].append(d)
        else:
            groups.append([d])
    return tuple(tuple(g) for g in groups)


def _c_strides(shape, itemsize=8):
    return [math.prod(shape[d + 1:]) * itemsize for d in range(len(shape))]


def _group_sizes(shape, groups):
    return tuple(math.prod([shape[d] for d in g]) for g in groups)


def read_only_alias(array):
    """A read-only ``array``'s memory as an array Numba types as writeable (no copy),
    for a loop that only reads it: Numba types a read-only array apart, so a loop
    compiled for a writeable one would be compiled again for it (seconds for a large
    kernel).  The loop views below are all read-only, so they never differ."""
    interface = dict(array.__array_interface__)
    interface["data"] = (interface["data"][0], False)
    return np.asarray(_Exported(interface, array))


class _Exported:
    """An array interface, keeping the array whose memory it describes alive."""
    __slots__ = ("__array_interface__", "base")

    def __init__(self, interface, base):
        self.__array_interface__, self.base = interface, base


def _loop_view(array, shape, groups, writeable=False):
    """``array`` (broadcastable to ``shape``) viewed over the grouped loop dims, with
    zero strides where it is broadcast.  Never a copy."""
    strides = _broadcast_strides(array.shape, array.strides, shape)
    loop_shape = _group_sizes(shape, groups)
    loop_strides = tuple(strides[g[-1]] for g in groups)
    return as_strided(array, loop_shape, loop_strides, writeable=writeable)


def plan_call(kernel_name, args):
    # Python scalars stay as they are (cheap, and weak in promotion); everything else
    # becomes an ndarray or a NumPy scalar.
    originals = tuple(a if type(a) in PYTHON_SCALARS else _as_numeric(kernel_name, i, a)
                      for i, a in enumerate(args))
    typed = [o for o in originals if type(o) not in PYTHON_SCALARS]
    dtype = compute_dtype(typed)
    shapes = [o.shape for o in typed]
    if not shapes:
        shape = ()
    elif shapes.count(shapes[0]) == len(shapes):
        shape = shapes[0]
    else:
        shape = _broadcast_shape(kernel_name, originals, shapes)

    kinds, arrays, recipes = [], [], []
    for o in originals:
        if type(o) in PYTHON_SCALARS or o.size == 1:
            kinds.append(SCALAR)
            whole = type(o) in PYTHON_SCALARS or not o.ndim
            recipes.append(AS_SCALAR if whole else FIRST_ELEMENT)
        else:
            kinds.append(ARRAY)
            recipes.append(None)
            arrays.append(_loadable(o))

    fast = all(a.shape == shape and a.flags.c_contiguous for a in arrays)
    if fast:
        # The common case, every array the full result shape and contiguous: one flat
        # loop over plain reshaped views (no arrays at all: no loop).
        if arrays:
            groups = (tuple(d for d, n in enumerate(shape) if n != 1),)
            loop_shape = (math.prod(shape),)
        else:
            groups = loop_shape = ()
    else:
        # Every operand must agree on a merge: the arrays, the C-ordered output, and the
        # C-ordered gradient buffer of each array's own shape (sum_and_partials walks it
        # with the same loops; an input with zero strides of its own may merge where
        # its gradient buffer cannot).
        strides = [_broadcast_strides(a.shape, a.strides, shape) for a in arrays]
        strides += [_broadcast_strides(a.shape, _c_strides(a.shape), shape) for a in arrays]
        groups = _coalesce(shape, strides + [_c_strides(shape)])
        loop_shape = _group_sizes(shape, groups)
    views = iter(arrays)
    for i, kind in enumerate(kinds):
        if kind == ARRAY:
            recipes[i] = FLAT if fast else LOOP_VIEW
            view = next(views)
            if not fast and len(groups) == 1 and \
                    _loop_view(view, shape, groups).strides[0] != view.itemsize:
                kinds[i] = STRIDED
    described = tuple((np.shape(o), np.result_type(o), isinstance(o, np.ndarray))
                      for o in originals)
    converted = tuple(None if _taken_as_is(arg) else o for arg, o in zip(args, originals))
    return CallPlan(shape, dtype, groups, loop_shape, tuple(kinds), described, converted,
                    tuple(recipes))


def _taken_as_is(arg):
    kind = type(arg)
    return kind is np.ndarray or kind in PYTHON_SCALARS or isinstance(arg, np.generic)


def signature_key(args):
    """What a call's planning depends on: per argument its type, and for arrays the
    dtype, shape and strides.  None when an argument is something else (a list...),
    which is planned afresh every call."""
    key = []
    for arg in args:
        kind = type(arg)
        if kind is np.ndarray:
            key.append((arg.dtype, arg.shape, arg.strides))
        elif kind is float or kind is int or kind is bool:
            key.append(kind)
        elif isinstance(arg, np.generic):
            key.append(arg.dtype)
        else:
            return None
    return tuple(key)
