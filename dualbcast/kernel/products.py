"""NaN-safe products of a cotangent with local partials, compiled: the backward pass
of a kernel map and of NumPy's elementwise rules.

``g * local`` elementwise, except 0 where either factor is 0 and the product is nan (a
zero cotangent meeting an infinite partial, or a zero partial meeting an infinite
cotangent: a value that does not influence the output contributes nothing, design.md
§4, as the kernels' dual numbers have it), and the sum of those products (the gradient of a
scalar argument broadcast over an array).  One pass over memory each, where NumPy took
a multiply and a second pass to detect a nan; and no BLAS: OpenBLAS's threads spin for
a while after a ``np.dot`` and took both cores from the kernels' loops (the ten-kernel
chain at 10^5 elements ran twice as long).

Both take float64 arrays of one shape, C-contiguous, and return None for anything else
(the caller's NumPy path handles it).  Above ``config.parallel_threshold`` elements
they may run on ``config.threads`` threads (when that is measured faster), which take
chunks of ``CHUNK`` elements from a queue as they get free (kernel/threads.py); a sum
is added up in chunks of a fixed size in a fixed order, so its bits never depend on the
threads.
"""
import math

import numba
import numpy as np

from ..safe_cache import guarded_njit
from .loops import lane_sum
from .threads import ChoicesBySize, next_chunk, split_if_it_pays

CHUNK = 1 << 12         # elements per partial sum

_FLOAT64 = np.dtype(np.float64)


def nan_safe_multiply(g, local, out=None):
    """``g * local``, 0 where a zero factor makes a nan product, written into ``out`` (may
    be ``local``) or a new array; None unless all are C-contiguous float64 arrays of one
    shape."""
    if not _flat_float64(g, local):
        return _multiply_broadcast(g, local) if out is None else None
    if out is None:
        out = np.empty(g.shape)
    elif type(out) is not np.ndarray or out.shape != g.shape or out.dtype != _FLOAT64 \
            or not out.flags.c_contiguous or not out.flags.writeable:
        return None
    serial = _multiply_into_second if out is local else _multiply
    split_if_it_pays(_MULTIPLY, g.size, CHUNK, _multiply_parallel, serial,
                     _flat(g), _flat(local), _flat(out))
    return out


def _multiply_broadcast(g, local):
    """:func:`nan_safe_multiply` of C-contiguous float64 arrays one of which is
    broadcast along the other's leading axes (a stack of tangents or cotangents times
    one local partial: ``vmap``'s batched products), into a new array; None for
    anything else."""
    if type(g) is not np.ndarray or type(local) is not np.ndarray \
            or g.dtype != _FLOAT64 or local.dtype != _FLOAT64 \
            or not (g.flags.c_contiguous and local.flags.c_contiguous):
        return None
    big, small = (g, local) if g.ndim >= local.ndim else (local, g)
    if big.shape[big.ndim - small.ndim:] != small.shape or not small.size \
            or big.size < CHUNK:
        return None
    width = small.size
    out = np.empty(big.shape)
    _multiply_rows(big.reshape(-1, width), small.reshape(-1), out.reshape(-1, width))
    return out


def nan_safe_dot(g, local):
    """``sum(g * local)`` over every element, each product NaN-safe as in
    :func:`nan_safe_multiply`, as a Python float; None unless both are C-contiguous
    float64 arrays of one shape."""
    if not _flat_float64(g, local):
        return None
    return split_if_it_pays(_DOT, g.size, CHUNK, _dot_parallel, _dot, _flat(g), _flat(local))


def scaled_sum(a, x, b, y):
    """``a * x + b * y`` for finite, nonzero float scalars ``a`` and ``b`` (so every
    product is NaN-safe as it is) and C-contiguous float64 arrays ``x`` and ``y`` of one
    shape, in one pass (the tangent of a cotangent scaled by a scalar: a kernel sum's
    Hessian-vector product), each product and the sum rounded as NumPy rounds them;
    None for anything else."""
    if type(a) not in _SCALARS or type(b) not in _SCALARS or not _flat_float64(x, y) \
            or not (math.isfinite(a) and math.isfinite(b) and a != 0 and b != 0):
        return None
    out = np.empty(x.shape)
    split_if_it_pays(_SCALED_SUM, x.size, CHUNK, _scaled_sum_parallel, _scaled_sum,
                     float(a), _flat(x), float(b), _flat(y), _flat(out))
    return out


# Threads or one thread, per pass and size, as measured (kernel/threads.py).
_MULTIPLY, _DOT, _SCALED_SUM = ChoicesBySize(), ChoicesBySize(), ChoicesBySize()


