"""Kernels over Dask arrays (the optional ``[dask]`` extra): the same one loop, block by
block, as lazy Dask work.

For data larger than memory, or spread over a cluster's machines: a kernel called with
a Dask array among its arguments, and ``dualbcast.grad``, ``value_and_grad`` and ``vjp``
of a program over Dask arrays, build lazy Dask graphs whose tasks run the kernel's
loops on the blocks, so that a value and its gradient are computed in one pass over
the data.  Importing this module is not needed: a kernel's methods dispatch to it.

A kernel called with a Dask array among its arguments (``k(x)``, ``k.sum(x)``,
``k.value_and_partials``, ``k.sum_and_partials``) builds a Dask graph instead of
computing: the arguments are aligned on one grid of blocks of the broadcast shape (NumPy
arrays become Dask arrays with those chunks, Python numbers go to every block), and each
block runs the kernel's loop for that mode once.  A sum is a tree reduction of the
blocks' sums; the partials of an argument that spans blocks stay blockwise, those of an
argument broadcast across blocks (a scalar, a smaller array) are added up by a tree.
Values and partials come from the same task per block, so ``dask.compute`` of both
passes over the data once.

The kernel travels to Dask's workers pickled: by name where its module can be imported
there, else by its Python function and the values it reads (see
``FastBroadcast.__reduce__``), and is compiled there (or loaded from the on-disk
compile cache).  Sums over blocks are added in a different order than in memory: they
agree to rounding, not bit for bit.
"""
from __future__ import annotations

import math

import numpy as np

try:
    import dask.array as da
except ImportError as err:          # pragma: no cover (the extra is installed in CI)
    raise ImportError('dualbcast.dask needs Dask: pip install "dualbcast[dask]"') from err

from .kernel.tracing import hook
from .positions import argument_positions

__all__ = ["BlockwiseCall"]

MODES = ("map", "sum", "partials", "sum_partials")
_PYTHON_NUMBERS = (bool, int, float)


