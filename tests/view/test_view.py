"""`entropy-lens view` without a browser: the statistics against planted signals, the reduction, the
numbers the page carries, its self-containedness, the CLI's checks (test_view_browser.py drives the page)."""

from __future__ import annotations

import base64
import html
import json
import re

import numpy as np
import pytest
from cli_cases import one_line_error
from sweeps import edit_index, quadratic_sweep, save_sweep, sweep_folder
from view_inputs import (
    HISTORY_STATS,
    HOSTILE,
    LN2,
    META_FIELDS,
    NAME,
    ZERO_HEAD,
    ZERO_KEYS,
    hostile,
    monitored_history,
    page_data,
    planted,
    with_keys,
    with_stats,
)

from entropy_lens.analysis import head_statistics
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult
from entropy_lens.results.history import HISTORY_FILE, load_history
from entropy_lens.view import view
from entropy_lens.view.payload import build_payload
from entropy_lens.view.reduce import Bins, points_for
from entropy_lens.view.sources import gather, resolve


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


def test_statistics_of_every_row_statistic_in_its_own_unit():
    """head_statistics(stat=...) of the planted statistics (view_inputs.with_stats): means in the
    statistic's unit (entropy alone in bits), the slope against the bound's variable where one grows with
    i (ln(i + 1) for collision_entropy, i for distance), and `undefined` saying why elsewhere."""
    L = 64
    r = with_stats(planted(jump=True), L)
    default, entropy = head_statistics(r), head_statistics(r, stat="entropy")
    assert entropy.unit == default.unit == "bits" and entropy.stat == "entropy"
    assert entropy.units["slope"] == "bits per e-fold" and entropy.units["departure"] == "position"
    for name, values in default.values.items():  # entropy as before the argument existed
        np.testing.assert_array_equal(entropy.values[name], values)
    h = np.arange(6.0).reshape(2, 3)

    mp = head_statistics(r, stat="max_prob")
    assert mp.unit == "probability" and "probability" in mp.descriptions["converged"]
    want = 0.15 + 0.02 * h
    want[0, 0] += 0.3  # the jump at 1.5L is in the last span
    np.testing.assert_allclose(mp.values["converged"], want, atol=1e-6)
    growth = np.full((2, 3), 0.1)
    growth[0, 0] += 0.3 * 0.5  # half of [L, 2L) is past the jump
    np.testing.assert_allclose(mp.values["growth"], growth, atol=1e-6)
    assert "slope" not in mp.values and "is a probability" in mp.undefined["slope"]
    assert ((L - 5 <= mp.values["departure"]) & (mp.values["departure"] <= L)).all()  # the step at L

    ce = head_statistics(r, stat="collision_entropy")
    k = np.linspace(0.2, 0.7, 6).reshape(2, 3)
    assert ce.unit == "nats" and "nats per e-fold" in ce.descriptions["slope"]
    np.testing.assert_allclose(ce.values["slope"], k, atol=1e-5)  # against ln(i + 1), in nats: no ÷ ln 2
    d = head_statistics(r, stat="distance")
    a = np.linspace(0.1, 0.6, 6).reshape(2, 3)
    assert d.unit == "tokens" and "against i" in d.descriptions["slope"]
    np.testing.assert_allclose(d.values["slope"], a, rtol=1e-5)  # tokens per position
    np.testing.assert_allclose(d.values["growth"], a * (1.5 * L - 0.75 * L), rtol=1e-5)
    assert "departure" not in d.values and "grows like i" in d.undefined["departure"]
    assert d.units == {name: "tokens per position" if name == "slope" else "tokens" for name in d.values}
    v = head_statistics(r, stat="varentropy")
    assert v.unit == "nats²" and "has no bound" in v.undefined["slope"]
    sink = head_statistics(r, stat="sink_mass")  # no mean square in the file: departures without sd
    assert np.isnan(sink.values["departure"]).all()  # constant: never departs
    with pytest.raises(EntropyLensError, match="holds no 'distance'.*--stats distance"):
        head_statistics(planted(), stat="distance")
    r.meta["train_len"] = None
    assert "is a probability" in head_statistics(r, stat="max_prob").undefined["slope"]
    assert "train_len" in head_statistics(r, stat="collision_entropy").undefined["slope"]


