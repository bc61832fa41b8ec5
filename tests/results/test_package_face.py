"""`entropy_lens.results` is the package's face: its __init__ states the file's contract (the module
docstring) and hands on the names of the modules that keep it, and holds no code of its own (issue 58);
every public import path keeps working."""

import ast
import importlib
from pathlib import Path

import entropy_lens
from entropy_lens import results

INIT = Path(results.__file__)


def test_the_face_holds_a_docstring_imports_and_all_only():
    body = ast.parse(INIT.read_text(encoding="utf-8")).body
    kinds = {type(node).__name__ for node in body[1:]}
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    assert kinds <= {"ImportFrom", "Import", "Assign"}, kinds
    assigned = [t.id for node in body if isinstance(node, ast.Assign) for t in node.targets]
    assert assigned == ["__all__"]


def test_every_public_name_is_handed_on_from_its_module():
    for name in results.__all__:
        value = getattr(results, name)
        home = getattr(value, "__module__", None)
        if home is not None and callable(value):
            assert home.startswith("entropy_lens.results."), (name, home)
            assert getattr(importlib.import_module(home), name) is value
    assert entropy_lens.ScanResult is results.ScanResult and entropy_lens.summary is results.summary
    assert callable(results.summary)  # the function, not a module of the same name