class BlockwiseCall:
    """A kernel's call over arguments among which are Dask arrays, built as lazy Dask work.

    What a kernel makes when one of its arguments is a Dask array: ``k(...)``,
    ``k.sum(...)``, ``k.value_and_partials(...)`` and ``k.sum_and_partials(...)`` each
    construct one and call its method of the same mode, which returns lazy Dask
    arrays.  The arguments are checked when it is constructed, before any data is
    read: shapes, chunk sizes, dtypes and ``wrt``, as a call over NumPy arrays checks
    them.  Then they are aligned on one grid of blocks of the broadcast shape (NumPy
    arrays become Dask arrays with those chunks, numbers go to every block), and each
    block runs the kernel's loop for the mode once.

    Parameters
    ----------
    kernel : FastBroadcast
        The kernel.
    mode : {"map", "sum", "partials", "sum_partials"}
        What the call computes: the map, its sum, ``value_and_partials`` or
        ``sum_and_partials``.
    args : tuple
        The kernel's arguments, one per parameter, in order: Dask arrays, NumPy
        arrays and numbers.
    wrt : int or tuple of int or None
        The differentiated arguments' positions, for the partials modes.

    Attributes
    ----------
    shape : tuple of int
        The broadcast shape.
    dtype : numpy.dtype
        The result dtype.
    chunks : tuple of tuple of int
        The grid of blocks: along each dimension the chunks of the first Dask array
        that spans it.

    Raises
    ------
    TypeError
        If ``mode`` is not one of these (``jvp`` and ``tangents=`` take NumPy
        arrays), if the call is inside ``jvp``, a nested derivative or
        ``dualbcast.jit``, or if an argument's dtype or ``wrt`` is refused as for a
        NumPy call.
    ValueError
        If a Dask array has unknown chunk sizes (after boolean indexing: call
        ``x.compute_chunk_sizes()`` first), the shapes do not broadcast together, or
        ``wrt`` is out of range.

    Notes
    -----
    A sum is a tree reduction of the blocks' sums: it agrees with the in-memory sum to
    rounding, not bit for bit.  The partials of an argument that spans the blocks stay
    blockwise; those of an argument broadcast across them (a scalar, a smaller array)
    are added up by a tree.

    Examples
    --------
    >>> import math, dask, dask.array as da, dualbcast as db
    >>> @db.fast_broadcast
    ... def decay(r, beta):
    ...     return math.exp(-beta * r)
    >>> r = da.arange(6.0, chunks=3)                  # two blocks
    >>> total, dbeta = decay.sum_and_partials(r, 1.0, wrt=1)      # lazy
    >>> total, dbeta = dask.compute(total, dbeta)     # one task per block
    >>> round(float(total), 6), round(float(dbeta), 6)
    (1.578055, -0.894864)
    >>> from dualbcast.dask import BlockwiseCall
    >>> call = BlockwiseCall(decay, "sum", (r, 1.0), None)
    >>> call.shape, call.chunks
    ((6,), ((3, 3),))
    """

    def __init__(self, kernel, mode, args, wrt):
        name = kernel.__name__
        if not hook.takes_lazy_arrays():
            raise TypeError(f"{name}: called on Dask arrays inside jvp, a nested "
                            f"derivative or dualbcast.jit; over Dask arrays, grad, "
                            f"value_and_grad and vjp (first order) differentiate kernels "
                            f"lazily: compute NumPy arrays first (x.compute()) for those")
        if mode not in MODES:
            raise TypeError(f"{name}: over Dask arrays a kernel maps, sums, and gives "
                            f"value_and_partials and sum_and_partials; jvp and tangents= "
                            f"take NumPy arrays")
        for position, arg in enumerate(args):
            if isinstance(arg, da.Array) and any(math.isnan(n) for n in arg.shape):
                raise ValueError(f"{name}: argument {position} is a Dask array with unknown "
                                 f"chunk sizes (shape {arg.shape}); compute them first with "
                                 f"x.compute_chunk_sizes()")
        shapes = [np.shape(arg) for arg in args]
        try:
            self.shape = np.broadcast_shapes(*shapes)
        except ValueError:
            raise ValueError(f"{name}: operands could not be broadcast together with shapes "
                             f"{' '.join(map(str, shapes))}") from None
        # Every check a NumPy call makes of types and wrt, on one-element stand-ins.
        stand_ins = [arg if type(arg) in _PYTHON_NUMBERS
                     else np.zeros((1,) * np.ndim(arg), _dtype(arg)) for arg in args]
        self.dtype = kernel._result_dtype(*stand_ins, wrt=wrt)
        self.kernel, self.mode, self.args = kernel, mode, args
        if wrt is not None:
            self.single, self.wrt = argument_positions(wrt, len(args), "wrt", name)
        self.chunks = _output_chunks(self.shape, args)
        self.blocks = [_aligned(arg, self.shape, self.chunks) for arg in args]

    # The methods of a prepared call (kernel/prepared.py), each lazy.

    def map(self, args):
        """The kernel's map, a lazy Dask array at the broadcast shape (``args`` are
        the constructor's: the prepared calls' interface)."""
        return da.map_blocks(_Block(self.kernel, "map"), *self.blocks, dtype=self.dtype,
                             meta=np.empty((0,) * len(self.shape), self.dtype))

    def sum(self, args):
        """The sum of the map, a lazy 0-d Dask array: a tree of the blocks' sums."""
        return self._total(da.map_blocks(_Block(self.kernel, "sum"), *self.blocks,
                                         dtype=self.dtype, chunks=self._one_per_block(),
                                         meta=self._meta(self.dtype)))

    def value_and_partials(self, args):
        """``(value, partials)``, lazy Dask arrays at the broadcast shape, from one task
        per block (one partials array for an int ``wrt``, a tuple for a tuple)."""
        records = self._records("partials")
        value = _item(records, 0, self.dtype)
        partials = tuple(_item(records, 1 + k, self.dtype) for k in range(len(self.wrt)))
        return value, partials[0] if self.single else partials

    def sum_and_partials(self, args, out=None):
        """``(total, gradients)``, lazy Dask arrays, from one task per block: each
        gradient at its argument's shape (``out=`` is refused: TypeError)."""
        if out is not None:
            raise TypeError(f"{self.kernel.__name__}.sum_and_partials: out= takes NumPy "
                            f"arrays; over Dask arrays the gradients are lazy Dask arrays")
        records = self._records("sum_partials")
        total = self._total(_item(records, 0, self.dtype, chunks=self._one_per_block()))
        gradients = tuple(self._reduced_gradient(records, 1 + k, i)
                          for k, i in enumerate(self.wrt))
        return total, gradients[0] if self.single else gradients

    # ------------------------------------------------------------------ internals

    def _records(self, mode):
        """Per block, one task running the mode's loop once: (value or sum, partials...)."""
        return da.map_blocks(_Block(self.kernel, mode, self.wrt), *self.blocks, dtype=object,
                             meta=np.empty((0,) * len(self.shape), object))

    def _one_per_block(self):
        return tuple((1,) * len(c) for c in self.chunks)

    def _meta(self, dtype):
        return np.empty((0,) * len(self.shape), dtype)

    def _total(self, sums):
        """The sum of the blocks' sums (one element per block), by Dask's tree."""
        return sums.sum(dtype=self.dtype)

    def _reduced_gradient(self, records, item, position):
        """Argument ``position``'s gradient: blockwise along the dimensions it spans,
        added up by a tree along those it is broadcast over."""
        arg = self.args[position]
        own = np.shape(arg)
        lead = len(self.shape) - len(own)
        padded = (1,) * lead + own
        spans = [n != 1 and n == full for n, full in zip(padded, self.shape)]
        chunks = tuple(c if spanned else (1,) * len(c) for c, spanned in zip(self.chunks, spans))
        dtype = np.dtype(np.float64) if type(arg) in _PYTHON_NUMBERS else _dtype(arg)
        pieces = _item(records, item, dtype, chunks=chunks, shape=padded)
        broadcast = tuple(d for d, spanned in enumerate(spans) if not spanned)
        gradient = pieces.sum(axis=broadcast, keepdims=True, dtype=dtype) if broadcast else pieces
        return gradient.reshape(own)


