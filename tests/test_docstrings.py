"""Every example in the package's docstrings runs and gives what it shows."""
import doctest
import importlib
import pkgutil

import pytest

import dualbcast

MODULES = sorted(name for _, name, _ in pkgutil.walk_packages(dualbcast.__path__, "dualbcast.")
                 if not name.endswith("__main__"))
# The adapters, importable only with their optional extra installed.
EXTRAS = {"dualbcast.torch": "torch", "dualbcast.jax": "jax", "dualbcast.scipy": "scipy",
          "dualbcast.dask": "dask.array"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in EXTRAS:
        pytest.importorskip(EXTRAS[name], reason=f"{name} needs its optional extra")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
