"""The bundled SmolLM2's first-use conversion time (issue 80 item 4: "~25 s on 2 cores" was announced,
171-173 s measured): benchmarks/gguf_convert_cpu.py measures it, models/gguf.py's line states a range
that holds the measurement, and every page that states the time carries the line made from the record
(benchmarks/readme_tables.py's convert_line), never a typed number."""

from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def tables(benchmark_script):
    return benchmark_script("readme_tables")


def test_the_stated_range_holds_the_measurement(tables):
    from entropy_lens.models.gguf import CONVERSION_S

    record = tables.convert_record()
    assert record is not None, f"measure it: {tables.CONVERT_COMMAND}"
    low, high = record["seconds"]
    assert CONVERSION_S[0] <= low <= high <= CONVERSION_S[1], (record["seconds"], CONVERSION_S)
    assert [r["convert_s"] for r in record["rows"]] and record["threads"] == 2


def test_the_first_runs_line_states_the_range(tmp_path, monkeypatch, capsys):
    import shutil

    from entropy_lens.models.gguf import CONVERSION_S, ensure_gguf_cache

    monkeypatch.setenv("ENTROPY_LENS_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    ensure_gguf_cache(gguf, convert=lambda g, out: shutil.copy(g, out / "copied"))
    err = capsys.readouterr().err
    assert f"(SmolLM2-135M: {CONVERSION_S[0] // 60}-{CONVERSION_S[1] // 60} min on 2 cores)" in err
    assert "~25 s" not in err


def test_each_page_carries_the_generated_line(tables):
    """Each page of CONVERT_PAGES states the time in exactly one line, the one convert_line makes; no page
    of the docs types the old guess."""
    line = tables.convert_line(tables.convert_record())
    for page in tables.CONVERT_PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        marked = [row.strip() for row in text.splitlines() if row.rstrip().endswith(tables.CONVERT_MARK)]
        assert marked == [line], f"{page}: regenerate it: python benchmarks/readme_tables.py"
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        text = page.read_text(encoding="utf-8")
        assert "about 25 s" not in text and "~20–25 s" not in text, page


def test_the_line_says_how_to_measure_until_measured_and_a_range_of_repeats(tables):
    assert f"run `{tables.CONVERT_COMMAND}`" in tables.convert_line(None)
    machine = {"cpu": "x86_64", "cores": 2, "memory_gib": 23.5, "torch": "2.13.0+cpu", "torch_threads": 2}
    rows = [
        {"repeat": 0, "transformers": "5.24.0", "convert_s": 64.6, "tokenizer_s": 21.5},
        {"repeat": 1, "transformers": "5.24.0", "convert_s": 70.2, "tokenizer_s": 20.9},
    ]
    record = {
        "seconds": [64.6, 70.2],
        "rows": rows,
        "machine": machine,
        "created_utc": "2026-11-28T22:47:00Z",
    }
    line = tables.convert_line(record)
    assert "(65–70 s, the tokenizer 21 s of it, measured 2026-11-28 with 2 torch threads" in line