def _dtype(arg):
    return arg.dtype if isinstance(arg, da.Array) else np.result_type(arg)


def _output_chunks(shape, args):
    """The block grid of the broadcast shape: along each dimension the chunks of the
    first Dask array spanning it (one block where none does)."""
    chunks = [None] * len(shape)
    for arg in args:
        if isinstance(arg, da.Array):
            lead = len(shape) - arg.ndim
            for d, n in enumerate(arg.shape):
                if n != 1 and chunks[lead + d] is None:
                    chunks[lead + d] = arg.chunks[d]
    return tuple(c if c is not None else (n,) for c, n in zip(chunks, shape))


def _aligned(arg, shape, chunks):
    """``arg`` as each block reads it: a Dask array chunked like the grid along the
    dimensions it spans (one chunk where it is broadcast); numbers as they are."""
    if type(arg) in _PYTHON_NUMBERS or np.ndim(arg) == 0:
        return arg
    lead = len(shape) - np.ndim(arg)
    target = tuple(chunks[lead + d] if n != 1 else (1,) for d, n in enumerate(np.shape(arg)))
    if not isinstance(arg, da.Array):
        return da.from_array(np.asarray(arg), chunks=target)
    return arg if arg.chunks == target else arg.rechunk(target)


def _item(records, item, dtype, chunks=None, shape=None):
    """Item ``item`` of every block's record, as a Dask array (reshaped to ``shape``'s
    length of dimensions per block when given)."""
    ndim = records.ndim
    return records.map_blocks(_Item(item, ndim if shape is not None else None), dtype=dtype,
                              chunks=chunks, meta=np.empty((0,) * ndim, dtype))


class _Item:
    """Takes one item of a block's record (a picklable, tokenisable callable)."""

    def __init__(self, item, pad_to):
        self.item, self.pad_to = item, pad_to

    def __call__(self, record):
        value = record[self.item]
        if self.pad_to is not None:     # a gradient at its own shape: padded to the grid's
            value = np.reshape(value, (1,) * (self.pad_to - np.ndim(value)) + np.shape(value))
        return value

    def __dask_tokenize__(self):
        return (_Item, self.item, self.pad_to)


class _Block:
    """A kernel's loop over one block: what each Dask task runs."""

    def __init__(self, kernel, mode, wrt=None):
        self.kernel, self.mode, self.wrt = kernel, mode, wrt

    def __call__(self, *blocks):
        kernel = self.kernel
        if self.mode == "map":
            return kernel(*blocks)
        ndim = max((np.ndim(b) for b in blocks), default=0)
        if self.mode == "sum":
            return np.reshape(kernel.sum(*blocks), (1,) * ndim)
        if self.mode == "partials":
            value, partials = kernel.value_and_partials(*blocks, wrt=self.wrt)
            return (value, *partials)
        total, gradients = kernel.sum_and_partials(*blocks, wrt=self.wrt)
        return (np.reshape(total, (1,) * ndim), *gradients)

    def __dask_tokenize__(self):
        # The kernel's identity and generation (its code and what it reads), so that two
        # graphs built around a change of the kernel's globals never share a key.
        return (_Block, id(self.kernel), self.kernel._current_generation(), self.mode, self.wrt)
