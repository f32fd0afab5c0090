"""The compile log (dualbcast/compile_log.py): every compile of a kernel's loop, of its
threaded driver and of a fused db.jit program is named on the "dualbcast" logger, with
its seconds and whether the disk cache served it; a long one prints a notice."""
import logging
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dualbcast as db


@pytest.fixture
def compile_log(caplog):
    caplog.set_level(logging.INFO, logger="dualbcast")
    return caplog


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "dualbcast"]


def test_a_first_call_names_what_it_compiled_and_a_second_is_silent(compile_log):
    @db.fast_broadcast
    def logged_kernel(r, a):
        return a * math.exp(-r)

    x = np.linspace(0.0, 1.0, 10)
    logged_kernel.sum(x, 2.0)
    (message,) = _messages(compile_log)
    assert message.startswith("@fast_broadcast kernel 'logged_kernel', sum loop "
                              "(float64, float64) over 1-d arrays: ")
    assert message.endswith(" s") and ("compiled in" in message or "disk cache" in message)
    compile_log.clear()
    logged_kernel.sum(x, 3.0)
    assert _messages(compile_log) == []
    logged_kernel.sum_and_partials(x.astype(np.float32), 2.0, wrt=0)
    (message,) = _messages(compile_log)
    assert "sum_partials loop (Dual(float32, 1), float32)" in message


def test_the_threaded_driver_and_a_fused_program_are_named(compile_log, monkeypatch):
    @db.fast_broadcast
    def threaded_kernel(r):
        return r * r + 1.0

    from dualbcast.kernel import prepared
    monkeypatch.setattr(db.config, "parallel_threshold", 1000)
    monkeypatch.setattr(db.config, "threads", 2)
    monkeypatch.setattr(prepared, "DRIVER_AFTER", 0.0)
    x = np.linspace(0.0, 1.0, 50_000)
    # The first large call runs on one thread, compiling the loop and (with no time
    # on one thread to wait for) its threaded driver both; the second runs on
    # threads, compiling nothing.
    total = threaded_kernel.sum(x)
    messages = _messages(compile_log)
    assert [m.split(":")[0] for m in messages] == [
        "@fast_broadcast kernel 'threaded_kernel', sum loop (float64) over 1-d arrays",
        "the threaded driver of @fast_broadcast kernel 'threaded_kernel', sum loop "
        "(float64) over 1-d arrays"], messages
    compile_log.clear()
    assert threaded_kernel.sum(x) == total
    assert _messages(compile_log) == []
    step = db.jit(db.value_and_grad(lambda x: threaded_kernel.sum(x) ** 2))
    small = x[:10]
    for _ in range(4):
        step(small)
    assert any(m.startswith("a db.jit program of ") and "fused into one Numba function" in m
               for m in _messages(compile_log)), _messages(compile_log)


def test_a_long_compile_prints_a_notice_that_can_be_turned_off(capsys, monkeypatch):
    @db.fast_broadcast
    def noticed_kernel(r):
        return r - 1.0

    monkeypatch.setattr(db.config, "compile_notice", 0.0)
    noticed_kernel(np.ones(3))
    err = capsys.readouterr().err
    assert err.startswith("dualbcast: @fast_broadcast kernel 'noticed_kernel', map loop")
    assert "compile_notice = None" in err
    monkeypatch.setattr(db.config, "compile_notice", None)
    noticed_kernel(np.ones(3, np.float32))
    assert capsys.readouterr().err == ""


def test_compile_notice_setting_is_checked():
    for bad in (-1.0, "2", True):
        with pytest.raises(ValueError, match="compile_notice"):
            db.config.compile_notice = bad


def test_a_loop_from_the_disk_cache_says_so(tmp_path):
    script = textwrap.dedent("""
        import logging, math, numpy as np, dualbcast as db
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("dualbcast").setLevel(logging.INFO)

        @db.fast_broadcast
        def cached_kernel(r):
            return math.exp(-r)

        cached_kernel.sum(np.ones(5))
    """)
    (tmp_path / "run.py").write_text(script)
    env = dict(os.environ, DUALBCAST_CACHE_DIR=str(tmp_path / "cache"),
               DUALBCAST_COMPILE_NOTICE="off")

    def run():
        done = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr

    first, second = run(), run()
    assert "'cached_kernel', sum loop (float64) over 1-d arrays: compiled in" in first
    assert "'cached_kernel', sum loop (float64) over 1-d arrays: loaded from the disk cache" \
        in second


SCALE = 2.0


def test_a_kernel_compiled_afresh_compiles_and_names_its_own_threaded_driver(
        compile_log, monkeypatch):
    @db.fast_broadcast
    def scaled(r):
        return SCALE * r * r

    monkeypatch.setattr(db.config, "parallel_threshold", 1000)
    monkeypatch.setattr(db.config, "threads", 2)
    monkeypatch.setattr(db.config, "adaptive_threads", False)
    x = np.linspace(0.0, 1.0, 50_000)
    assert scaled.sum(x) == pytest.approx(2.0 * np.sum(x * x), rel=1e-12)
    drivers = [m for m in _messages(compile_log) if m.startswith("the threaded driver")]
    assert len(drivers) == 1, _messages(compile_log)
    monkeypatch.setitem(globals(), "SCALE", 3.0)        # a new generation: a new loop
    compile_log.clear()
    for _ in range(2):
        assert scaled.sum(x) == pytest.approx(3.0 * np.sum(x * x), rel=1e-12)
    messages = _messages(compile_log)        # the new loop, then its own driver
    assert [m.split(",")[0] for m in messages] == [
        "@fast_broadcast kernel 'scaled'",
        "the threaded driver of @fast_broadcast kernel 'scaled'"], messages
