"""Run-time settings of dualbcast: the ``dualbcast.config`` object, a :class:`Config`."""
import os


def _from_env(name, parse, expected):
    """An environment variable's value parsed, or an error naming the variable."""
    text = os.environ[name]
    try:
        return parse(text.strip())
    except ValueError:
        raise ValueError(f"dualbcast: the environment variable {name}={text!r} is not "
                         f"{expected}") from None


def _default_threads():
    if os.environ.get("DUALBCAST_THREADS"):
        return _from_env("DUALBCAST_THREADS", int, "a whole number of threads")
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                  # not on Linux
        return os.cpu_count() or 1


_YES, _NO = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


def _yes_or_no(text):
    if text.lower() not in _YES + _NO:
        raise ValueError(text)
    return text.lower() in _YES


def _default_adaptive_threads():
    if "DUALBCAST_ADAPTIVE_THREADS" not in os.environ:
        return True
    return _from_env("DUALBCAST_ADAPTIVE_THREADS", _yes_or_no,
                     "one of 1, true, yes, on, 0, false, no, off")


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
    if from_env.strip().lower() in ("off", "none", ""):
        return None
    return _from_env("DUALBCAST_COMPILE_NOTICE", float, "a number of seconds or off")


class Config:
    """Run-time settings of dualbcast, the attributes of ``dualbcast.config``.

    Set a setting by assigning to it (``db.config.threads = 1``); each assignment is
    checked at once.  A default comes from its environment variable when that is set,
    read once, when dualbcast is imported.  Results never depend on the thread
    settings: sums are reduced in a fixed order of fixed-size chunks.

    Attributes
    ----------
    threads : int
        The number of parts a large kernel loop is split into, run on Numba's
        threads; at least 1.  Default: ``DUALBCAST_THREADS``, or else the number of
        CPUs this process may use.
    adaptive_threads : bool
        True (the default): each place a large loop may split times its calls on
        threads and on one thread, and runs the way that has been faster lately
        (threads must win by 10%, as they take a second core).  False: every large
        loop splits.  ``DUALBCAST_ADAPTIVE_THREADS=0`` (or ``false``, ``no``,
        ``off``) makes the default False.
    parallel_threshold : int
        Loops over fewer elements than this run on one thread (default 32768; at
        least 0).  Starting a parallel region costs about 10 µs, so only large loops
        gain from threads (two threads beat one from about 16k elements of an EAM
        kernel).
    cache_dir : str or None
        Where compiled loops are cached on disk.  Default: ``DUALBCAST_CACHE_DIR``, or
        else ``$XDG_CACHE_HOME/dualbcast``, or ``~/.cache/dualbcast``.  A path-like
        value is stored as a str; None turns the cache off.  It is read when a loop
        is first compiled in a process: a loop compiled already keeps its place.
    compile_notice : float or None
        A compile longer than this many seconds prints one line on stderr (default
        2.0; ``DUALBCAST_COMPILE_NOTICE``, where ``off`` or ``none`` means None).
        None turns the notice off.  Every compile is logged at INFO on the
        ``"dualbcast"`` logger (:mod:`dualbcast.compile_log`) either way.

    Raises
    ------
    AttributeError
        On an assignment to a name that is not a setting.
    TypeError
        On an assignment of a value of the wrong kind to ``adaptive_threads`` (not a
        bool) or ``cache_dir`` (not a path or None).
    ValueError
        On an assignment to ``threads`` or ``parallel_threshold`` of anything but an int
        in range (a bool is refused), or to ``compile_notice`` of anything but a number
        of seconds >= 0 or None.  At import, for an environment variable that does not
        parse (``DUALBCAST_THREADS=two``).

    See Also
    --------
    dualbcast.compile_log : What is compiled, and how long it takes.

    Examples
    --------
    >>> import dualbcast as db
    >>> db.config
    dualbcast.config(threads=..., adaptive_threads=..., parallel_threshold=...,
    cache_dir=..., compile_notice=...)
    >>> previous = db.config.parallel_threshold
    >>> db.config.parallel_threshold = 100_000      # only loops of 100k elements split
    >>> db.config.parallel_threshold
    100000
    >>> db.config.parallel_threshold = previous
    >>> db.config.threads = 0
    Traceback (most recent call last):
        ...
    ValueError: dualbcast.config.threads must be an int >= 1, not 0
    >>> db.config.thread = 2
    Traceback (most recent call last):
        ...
    AttributeError: dualbcast.config has no setting 'thread'
    """

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
