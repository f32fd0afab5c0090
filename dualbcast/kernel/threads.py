"""Split a chunked loop call across threads (the loops release the GIL)."""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..config import config

_lock = threading.Lock()
_pool = None


def _workers(count):
    global _pool
    with _lock:
        if _pool is None or _pool._max_workers < count:
            _pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="dualbcast")
        return _pool


def run_chunks(call, nchunks, threads):
    """``call(worker, lo, hi)`` over the chunks ``0 <= c < nchunks``: on this thread
    alone (worker 0), or on ``threads`` threads each taking a contiguous range of chunks
    (this one included, as worker 0)."""
    threads = min(threads, nchunks)
    if threads <= 1:
        call(0, 0, nchunks)
        return
    bounds = [nchunks * t // threads for t in range(threads + 1)]
    pool = _workers(threads - 1)
    futures = [pool.submit(call, t, bounds[t], bounds[t + 1]) for t in range(1, threads)]
    error = None
    try:
        call(0, bounds[0], bounds[1])
    except BaseException as err:        # wait for the others before raising
        error = err
    for future in futures:
        try:
            future.result()
        except BaseException as err:
            error = error or err
    if error is not None:
        raise error


def multiply_in_place(array, factor):
    """``array *= factor``, split across ``config.threads`` threads for a large
    C-contiguous array (NumPy releases the GIL inside the multiplication)."""
    threads = config.threads if array.size >= config.parallel_threshold \
        and array.flags.c_contiguous else 1
    if threads <= 1:
        np.multiply(array, factor, out=array)
        return
    flat = array.reshape(-1)
    bounds = [flat.size * t // threads for t in range(threads + 1)]

    def part(worker, lo, hi):
        piece = flat[bounds[lo]:bounds[hi]]
        np.multiply(piece, factor, out=piece)
    run_chunks(part, threads, threads)
