"""Figure 19: where NoPE's attention goes beyond L, by key position. The numbers on planted scans (uniform
rows give the uniform reference exactly; a planted head's unevenness is found), the words from them, the
builder's panels, and `figures 19 --cached-only` from the committed runs: the section is the committed
one and its words are the runs' numbers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from entropy_lens.analysis import key_shares, uniform_received
from entropy_lens.analysis.received import counted_rows, spread
from entropy_lens.errors import EntropyLensError
from entropy_lens.figures.beyond import times
from entropy_lens.figures.landing import EVEN, answer, model_words
from entropy_lens.figures.record import KeysReceived
from entropy_lens.figures.registry import item
from entropy_lens.results import ScanResult

ROOT = Path(__file__).parents[2]
RUNS = ROOT / "figures" / "runs"
L, T, W = 16, 64, 48  # the rows beyond L: [16, 64)


def planted(mass: np.ndarray, *, evenness: float = 1.0, piled=None, window: int | None = W) -> ScanResult:
    """A scan whose every head gives each key `mass` (received, (T,)), the same in every window (received²
    as its mean square) but for the head `piled`, whose keys beyond L get it as if in one window of
    1/`evenness`; received_mean is received over the counted rows."""
    layers, heads = 2, 3
    shape = (layers, heads, T)
    received = np.broadcast_to(mass, shape).astype(np.float32).copy()
    square = received.astype(np.float64) ** 2
    if piled is not None:
        square[(*piled, slice(L, None))] /= evenness
    zeros = np.zeros(shape, dtype=np.float32)
    stats = {
        "received": received,
        "received_sq": square.astype(np.float32),
        "received_mean": (received / counted_rows(T, window)).astype(np.float32),
        "received_mean_sq": zeros,
    }
    meta = {"model": "m", "length": T, "samples": 2, "query_window": window}
    line = np.zeros(T, dtype=np.float32)
    return ScanResult(zeros, zeros, line, line, np.full(T, 2), meta=meta, stats=stats)


def test_uniform_rows_by_hand():
    """Row i gives 1/(i + 1) to each key j <= i; the last W rows are counted."""
    n = counted_rows(6, 4)
    assert n.tolist() == [4, 4, 4, 3, 2, 1]
    mass, share = uniform_received(6, 4)
    by_hand = [sum(1 / (i + 1) for i in range(2, 6) if i >= j) for j in range(6)]
    assert mass == pytest.approx(by_hand) and share == pytest.approx(np.array(by_hand) / n)
    assert counted_rows(6, None).tolist() == [6, 5, 4, 3, 2, 1]
    assert mass.sum() == pytest.approx(4)  # each counted row gives all it has
    assert spread(np.array([[1.0, 2.0, 4.0]]), (0, 100)) == pytest.approx([4.0])


def test_uniform_rows_give_the_uniform_reference_and_a_piled_head_is_found():
    mass, _ = uniform_received(T, W)
    k = key_shares(planted(mass), L)
    assert k.beyond == pytest.approx([k.beyond_uniform] * 2)
    assert k.first == pytest.approx([k.first_uniform] * 2, rel=1e-6)
    assert k.spread == pytest.approx([k.spread_uniform] * 2, rel=1e-5)
    assert k.tilt == pytest.approx([k.tilt_uniform] * 2, rel=1e-5)
    assert k.evenness == pytest.approx(np.ones((2, 3)))
    piled = key_shares(planted(mass, evenness=0.1, piled=(1, 2)), L)
    assert piled.evenness[1, 2] == pytest.approx(0.1, rel=1e-5) and piled.evenness[0] == pytest.approx(1)
    with pytest.raises(EntropyLensError, match="no key is beyond it"):
        key_shares(planted(mass), T)


def _shares():
    """NoPE: uniform rows, one head piled (layer 1 head 2); RoPE: the mass on the keys beyond L rising ×20
    from L to the end, head 0 of each layer piled."""
    mass, _ = uniform_received(T, W)
    ramp = mass.copy()
    ramp[L:] *= np.geomspace(1, 20, T - L)
    ramp *= mass.sum() / ramp.sum()
    return {
        "NoPE": key_shares(planted(mass, evenness=0.1, piled=(1, 2)), L),
        "RoPE": key_shares(planted(ramp, evenness=0.05, piled=(slice(None), 0)), L),
    }


def test_the_words_are_the_numbers():
    shares = _shares()
    nope, rope = shares["NoPE"], shares["RoPE"]
    words = model_words("NoPE", nope, "mean entropy ...")
    assert words.startswith("NoPE, the rows [L, 4L) = [16, 64), layers 0, 1: their mass on the keys beyond L")
    assert f"{nope.beyond[0]:.0%}, {nope.beyond[1]:.0%} (uniform rows {nope.beyond_uniform:.0%})" in words
    assert f"spread {times(nope.spread[0])}, {times(nope.spread[1])} (uniform rows" in words
    assert "least in layer 1 head 2 (0.10); mean entropy ..." in words
    where, how = answer(shares)
    assert f"NoPE's put up to {nope.beyond.max():.0%}" in where
    assert rope.spread.min() > EVEN * rope.spread_uniform  # planted: RoPE uneven in every layer
    assert "By position, evenly:" in how
    assert "within the bound in every layer; for RoPE beyond it in layers 0, 1, up to" in how
    assert "its later keys receiving more" in how  # RoPE's ramp rises
    assert "NoPE's keys beyond L are the most even" in how and "NoPE more even in 2 of 2 layers" in how
    assert (
        "layer 1 head 2 (0.10), gives a key its mass as if one window in 10 gave it all: that head piles"
        in how
    )
    # NoPE as RoPE: not evenly, and not the most even
    how = answer({"NoPE": rope, "RoPE": nope})[1]
    assert "By position, not evenly:" in how and "not the most even" in how


def test_the_builder_draws_every_layer_and_four_panels():
    import matplotlib.pyplot as plt

    mass, _ = uniform_received(T, W)
    runs = {"NoPE": planted(mass), "RoPE": planted(mass), "NoPE λ=1.4/√d": planted(mass)}
    data = SimpleNamespace(received=KeysReceived(scale=1.4, window=W, runs=runs), L=L)
    config = SimpleNamespace(data="austen:persuasion")
    drawn = item("figure-19").draw(data, config)
    visible = [ax for ax in drawn.figure.axes if ax.axison]
    assert len(visible) == 2 + 4  # the two layers, the four per-layer panels
    assert visible[0].get_yscale() == "log" and [ln.get_label() for ln in visible[0].get_lines()][:4] == [
        "NoPE",
        "RoPE",
        "NoPE λ=1.4/√d",
        "uniform rows",
    ]
    assert "received_mean" in drawn.caption and "--query-window 48" in drawn.caption
    assert len(drawn.numbers) == 3 + 2
    assert "the setting received_scale" in item("figure-19").differences(data, config)[2]
    plt.close(drawn.figure)


def test_figure19_from_the_committed_runs_says_what_they_hold(tmp_path):
    """`figures 19 --cached-only` reads the three committed scans alone and writes the committed section;
    the scans hold full windows (received_mean is received over the counted rows) and every counted row
    gives all its mass to keys (no sink), so the shares mean what the words say."""
    from entropy_lens.figures.landing import shares_of
    from entropy_lens.figures.pipeline import FiguresConfig, figure_data, make_figures

    data = figure_data(FiguresConfig(), cache=RUNS, progress=False, cached_only=True)
    r = data.received
    assert list(r.runs) == ["NoPE", "RoPE", "NoPE λ=1.4/√d"] and r.window == data.long - data.L
    assert len(data.runs.used) == 3
    for result in r.runs.values():
        assert result.meta["query_window"] == r.window and result.n_heads > 1
        n = counted_rows(result.length, r.window)
        np.testing.assert_allclose(result.received("received_mean") * n, result.received(), rtol=1e-5)
        np.testing.assert_allclose(result.received().sum(axis=-1), r.window, rtol=1e-4)
    shares = shares_of(r, data.L)
    committed = (ROOT / "figures" / "README.md").read_text(encoding="utf-8")
    section = committed[committed.index("## Figure 19") :].split("\n## ")[0]
    for name, k in shares.items():
        bullet = next(line for line in section.splitlines() if line.startswith(f"- {name}, "))
        assert ", ".join(f"{b:.0%}" for b in k.beyond) in bullet
        assert ", ".join(times(s) for s in k.spread) in bullet
        assert ", ".join(f"{e:.2f}" for e in k.evenness.mean(axis=1)) in bullet
    cache = tmp_path / "cache"
    cache.mkdir()
    for path in data.runs.used:  # the figure's own runs alone
        (cache / path.name).symlink_to(path.resolve())
    out = tmp_path / "out"
    out.mkdir()  # the committed README with Figure 19's section emptied: that section alone is rewritten
    end = committed.index("\n## ", committed.index("## Figure 19")) + 1
    emptied = committed[: committed.index("## Figure 19")] + "## Figure 19\n\n" + committed[end:]
    (out / "README.md").write_text(emptied, encoding="utf-8")
    written = make_figures(FiguresConfig(), out, cache=cache, progress=False, cached_only=True, only=["19"])
    assert sorted(p.name for p in written) == ["README.md", "figure-19.pdf", "figure-19.png"]
    assert (out / "figure-19.pdf").read_bytes() == (ROOT / "figures" / "figure-19.pdf").read_bytes()
    assert (out / "README.md").read_text(encoding="utf-8") == committed
