"""benchmarks/peers_cpu.py (eager attention with hooks / output_attentions against a scan) and what is made
from its JSON: the benchmarks page's table and the README's one number."""

import json
from pathlib import Path

import pytest
from bench_children import children_in_process

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def tables(benchmark_script):
    return benchmark_script("readme_tables")


def _record(**summary) -> dict:
    rows = [
        {"mode": "scan", "len": 8192, "median_s": 30.0, "peak_rss_mb": 1500.0},
        {"mode": "hooks", "len": 8192, "median_s": 90.0, "peak_rss_mb": 6000.0, "max_abs_entropy_diff": 2e-6},
        {"mode": "output_attentions", "len": 8192, "skipped": "the attention maps alone need 67.5 GiB"},
    ]
    machine = {"cpu": "x86_64", "cores": 2, "memory_gib": 23.5, "torch": "2.13.0+cpu", "torch_threads": 1}
    return {
        "model": "smollm2",
        "rows": rows,
        "summary": summary or None,
        "machine": machine,
        "created_utc": "2026-11-26T05:13:40Z",
    }


def test_readme_holds_the_generated_line(tables):
    """README.md's marked line is peers_line of benchmarks/results/peers_cpu.json, or, until that file
    exists, the line that says how to measure it (never a typed number)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    marked = [line for line in readme.splitlines() if line.startswith(tables.PEERS_MARK)]
    record = tables.peers_record()
    assert marked == [tables.peers_line(record)], "regenerate it: python benchmarks/readme_tables.py"
    if record is None:
        assert f"not measured yet, run `{tables.PEERS_COMMAND}`" in marked[0]
    page = tables.TARGET.read_text(encoding="utf-8")
    assert tables.tables()["peers_cpu"] in page


def test_table_and_line_from_a_record(tables):
    record = _record(len=8192, speedup=3.0, memory_ratio=4.0)
    line = tables.peers_line(record)
    assert "at 8,192 tokens (smollm2), a scan is 3.0× as fast" in line and "4.0× less peak memory" in line
    # how it was measured, where the number stands (as the benchmarks page's note says it)
    assert (
        "(measured 2026-11-26 with 1 torch thread on a 2-core x86_64 CPU with 23.5 GiB, torch 2.13.0+cpu;"
        in line
    )
    record["machine"]["torch_threads"] = 2
    assert "with 2 torch threads on" in tables.peers_line(record)
    table = tables.peers_table(record)
    assert "| 8,192 | hooks | 90.00 | 3.00 | 6,000 | 4.00 | 2.0e-06 |" in table
    assert "| 8,192 | output_attentions | skipped: the attention maps alone need 67.5 GiB |" in table
    assert "undefined" in tables.peers_line(_record()) and "nan" not in tables.peers_line(_record())
    assert "not measured yet: run `python benchmarks/peers_cpu.py`" in tables.peers_table(None)


@pytest.mark.slow
def test_quick_run_writes_every_mode_with_the_scans_entropy(tmp_path, benchmark_script, tables, monkeypatch):
    """--quick (tiny-nope, 64 tokens): a row per mode with time and peak RSS, the peers' entropy equal to
    the scan's, a summary, and the page's table and README line made from the JSON. Each mode's worker in
    this process (tests/bench_children.py); in a child process of its own under make test-full."""
    out = tmp_path / "peers_cpu.json"
    peers_cpu = benchmark_script("peers_cpu")
    commands = children_in_process(peers_cpu, monkeypatch)
    assert peers_cpu.main(["--quick", "--out", str(out)]) == 0
    if commands:
        assert [c[c.index("--worker") + 1] for c in commands] == list(peers_cpu.MODES)
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["benchmark"] == "peers_cpu" and record["model"] == "tiny-nope" and "machine" in record
    rows = {r["mode"]: r for r in record["rows"]}
    assert set(rows) == {"scan", "hooks", "output_attentions"}
    for r in rows.values():
        assert r["len"] == 64 and r["median_s"] > 0 and r["peak_rss_mb"] >= r["rss_after_load_mb"] > 50
    assert rows["scan"]["paths"] and "max_abs_entropy_diff" not in rows["scan"]
    for mode in ("hooks", "output_attentions"):
        assert 0 <= rows[mode]["max_abs_entropy_diff"] < 1e-4
    summary = record["summary"]
    assert summary["len"] == 64 and summary["speedup"] > 0 and summary["memory_ratio"] > 0
    assert "| 64 | hooks |" in tables.peers_table(record)
    assert "at 64 tokens (tiny-nope)" in tables.peers_line(record)


def test_the_script_rewrites_stale_tables_in_place(tables):
    """`python benchmarks/readme_tables.py` (the fix the tests suggest) rewrites each marked table and the
    README's line; text outside the markers is kept, and a second pass changes nothing."""
    made = {"scan_cpu": "| new |\n|---|"}
    page = "intro\n<!-- table scan_cpu -->\n| old |\n|---|\n| 1 |\n<!-- /table scan_cpu -->\noutro\n"
    page += f"{tables.PEERS_MARK} a stale line\n"
    new = tables.regenerate(page, made)
    assert new.startswith("intro\n<!-- table scan_cpu -->\n| new |\n|---|\n<!-- /table scan_cpu -->\noutro\n")
    assert new.splitlines()[-1] == tables.peers_line(tables.peers_record())
    assert tables.regenerate(new, made) == new


def test_every_table_has_its_markers(tables):
    page = tables.TARGET.read_text(encoding="utf-8")
    for name in tables.tables():
        assert page.count(f"<!-- table {name} -->") == 1 and page.count(f"<!-- /table {name} -->") == 1, name
    assert tables.main(["--check"]) == 0, "regenerate: python benchmarks/readme_tables.py"
