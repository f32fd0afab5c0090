"""Run-time settings of dualbcast, read at every kernel call.

``config.threads``             threads a large kernel loop is split across (default: the
                               CPUs this process may use; ``DUALBCAST_THREADS``)
``config.parallel_threshold``  loops over fewer elements run on one thread (threads
                               cost ~20 µs to wake; measured in asv_bench)

Results never depend on either: sums are reduced in a fixed order of fixed-size chunks.
"""
import os


def _default_threads():
    from_env = os.environ.get("DUALBCAST_THREADS")
    if from_env:
        return int(from_env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                  # not on Linux
        return os.cpu_count() or 1


class Config:
    def __init__(self):
        self.threads = _default_threads()
        self.parallel_threshold = 200_000

    def __setattr__(self, name, value):
        if name not in ("threads", "parallel_threshold"):
            raise AttributeError(f"dualbcast.config has no setting {name!r}")
        minimum = 1 if name == "threads" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"dualbcast.config.{name} must be an int >= {minimum}, "
                             f"not {value!r}")
        object.__setattr__(self, name, value)

    def __repr__(self):
        return (f"dualbcast.config(threads={self.threads}, "
                f"parallel_threshold={self.parallel_threshold})")


config = Config()
