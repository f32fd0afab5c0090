"""The C allocator's settings for array programs: keep freed memory for the next call.

An array program's temporaries are large (a 256 x 256 float64 array is 512 KiB), and
glibc's ``malloc`` serves allocations past its mmap threshold (128 KiB at first, raised
as such blocks are freed) with fresh pages from the kernel, and gives the top of its
heap back once more than twice that threshold lies free there.  A program that frees
its temporaries at the end of each call -- every NumPy program, a gradient's tape --
then meets a page fault for every 4 KiB of every temporary on the next call: a 256 x 256
Hessian-vector product took 11 ms a call where its arithmetic takes 2.2 ms (measured
here; importing JAX made the EAM chain fault ~3900 pages a call, 8 ms against 3 ms).

So, on import, with glibc, dualbcast sets ``M_MMAP_THRESHOLD`` to 32 MiB and
``M_TRIM_THRESHOLD`` to 64 MiB (``mallopt``, as the environment variables
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` would): blocks up to 32 MiB
come from the heap and return to it, and up to 64 MiB of freed memory stays with the
process for its next allocations.  The cost: the process's resident size keeps that
much more after a peak, and the heap's holes between blocks of many sizes (a loop over
8 MB arrays of a new length each call: ~140-200 MB resident against ~100 MB, flat;
with a 256 MiB trim threshold ~280 MB).  The thresholds are glibc's, for every arena
(a threaded host may keep that much in each thread's arena); ``GLIBC_TUNABLES``'
malloc settings are overridden too, unless ``DUALBCAST_MALLOC_TUNING=0``.  Not done when the user set either environment variable (they
decided), nor with ``DUALBCAST_MALLOC_TUNING=0``.
"""
import ctypes
import os
import platform

from .compile_log import logger

MMAP_THRESHOLD = 32 << 20       # glibc's maximum for the dynamic threshold (64-bit)
TRIM_THRESHOLD = 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3       # (malloc.h)

tuned = False                   # whether this process's allocator was tuned here


def tune_malloc():
    """Set glibc's thresholds as above, unless the environment decides; whether done."""
    global tuned
    if tuned:
        return True
    if os.environ.get("DUALBCAST_MALLOC_TUNING", "1") == "0" \
            or "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")     # (find_library would run ldconfig)
        done = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    except (OSError, AttributeError):
        return False
    tuned = done
    logger.debug(f"glibc malloc: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold "
                 f"{TRIM_THRESHOLD >> 20} MiB ({'set' if done else 'not set'})")
    return done
