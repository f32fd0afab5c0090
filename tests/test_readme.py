"""Every example in README.md runs, in order, in one namespace (as a reader would)."""
import importlib.util
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 4


# The adapters' examples need their optional extras (CI installs them all).
EXTRAS = {"dualbcast.torch": ("torch",), "dualbcast.jax": ("jax",),
          "dualbcast.scipy": ("scipy",), "dask.array": ("dask", "distributed")}


def _missing_extra(block):
    for module, needs in EXTRAS.items():
        if f"import {module}" in block:
            for name in needs:
                if importlib.util.find_spec(name) is None:
                    return name
    return None


def test_readme_examples_run(capsys):
    namespace = {}
    missing = []
    for block in BLOCKS:
        extra = _missing_extra(block)
        if extra is not None:
            missing.append(extra)
            continue
        exec(compile(block, str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "could not be broadcast together with shapes (3,) (4,) () ()" in printed
    assert "no gradient rule for numpy.median" in printed
    if missing:
        pytest.skip(f"the examples of the adapters for {', '.join(missing)} did not run "
                    f"(not installed); every other example ran")


def test_readme_names_the_test_command_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[test\]" && (python -m pytest[^\n#]*)',
                        README.read_text()).group(1).strip()
    assert command in ci


def test_readme_names_the_docs_build_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[docs\]" && (python -m sphinx[^\n#]*)',
                        README.read_text()).group(1).strip()
    assert command in ci
