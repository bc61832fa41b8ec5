"""Sphinx configuration of the entropy_lens documentation (see docs/README.md for why Sphinx + MyST).

Built offline: no intersphinx, no CDN (MathJax is not loaded; formulas are written as text), and
`make docs` runs with warnings as errors, so a broken reference fails the build.
"""

import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

from entropy_lens import __version__

project = "entropy_lens"
author = "entropy_lens contributors"
release = version = __version__

extensions = [
    "myst_nb",  # Markdown pages (myst-parser) and the notebooks, rendered without executing them
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # Google-style Args/Returns/Raises sections -> the parameter tables
    "cli_reference",  # docs/_ext/cli_reference.py: the CLI reference from the argparse parser
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "README.md", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # tests/figures/test_notebooks.py executes them; the site shows them as committed

autodoc_default_options: dict = {}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_param = True  # one ":param x:" per argument: the "Parameters" table
napoleon_use_rtype = True

smartquotes = False  # "--len" stays two hyphens in help texts
html_theme = "alabaster"
html_title = f"entropy_lens {__version__}"
html_static_path: list[str] = []
html_theme_options = {"description": "attention entropy of causal LMs, at any length", "fixed_sidebar": True}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}


def _copy_notebooks(app):
    """The notebooks live in notebooks/ (where the tests run them); the site renders copies."""
    target = DOCS / "tutorials"
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        copy = target / notebook.name
        if not copy.exists() or copy.read_bytes() != notebook.read_bytes():
            shutil.copyfile(notebook, copy)


# what napoleon writes for an Args/Returns/Raises section (sphinx.ext.napoleon, napoleon_use_param)
_FIELD = re.compile(r"^:(param|type|returns?|rtype|raises?|yields?|ytype|keyword|kwtype)\b[^:]*:")
_MARKUP = re.compile(r"([\\*`|_\[\]])")


def _docstring_as_text(app, what, name, obj, options, lines):
    """The package's docstrings are plain text (shapes, units, formulas such as |i − j|), not
    reStructuredText: show the prose as written, in a literal block, so no formula reads as markup.
    Runs after napoleon (priority 600 > its 500): the field list it made of the Args/Returns/Raises
    sections stays a field list (the parameter table), its text escaped so it too reads as written."""
    if not any(line.strip() for line in lines):
        return
    text = [line.rstrip() for line in lines]
    start = next((i for i, line in enumerate(text) if _FIELD.match(line)), len(text))
    prose, fields = text[:start], text[start:]
    while prose and not prose[-1].strip():
        prose.pop()
    out = [".. code-block:: text", ""] + [f"   {line}" if line else "" for line in prose] + [""] if prose else []
    for line in fields:
        head = _FIELD.match(line)
        cut = head.end() if head else 0
        out.append(line[:cut] + _MARKUP.sub(r"\\\1", line[cut:]))
    lines[:] = [*out, ""]


def setup(app):
    app.connect("builder-inited", _copy_notebooks)
    app.connect("autodoc-process-docstring", _docstring_as_text, priority=600)