def test_page_carries_every_row_statistic():
    """Each row statistic a result holds reaches the page in its unit, with its per-head statistics, its
    curves, its bound (log₂(i + 1), ln(i + 1), i) or the range [0, 1]; entropy alone as before."""
    L = 64
    r = with_stats(planted(), L)
    payload = build_payload(resolve([("A", r), ("B", planted())])[0], [], points=16)
    a, b = payload["results"]
    assert (
        list(a["stats"])
        == list(r.stat_names)
        == [
            "entropy",
            "sink_mass",
            "max_prob",
            "collision_entropy",
            "varentropy",
            "distance",
            "first_mass",
        ]
    )
    assert list(b["stats"]) == ["entropy"]  # a result without --stats
    assert payload["points"] == 16
    units = {name: s["unit"] for name, s in a["stats"].items()}
    assert units == {"entropy": "bits", **{n: u for n, u in r.meta["stats"].items() if n != "entropy"}}
    bins = Bins.of(256, 16)
    for name, s in a["stats"].items():
        factor = 1 / LN2 if name == "entropy" else 1.0
        mean = bins.reduce(r.stat(name).astype(np.float64) * factor)[0]
        got = np.frombuffer(base64.b64decode(s["curves"]["mean"]), np.float32).reshape(mean.shape)
        np.testing.assert_allclose(got, mean, rtol=1e-6, atol=1e-7)
        heads = head_statistics(r, stat=name)
        for statistic, values in heads.values.items():
            np.testing.assert_allclose(
                np.array(s["per_head"][statistic]["values"], dtype=float), values, equal_nan=True
            )
        assert s["undefined"] == heads.undefined
        assert s["range"] == ([0, 1] if s["unit"] == "probability" else None)
    bounds = {name: s["bound"] and s["bound"]["label"] for name, s in a["stats"].items()}
    assert bounds == {
        "entropy": "log₂(i + 1)",
        "sink_mass": None,
        "max_prob": None,
        "collision_entropy": "ln(i + 1)",
        "varentropy": None,
        "distance": "i",
        "first_mass": None,
    }
    x = np.array(a["stats"]["distance"]["bound"]["x"])
    assert x[0] == 0 and x[-1] == 255 and a["stats"]["distance"]["bound"]["y"] == x.tolist()  # the diagonal
    np.testing.assert_allclose(a["stats"]["entropy"]["bound"]["y"], np.log2(x + 1.0))
    np.testing.assert_allclose(a["stats"]["collision_entropy"]["bound"]["y"], np.log(x + 1.0))
    assert a["meta"]["first_keys"] == "2" and "distance (tokens)" in a["meta"]["stats"]
    page = view([("A", r), ("B", planted())])
    assert (
        "distance (tokens, under its bound i)" in page.html
        and "max_prob (probability, on [0, 1])" in page.html
    )
    assert "scan --stats" not in view([("B", planted())]).html  # entropy alone: the page as before


