"""The on-disk cache of compiled loops: a second process loads instead of compiling,
and any edit the machine code depends on (the kernel, a helper it calls, a global
number it reads) compiles afresh instead of loading a stale loop."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dualbcast as db

KERNEL_MODULE = '''
import math
import numba
import dualbcast as db

SCALE = {scale}

@numba.njit
def helper(r):
    return r + {shift}

@db.fast_broadcast
def rho(r):
    return SCALE * math.exp(-3.0 * helper(r))
'''

# The same kernel reading its number and its helper through modules.
THROUGH_MODULES = {
    "kernels.py": '''
import math
import dualbcast as db
import helpers, params

@db.fast_broadcast
def rho(r):
    return params.SCALE * math.exp(-3.0 * helpers.shift(r))
''',
    "params.py": "SCALE = {scale}\n",
    "helpers.py": '''
import numba

@numba.njit
def shift(r):
    return r + {shift}
'''}

RUN = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import kernels
total, grad = kernels.rho.sum_and_partials(np.linspace(0.0, 1.0, 7))
loops = list(kernels.rho._loops.values())
print(json.dumps({
    "total": float(total), "grad0": float(grad[0]),
    "hits": sum(sum(loop.stats.cache_hits.values()) for loop in loops),
    "misses": sum(sum(loop.stats.cache_misses.values()) for loop in loops),
}))
'''


def _run(tmp_path, cache_dir, scale=2.0, shift=1.0, files=None):
    source_dir = tmp_path / "src"
    source_dir.mkdir(exist_ok=True)
    for name, text in (files or {"kernels.py": KERNEL_MODULE}).items():
        (source_dir / name).write_text(text.format(scale=scale, shift=shift))
    env = dict(os.environ)
    if cache_dir is None:
        env.pop("DUALBCAST_CACHE_DIR", None)
        env["HOME"] = str(tmp_path / "home")          # the default cache would go there
        env.pop("XDG_CACHE_HOME", None)
        code = "import dualbcast; dualbcast.config.cache_dir = None\n" + RUN
    else:
        env["DUALBCAST_CACHE_DIR"] = str(cache_dir)
        code = RUN
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(source_dir)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _expected(scale, shift):
    x = np.linspace(0.0, 1.0, 7)
    values = scale * np.exp(-3.0 * (x + shift))
    return values.sum(), -3.0 * values[0]


def test_a_second_process_loads_the_loop_instead_of_compiling(tmp_path):
    first = _run(tmp_path, tmp_path / "cache")
    second = _run(tmp_path, tmp_path / "cache")
    assert (first["hits"], first["misses"]) == (0, 1)
    assert (second["hits"], second["misses"]) == (1, 0)
    assert first["total"] == second["total"] and first["grad0"] == second["grad0"]
    np.testing.assert_allclose((second["total"], second["grad0"]), _expected(2.0, 1.0),
                               rtol=1e-14)


@pytest.mark.parametrize("edit", [{"scale": 3.0}, {"shift": 0.5}],
                         ids=["a global number the kernel reads", "a helper it calls"])
def test_an_edit_the_loop_depends_on_compiles_afresh(tmp_path, edit):
    _run(tmp_path, tmp_path / "cache")
    edited = _run(tmp_path, tmp_path / "cache", **edit)
    assert (edited["hits"], edited["misses"]) == (0, 1)
    want = _expected(edit.get("scale", 2.0), edit.get("shift", 1.0))
    np.testing.assert_allclose((edited["total"], edited["grad0"]), want, rtol=1e-14)
    # and the old version is still cached beside it
    again = _run(tmp_path, tmp_path / "cache")
    assert (again["hits"], again["misses"]) == (1, 0)


@pytest.mark.parametrize("edit", [{"scale": 3.0}, {"shift": 0.5}],
                         ids=["a module's number the kernel reads", "a module's helper"])
def test_an_edit_through_a_module_compiles_afresh(tmp_path, edit):
    # The fingerprint once recorded a module by its name only: params.SCALE edited,
    # a new process loaded the loop compiled with the old value.
    first = _run(tmp_path, tmp_path / "cache", files=THROUGH_MODULES)
    np.testing.assert_allclose((first["total"], first["grad0"]), _expected(2.0, 1.0),
                               rtol=1e-14)
    edited = _run(tmp_path, tmp_path / "cache", files=THROUGH_MODULES, **edit)
    assert (edited["hits"], edited["misses"]) == (0, 1)
    want = _expected(edit.get("scale", 2.0), edit.get("shift", 1.0))
    np.testing.assert_allclose((edited["total"], edited["grad0"]), want, rtol=1e-14)


REBIND = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import kernels
x = np.linspace(0.0, 1.0, 7)
before = float(kernels.rho.sum(x))
kernels.SCALE = 3.0         # rebound after the loops were compiled with 2.0
print(json.dumps({"before": before, "map": float(kernels.rho(x).sum()),
                  "sum": float(kernels.rho.sum(x)),
                  "partials": float(kernels.rho.value_and_partials(x)[0].sum()),
                  "sum_partials": float(kernels.rho.sum_and_partials(x)[0])}))
'''


def test_a_rebound_global_is_seen_by_every_mode_and_cached_under_its_value(tmp_path):
    env = dict(os.environ, DUALBCAST_CACHE_DIR=str(tmp_path / "cache"))
    source_dir = tmp_path / "src"
    source_dir.mkdir()
    (source_dir / "kernels.py").write_text(KERNEL_MODULE.format(scale=2.0, shift=1.0))
    done = subprocess.run([sys.executable, "-c", REBIND, str(source_dir)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == pytest.approx(_expected(2.0, 1.0)[0], rel=1e-14)
    for mode in ("map", "sum", "partials", "sum_partials"):
        assert seen[mode] == pytest.approx(_expected(3.0, 1.0)[0], rel=1e-14), mode
    # A new process whose module says 3.0 loads what was compiled with 3.0.
    fresh = _run(tmp_path, tmp_path / "cache", scale=3.0)
    assert (fresh["hits"], fresh["misses"]) == (1, 0)
    np.testing.assert_allclose((fresh["total"], fresh["grad0"]), _expected(3.0, 1.0),
                               rtol=1e-14)


def test_with_the_cache_off_nothing_is_written(tmp_path):
    result = _run(tmp_path, None)
    assert (result["hits"], result["misses"]) == (0, 1)
    assert not (tmp_path / "home").exists()


def test_an_unusable_cache_directory_only_means_no_cache(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = _run(tmp_path, blocker / "cache")
    np.testing.assert_allclose((result["total"], result["grad0"]), _expected(2.0, 1.0),
                               rtol=1e-14)


def test_kernels_reading_unfingerprintable_values_are_compiled_without_the_cache(tmp_path):
    saved = db.config.cache_dir
    db.config.cache_dir = str(tmp_path)
    try:
        table = {"a": 1.0}                      # a dict: Numba cannot freeze it anyway

        @db.fast_broadcast
        def lookup(x):
            return x * 2.0 if table else x

        with pytest.raises(db.KernelCompileError):
            lookup(np.ones(3))
        assert os.listdir(tmp_path) == []
    finally:
        db.config.cache_dir = saved


def test_a_kernel_whose_module_cannot_be_found_is_not_cached(tmp_path):
    """Code made by exec (or a module loaded under a name of its own, as asv's are):
    Numba names its module "<dynamic>", which another process cannot import, so its
    loops are not cached on disk; a second process compiles them again and runs."""
    code = textwrap.dedent('''
        import json, math, numpy as np, dualbcast as db
        namespace = {"math": math, "__name__": "made_by_exec"}
        exec("def rho(r):\\n    return math.exp(-3.0 * (r + 1.0))\\n", namespace)
        rho = db.fast_broadcast(namespace["rho"])
        total, grad = rho.sum_and_partials(np.linspace(0.0, 1.0, 10 ** 6), wrt=0)
        loops = list(rho._loops.values())
        print(json.dumps({"total": float(total),
                          "hits": sum(sum(l.stats.cache_hits.values()) for l in loops)}))
    ''')
    env = dict(os.environ, DUALBCAST_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    results = [json.loads(done.stdout.strip().splitlines()[-1]) for done in runs]
    assert results[0] == results[1] and results[1]["hits"] == 0


# ------------------------------------------- dualbcast's own helpers, cached on disk

HELPER_RUN = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import dualbcast
from dualbcast.vmath import trig
assert dualbcast.__file__.startswith(sys.argv[1]), dualbcast.__file__
value = trig.sin(0.5)
print(json.dumps({"value": value, "hits": sum(trig.sin.stats.cache_hits.values())}))
'''


def test_an_edit_of_a_library_file_a_cached_helper_inlines_compiles_it_afresh(tmp_path):
    # vmath's sin inlines common.py's f64; Numba's own stamp is sin's file, trig.py,
    # which this edit leaves alone: the library's fingerprint stamps it instead.
    import math
    import shutil
    package = os.path.dirname(db.__file__)
    shutil.copytree(package, tmp_path / "lib" / "dualbcast",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))

    def run():
        done = subprocess.run([sys.executable, "-c", HELPER_RUN, str(tmp_path / "lib")],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    assert run() == {"value": math.sin(0.5), "hits": 0}
    assert run() == {"value": math.sin(0.5), "hits": 1}         # loaded, not compiled
    common = tmp_path / "lib" / "dualbcast" / "vmath" / "common.py"
    source = common.read_text()
    cast = "return context.cast(builder, args[0], x, types.float64)"
    assert source.count(cast) == 1
    common.write_text(source.replace(cast, "return builder.fmul(context.cast(builder, "
                                     "args[0], x, types.float64), context.get_constant("
                                     "types.float64, 2.0))"))
    edited = run()
    assert edited["hits"] == 0 and abs(edited["value"] - math.sin(1.0)) < 1e-15
