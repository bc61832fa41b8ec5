"""Sphinx configuration of the entropy_lens documentation (see docs/README.md for why Sphinx + MyST).

Built offline: no intersphinx, no CDN (MathJax is not loaded; formulas are written as text), and
`make docs` runs with warnings as errors, so a broken reference fails the build.
"""

import datetime
import inspect
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
# the footer's copyright holder: pyproject's authors where it names them (Python >= 3.11 reads it),
# else the project's contributors
try:
    import tomllib

    _authors = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"].get(
        "authors", []
    )
except ModuleNotFoundError:
    _authors = []
author = ", ".join(a["name"] for a in _authors if a.get("name")) or "the entropy_lens contributors"
copyright = f"{datetime.date.today().year}, {author}"
release = version = __version__

extensions = [
    "myst_nb",  # Markdown pages (myst-parser) and the notebooks, rendered without executing them
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # Google-style Args/Returns/Raises sections -> the parameter tables
    "sphinx_copybutton",  # a copy button on every code block (prompts and outputs left out)
    "cli_reference",  # docs/_ext/cli_reference.py: the CLI reference from the argparse parser
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "README.md", "Thumbs.db", ".DS_Store", "tutorials/executed"]
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

# the docstrings are plain text in which `name` means code: so it reads in the reference too (a name
# autodoc documents becomes a link; nitpicky is off, so an unresolved one is code without a link)
default_role = "py:obj"
smartquotes = False  # "--len" stays two hyphens in help texts
html_theme = "furo"  # light/dark mode and the page's table of contents, all files local
html_title = f"entropy_lens {__version__}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": True,
    "top_of_page_buttons": [],  # no "edit this page" / "view source" links to a host the build does not know
}
html_show_sourcelink = False
html_copy_source = False
# search results show the words around the match (Sphinx's searchtools reads them from the page's
# role="main" element, which furo's article is; served over HTTP, as any browser fetch needs)
html_search_language = "en"
html_show_search_summary = True
copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False


def _copy_notebooks(app):
    """The notebooks live in notebooks/ (where the tests run them, without outputs); the site renders copies,
    executed with their outputs where tools/tutorial_outputs.py stored them (docs/tutorials/executed/)."""
    target = DOCS / "tutorials"
    for source in sorted((ROOT / "notebooks").glob("*.ipynb")):
        executed = target / "executed" / source.name
        notebook = executed if executed.is_file() else source
        copy = target / source.name
        if not copy.exists() or copy.read_bytes() != notebook.read_bytes():
            shutil.copyfile(notebook, copy)


# the home page's quick starts are the README's, read at build time so the two never differ
QUICKSTARTS = "<!-- the README's quick starts (docs/conf.py: _readme_quickstarts) -->"
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")
_MOVED = {"notebooks/README.md": "tutorials/index.md"}  # README links whose page the site holds elsewhere


def _site_link(match: re.Match) -> str:
    """A README link as the home page's: docs/ pages relative to docs/, other files as plain text."""
    text, target = match.groups()
    if target.startswith(("http://", "https://", "#")):
        return match.group(0)
    if target in _MOVED:
        return f"[{text}]({_MOVED[target]})"
    if target.startswith("docs/"):
        return f"[{text}]({target.removeprefix('docs/')})"
    return text


def _readme_quickstarts(readme: str) -> str:
    """The README's quick starts (the command line, Python, the training monitor, the integrations) as
    the home page's sections: its "Quick start" sections, the Python one cut before the paragraph that
    leads to its second Python block (the monitor's)."""
    sections = {part.split("\n", 1)[0]: part.split("\n", 1)[1].strip() for part in readme.split("\n## ")[1:]}
    cli = sections["Quick start: the command line"]
    python = sections["Quick start: Python"]
    second = [m.start() for m in re.finditer(r"^```python$", python, re.MULTILINE)][1]
    cut = python.rindex("\n\n", 0, python.rindex("\n\n", 0, second) + 1)
    parts = {
        "The command line": cli,
        "Python": python[:cut],
        "Training monitor": python[cut:].strip(),
        "Integrations": sections["Quick start: integrations"],
    }
    return "\n\n".join(f"### {title}\n\n{_LINK.sub(_site_link, text)}" for title, text in parts.items())


def _home_page(app, docname, source):
    if docname == "index" and QUICKSTARTS in source[0]:
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        source[0] = source[0].replace(QUICKSTARTS, _readme_quickstarts(readme))


def _no_builtin_docstring(app, what, name, obj, options, lines):
    """A constant (`BACKENDS`, a tuple) has no docstring of its own: autodoc would show its type's
    ("Built-in immutable sequence..."); the page's text about it stands instead."""
    if what in ("data", "attribute") and lines and inspect.getdoc(type(obj)) == "\n".join(lines).strip():
        lines[:] = []


def outside_override(cls, name: str) -> bool:
    """Whether `cls.name` overrides, without a docstring of its own, a method of a base from outside the
    package (`EntropyLensCallback.on_log`, one of transformers' Trainer events): autodoc would show that
    base's docstring as ours, so the reference leaves it to the base's documentation."""
    own = vars(cls).get(name)
    if own is None or getattr(own, "__doc__", None):
        return False
    return any(
        name in vars(base)
        for base in cls.__mro__[1:]
        if base is not object and not base.__module__.startswith("entropy_lens")
    )


def _skip_outside_overrides(app, what, name, obj, skip, options):
    owner = getattr(obj, "__qualname__", "").rpartition(".")[0]
    cls = getattr(sys.modules.get(getattr(obj, "__module__", None) or ""), owner, None) if owner else None
    return True if isinstance(cls, type) and outside_override(cls, name) else None


def setup(app):
    app.connect("builder-inited", _copy_notebooks)
    app.connect("source-read", _home_page)
    app.connect("autodoc-process-docstring", _no_builtin_docstring)
    app.connect("autodoc-skip-member", _skip_outside_overrides)
