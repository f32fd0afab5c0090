"""``scatter_add``: ``np.add.at`` for the backward pass of integer-array indexing, fast
in the common case.

``X[i]`` with an integer array ``i`` that may repeat sends back a
:class:`~dualbcast.core.tape.SparseCotangent` whose values must *add up* at repeated
positions.  ``np.add.at`` does that one element at a time (~12-16 ns each); for the
common case -- one integer array indexing axis 0 of a float buffer, with at least as
many values as the buffer has elements -- ``np.bincount`` does the same sums 2.4-6.7x
faster (the ``i`` and ``j`` of all pairs of 100 to 1000 atoms: a sorted ``i`` is the
slow end, its repeats adding into one bin after another).

Same results as ``np.add.at``:

- float64 buffers: bit for bit.  ``bincount`` adds in index order, as ``np.add.at``
  does, and the buffer's own values are its first weights, so every position sums
  ``((b + v1) + v2) + ...`` exactly as ``np.add.at`` does (``bincount`` starts from
  +0.0, and ``0.0 + b`` is ``b`` for every ``b`` but -0.0: see ``_negative_zero_lost``);
- float32 buffers: ``bincount`` sums in float64 and the total is rounded to float32
  once, where ``np.add.at`` rounds after every addition: the bits may differ, and the
  result is the more accurate;
- out-of-range indices raise ``np.add.at``'s IndexError before anything is written
  (``np.add.at`` itself raises it), and every other index form goes to ``np.add.at``.
"""
import numpy as np

# The fast path costs ~25 µs of calls, ~7 ns per element of the buffer (bincount
# visits them all) and ~2 ns per value; np.add.at ~2 µs and ~12-16 ns per value.  So
# np.add.at for small inputs (LJ of 30 atoms: 435 pairs x 3 values) and for a few
# elements read from a large array; measured crossovers are near 3000 values and near
# as many values as the buffer has elements.
MIN_VALUES = 4096
MIN_VALUES_PER_ELEMENT = 1

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
        if _bincount_add(buffer, idx, values, shape):
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


def _bincount_add(buffer, idx, values, shape):
    """The fast path of ``buffer[idx] += values`` with repeats adding up, ``shape`` the
    shape of ``buffer[idx]``: True once done, False with nothing written where
    np.add.at must do it (other buffers, small inputs, and the errors it raises)."""
    if not (type(buffer) is np.ndarray and buffer.dtype in _FLOATS and buffer.ndim
            and buffer.flags.c_contiguous and buffer.flags.writeable):
        return False
    values = np.asarray(values)
    if values.dtype.kind != "f" or values.dtype.itemsize > 8:     # (longdouble)
        return False
    n0 = buffer.shape[0]
    count, width = idx.size, buffer.size // n0 if n0 else 0
    added = count * width
    if added == 0:                      # nothing to add (np.add.at still checks shapes)
        return False
    if added < max(MIN_VALUES, MIN_VALUES_PER_ELEMENT * buffer.size):
        return False
    if values.shape != shape:
        values = _broadcast(values, shape)
        if values.shape != shape:
            return False
    lo, hi = idx.min(), idx.max()
    if lo < -n0 or hi >= n0:
        return False                    # np.add.at raises its IndexError
    idx = idx.reshape(-1).astype(np.intp, copy=False)   # (int8 + n0 could overflow)
    if lo < 0:
        idx = np.where(idx < 0, idx + n0, idx)
    return _add_rows(buffer.reshape(n0, width), idx, values.reshape(count, width))


def _add_rows(buffer, idx, values):
    """Add the rows ``values`` (count, width) into the rows ``idx`` (count,) of
    ``buffer`` (n0, width), ``idx`` in range and non-negative.  False, with nothing
    written, where the result could differ from np.add.at's in the sign of a zero."""
    n0, width = buffer.shape
    # One bincount per column, on contiguous float64 weights: the column's current
    # values first (so the sums start from them, as np.add.at's do), then its values.
    # (Linear indices into the whole buffer, one bincount, are 2-4x slower at width 3:
    # they build and scan an index array width times as long.)
    weights = np.empty((width, n0 + idx.size))
    weights[:, :n0] = buffer.T
    weights[:, n0:] = values.T
    positions = np.concatenate((np.arange(n0, dtype=np.intp), idx))
    sums = np.empty((width, n0))
    for column in range(width):
        sums[column] = np.bincount(positions, weights[column], minlength=n0)
    if _negative_zero_lost(sums, weights[:, :n0]):
        return False
    buffer[...] = sums.T                # float32: the float64 sum, rounded once
    return True


def _negative_zero_lost(sums, before):
    """Whether some position might be -0.0 by np.add.at and +0.0 here.

    bincount starts each sum from +0.0, so a -0.0 in the buffer becomes +0.0 before the
    values are added; that only shows where every value added to it is -0.0 too (any
    other value gives the same sum either way), and then the sum is zero.  Rare (the
    backward pass adds into fresh +0.0 buffers): np.add.at does those."""
    zero = sums == 0
    if not zero.any():
        return False
    before = before[zero]
    return bool(np.any((before == 0) & np.signbit(before)))
