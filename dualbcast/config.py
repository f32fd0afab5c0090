"""Run-time settings of dualbcast.

``config.threads``             parts a large kernel loop is split into, run on Numba's
                               threads (default: the CPUs this process may use;
                               ``DUALBCAST_THREADS``)
``config.adaptive_threads``    True (default): each place a large loop may split times
                               its calls on threads and on one thread and runs the way
                               that has been faster lately (kernel/threads.py); False:
                               every large loop splits (``DUALBCAST_ADAPTIVE_THREADS=0``)
``config.parallel_threshold``  loops over fewer elements run on one thread (starting a
                               parallel region costs ~10 µs: two threads win from about
                               16k elements of the EAM kernel here; asv_bench measures)
``config.cache_dir``           where compiled loops are cached on disk (default
                               ``$XDG_CACHE_HOME/dualbcast`` or ``~/.cache/dualbcast``;
                               ``DUALBCAST_CACHE_DIR``); None turns the cache off
``config.compile_notice``      a compile longer than this many seconds prints one line
                               on stderr (default 2.0; ``DUALBCAST_COMPILE_NOTICE``,
                               ``off``); None turns the notice off.  Every compile is
                               logged at INFO on the ``"dualbcast"`` logger
                               (:mod:`dualbcast.compile_log`)

Results never depend on the threads: sums are reduced in a fixed order of fixed-size
chunks.  ``cache_dir`` is read when a loop is first compiled in a process.
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


def _default_adaptive_threads():
    from_env = os.environ.get("DUALBCAST_ADAPTIVE_THREADS", "").strip().lower()
    return from_env not in ("0", "false", "no", "off")


def _default_cache_dir():
    from_env = os.environ.get("DUALBCAST_CACHE_DIR")
    if from_env:
        return from_env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dualbcast")


def _default_compile_notice():
    from_env = os.environ.get("DUALBCAST_COMPILE_NOTICE")
    if from_env is None:
        return 2.0
    return None if from_env.strip().lower() in ("off", "none", "") else float(from_env)


class Config:
    def __init__(self):
        self.threads = _default_threads()
        self.adaptive_threads = _default_adaptive_threads()
        self.parallel_threshold = 32_768
        self.cache_dir = _default_cache_dir()
        self.compile_notice = _default_compile_notice()

    def __setattr__(self, name, value):
        if name == "cache_dir":
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"dualbcast.config.cache_dir must be a path or None, "
                                f"not {value!r}")
            value = None if value is None else os.fspath(value)
        elif name == "compile_notice":
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"dualbcast.config.compile_notice must be a number of "
                                 f"seconds >= 0 or None, not {value!r}")
        elif name == "adaptive_threads":
            if not isinstance(value, bool):
                raise TypeError(f"dualbcast.config.adaptive_threads must be True or False, "
                                f"not {value!r}")
        elif name in ("threads", "parallel_threshold"):
            minimum = 1 if name == "threads" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"dualbcast.config.{name} must be an int >= {minimum}, "
                                 f"not {value!r}")
        else:
            raise AttributeError(f"dualbcast.config has no setting {name!r}")
        object.__setattr__(self, name, value)

    def __repr__(self):
        return (f"dualbcast.config(threads={self.threads}, adaptive_threads="
                f"{self.adaptive_threads}, parallel_threshold="
                f"{self.parallel_threshold}, cache_dir={self.cache_dir!r}, "
                f"compile_notice={self.compile_notice!r})")


config = Config()
