"""``scatter_add``: ``np.add.at`` for the backward pass of integer-array indexing, fast
in the common case.

``X[i]`` with an integer array ``i`` that may repeat sends back a
:class:`~dualbcast.core.tape.SparseCotangent` whose values must *add up* at repeated
positions.  ``np.add.at`` does that one element at a time (~12-16 ns each); for the
common case -- one integer array indexing axis 0 of a C-contiguous float buffer, the
values of the buffer's dtype -- a compiled loop does the same additions in the same
order, 3-5x faster (the ``i`` and ``j`` of all pairs of 100 to 1000 atoms), and so gives
``np.add.at``'s bits, float32 and -0.0 included: every position sums ``((b + v1) +
v2) + ...`` in index order.  Out-of-range indices raise ``np.add.at``'s IndexError
before anything is written (``np.add.at`` itself raises it), and every other index
form goes to ``np.add.at``.
"""
import numpy as np

from ..safe_cache import guarded_njit

# np.add.at costs ~2 µs and ~12-16 ns per value, the compiled loop ~1.5 µs of calls
# and ~1-3 ns per value: np.add.at only for a handful of values.
MIN_VALUES = 16

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def scatter_add(buffer, index, values):
    """``np.add.at(buffer, index, values)``: add ``values`` into ``buffer[index]`` in
    place, repeated positions adding up."""
    idx = _axis0_array(index, np.ndim(buffer))
    if idx is not None:
        shape = idx.shape + np.shape(buffer)[1:]
        if type(values) is np.ndarray and values.shape != shape:
            # np.add.at (NumPy 2.4) reads past the end of 1-d values broadcast over a
            # 2-d index into a 1-d buffer (its 1-d fast path takes them as they are);
            # the broadcast view adds up right.
            values = _broadcast(values, shape)
        if _compiled_add(buffer, idx, values, shape):
            return
    np.add.at(buffer, index, values)


def _axis0_array(index, ndim):
    """The integer array ``i`` if ``index`` is ``i``, ``(i, :, ..., :)`` or ``(i, ...)``
    on an array of ``ndim`` dimensions, else None."""
    if type(index) is tuple:
        if not index:
            return None
        rest = index[1:]
        ellipses = sum(part is Ellipsis for part in rest)
        if (ellipses > 1 or len(rest) - ellipses >= ndim
                or not all(part is Ellipsis or _is_full_slice(part) for part in rest)):
            return None
        index = index[0]
    if type(index) is np.ndarray and index.dtype.kind in "iu":
        return index
    return None


def _is_full_slice(part):
    return (type(part) is slice and part.start is None and part.stop is None
            and part.step is None)


def _broadcast(values, shape):
    try:
        return np.broadcast_to(values, shape)
    except ValueError:
        return values                   # np.add.at raises its own error


def _compiled_add(buffer, idx, values, shape):
    """The fast path of ``buffer[idx] += values`` with repeats adding up, ``shape`` the
    shape of ``buffer[idx]``: True once done, False with nothing written where
    np.add.at must do it (other buffers and values, small inputs, the errors it
    raises)."""
    if not (type(buffer) is np.ndarray and buffer.dtype in _FLOATS and buffer.ndim
            and buffer.flags.c_contiguous and buffer.flags.writeable):
        return False
    values = np.asarray(values)
    if values.dtype != buffer.dtype:
        return False                    # (np.add.at's casting rules: left to it)
    n0 = buffer.shape[0]
    count, width = idx.size, buffer.size // n0 if n0 else 0
    if count * width == 0 or count * width < MIN_VALUES:    # (np.add.at checks shapes)
        return False
    if values.shape != shape:
        values = _broadcast(values, shape)
        if values.shape != shape:
            return False
    if np.may_share_memory(buffer, values):
        return False                    # (the loop would read values it already wrote)
    lo, hi = idx.min(), idx.max()
    if lo < -n0 or hi >= n0:
        return False                    # np.add.at raises its IndexError
    idx = idx.reshape(-1).astype(np.intp, copy=False)   # (int8 + n0 could overflow)
    if lo < 0:
        idx = np.where(idx < 0, idx + n0, idx)
    _add_rows(buffer.reshape(n0, width), idx, values.reshape(count, width))
    return True


@guarded_njit(error_model="numpy", cache=True, nogil=True)
def _add_rows(buffer, idx, values):
    """Add the rows ``values`` (count, width) into the rows ``idx`` (count,) of
    ``buffer`` (n0, width), in index order, ``idx`` in range and non-negative."""
    for p in range(idx.size):
        row = idx[p]
        for c in range(buffer.shape[1]):
            buffer[row, c] += values[p, c]
