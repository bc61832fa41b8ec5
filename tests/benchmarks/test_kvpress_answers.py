"""The kvpress guide shows what its pipeline block printed (issue 80 item 8: the pressed answer alone was
shown): the answer without a press beside the pressed one, and the keys the press kept. The lines are
benchmarks/kvpress_answers.py's run of the block as written (2,048 tokens, in the kvpress environment),
never typed: the guide holds the record's lines, the record names the block it ran by its SHA-256, and
its numbers are the press's (a quarter of the keys kept at compression_ratio 0.75)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
GUIDE = ROOT / "docs" / "guides" / "kvpress.md"


@pytest.fixture(scope="module")
def tables(benchmark_script):
    return benchmark_script("readme_tables")


@pytest.fixture(scope="module")
def answers(benchmark_script):
    return benchmark_script("kvpress_answers")


def test_the_guide_shows_the_record_of_its_block_as_written(tables, answers):
    record = tables.answers_record()
    assert record is not None, "run .venv-kvpress/bin/python benchmarks/kvpress_answers.py"
    text = GUIDE.read_text(encoding="utf-8")
    assert record["block_sha256"] == answers.block_sha256(answers.guide_block(text)), (
        "the block changed since its run: rerun benchmarks/kvpress_answers.py, then benchmarks/readme_tables.py"
    )
    assert record["tokens"] == 2048 and f"{answers.WRITTEN}  #" in answers.guide_block(text)
    region = re.search(
        r"<!-- output kvpress_answers -->\n(.*?)\n<!-- /output kvpress_answers -->", text, re.DOTALL
    )
    assert region and region.group(1) == tables.answers_output(record), "python benchmarks/readme_tables.py"


def test_both_answers_and_the_kept_fraction_are_shown(tables, answers):
    """The unpressed answer beside the pressed one, each non-empty, and the kept keys a quarter of the
    context's (kvpress keeps int(n × (1 − compression_ratio)) of each layer's n), as the percentage says."""
    record = tables.answers_record()
    assert record is not None, "run .venv-kvpress/bin/python benchmarks/kvpress_answers.py"
    assert "ObservedAttentionPress(compression_ratio=0.75)" in answers.guide_block(GUIDE.read_text("utf-8"))
    without, pressed = record["printed"]
    full = re.fullmatch(r"without a press \(([\d,]+) keys per layer\): (['\"])(.+)\2", without)
    kept = re.fullmatch(r"with the press \(([\d,]+) kept, (\d+)%\): (['\"])(.+)\3", pressed)
    assert full and kept, record["printed"]
    n, k = int(full.group(1).replace(",", "")), int(kept.group(1).replace(",", ""))
    assert n > record["tokens"] and k == int(n * (1 - 0.75)) and int(kept.group(2)) == round(100 * k / n)
    assert full.group(3).strip() and kept.group(4).strip()