def test_page_carries_attention_received_by_key_position(tmp_path):
    """Each key statistic of a results file reaches the page binned as the row statistics are, for a log
    scale: per bin the mean, min and max of ScanResult.received's positive values (keys at 0 left out, a
    bin of nothing else a gap), the envelope in steps of ln(value), key 0's own value, the zeros counted
    per head and named in a note, its unit, the rows counted, L."""
    L, T = 64, 256
    path = with_keys(with_stats(planted(T=T, L=L), L), query_window=32).save(tmp_path / "keys.npz")
    r = ScanResult.load(path)
    assert r.key_names == ("received", "received_max", "received_mean")
    (result,) = build_payload(gather([path]).results, [], points=16)["results"]
    keys = result["keys"]
    assert keys["rows"] == "the last 32 query rows of each window" and result["train_len"] == L
    assert list(keys["stats"]) == list(r.key_names)
    assert list(result["stats"]) == list(r.stat_names)  # the row statistics as before, no key among them
    bins = Bins.of(T, 16)
    assert result["bins"] == {"starts": bins.starts.tolist(), "stops": bins.stops.tolist(), "exact": False}
    for name, s in keys["stats"].items():
        values = r.received(name).astype(np.float64)
        assert s["unit"] == r.stat_unit(name) == ("attention" if name == "received" else "probability")
        assert s["samples"] == ("max over samples" if name == "received_max" else "mean over samples")
        c = s["curves"]
        assert c["log"] is True and c["gap"] == 65535
        mean = np.frombuffer(base64.b64decode(c["mean"]), np.float32).reshape(2, 3, 16)
        codes = {
            q: np.frombuffer(base64.b64decode(c[q]), np.uint16).reshape(2, 3, 16) for q in ("low", "high")
        }
        for layer, head, k in np.ndindex(2, 3, 16):
            part = values[layer, head, bins.starts[k] : bins.stops[k]]
            kept = part[part > 0]
            if not kept.size:  # head (1, 2)'s bins inside keys [40, 80): a gap
                assert (layer, head) == ZERO_HEAD and ZERO_KEYS[0] <= bins.starts[k] < ZERO_KEYS[1]
                assert np.isnan(mean[layer, head, k]) and codes["low"][layer, head, k] == 65535
                continue
            assert mean[layer, head, k] == pytest.approx(kept.mean(), rel=1e-6)
            for q, want in (("low", kept.min()), ("high", kept.max())):  # relative precision: a log code
                got = np.exp(c["floor"] + codes[q][layer, head, k] * c["step"])
                assert got == pytest.approx(want, rel=c["step"])
        assert np.ptp(np.log(mean[np.isfinite(mean)])) > np.log(100)  # orders of magnitude apart
        np.testing.assert_allclose(s["first"], values[:, :, 0], rtol=1e-7)  # the sink itself, unbinned
        zeros = np.zeros((2, 3), int)
        zeros[ZERO_HEAD] = ZERO_KEYS[1] - ZERO_KEYS[0]
        assert s["zeros"] == zeros.tolist()
        assert any(n.startswith(f"{name}: 40 of 1536 values") and "left out" in n for n in result["notes"])
    exact = build_payload(gather([path]).results, [], points=T)["results"][0]["keys"]["stats"]["received"]
    mean = np.frombuffer(base64.b64decode(exact["curves"]["mean"]), np.float32).reshape(2, 3, T)
    values = r.received("received")
    np.testing.assert_array_equal(mean[values > 0], values[values > 0])  # position by position
    assert np.isnan(mean[values == 0]).all() and "low" not in exact["curves"]  # 0: a gap on a log scale
    html_ = view([path]).html
    assert 'id="received"' in html_ and "Keys that receive 0 (no counted query row can attend" in html_
    assert "received (attention: Σ_i p_ij" in html.unescape(html_)


def test_a_result_without_key_statistics_has_the_payload_it_had():
    """The key statistics add `keys` (notes of their zeros, their units in the meta's `stats` row) and
    nothing else: the same result without them has the payload it had before they existed, and its page
    no received plot; by default, their curves count against the page's budget as the row statistics' do."""
    r = with_stats(planted(), 64)
    keyed = with_keys(with_stats(planted(), 64))
    assert r.key_names == () and keyed.key_names
    for points in (16, 256):
        old = build_payload(resolve([("A", r), ("B", planted())])[0], [], points=points)
        new = build_payload(resolve([("A", keyed), ("B", planted())])[0], [], points=points)
        assert "keys" not in old["results"][0] and "keys" not in new["results"][1]
        keys = new["results"][0].pop("keys")
        notes = new["results"][0]["notes"]
        assert len(notes) == len(keys["stats"]) and all("left out of its log-scale plot" in n for n in notes)
        notes.clear()
        meta = new["results"][0]["meta"]  # the file's meta names the key statistics' units: shown as it is
        assert meta.pop("stats") == old["results"][0]["meta"].pop("stats") + (
            ", received (attention), received_max (probability), received_mean (probability)"
        )
        assert new == old
    page = view([("A", r)]).html
    assert 'id="received"' not in page and 'id="key-select"' not in page
    wide = {"layers": 8, "heads": 24, "T": 1024}  # 192 curves: 512 points each; 4 × 192 (keys too): fewer
    default = lambda result: build_payload(resolve([("A", result)])[0], [])["points"]
    assert default(planted(**wide)) == points_for(192, 1024) == 512
    assert default(with_keys(planted(**wide))) == points_for(4 * 192, 1024) < 512


