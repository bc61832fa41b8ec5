"""The documentation's tables that restate a declaration are generated (tools/doc_tables.py): the statistics
guide's tables from `STATISTICS` and `KEY_STATISTICS`, the layout page's package table and its floors
from tests/test_layout.py's `ALLOWED`, the passkey guide's retrieval heads from the passkey records in
figures/runs. The committed text is what the tool writes."""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
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


def _reference_rows(record: dict) -> dict[int, tuple[float, list[tuple[int, int, float]]]]:
    """{length: (accuracy, [(layer, head, mean score) of every head above 0, highest first])} read from the
    record's JSON directly (numpy, not entropy_lens.analysis)."""
    rows = {}
    for length in sorted({c["length"] for c in record["results"]}):
        trials = [t for c in record["results"] if c["length"] == length for t in c["per_trial"]]
        mean = np.mean([t["retrieval_score"] for t in trials], axis=0)
        heads = sorted(
            ((layer, head, mean[layer, head]) for layer, head in zip(*np.nonzero(mean > 0))),
            key=lambda h: (-h[2], h[0], h[1]),
        )
        rows[length] = (np.mean([t["correct"] for t in trials]), heads)
    return rows


def test_the_retrieval_table_lists_each_records_best_heads(tool):
    """Each committed record's row (the passkey guide's table): its accuracy and its heads of the highest
    mean score, equal to the record's own numbers; a model that answers (accuracy above 0) at the length."""
    records = tool.read_records()
    table = tool.retrieval_table(records)
    assert table in tool.PASSKEY_PAGE.read_text(encoding="utf-8")
    assert [r["config"]["model"] for r in records.values()] == [
        "tiny-nope",
        "tiny-rope",
        "tiny-alibi",
        "smollm2",
    ]
    lines = table.splitlines()
    for record in records.values():
        for length, (accuracy, heads) in _reference_rows(record).items():
            start = f"| {record['config']['model']} | {length} ({record['model']['train_len']}) |"
            row = next(x for x in lines if x.startswith(start))
            assert accuracy > 0 and f"| {accuracy:.2f} |" in row
            shown = re.findall(r"(\d+)\.(\d+): ([\d.]+)", row.split(" | ")[-1])
            want = heads[: tool.TOP_HEADS]
            assert [(int(a), int(b)) for a, b, _ in shown] == [(a, b) for a, b, _ in want]
            assert [float(s) for *_, s in shown] == pytest.approx([s for *_, s in want], abs=5e-4)
    assert "--lens 1024 --depths" in table and "retrieval-smollm2-1024.json" in table


def test_a_model_without_a_retrieving_head_is_said_so_not_listed_as_zeros(tool):
    record = json.loads(tool.RETRIEVAL_RECORDS[0].read_text(encoding="utf-8"))
    for cell in record["results"]:
        for trial in cell["per_trial"]:
            trial["retrieval_score"] = np.zeros_like(trial["retrieval_score"]).tolist()
    row = tool.retrieval_table({"none.json": record}).splitlines()[2]
    assert "none: every head scores 0" in row and ": 0.000" not in row
    one = np.zeros((4, 6))
    one[2, 5] = 0.25  # a single retrieving head is listed alone
    for cell in record["results"]:
        for trial in cell["per_trial"]:
            trial["retrieval_score"] = one.tolist()
    assert tool.retrieval_table({"one.json": record}).splitlines()[2].endswith("| 2.5: 0.250 |")
