"""Sphinx configuration of dualbcast's documentation site.

Build it from the repository root (warnings are errors; the gallery's examples run):

    pip install -e ".[docs]" && python -m sphinx -W --keep-going -b html docs docs/_build/html
"""
import importlib.util
import os
import sys

import dualbcast

# The examples run in this process: a first compile's notice on stderr is noise here.
dualbcast.config.compile_notice = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

project = "dualbcast"
author = "the dualbcast developers"
copyright = "2026, the dualbcast developers"
release = version = dualbcast.__version__

extensions = [
    "myst_parser",                  # the guide's pages are Markdown
    "sphinx.ext.autodoc",           # the API reference, from the docstrings
    "sphinx.ext.napoleon",          # ... written in NumPy's style
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",   # the examples, executed at every build
    "sphinx_copybutton",
    "asv_pages",                    # the benchmark tables and plots, from asv's results
]

exclude_patterns = ["_build", "examples", "benchmarks/_generated"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "none"          # the docstrings' Parameters say the types a user sees
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "gallery",
    "filename_pattern": r"/plot_",          # every example is executed
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "reset_modules": ("matplotlib",),
    "matplotlib_animations": False,
    "show_memory": False,
}

html_theme = "furo"
html_title = f"dualbcast {release}"
html_show_sourcelink = False

# Offline: nothing is fetched when the site is built or read (no intersphinx
# inventories, no fonts or scripts from a CDN).  The examples' formulas are drawn by a
# copy of MathJax 3 served with the site (the [docs] extra's django-static-mathjax
# carries its built files; tex-svg.js is one file: SVG output needs no web fonts).
_mathjax = importlib.util.find_spec("mathjax")
if _mathjax is None:
    raise ImportError("docs: MathJax is not installed: pip install -e '.[docs]'")
html_static_path = [os.path.join(os.path.dirname(_mathjax.origin), "static", "mathjax", "es5",
                                 "tex-svg.js")]
mathjax_path = "tex-svg.js"
