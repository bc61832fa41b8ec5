"""The documentation's tables that restate a declaration are generated (tools/doc_tables.py): the statistics
guide's tables from `STATISTICS` and `KEY_STATISTICS`, the layout page's package table and its floors
from tests/test_layout.py's `ALLOWED`. The committed text is what the tool writes."""

import importlib.util
import re
from pathlib import Path

import pytest

import entropy_lens
from entropy_lens.statistics import KEY_STATISTICS, STATISTICS

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "tools" / "doc_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_regions_are_what_the_tool_writes(tool):
    assert tool.stale() == [], "run: python tools/doc_tables.py"


def test_the_statistics_guide_lists_every_statistic_once(tool):
    page = tool.STATISTICS_PAGE.read_text(encoding="utf-8")
    for declared in (STATISTICS, KEY_STATISTICS):
        table = tool.statistics_table(declared)
        assert table in page
        names = re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)
        assert names == list(declared)
    row = tool.statistics_table({"max_logit": STATISTICS["max_logit"]}).splitlines()[-1]
    assert row.startswith("| `max_logit` | score |") and row.endswith("| — | max | rows |")


def _table_rows(text: str) -> dict[str, str]:
    """layout.md's package table: package name -> its "may import" cell."""
    start = text.index("| package | owns | may import |")
    rows = text[start : text.index("\n\n", start)].splitlines()[2:]
    return {
        r.split(" | ")[0].strip("|` ").removesuffix("/").removesuffix(".py"): r.split(" | ")[-1] for r in rows
    }


def test_the_layout_table_has_a_row_per_package_of_allowed_and_its_imports(tool):
    from test_layout import ALLOWED

    rows = _table_rows(tool.LAYOUT_PAGE.read_text(encoding="utf-8"))
    assert list(rows) == list(ALLOWED), "every package of ALLOWED has a row, and no other package"
    for name, cell in rows.items():
        listed = set(cell.removesuffix(" |").split(", ")) - {"—"}
        assert listed == ALLOWED[name], name


def test_the_layout_page_states_the_floors_of_allowed(tool):
    from test_layout import ALLOWED, BASE

    line = tool.floors_line(ALLOWED, BASE)
    assert " ".join(line.split()) in " ".join(tool.LAYOUT_PAGE.read_text(encoding="utf-8").split())
    floors = tool.floors(ALLOWED, BASE)
    assert sorted(n for f in floors for n in f) == sorted(set(ALLOWED) - BASE)
    level = {n: k for k, f in enumerate(reversed(floors)) for n in f}
    for name, imports in ALLOWED.items():  # each package imports only from floors below its own
        assert all(level[t] < level[name] for t in imports - BASE), name


def test_the_tool_refuses_a_missing_or_an_extra_row(tool):
    text = tool.LAYOUT_PAGE.read_text(encoding="utf-8")
    allowed = {"cli": {"runs"}, "runs": set(), "new": set()}
    with pytest.raises(ValueError, match=r"no row for new .*rows for harness, training"):
        tool.layout_table(text, allowed)


def test_the_readme_names_every_statistic_from_the_declarations(tool):
    line = next(x for x in tool.README.read_text(encoding="utf-8").splitlines() if "<!-- statistics -->" in x)
    assert tool.statistics_cell() in line
    assert all(f"`{name}`" in line for name in (*STATISTICS, *KEY_STATISTICS))


def test_the_api_page_opens_with_what_a_user_calls_not_the_layering():
    """The package docstring opens the API page (docs/reference/api.md's automodule): it names where to
    start, and leaves the import rule for contributors to the layout page it links (issue 70)."""
    doc = " ".join(entropy_lens.__doc__.split())
    assert "Imports run one way" not in doc and "docs/internals/layout.md" in doc
    for name in (
        "scan",
        "ScanResult",
        "EntropyRecorder",
        "attention_stats",
        "AttentionMonitor",
        "load_model",
    ):
        assert f"`{name}" in doc, name
    api = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    assert api.index(".. automodule:: entropy_lens\n") < api.index(".. auto", api.index("automodule") + 1)
