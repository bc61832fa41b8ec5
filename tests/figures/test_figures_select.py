"""`entropy-lens figures 17 ...`: one figure drawn from its own runs alone, its README section rewritten
and no other, `--list`; the record resolves each field on first read; the run code sits below the paper's
pipeline."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.figures.record import FIELDS, FigureData
from entropy_lens.figures.registry import Drawn, Item, items, select

ROOT = Path(__file__).parents[2]
RUNS = ROOT / "figures" / "runs"


def test_items_are_named_by_number_or_stem():
    assert [i.stem for i in select(["17", "5", "figure-5", "figure-07", "table-2"])] == [
        "figure-05",
        "figure-07",
        "figure-17",
        "table-02",
    ]
    with pytest.raises(EntropyLensError, match=r"no figure or table 'figure-99'.*figures --list"):
        select(["figure-99"])
    with pytest.raises(EntropyLensError, match="no figure or table 'fig'"):
        select(["fig"])


def test_list_prints_every_item_with_one_line(capsys):
    assert main(["figures", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in lines] == [i.stem for i in items()]
    assert all(len(line.split("  ", 1)[1]) > 20 for line in lines)  # each says what it is
    assert lines[16].startswith("figure-17  Not in the paper: the row statistics beyond entropy")


class _Runs:
    """A stand-in for figures.pipeline.Runs that counts what the record asks of it."""

    def __init__(self):
        self.config = SimpleNamespace(nope="n", rope="r", short=2, long=4, fit=8, length=None, early=None)
        self.asked: list[str] = []

    def __getattr__(self, name):
        def run(*args, **kw):
            self.asked.append(name)
            if name == "train_len":
                return 16
            if name == "figure7":
                return SimpleNamespace(sweep="the sweep")
            return name

        return run


@pytest.fixture
def planted_scale(monkeypatch):
    """s* = 1.5 from any sweep: the record's own analysis step, on the stand-in's sweep."""
    import entropy_lens.analysis

    monkeypatch.setattr(
        entropy_lens.analysis, "best_uniform_scale", lambda sweep, **kw: SimpleNamespace(scale=1.5, **kw)
    )


def test_the_record_resolves_a_field_on_first_read_and_only_what_it_is_made_of(planted_scale):
    runs = _Runs()
    data = FigureData(runs)
    assert runs.asked == []  # nothing runs until a field is read
    assert data.beyond == "beyond" and data.beyond == "beyond"
    # Figure 17: its own scans, and the NoPE sweep that gives s*; once each, however often read
    assert runs.asked == ["train_len", "figure7", "beyond"]
    assert data.long == 64 and data.fit_len == 128 and data.early is None
    assert runs.asked == ["train_len", "figure7", "beyond"]
    assert "beyond" in FIELDS and "compute" not in FIELDS and len(FIELDS) == 29


def test_a_readme_section_is_replaced_and_every_other_line_kept():
    from entropy_lens.figures.readme import section_lines, splice

    def item(stem):
        return Item(stem, lambda d, c: None, lambda d, c: [])

    a, b, c = item("figure-01"), item("figure-02"), item("table-02")

    def section(i, words):
        return (i, Drawn(None, words, [words]), [f"{words} differs"])

    header = ["# Figures", "", "settings", ""]
    text = "\n".join(header + section_lines(*section(a, "old a")) + section_lines(*section(c, "old c")))
    new = splice(text, [section(c, "new c"), section(b, "new b")], [a, b, c])
    assert new == "\n".join(
        header
        + section_lines(*section(a, "old a"))
        + section_lines(*section(b, "new b"))  # absent: put in its place
        + section_lines(*section(c, "new c"))
    )
    assert splice(text, [section(a, "old a")], [a, b, c]) == text


def test_figure17_alone_reads_only_its_runs_and_rewrites_only_its_section(tmp_path):
    """With a cache that holds only Figure 17's runs (its statistic scans and the NoPE sweep that gives
    s*), `figures 17 --cached-only` draws it, the same bytes as the committed figure, and rewrites its
    README section only; every figure needs more and is refused."""
    from entropy_lens.figures.pipeline import FiguresConfig, make_figures

    cache = tmp_path / "cache"
    cache.mkdir()
    for path in [*RUNS.glob("curves-*"), *RUNS.glob("sweep-tiny-nope-1024-*")]:
        (cache / path.name).symlink_to(path)
    out = tmp_path / "out"
    out.mkdir()
    committed = (ROOT / "figures" / "README.md").read_text(encoding="utf-8")
    # another section changed by hand, Figure 17's emptied: the one is kept, the other redrawn
    edited = committed.replace("## Figure 3\n", "## Figure 3\n\nkept by hand\n")
    start = edited.index("## Figure 17\n")
    end = edited.index("\n## ", start) + 1  # the next section
    (out / "README.md").write_text(edited[:start] + "## Figure 17\n\n" + edited[end:], encoding="utf-8")
    written = make_figures(FiguresConfig(), out, cache=cache, progress=False, cached_only=True, only=["17"])
    assert sorted(p.name for p in written) == ["README.md", "figure-17.pdf", "figure-17.png"]
    assert (out / "README.md").read_text(encoding="utf-8") == edited
    assert (out / "figure-17.png").read_bytes() == (ROOT / "figures" / "figure-17.png").read_bytes()
    assert not list(cache.glob("*.partial*"))
    with pytest.raises(EntropyLensError, match="not in the cache"):
        make_figures(FiguresConfig(), tmp_path / "all", cache=cache, progress=False, cached_only=True)


def test_the_run_code_imports_nothing_of_the_papers_pipeline():
    """runs/ sits below figures/ (tests/test_layout.py's table), lazily too: no module name of figures/
    appears in runs/, not even in an import_module string."""
    from test_layout import ALLOWED

    assert "figures" not in ALLOWED["runs"] and "runs" in ALLOWED["figures"]
    named = [
        p.name
        for p in (ROOT / "entropy_lens" / "runs").glob("*.py")
        if re.search(r"entropy_lens\.figures|\"figures\"", p.read_text(encoding="utf-8"))
    ]
    assert named == []


def test_a_record_with_one_field_replaced_keeps_the_others_lazy(planted_scale):
    runs = _Runs()
    data = FigureData(runs)
    other = data.replace(early="given")
    assert other.early == "given" and data.early is None and runs.asked == []
    assert other.beyond == "beyond" and runs.asked == ["train_len", "figure7", "beyond"]
    with pytest.raises(TypeError, match="FigureData has no field erly"):
        data.replace(erly=None)
