"""The disk cache as a store that can be damaged or shared: truncated, emptied and
garbled files, entries written by processes whose main module has another name, a
directory several processes compile into at once, a process killed while writing.
Each case runs in fresh processes (a process keeps what it loaded) and ends in the
right answer, compared with the closed form."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

KERNEL = '''
import math
import dualbcast as db


@db.fast_broadcast
def rho(r):
    return 2.0 * math.exp(-3.0 * (r + 1.0))
'''

# A process computes sum(rho) and its gradient (one loop), then says whether the loop
# was loaded from the disk cache, whether a second dispatcher of the same loop (made
# afresh in this process) then loads it (the entry was replaced), and what the
# "dualbcast" log said about entries that could not be loaded or were not written.
REPORT = '''
def report(kernel):
    import json, logging, numpy as np
    import dualbcast as db
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("dualbcast").addHandler(handler)
    logging.getLogger("dualbcast").setLevel(logging.INFO)
    total, grad = kernel.sum_and_partials(np.linspace(0.0, 1.0, 7))
    (loop,) = kernel._loops.values()
    again = db.fast_broadcast(kernel.py_func)
    again.sum_and_partials(np.linspace(0.0, 1.0, 7))
    (reloaded,) = again._loops.values()
    return {"total": float(total), "grad": grad.tolist(),
            "hits": sum(loop.stats.cache_hits.values()),
            "misses": sum(loop.stats.cache_misses.values()),
            "reloaded": sum(reloaded.stats.cache_hits.values()),
            "unloadable": sum("could not be loaded" in line for line in said),
            "unwritten": sum("not cached on disk" in line for line in said)}
'''

PLAIN = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import kernels
print(json.dumps(kernels.report(kernels.rho)))
'''


def _expected():
    x = np.linspace(0.0, 1.0, 7)
    values = 2.0 * np.exp(-3.0 * (x + 1.0))
    return values.sum(), -3.0 * values


def _check(result):
    total, grad = _expected()
    np.testing.assert_allclose(result["total"], total, rtol=1e-14)
    np.testing.assert_allclose(result["grad"], grad, rtol=1e-14)


def _env(cache_dir):
    return dict(os.environ, DUALBCAST_CACHE_DIR=str(cache_dir))


def _start(args, cache_dir, cwd=None):
    return subprocess.Popen([sys.executable, *args], env=_env(cache_dir), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(process):
    """The JSON a process started by :func:`_start` printed last."""
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _run(args, cache_dir, cwd=None):
    """Run ``python args...`` and return the JSON it printed last."""
    return _result(_start(args, cache_dir, cwd))


def _sources(tmp_path):
    source_dir = tmp_path / "src"
    source_dir.mkdir(exist_ok=True)
    (source_dir / "kernels.py").write_text(KERNEL + REPORT)
    return source_dir


# ---------------------------------------------------------------- damaged files

@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A cache holding the loop, written by one process; each test damages a copy."""
    tmp_path = tmp_path_factory.mktemp("populated")
    source_dir = _sources(tmp_path)
    result = _run(["-c", PLAIN, str(source_dir)], tmp_path / "cache")
    assert (result["hits"], result["misses"]) == (0, 1)
    return source_dir, tmp_path / "cache"


def _one(cache_dir, pattern):
    (found,) = cache_dir.glob(f"*/{pattern}")
    return found


def _truncated(path):
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def _emptied(path):
    path.write_bytes(b"")


def _garbled(path):
    # Same length, every byte but the first two changed (a pickle's header is intact;
    # a loop file is no longer UTF-8).
    data = path.read_bytes()
    path.write_bytes(data[:2] + bytes(byte ^ 0xA5 for byte in data[2:]))


