"""A package whose docstring is its table of modules names every one of them, so a reader finds a module by
its job there (issue 58: runs/ is grouped by job; results/ hands its names on)."""

import importlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "entropy_lens"
TABLED = ("figures", "harness", "results", "runs", "training")  # the packages whose docstring lists them


@pytest.mark.parametrize("name", TABLED)
def test_the_docstring_table_names_every_module(name):
    doc = importlib.import_module(f"entropy_lens.{name}").__doc__
    modules = sorted(p.name for p in (PACKAGE / name).glob("*.py") if p.stem not in ("__init__", "__main__"))
    missing = [m for m in modules if not re.search(rf"^ +({name}/)?{re.escape(m)} ", doc, re.MULTILINE)]
    assert not missing, f"entropy_lens/{name}/__init__.py's table lacks {', '.join(missing)}: add a line each"
