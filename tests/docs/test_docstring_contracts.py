"""Docstrings and comments keep contracts (shapes, units, what is refused), not history or measurements:
timings, machine descriptions and issue numbers live in docs/internals/*.md."""

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "entropy_lens"
# a time measured on some machine, a machine, or a project issue number
MEASURED = re.compile(
    r"~\s?\d+(\.\d+)?\s?(s|ms|min|minutes|seconds)\b|\b\d+(\.\d+)?\s?(s|ms|min)\b[^.;:]{0,40}\bcores?\b"
    r"|\bon \d+ (CPU |quiet )?cores\b|\(issue \d+\)|\bissue \d+\b|\bmeasured on\b|\bx faster\b|\d×? faster\b"
)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a module's `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found.append((tok.start[0], tok.string))
    return found


def test_docstrings_and_comments_state_no_measurement_or_history():
    hits = [
        f"{path.relative_to(PACKAGE)}:{line}: {m.group(0)!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in prose(path.read_text(encoding="utf-8"))
        for m in MEASURED.finditer(text)
    ]
    assert not hits, "move these to docs/internals/*.md: " + "; ".join(hits)


def test_the_check_sees_a_timing_and_an_issue_number():
    source = '"""Train it.\n\n    train()   # ~15 min on 2 CPU cores\n"""\nx = 1  # as issue 41 asks\n'
    assert [bool(MEASURED.search(text)) for _, text in prose(source)] == [True, True]