def _flipped(path):
    # One byte in the middle of the file inverted: the pickle still loads, with
    # altered machine code in it.
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _stale_bytecode(path):
    # A bytecode file beside the loop with a header that matches the loop file (magic
    # number, its mtime and size) and a garbled body: what a bad copy leaves, or an
    # import from a version that imported the loop files.  Read, it fails to unmarshal.
    stat = path.stat()
    bytecode = importlib.util.cache_from_source(str(path))
    os.makedirs(os.path.dirname(bytecode), exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + b"\0\0\0\0" + \
        (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + \
        (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    with open(bytecode, "wb") as file:
        file.write(header + b"\xe3 not marshal data" * 10)


DAMAGES = [(pattern, damage) for pattern in ("__pycache__/*.nbi", "__pycache__/*.nbc",
                                             "loop_*.py")
           for damage in (_truncated, _emptied, _garbled)] + [("__pycache__/*.nbc", _flipped),
                                                             ("loop_*.py", _stale_bytecode)]


CASES = {f"{pattern.rpartition('.')[2]}-{damage.__name__[1:]}": (pattern, damage)
         for pattern, damage in DAMAGES}
CASES["none"] = (None, None)        # only moved: the cache was copied to another place


@pytest.fixture(scope="module")
def damaged(populated, tmp_path_factory):
    """Per case: a process started on a damaged copy of the populated cache (all at
    once: each only waits for its compile)."""
    source_dir, populated_cache = populated
    started = {}
    for case, (pattern, damage) in CASES.items():
        cache = tmp_path_factory.mktemp(case) / "cache"
        shutil.copytree(populated_cache, cache)       # (mtimes kept: the entry is current)
        if damage is not None:
            damage(_one(cache, pattern))
        started[case] = _start(["-c", PLAIN, str(source_dir)], cache), cache
    yield started
    for process, _ in started.values():        # (those a failed test left running)
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.mark.parametrize("case", CASES)
def test_a_damaged_cache_file_is_compiled_afresh_and_replaced(populated, damaged, case):
    process, cache = damaged[case]
    result = _result(process)
    _check(result)
    if case.startswith("nb"):
        assert (result["hits"], result["misses"], result["unloadable"]) == (0, 1, 1)
        assert result["reloaded"] == 1          # replaced by an entry that loads
    else:
        # A loop file is written again, and then its entry (compiled from the same
        # source: Numba checks) loads; its bytecode file is never read.  And a cache
        # directory moved elsewhere loads: its loops' modules were once named by their
        # paths, and every process failed with ModuleNotFoundError.
        assert (result["hits"], result["misses"]) == (1, 0)
        loop = _one(cache, "loop_*.py")
        assert loop.read_text() == (populated[1] / loop.parent.name / loop.name).read_text()


TWO_ENTRIES = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import kernels
total, grad = kernels.rho.sum_and_partials(np.linspace(0.0, 1.0, 7))
(loop,) = kernels.rho._loops.values()
(types,) = loop.signatures
# The loop for a read-only array too: a second entry in the loop's index.
loop.compile((*types[:4], types[4].copy(readonly=True), *types[5:]))
print(json.dumps({"total": float(total), "grad": grad.tolist(),
                  "hits": sum(loop.stats.cache_hits.values())}))
'''


def test_a_data_file_holding_another_entry_is_not_loaded(tmp_path):
    """An index that names a data file holding another entry's code (two data files
    swapped; or an index written, then the process stopped before the data file it
    names was)."""
    source_dir = _sources(tmp_path)
    first = _run(["-c", TWO_ENTRIES, str(source_dir)], tmp_path / "cache")
    assert first["hits"] == 0
    one, two = sorted((tmp_path / "cache").glob("*/__pycache__/*.nbc"))
    swapped = one.read_bytes()
    one.write_bytes(two.read_bytes())
    two.write_bytes(swapped)
    second = _run(["-c", TWO_ENTRIES, str(source_dir)], tmp_path / "cache")
    _check(second)
    assert second["hits"] == 0


# ------------------------------------------- written where the main module is named otherwise

# As a Dask worker gets a script's kernel: pickled by value (the script's __main__ is
# not the worker's), run in a process started by spawn, whose main module is the script
# run again as __mp_main__ (or, for python -c, none).
IN_WORKER = '''

class InWorker:
    """Unpickled, it is report(kernel): what the worker computes."""
    def __init__(self, kernel):
        self.kernel = kernel

    def __reduce__(self):
        return report, (self.kernel,)


def in_worker(kernel):
    import cloudpickle, multiprocessing
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(cloudpickle.loads, (cloudpickle.dumps(InWorker(kernel)),))
'''

APP = KERNEL + REPORT + IN_WORKER + '''

if __name__ == "__main__":
    import json, sys
    print(json.dumps(in_worker(rho) if sys.argv[1:] == ["spawn"] else report(rho)))
'''


@pytest.mark.parametrize("how", ["script", "module"])
def test_entries_written_by_a_worker_do_not_break_a_plain_run(tmp_path, how):
    """A Dask worker (here a multiprocessing spawn child) compiled the script's kernel
    first, under the main module name __mp_main__: a plain run of the script then raised
    ModuleNotFoundError: No module named '__mp_main__' at its first kernel call."""
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(APP)
    run = ["app/main.py"] if how == "script" else ["-m", "app.main"]
    cache = tmp_path / "cache"
    worker = _run(run + ["spawn"], cache, cwd=tmp_path)
    plain = _run(run, cache, cwd=tmp_path)
    # Each kind of process loads what one of its kind compiled (python -m and the
    # script run by its path share their __main__ entries).
    again = [_start(run + ["spawn"], cache, cwd=tmp_path), _start(run, cache, cwd=tmp_path)]
    if how == "module":
        again.append(_start(["app/main.py"], cache, cwd=tmp_path))
    again = list(map(_result, again))
    for result in (worker, plain, *again):
        _check(result)
        assert result["unloadable"] == 0        # (not a failed load compiled afresh)
    assert (worker["misses"], plain["misses"]) == (1, 1)
    assert [result["hits"] for result in again] == [1] * len(again)


NOTEBOOK = '''
import __main__, json, sys
assert not hasattr(__main__, "__file__")       # (python -c: a main module with no file)
exec(compile({cell!r}, "<ipython-input-1-0123456789ab>", "exec"), __main__.__dict__)
if {spawn!r}:
    print(json.dumps(in_worker(rho)))
print(json.dumps(report(rho)))
'''


def test_a_notebook_kernel_is_cached_and_loaded(tmp_path):
    """A kernel defined in a notebook cell: code exec'd in a main module with no file,
    also sent to a spawned worker first."""
    cell = KERNEL + REPORT + IN_WORKER
    cache = tmp_path / "cache"
    first = _run(["-c", NOTEBOOK.format(cell=cell, spawn=True)], cache)
    second = _run(["-c", NOTEBOOK.format(cell=cell, spawn=False)], cache)
    for result in (first, second):
        _check(result)
    assert second["hits"] == 1


EXEC_AS_MAIN = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import kernels
namespace = {"__name__": "__main__"}         # exec'd code that says it is the main module
exec(compile(open(kernels.__file__).read(), "<exec'd>", "exec"), namespace)
print(json.dumps(namespace["report"](namespace["rho"])))
'''


def test_exec_d_code_naming_itself_main_is_cached_and_loaded(tmp_path):
    source_dir = _sources(tmp_path)
    cache = tmp_path / "cache"
    first = _run(["-c", EXEC_AS_MAIN, str(source_dir)], cache)
    second = _run(["-c", EXEC_AS_MAIN, str(source_dir)], cache)
    for result in (first, second):
        _check(result)
    assert (first["misses"], second["hits"]) == (1, 1)


HELPER_MADE_BY_EXEC = '''
import math
import numba
import dualbcast as db

namespace = {"__name__": "made_by_exec"}     # a module no process can import
exec("def shift(r):\\n    return r + 1.0\\n", namespace)
shift = numba.njit(namespace["shift"])


@db.fast_broadcast
def rho(r):
    return 2.0 * math.exp(-3.0 * shift(r))
'''


def test_an_entry_naming_a_module_another_process_cannot_import_is_not_written(tmp_path):
    """The kernel's module is importable, a helper's is not (Numba names it
    "<dynamic>"): once written, every later process raised ModuleNotFoundError."""
    source_dir = _sources(tmp_path)
    (source_dir / "kernels.py").write_text(HELPER_MADE_BY_EXEC + REPORT)
    runs = [_run(["-c", PLAIN, str(source_dir)], tmp_path / "cache") for _ in range(2)]
    for result in runs:
        _check(result)
        assert (result["hits"], result["unloadable"]) == (0, 0) and result["unwritten"]


# ----------------------------------------------------- shared, killed, full

def test_three_processes_compiling_into_one_directory_at_once(tmp_path):
    source_dir = _sources(tmp_path)
    cache = tmp_path / "cache"
    started = [_start(["-c", PLAIN, str(source_dir)], cache) for _ in range(3)]
    for process in started:
        _check(_result(process))
    after = _run(["-c", PLAIN, str(source_dir)], cache)
    _check(after)
    assert (after["hits"], after["misses"]) == (1, 0)


# A process whose writes of cache data files fail: killed half-way through writing one
# (as on a file system where a write is not made atomic by a rename), or refused by a
# full disk.
FAILING_WRITE = '''
import contextlib, errno, os, signal, sys
from numba.core import caching

how = sys.argv[2]

@contextlib.contextmanager
def failing(self, path):
    if not path.endswith(".nbc") or not path.startswith(os.environ["DUALBCAST_CACHE_DIR"]):
        with open(path, "wb") as file:
            yield file
        return
    if how == "full":
        raise OSError(errno.ENOSPC, "No space left on device", path)
    file = open(path, "wb")

    class HalfThenKilled:
        def write(self, data):
            file.write(data[:len(data) // 2])
            file.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    yield HalfThenKilled()

caching.IndexDataCacheFile._open_for_write = failing
''' + PLAIN


@pytest.mark.parametrize("how", ["killed", "full"])
def test_a_write_that_fails_leaves_no_damage(tmp_path, how):
    source_dir = _sources(tmp_path)
    cache = tmp_path / "cache"
    done = subprocess.run([sys.executable, "-c", FAILING_WRITE, str(source_dir), how],
                          env=_env(cache), capture_output=True, text=True, timeout=300)
    if how == "killed":
        assert done.returncode == -9, done.stderr
    else:                                       # the call itself succeeds
        assert done.returncode == 0, done.stderr
        _check(json.loads(done.stdout.strip().splitlines()[-1]))
    after = _run(["-c", PLAIN, str(source_dir)], cache)
    _check(after)
    assert (after["hits"], after["misses"]) == (0, 1)
    assert after["reloaded"] == 1


# dualbcast's own Numba helpers are cached in the package's __pycache__ (here in
# NUMBA_CACHE_DIR, where Numba puts every cache when it is set): a scatter-add, a kernel
# map's backward product, a db.jit program's fused runtime.
PACKAGE_HELPERS = '''
import json, logging, numpy as np
import dualbcast as db
from dualbcast.core.scatter import scatter_add
said = []
handler = logging.Handler()
handler.emit = lambda record: said.append(record.getMessage())
logging.getLogger("dualbcast").addHandler(handler)
logging.getLogger("dualbcast").setLevel(logging.INFO)
buffer = np.zeros(5)
scatter_add(buffer, np.arange(40) % 5, np.ones(40))
grad = db.grad(lambda x: np.sum(np.sin(x[np.arange(40) % 5])))(np.linspace(0.0, 1.0, 5))
print(json.dumps({"buffer": buffer.tolist(), "grad": grad.tolist(),
                  "unloadable": sum("could not be loaded" in line for line in said)}))
'''


def test_a_damaged_entry_of_the_package_s_own_helpers_is_compiled_afresh(tmp_path):
    numba_cache = tmp_path / "numba"
    env = dict(_env(tmp_path / "loops"), NUMBA_CACHE_DIR=str(numba_cache))
    x = np.linspace(0.0, 1.0, 5)

    def run():
        done = subprocess.run([sys.executable, "-c", PACKAGE_HELPERS], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        np.testing.assert_array_equal(result["buffer"], np.full(5, 8.0))
        np.testing.assert_allclose(result["grad"], 8.0 * np.cos(x), rtol=1e-14)
        return result
    run()
    entries = [path for path in numba_cache.rglob("*") if path.suffix in (".nbi", ".nbc")]
    assert any("scatter" in path.name for path in entries), entries
    for path in entries:
        path.write_bytes(b"garbage")
    assert run()["unloadable"] >= 1
    assert run()["unloadable"] == 0         # replaced