_SCALARS = frozenset({float, np.float64})


def _flat_float64(g, local):
    return type(g) is np.ndarray and type(local) is np.ndarray and g.dtype == _FLOAT64 \
        and local.dtype == _FLOAT64 and g.shape == local.shape \
        and g.flags.c_contiguous and local.flags.c_contiguous


def _flat(array):
    return array if array.ndim == 1 else array.reshape(-1)


# --- compiled passes (cached beside this file: compiled once per installation) ---------

# (Each pass takes its range as slices and loops from 0: with a loop from ``lo``,
# Numba's negative-index wraparound made LLVM vectorise with gathers, 3x slower.)

@guarded_njit(error_model="numpy", cache=True, nogil=True, forceinline=True)
def nan_safe_product(g, local):
    """One element of :func:`nan_safe_multiply`: ``g * local``, 0 where a zero factor
    makes a nan (also what a fused chain of kernels computes per element, so that it
    gets these bits: dualbcast.jit.segments)."""
    p = g * local
    return 0.0 if ((g == 0.0) | (local == 0.0)) & (p != p) else p    # (no branch)


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def _multiply(g, local, out):
    for i in range(g.size):
        out[i] = nan_safe_product(g[i], local[i])


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def _multiply_rows(rows, local, out):
    for r in range(rows.shape[0]):
        _multiply(rows[r], local, out[r])


def _multiply_into_second(g, local, out):
    _multiply_into(g, local)


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def _multiply_into(g, local):
    # (out is local: a loop of its own, since LLVM's vector loop checks that the
    # output does not overlap an input, and ran the scalar loop when it did: 3x slower)
    for i in range(g.size):
        local[i] = nan_safe_product(g[i], local[i])


@guarded_njit(parallel=True, error_model="numpy", cache=True, nogil=True)
def _multiply_parallel(g, local, out, workers):
    n = g.size
    queue = np.zeros(1, np.int64)       # chunks taken as threads get free (threads.py)
    for w in numba.prange(workers):
        c = next_chunk(queue)
        while c * CHUNK < n:
            lo, hi = c * CHUNK, min((c + 1) * CHUNK, n)
            _multiply(g[lo:hi], local[lo:hi], out[lo:hi])
            c = next_chunk(queue)


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def _scaled_sum(a, x, b, y, out):
    for i in range(x.size):
        out[i] = a * x[i] + b * y[i]        # (no fastmath: no fused multiply-add)


@guarded_njit(parallel=True, error_model="numpy", cache=True, nogil=True)
def _scaled_sum_parallel(a, x, b, y, out, workers):
    n = x.size
    queue = np.zeros(1, np.int64)
    for w in numba.prange(workers):
        c = next_chunk(queue)
        while c * CHUNK < n:
            lo, hi = c * CHUNK, min((c + 1) * CHUNK, n)
            _scaled_sum(a, x[lo:hi], b, y[lo:hi], out[lo:hi])
            c = next_chunk(queue)


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def _chunk_dot(g, local, products):
    """The NaN-safe sum of ``g[i] * local[i]`` (one chunk): the products written into
    ``products`` (a vectorised pass), then added up by ``lane_sum`` in an order fixed
    by the source, so that code computing the same products elsewhere (a fused chain
    of kernels under ``dualbcast.jit``) gets these bits by adding them up the same
    way; never dependent on the threads, the call or how LLVM compiled the loop."""
    for i in range(g.size):
        products[i] = nan_safe_product(g[i], local[i])
    return lane_sum(products, g.size)


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def _dot(g, local):
    # Chunk by chunk, in order: the bits _dot_parallel gives with any number of threads.
    n = g.size
    products = np.empty(min(n, CHUNK))
    total = 0.0
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        total += _chunk_dot(g[lo:hi], local[lo:hi], products)
    return total


@guarded_njit(parallel=True, error_model="numpy", cache=True, nogil=True)
def _dot_parallel(g, local, workers):
    n = g.size
    nchunks = (n + CHUNK - 1) // CHUNK
    sums = np.empty(nchunks)
    queue = np.zeros(1, np.int64)
    for w in numba.prange(workers):
        products = np.empty(CHUNK)
        c = next_chunk(queue)
        while c < nchunks:
            lo, hi = c * CHUNK, min((c + 1) * CHUNK, n)
            sums[c] = _chunk_dot(g[lo:hi], local[lo:hi], products)
            c = next_chunk(queue)
    total = 0.0
    for c in range(nchunks):
        total += sums[c]
    return total