def test_a_statistic_with_holes_or_of_text_is_a_gap_or_refused(tmp_path, capsys):
    r = with_stats(planted(), 64)
    r.stats["distance"][1, 0, 30] = np.nan
    (result,) = page_data(view([("A", r)], points=16))["results"]
    converged = np.array(result["stats"]["distance"]["per_head"]["converged"]["values"], dtype=float)
    assert np.isnan(converged[1, 0]) and np.isfinite(np.delete(converged.ravel(), 3)).all()
    assert any("1 of 6 heads hold NaN/inf distance" in n for n in result["notes"])
    assert np.isfinite(result["stats"]["entropy"]["per_head"]["converged"]["values"]).all()
    r.stats["distance"] = np.full(r.entropy.shape, "a")
    r.save(tmp_path / "text.npz")
    err = one_line_error(["view", str(tmp_path / "text.npz"), "--out", str(tmp_path / "p.html")], capsys)
    assert "text.npz: distance is <U1, not real numbers" in err and "rerun the scan" in err


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
    decoded = np.frombuffer(
        base64.b64decode(first["stats"]["entropy"]["curves"]["mean"]), np.float32
    ).reshape(mean.shape)
    np.testing.assert_allclose(decoded, mean, rtol=1e-6)
    e = first["stats"]["entropy"]["curves"]
    up = lambda q: e["floor"] + np.frombuffer(base64.b64decode(q), np.uint16).reshape(mean.shape) * e["step"]
    np.testing.assert_allclose(up(e["low"]), low, atol=e["step"] / 2 + 1e-12)
    np.testing.assert_allclose(up(e["high"]), high, atol=e["step"] / 2 + 1e-12)
    np.testing.assert_allclose(first["loss"]["mean"], bins.reduce(a.loss)[0])
    converged = head_statistics(a).values["converged"]
    np.testing.assert_allclose(first["stats"]["entropy"]["per_head"]["converged"]["values"], converged)
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


# ---- untrusted files (issue 39): paths, hostile strings, malformed contents ----------------------------


def test_sweep_index_may_name_only_files_inside_its_folder(tmp_path, capsys):
    elsewhere = sweep_folder(tmp_path / "elsewhere")
    names = json.loads((elsewhere / "sweep.json").read_text())["files"]
    out = ["--out", str(tmp_path / "p.html")]
    for k, outside in enumerate([str(elsewhere / names[0]), f"../elsewhere/{names[0]}"]):
        folder = sweep_folder(tmp_path / f"sw{k}")
        edit_index(folder, files=[outside, *names[1:]])
        err = one_line_error(["view", str(folder), *out], capsys)
        assert "outside the sweep folder" in err and outside in err and "copy that file into" in err
    folder = sweep_folder(tmp_path / "linked")  # a file inside that is a symlink to one outside
    (folder / names[0]).unlink()
    (folder / names[0]).symlink_to(elsewhere / names[0])
    assert "outside the sweep folder (through a symlink)" in one_line_error(
        ["view", str(folder), *out], capsys
    )
    folder = sweep_folder(tmp_path / "index-linked")  # sweep.json itself a symlink to another folder's
    (folder / "sweep.json").unlink()
    (folder / "sweep.json").symlink_to(elsewhere / "sweep.json")
    assert "lists 'sweep.json', which lies outside" in one_line_error(["view", str(folder), *out], capsys)
    assert not (tmp_path / "p.html").exists()
    inner = sweep_folder(tmp_path / "inner")  # a symlink that stays inside the folder is fine
    (inner / "copy.npz").symlink_to(inner / names[0])
    edit_index(inner, files=["copy.npz", *names[1:]])
    assert main(["view", str(inner), *out]) == 0


