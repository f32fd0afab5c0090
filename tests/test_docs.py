"""The documentation site's pages: every Python example on a page runs, in order, in
one namespace per page (as a reader would run them); every public name is in the API
reference; every page is in the site's table of contents.  (The gallery's examples run
when the site is built: ``docs/conf.py``.)"""
import importlib
import importlib.util
import pathlib
import re
import sys

import pytest

import dualbcast

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md")
               if "_build" not in p.parts and "gallery" not in p.parts
               and "_generated" not in p.parts)
README = DOCS.parent / "README.md"

# What an example prints, where the page shows it (an error message a reader relies on).
PRINTED = {
    "README.md": ["could not be broadcast together with shapes (3,) (4,) () ()",
                  "no gradient rule for numpy.median"],
    "guide/kernels.md": ["could not be broadcast together with shapes (3,) (4,) () ()"],
    "sharp-bits.md": ["no gradient rule for numpy.median",
                      "is a constant, compared on every replay"],
}

# The adapters' examples need their optional extras (CI installs them all).
EXTRAS = {"dualbcast.torch": ("torch",), "dualbcast.jax": ("jax",),
          "dualbcast.scipy": ("scipy",), "dask.array": ("dask", "distributed"),
          "scipy.optimize": ("scipy",)}


def blocks(page):
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def _missing_extra(block):
    for module, needs in EXTRAS.items():
        if f"import {module}" in block:
            for name in needs:
                if importlib.util.find_spec(name) is None:
                    return name
    return None


def _name(page):
    return "README.md" if page == README else str(page.relative_to(DOCS))


@pytest.mark.parametrize("page", [README] + PAGES, ids=_name)
def test_page_examples_run(page, capsys):
    namespace = {}
    missing = []
    for block in blocks(page):
        extra = _missing_extra(block)
        if extra is not None:
            missing.append(extra)
            continue
        exec(compile(block, str(page), "exec"), namespace)
    printed = capsys.readouterr().out
    for text in PRINTED.get(_name(page), []):
        assert text in printed
    if missing:
        pytest.skip(f"examples needing {', '.join(missing)} did not run (not installed)")


def test_every_public_name_is_in_the_api_reference():
    api = (DOCS / "api.md").read_text()
    names = [f"dualbcast.{name}" for name in dualbcast.__all__]
    names += [f"dualbcast.FastBroadcast.{method}" for method in
              ("sum", "value_and_partials", "sum_and_partials", "sum_hessian_diagonal",
               "jvp", "sum_jvp")]
    for module, public in (("torch", ("wrap", "TorchOp")), ("jax", ("wrap", "Op")),
                           ("scipy", ("Objective", "objective")),
                           ("dask", ("BlockwiseCall",))):
        names += [f"dualbcast.{module}.{name}" for name in public]
    documented = set(re.findall(r"dualbcast(?:\.\w+)+", api))
    kernel_members = re.search(r"autoclass:: dualbcast\.FastBroadcast\n\s+:members: (.*)", api)
    documented |= {f"dualbcast.FastBroadcast.{m.strip()}"
                   for m in kernel_members.group(1).split(",")}
    assert sorted(set(names) - documented) == []


def test_adapters_list_what_the_reference_documents():
    for module, public in (("torch", ["wrap", "TorchOp"]), ("jax", ["wrap", "Op"]),
                           ("scipy", ["Objective", "objective"]),
                           ("dask", ["BlockwiseCall"])):
        source = (DOCS.parent / "dualbcast" / f"{module}.py").read_text()
        listed = re.search(r"__all__ = \[(.*?)\]", source, re.S).group(1)
        assert sorted(re.findall(r'"(\w+)"', listed)) == sorted(public)


def test_every_page_is_in_a_table_of_contents():
    toctrees = "\n".join(re.findall(r"```\{toctree\}(.*?)```", (DOCS / "index.md").read_text(),
                                    re.S))
    listed = set(re.findall(r"^([\w/-]+)$", toctrees, re.M))
    pages = {str(p.relative_to(DOCS).with_suffix("")) for p in PAGES} - {"index"}
    assert pages <= listed, pages - listed


def test_dir_shows_the_public_api():
    assert sorted(dir(dualbcast)) == sorted(set(dualbcast.__all__) | {"__version__"})
    # The internal modules stay importable.
    assert importlib.import_module("dualbcast.kernel.fast_broadcast").fast_broadcast \
        is dualbcast.fast_broadcast


def test_the_readme_benchmark_table_is_the_last_asv_run():
    # The README shows the benchmarks page's "programs" table, as made from
    # docs/benchmarks/results.json (docs/_ext/asv_pages.py).
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        asv_pages = importlib.import_module("asv_pages")
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    readme = (DOCS.parent / "README.md").read_text()
    assert asv_pages.table("programs") in readme


def _public_objects():
    objects = {f"dualbcast.{name}": getattr(dualbcast, name) for name in dualbcast.__all__
               if name != "config"}
    objects["dualbcast.config.Config"] = type(dualbcast.config)
    for method in ("__call__", "sum", "value_and_partials", "sum_and_partials",
                   "sum_hessian_diagonal", "jvp", "sum_jvp"):
        objects[f"dualbcast.FastBroadcast.{method}"] = getattr(dualbcast.FastBroadcast, method)
    for module, public in (("torch", ("wrap", "TorchOp")), ("jax", ("wrap", "Op")),
                           ("scipy", ("Objective", "objective")),
                           ("dask", ("BlockwiseCall",))):
        spec = {"torch": "torch", "jax": "jax", "scipy": "scipy", "dask": "dask.array"}[module]
        if importlib.util.find_spec(spec.split(".")[0]) is None:
            continue
        adapter = importlib.import_module(f"dualbcast.{module}")
        objects.update({f"dualbcast.{module}.{name}": getattr(adapter, name) for name in public})
    return objects


@pytest.mark.parametrize("name", sorted(_public_objects()))
def test_public_docstrings_have_numpydoc_sections(name):
    # The API reference is these docstrings: what a call takes, gives, raises, and an
    # example (which tests/test_docstrings.py runs).
    obj = _public_objects()[name]
    doc = obj.__doc__ or ""
    sections = set(re.findall(r"^\s*(\w[\w ]*)\n\s*-{3,}\s*$", doc, re.M))
    if isinstance(obj, type) and issubclass(obj, Exception):
        wanted = {"Examples"}
    elif isinstance(obj, type):
        wanted = {"Examples"} | ({"Attributes"} if name.endswith("Config") else set())
    else:
        wanted = {"Parameters", "Returns", "Examples"}
    assert wanted <= sections, f"{name}: missing {sorted(wanted - sections)}"
    assert ">>>" in doc
