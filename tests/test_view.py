"""`entropy-lens view` without a browser: the statistics against planted signals, the reduction, the
numbers the page carries, its self-containedness, the CLI's checks (test_view_browser.py drives the page)."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from test_analysis import quadratic_sweep, save_sweep
from view_inputs import LN2, planted

from entropy_lens.analysis import head_statistics
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.view import view
from entropy_lens.view.payload import build_payload
from entropy_lens.view.reduce import Bins, points_for
from entropy_lens.view.sources import resolve


def page_data(page) -> dict:
    text = re.search(
        r'<script type="application/json" id="entropy-lens-data">(.*?)</script>', page.html, re.DOTALL
    )
    return json.loads(text.group(1))


def test_statistics_recover_the_planted_heads():
    r, L, T = planted(jump=True), 64, 256
    stats = head_statistics(r)
    bits = r.entropy.astype(np.float64) / LN2
    np.testing.assert_allclose(stats.values["converged"], bits[:, :, 3 * L : 4 * L].mean(axis=2))
    assert stats.spans["[3L, 4L)"] == (3 * L, 4 * L) and "span [L/2, L)" in stats.values
    slope = np.linspace(0.0, 0.5, 6).reshape(2, 3)
    step = np.linspace(-0.2, 0.3, 6).reshape(2, 3)
    step[0, 0] = 0.0  # head (0, 0) jumps at 1.5L instead
    ln = np.log(np.arange(T) + 1.0)
    growth = slope * (ln[L : 2 * L].mean() - ln[L // 2 : L].mean()) + step
    growth[0, 0] += 1.5 * 0.5  # the jump at 1.5L covers half of [L, 2L)
    np.testing.assert_allclose(stats.values["growth"], growth, atol=1e-5)
    expected_slope = slope.copy()
    expected_slope[0, 0] = np.polyfit(ln[L:], bits[0, 0, L:], 1)[0]  # the jump tilts head (0, 0)'s line
    np.testing.assert_allclose(stats.values["slope"], expected_slope, atol=1e-5)
    departure = stats.values["departure"]
    # smoothing ±L/16 may see a departure early, never late; head (0, 2) keeps its log trend
    assert L + L // 2 - 5 <= departure[0, 0] <= L + L // 2 and np.isnan(departure[0, 2])
    assert all(L - 5 <= departure[lh] <= L for lh in [(0, 1), (1, 0), (1, 1), (1, 2)])


def test_statistics_without_a_training_length_say_why():
    r = planted()
    r.meta["train_len"] = None
    stats = head_statistics(r)
    assert list(stats.spans) == ["first tenth", "middle tenth", "last tenth"]
    assert set(stats.undefined) == {"growth", "slope", "departure"}
    assert "train_len" in stats.undefined["growth"]
    short = head_statistics(planted(T=100, L=64))
    assert "growth" in short.undefined and "slope" in short.values


def test_bins_reduce_to_mean_min_max():
    x = np.random.default_rng(0).normal(size=(2, 3, 1000))
    bins = Bins.of(1000, 64)
    mean, low, high = bins.reduce(x)
    assert bins.starts[0] == 0 and bins.stops[-1] == 1000 and len(bins.starts) == 64
    for k in (0, 17, 63):
        part = x[..., bins.starts[k] : bins.stops[k]]
        np.testing.assert_allclose(mean[..., k], part.mean(-1))
        np.testing.assert_array_equal(low[..., k], part.min(-1))
        np.testing.assert_array_equal(high[..., k], part.max(-1))
    assert Bins.of(100, 512).exact and not bins.exact
    assert points_for(22 * 32, 16384) == 512 and points_for(2 * 22 * 32, 16384) < 512
    assert points_for(10_000, 16384) == 64 and points_for(4, 100) == 100


def test_page_carries_the_files_numbers():
    a, b = planted(T=2048), planted(T=2048, shift=0.5)
    payload = build_payload(resolve([("A", a), ("B", b)])[0], [], points=128)
    first = payload["results"][0]
    bins = Bins.of(2048, 128)
    mean, low, high = bins.reduce(a.entropy.astype(np.float64) / LN2)
    decoded = np.frombuffer(base64.b64decode(first["entropy"]["mean"]), np.float32).reshape(mean.shape)
    np.testing.assert_allclose(decoded, mean, rtol=1e-6)
    e = first["entropy"]
    up = lambda q: e["floor"] + np.frombuffer(base64.b64decode(q), np.uint16).reshape(mean.shape) * e["step"]
    np.testing.assert_allclose(up(e["low"]), low, atol=e["step"] / 2 + 1e-12)
    np.testing.assert_allclose(up(e["high"]), high, atol=e["step"] / 2 + 1e-12)
    np.testing.assert_allclose(first["loss"]["mean"], bins.reduce(a.loss)[0])
    converged = head_statistics(a).values["converged"]
    np.testing.assert_allclose(first["stats"]["converged"]["values"], converged)
    assert first["meta"]["model"] == "tiny-nope" and first["meta"]["scales"] == "1 (uniform)"


def test_page_is_self_contained_and_escapes_labels():
    page = view([("</script><b>x", planted())])
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page.html)
    ours = page.html.replace(
        re.search(r"<script>(.*?)</script>", page.html, re.DOTALL).group(1), ""
    )  # less plotly.js
    assert "http" not in ours  # (plotly.js names URLs for maps; the browser test sees that none is fetched)
    assert "</script><b>x" not in page.html  # escaped in the title, the table and the data
    assert page_data(page)["results"][0]["label"] == "</script><b>x"
    inline = page._repr_html_()
    assert inline.startswith("<iframe") and "srcdoc=" in inline and "<script" not in inline


def test_view_refuses_in_one_line(tmp_path):
    with pytest.raises(EntropyLensError, match="one label per result"):
        view([planted()], labels=["a", "b"])
    with pytest.raises(EntropyLensError, match="nothing to view"):
        view([])
    with pytest.raises(EntropyLensError, match="does not exist"):
        view([tmp_path / "missing"])
    (tmp_path / "folder").mkdir()
    with pytest.raises(EntropyLensError, match="without sweep.json"):
        view([tmp_path / "folder"])
    with pytest.raises(EntropyLensError, match="cannot view a dict"):
        view([{}])


def test_cli_writes_one_page_of_two_results_and_a_sweep(tmp_path, capsys):
    planted().save(tmp_path / "nope.npz")
    planted(shift=0.5, model="tiny-rope").save(tmp_path / "rope.npz")
    results, _ = quadratic_sweep(0.3, 64, 512, np.round(np.arange(0.8, 2.01, 0.1), 2))
    (tmp_path / "sw").mkdir()
    save_sweep(tmp_path / "sw", results)
    out = tmp_path / "page.html"
    args = ["view", str(tmp_path / "nope.npz"), str(tmp_path / "rope.npz"), str(tmp_path / "sw")]
    assert main([*args, "--labels", "NoPE", "RoPE", "sweep", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    data = page_data(type("P", (), {"html": out.read_text()})())
    labels = [r["label"] for r in data["results"]]
    assert labels[:2] == ["NoPE", "RoPE"] and all(x.startswith("sweep s") for x in labels[2:])
    (sweep,) = data["sweeps"]
    assert sweep["fit"]["a"] == pytest.approx(0.3, abs=0.02) and sweep["s_star"]["scale"] > 1
    assert len(sweep["loss"]) == len(results) and sweep["scales"][0] == pytest.approx(0.8)


def test_cli_checks_its_output_before_reading(tmp_path, capsys):
    assert main(["view", str(tmp_path / "missing.npz"), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    planted().save(tmp_path / "a.npz")
    assert (
        main(["view", str(tmp_path / "a.npz"), "--labels", "x", "y", "--out", str(tmp_path / "p.html")]) == 2
    )
    assert "one label per result" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["view", str(tmp_path / "a.npz"), "--bogus"])