def test_script_element_neutralises_hostile_strings(tmp_path):
    planted().save(tmp_path / f"{NAME}.npz")
    page = view([tmp_path / f"{NAME}.npz", ("</script>" + HOSTILE, hostile(planted()))])
    body = re.search(
        r'<script type="application/json" id="entropy-lens-data">(.*?)</script>', page.html, re.DOTALL
    )
    data = body.group(1)
    assert not re.search("[<>&\u2028\u2029]", data)  # nothing the HTML parser or old JS could act on
    assert page.html.index("</script>", body.start()) == body.end() - len("</script>")  # its own end tag
    parsed = json.loads(data)
    assert [r["label"] for r in parsed["results"]] == [NAME, "</script>" + HOSTILE]
    assert parsed["results"][0]["source"] == str(tmp_path / f"{NAME}.npz")
    assert all(parsed["results"][1]["meta"][k] == HOSTILE for k in META_FIELDS)
    for raw in ("<!--", "<script>&amp;", "<b>x", "<img"):  # plotly.js holds none of these
        assert raw not in page.html
    assert html.escape(HOSTILE) in page.html and html.escape(NAME) in page.html  # the title and meta table
    assert "<script" not in page._repr_html_()


def test_nan_and_inf_are_drawn_as_gaps(tmp_path, capsys):
    """A result made in Python may hold NaN/inf: drawn as gaps. A file holding them is refused in one line
    (ScanResult.load: a mean that is no number is never drawn as if measured, nor read as 0)."""
    r = planted(T=256)
    r.entropy[0, 0, 5] = np.nan  # head (0, 0), bin 0 of 16 positions
    r.entropy[1, 2, 100] = np.inf  # head (1, 2), bin 6
    r.loss[[3, 200]] = [np.nan, -np.inf]
    r.save(tmp_path / "holes.npz")
    clean = head_statistics(planted(T=256)).values
    for points in (16, 256):  # binned (mean + envelope) and position by position
        (result,) = page_data(view([("holes", r)], points=points))["results"]
        per = 256 // points
        assert result["loss"]["mean"][3 // per] is None and result["loss"]["mean"][200 // per] is None
        assert result["loss"]["mean"][1] == pytest.approx(float(r.loss[per : 2 * per].mean()))  # no hole
        mean = np.frombuffer(
            base64.b64decode(result["stats"]["entropy"]["curves"]["mean"]), np.float32
        ).reshape(2, 3, points)
        assert np.isnan(mean[0, 0, 5 // per]) and np.isnan(mean[1, 2, 100 // per])
        assert np.isfinite(mean).sum() == mean.size - 2  # only the bins holding a hole
        if points == 16:
            e = result["stats"]["entropy"]["curves"]
            low = np.frombuffer(base64.b64decode(e["low"]), np.uint16).reshape(2, 3, points)
            assert low[0, 0, 0] == e["gap"] and low[1, 2, 6] == e["gap"] and (low == e["gap"]).sum() == 2
        converged = np.array(result["stats"]["entropy"]["per_head"]["converged"]["values"], dtype=float)
        assert np.isnan(converged[0, 0]) and np.isnan(converged[1, 2])  # blank: null in the page
        keep = np.ones((2, 3), bool)
        keep[0, 0] = keep[1, 2] = False
        np.testing.assert_allclose(converged[keep], clean["converged"][keep])
        assert any("2 of 6 heads hold NaN/inf" in n for n in result["notes"])
        assert any("2 loss values are NaN/inf" in n for n in result["notes"])
    err = one_line_error(["view", str(tmp_path / "holes.npz"), "--out", str(tmp_path / "p.html")], capsys)
    assert (
        "holes.npz: entropy holds 2 NaN/inf value(s) where numbers are expected (first at [0, 0, 5])" in err
    )
    assert "--resume" in err and not (tmp_path / "p.html").exists()


def test_malformed_files_are_refused_in_one_line(tmp_path, capsys):
    out = ["--out", str(tmp_path / "p.html")]
    flat = planted()
    flat.entropy = flat.entropy[0]  # 2-D: (heads, positions)
    flat.save(tmp_path / "flat.npz")
    err = one_line_error(["view", str(tmp_path / "flat.npz"), *out], capsys)
    assert "flat.npz" in err and "entropy has shape (3, 256), not (layers, heads, positions)" in err
    assert "rerun the scan" in err
    bad = planted()
    bad.meta["scales"] = "abc"
    bad.save(tmp_path / "scales.npz")
    err = one_line_error(["view", str(tmp_path / "scales.npz"), *out], capsys)
    assert "scales.npz: meta scales 'abc' is not a table of numbers" in err
    names = json.loads((sweep_folder(tmp_path / "sw") / "sweep.json").read_text())["files"]
    scales = [float(n[1:-4]) for n in names]
    for k, change in enumerate(
        [
            {"scales": ["a", *scales[1:]]},
            {"requested_scales": [*scales, None], "complete": False},
            {"files": [3, *names[1:]]},
        ]
    ):
        folder = sweep_folder(tmp_path / f"sw{k}")
        edit_index(folder, **change)
        err = one_line_error(["view", str(folder), *out], capsys)
        assert "sweep.json" in err and next(iter(change)) in err and "rerun the sweep" in err
    folder = sweep_folder(tmp_path / "sw-flat")  # a malformed scale file inside a sweep: named
    name = json.loads((folder / "sweep.json").read_text())["files"][3]
    (tmp_path / "flat.npz").replace(folder / name)
    err = one_line_error(["view", str(folder), *out], capsys)
    assert name in err and "entropy has shape" in err
    with pytest.raises(EntropyLensError, match="result 1: meta scales 'abc'"):
        view([bad])
    assert not (tmp_path / "p.html").exists()


def test_lone_surrogates_are_replaced_not_a_crash(tmp_path):
    r = planted()
    r.meta["model"] = "tiny\ud800nope"
    r.save(tmp_path / "a.npz")
    page = view([tmp_path / "a.npz"], labels=["x\udfffy"])
    page.save(tmp_path / "p.html")  # UnicodeEncodeError before
    (result,) = page_data(page)["results"]
    assert result["meta"]["model"] == "tiny\ufffdnope" and result["label"] == "x\ufffdy"
    assert "tiny\ufffdnope" in (tmp_path / "p.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("train_len", [0, -5, 2.5, "64", True])
def test_unusable_train_len_in_meta_is_named(tmp_path, train_len):
    r = planted()
    r.meta["train_len"] = train_len
    (result,) = page_data(view([("A", r)]))["results"]
    why = f"meta train_len {train_len!r} is not a training length"
    assert result["train_len"] is None and why in result["stats"]["entropy"]["undefined"]["growth"]
    assert "--train-len L" in result["stats"]["entropy"]["undefined"]["growth"] and any(
        why in n for n in result["notes"]
    )
    assert page_data(view([("A", r)], train_len=64))["results"][0]["train_len"] == 64  # the flag wins


def test_sweep_with_unusable_train_len_says_so(tmp_path):
    folder = sweep_folder(tmp_path / "sw")
    for path in sorted(folder.glob("*.npz")):
        r = ScanResult.load(path)
        r.meta["train_len"] = -5
        r.save(path)
    (sweep,) = page_data(view([folder]))["sweeps"]
    assert sweep["fit"] is None and sweep["s_star"] is None
    assert "meta train_len -5 is not a training length" in sweep["fit_undefined"]


# ---- monitor histories (issue 50): each statistic by training step × head, per layer -------------------


@pytest.fixture(scope="module")
def history_file(tmp_path_factory):
    """A tiny Llama's AttentionMonitor history of 6 training steps, saved as train-tiny --monitor names it."""
    folder = tmp_path_factory.mktemp("history")
    history = monitored_history(folder / HISTORY_FILE)
    return folder / HISTORY_FILE, history


def decoded_mean(stat: dict, layers: int, heads: int) -> np.ndarray:
    """A statistic's curves as the page decodes them: float32 (layers, heads, bins)."""
    return np.frombuffer(base64.b64decode(stat["curves"]["mean"]), np.float32).reshape(layers, heads, -1)


def test_history_payload_equals_the_historys_arrays(history_file):
    path, history = history_file
    saved = load_history(path)
    found = gather([path])
    assert (
        not found.results and not found.sweeps and [h.label for h in found.histories] == ["attention-history"]
    )
    payload = build_payload([], [], histories=found.histories)
    (h,) = payload["histories"]
    assert (h["layers"], h["heads"], h["records"]) == (2, 4, 6) and h["bins"]["exact"]
    assert h["steps"]["first"] == h["steps"]["last"] == saved.steps.tolist() == list(range(1, 7))
    assert list(h["stats"]) == list(HISTORY_STATS)
    for stat in HISTORY_STATS:
        mean = decoded_mean(h["stats"][stat], 2, 4)
        np.testing.assert_array_equal(mean, np.moveaxis(saved.values[stat], 0, -1))  # (layers, heads, steps)
        np.testing.assert_array_equal(saved.values[stat], history.values[stat])
    assert h["stats"]["max_logit"]["reduction"] == "max" and h["stats"]["entropy"]["reduction"] == "mean"
    assert "max over the step's real query rows" in h["stats"]["max_logit"]["description"]
    assert h["stats"]["entropy"]["unit"] == "nats" and h["meta"]["stats"] == ", ".join(HISTORY_STATS)
    # more records than points: each bin of steps is its mean with the min–max envelope, as a scan's positions
    binned = build_payload([], [], histories=found.histories, points=4)["histories"][0]
    bins = Bins.of(6, 4)
    mean, low, high = bins.reduce(np.moveaxis(saved.values["max_logit"], 0, -1))
    encoded = binned["stats"]["max_logit"]
    np.testing.assert_allclose(decoded_mean(encoded, 2, 4), mean, rtol=1e-6)
    for edge, want in (("low", low), ("high", high)):  # the uint16 envelope, to its step
        code = np.frombuffer(base64.b64decode(encoded["curves"][edge]), np.uint16).reshape(want.shape)
        got = encoded["curves"]["floor"] + code * encoded["curves"]["step"]
        np.testing.assert_allclose(got, want, atol=encoded["curves"]["step"])
    assert (
        binned["steps"]["first"] == (bins.starts + 1).tolist()
        and binned["steps"]["last"] == bins.stops.tolist()
    )


def test_a_history_is_known_by_its_schema_not_its_name(history_file, tmp_path):
    path, history = history_file
    (tmp_path / "scan.npz").write_bytes(path.read_bytes())  # a history under a results file's name
    planted().save(tmp_path / HISTORY_FILE)  # a results file under the history's name
    found = gather([tmp_path / "scan.npz", tmp_path / HISTORY_FILE])
    assert [h.label for h in found.histories] == ["scan"] and [r.label for r in found.results] == [
        "attention-history"
    ]
    folder = path.parent  # train-tiny --monitor's output folder: its history, named by the folder
    found = gather([folder], labels=["run"])
    assert [(h.label, h.source) for h in found.histories] == [("run", str(path))]
    page = view([folder, tmp_path / HISTORY_FILE])
    data = page_data(page)
    assert [h["label"] for h in data["histories"]] == [folder.name] and len(data["results"]) == 1
    assert 'id="history-section"' in page.html and 'id="history-meta"' in page.html
    assert "history-section" not in view([planted()]).html  # a page without histories is as before
    with pytest.raises(EntropyLensError, match="is a monitor history; view it"):
        resolve([path])  # results and sweeps only
    memory = page_data(view([("run", history)]))  # mon.history, from Python: the same numbers
    assert memory["histories"][0]["stats"] == data["histories"][0]["stats"]


def test_a_damaged_or_foreign_history_is_refused_in_one_line(history_file, tmp_path, capsys):
    path, _ = history_file
    out = ["--out", str(tmp_path / "p.html")]
    cut = tmp_path / "cut.npz"
    cut.write_bytes(path.read_bytes()[:300])
    err = one_line_error(["view", str(cut), *out], capsys)
    assert (
        "cut.npz is not a readable results file, monitor history or generation" in err
        and "AttentionMonitor.save" in err
    )
    text = tmp_path / "text.npz"
    text.write_text("steps,entropy\n1,2.0\n")
    err = one_line_error(["view", str(text), *out], capsys)
    assert "not an .npz file" in err and "pickle" not in err
    arrays = dict(np.load(path, allow_pickle=False))
    np.savez(tmp_path / "nan.npz", **{**arrays, "max_logit": np.full_like(arrays["max_logit"], np.nan)})
    err = one_line_error(["view", str(tmp_path / "nan.npz"), *out], capsys)
    assert "nan.npz: max_logit holds NaN/inf values" in err and "mon.save" in err
    np.savez(tmp_path / "short.npz", **{**arrays, "entropy": arrays["entropy"][:, 0]})
    err = one_line_error(["view", str(tmp_path / "short.npz"), *out], capsys)
    assert "short.npz: entropy is float32 (6, 4)" in err
    meta = json.loads(str(arrays["meta"]))
    np.savez(tmp_path / "v9.npz", **{**arrays, "meta": np.array(json.dumps({**meta, "schema_version": 9}))})
    assert "has schema_version 9" in one_line_error(["view", str(tmp_path / "v9.npz"), *out], capsys)
    empty = {k: v[:0] for k, v in arrays.items() if k != "meta"}
    np.savez(tmp_path / "empty.npz", **empty, meta=arrays["meta"])
    assert "holds no recorded step" in one_line_error(["view", str(tmp_path / "empty.npz"), *out], capsys)
    np.savez(tmp_path / "foreign.npz", steps=np.arange(3), meta=np.array('{"schema": "other"}'))
    err = one_line_error(["view", str(tmp_path / "foreign.npz"), *out], capsys)  # read as a results file
    assert "foreign.npz lacks entropy" in err
    assert not (tmp_path / "p.html").exists()


def test_cli_views_a_history(history_file, tmp_path, capsys):
    path, _ = history_file
    out = tmp_path / "h.html"
    assert main(["view", str(path), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    data = page_data(type("P", (), {"html": out.read_text()})())
    assert [h["records"] for h in data["histories"]] == [6] and data["results"] == [] == data["sweeps"]


def test_the_history_files_name_is_train_tinys():
    from entropy_lens.training.watch import HISTORY

    assert HISTORY == HISTORY_FILE


def test_a_historys_nonfinite_steps_are_named_not_drawn(history_file, tmp_path, capsys):
    """A history whose monitor recorded steps with attention that was not finite (issue 57): the page
    names them in its meta rows; one with no finite step at all is refused saying so."""
    import dataclasses

    path, _ = history_file
    saved = load_history(path)
    some = dataclasses.replace(saved, nonfinite=np.array([7, 9], dtype=np.int64))
    some.save(tmp_path / "some.npz")
    (h,) = build_payload([], [], histories=gather([tmp_path / "some.npz"]).histories)["histories"]
    assert h["meta"]["non-finite steps"] == "2 not drawn (attention not finite): 7, 9" and h["records"] == 6
    none = dataclasses.replace(
        saved,
        steps=saved.steps[:0],
        forwards=saved.forwards[:0],
        rows=saved.rows[:0],
        sequences=saved.sequences[:0],
        values={s: v[:0] for s, v in saved.values.items()},
        nonfinite=np.array([1, 2, 3], dtype=np.int64),
    )
    none.save(tmp_path / "none.npz")
    err = one_line_error(["view", str(tmp_path / "none.npz"), "--out", str(tmp_path / "v.html")], capsys)
    assert "every recorded step of the monitor history (1, 2, 3) had attention that was not finite" in err
