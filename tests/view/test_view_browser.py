"""The view's page in a real browser: headless Chromium (the distribution's package) with the network
blocked loads it without console errors, draws one heat-map cell per layer and head, shows the clicked
head's curves, and every number it shows is the results file's (browser.py; skipped, saying why, where no
Chromium can run)."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from browser import chromium, console_errors, missing, open_page, wait_ready
from sweeps import quadratic_sweep, save_sweep
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
    planted,
    with_keys,
    with_stats,
)

from entropy_lens.analysis import best_scale_per_position, head_statistics, load_sweep
from entropy_lens.results import ScanResult
from entropy_lens.results.history import HISTORY_FILE, load_history
from entropy_lens.view import view
from entropy_lens.view.reduce import Bins

pytestmark = [
    pytest.mark.slow,  # a headless Chromium per module: seconds per test
    pytest.mark.skipif(missing() is not None, reason=f"browser tests: {missing()}"),
]

POINTS = 128  # the 2048-position results are binned: mean with its min–max envelope


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("view")
    planted(T=2048, L=256, jump=True).save(folder / "nope.npz")
    planted(T=2048, L=256, shift=0.5, model="tiny-rope").save(folder / "rope.npz")
    results, _ = quadratic_sweep(0.3, 64, 512, np.round(np.arange(0.8, 2.01, 0.1), 2))
    (folder / "sw").mkdir()
    save_sweep(folder / "sw", results)
    page = view(
        [folder / "nope.npz", folder / "rope.npz", folder / "sw"],
        labels=["NoPE", "RoPE", "sweep"],
        points=POINTS,
    )
    page.save(folder / "page.html")
    return folder


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def loaded(browser, files):
    open_page(browser, files / "page.html")
    return browser


def js(driver, code: str):
    return driver.execute_script(code)


def test_network_is_blocked(loaded):
    fetched = js(loaded, "return performance.getEntriesByType('resource').map(e => e.name)")
    assert not [u for u in fetched if u.startswith(("http", "ws"))]
    reached = loaded.execute_async_script(
        "const done = arguments[0]; fetch('https://cdn.plot.ly/plotly.min.js').then(() => done(true), () => done(false));"
    )
    assert reached is False


def test_page_loads_without_console_errors(browser, files):
    open_page(browser, files / "page.html")
    assert console_errors(browser) == []
    assert "tiny-nope" in browser.find_element("id", "meta").text  # the meta table
    assert "0123abcd" in browser.find_element("id", "meta").text  # provenance: the git hash
    assert (
        js(browser, "return document.getElementById('stat-select').parentElement.hidden") is True
    )  # no --stats
    assert js(browser, "return document.getElementById('received')") is None  # no key statistics


def test_heatmap_has_one_cell_per_layer_and_head(loaded, files):
    z = js(loaded, "return document.getElementById('heatmap').data[0].z")
    converged = head_statistics(ScanResult.load(files / "nope.npz")).values["converged"]
    assert np.shape(z) == converged.shape == (2, 3)
    np.testing.assert_allclose(z, converged, rtol=1e-12)
    cells = js(loaded, "return document.querySelectorAll('#heatmap .heatmaplayer image').length")
    assert cells == 1  # plotly draws a heat map as one image: count its cells by hovering each one
    for layer, head in np.ndindex(2, 3):
        text = hover(loaded, "heatmap", f"{{xval: {head}, yval: {layer}}}", f"layer {layer}, head {head}")
        assert f"{converged[layer, head]:.4f} bits" in text


def hover(driver, plot: str, where: str, expect: str) -> str:
    """The hover label's text once it shows `expect` (plotly throttles hover events to one per 50 ms)."""
    text = ""
    for _ in range(400):
        js(driver, f"Plotly.Fx.hover('{plot}', {where})")
        text = js(
            driver, f"const e = document.querySelector('#{plot} .hovertext'); return e ? e.textContent : ''"
        )
        if expect in text:
            return text
        time.sleep(0.06)
    raise AssertionError(f"hovering {plot} at {where} shows {text!r}, not {expect!r}")


def click_cell(driver, layer: int, head: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    x, y, w, h = js(
        driver,
        f"""const gd = document.getElementById('heatmap'), f = gd._fullLayout, r = gd.getBoundingClientRect();
        return [f.xaxis._offset + f.xaxis.l2p({head}), f.yaxis._offset + f.yaxis.l2p({layer}), r.width, r.height];""",
    )
    heatmap = driver.find_element("id", "heatmap")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", heatmap)
    ActionChains(driver).move_to_element_with_offset(
        heatmap, int(x - w / 2), int(y - h / 2)
    ).click().perform()


def test_clicking_a_cell_shows_that_heads_curves(loaded, files):
    click_cell(loaded, 1, 2)
    for _ in range(2000):  # a browser under `nice` on a loaded machine may take a while
        if js(loaded, "return [document.body.dataset.layer, document.body.dataset.head]") == ["1", "2"]:
            break
        time.sleep(0.05)
    assert "layer 1, head 2" in loaded.find_element("id", "head").text
    traces = js(loaded, "return document.getElementById('head').data.map(t => [t.name, t.y, t.customdata])")
    named = {name: (y, custom) for name, y, custom in traces if name}
    assert set(named) == {"NoPE", "NoPE loss", "RoPE", "RoPE loss", "log₂(i + 1)"}
    bins = Bins.of(2048, POINTS)
    for label, name in (("NoPE", "nope"), ("RoPE", "rope")):
        result = ScanResult.load(files / f"{name}.npz")
        mean, low, high = bins.reduce(result.entropy[1, 2].astype(np.float64) / LN2)
        y, custom = named[label]
        np.testing.assert_allclose(y, mean, rtol=1e-6)  # float32 in the page, float64 here
        np.testing.assert_allclose([c[2] for c in custom], low, atol=1e-4)  # the uint16 envelope
        np.testing.assert_allclose([c[3] for c in custom], high, atol=1e-4)
        assert [c[0] for c in custom] == bins.starts.tolist() and [c[1] for c in custom] == (
            bins.stops - 1
        ).tolist()
        np.testing.assert_allclose(named[f"{label} loss"][0], bins.reduce(result.loss)[0], rtol=1e-12)
    # the envelope is drawn: a filled band below each mean line
    assert (
        js(loaded, "return document.getElementById('head').data.filter(t => t.fill === 'tonexty').length")
        == 4
    )
    assert js(loaded, "return document.getElementById('head').layout.shapes[0].x0") == 256  # L


def test_hover_gives_the_exact_value(loaded, files):
    click_cell(loaded, 0, 0)
    k = js(loaded, "return document.getElementById('head').data.findIndex(t => t.name === 'NoPE')")
    bins = Bins.of(2048, POINTS)
    entropy = ScanResult.load(files / "nope.npz").entropy[0, 0].astype(np.float64) / LN2
    a, b = bins.starts[100], bins.stops[100]
    text = hover(loaded, "head", f"[{{curveNumber: {k}, pointNumber: 100}}]", f"positions {a}–{b - 1}")
    shown = float(re.search(r"mean (\d+\.\d+) bits", text).group(1))
    assert shown == pytest.approx(entropy[a:b].mean(), abs=6e-6)


def test_difference_and_statistic_choices(loaded, files):
    from selenium.webdriver.support.ui import Select

    Select(loaded.find_element("id", "view-select")).select_by_visible_text("NoPE − RoPE")
    Select(loaded.find_element("id", "statistic-select")).select_by_value("growth")
    z = js(loaded, "return document.getElementById('heatmap').data[0].z")
    a, b = (head_statistics(ScanResult.load(files / f"{n}.npz")).values["growth"] for n in ("nope", "rope"))
    np.testing.assert_allclose(z, a - b, atol=1e-12)
    assert js(loaded, "return document.getElementById('heatmap').data[0].zmid") == 0
    Select(loaded.find_element("id", "statistic-select")).select_by_value("departure")
    z = js(loaded, "return document.getElementById('heatmap').data[0].z")
    assert z[0][0] is not None and z[0][2] is None  # NaN where a head never departs: a blank cell
    assert console_errors(loaded) == []


def test_sweep_shows_loss_by_scale_and_the_fit(loaded, files):
    sweep = load_sweep(files / "sw")
    bins = Bins.of(512, POINTS)
    z = js(loaded, "return document.getElementById('sweep-0-loss').data[0].z")
    np.testing.assert_allclose(z, bins.reduce(sweep.loss)[0], rtol=1e-12)
    traces = js(loaded, "return document.getElementById('sweep-0-best').data.map(t => [t.name, t.y])")
    best = {n: y for n, y in traces if n}
    np.testing.assert_allclose(
        best["best scale per position"], bins.reduce(best_scale_per_position(sweep)["best_scale"])[0]
    )
    fit = next(n for n in best if n and n.startswith("fit"))
    a = float(re.search(r"a = (-?\d+\.\d+)", fit).group(1))
    assert math.isclose(a, 0.3, abs_tol=0.02)


def test_jupyter_inline_view_draws_in_its_iframe(browser, files, tmp_path):
    inline = view([("NoPE", ScanResult.load(files / "nope.npz"))])._repr_html_()
    (tmp_path / "notebook.html").write_text(
        f"<!DOCTYPE html><html><body><h1>cell output</h1>{inline}</body></html>"
    )
    browser.get((tmp_path / "notebook.html").as_uri())
    browser.switch_to.frame(browser.find_element("tag name", "iframe"))
    try:
        wait_ready(browser, what="the notebook's iframe")
        assert np.shape(js(browser, "return document.getElementById('heatmap').data[0].z")) == (2, 3)
        assert console_errors(browser) == []
    finally:
        browser.switch_to.default_content()


def test_switching_the_row_statistic_redraws_heat_map_and_curves(browser, tmp_path):
    """A result with --stats all beside one without: the menu offers each statistic the view's result
    holds; each draws its per-head statistics and its curves in its own unit, with its bound (i for
    distance, log₂(i + 1) for entropy) or [0, 1] for a probability; a difference offers what both hold.
    (It opens its own page, so it runs after the tests of the `loaded` one.)"""
    from selenium.webdriver.support.ui import Select

    nope = with_stats(planted(T=2048, L=256), 256)
    view([("NoPE", nope), ("RoPE", planted(T=2048, L=256, shift=0.5))], points=POINTS).save(
        tmp_path / "p.html"
    )
    open_page(browser, tmp_path / "p.html")
    assert js(browser, "return document.getElementById('stat-select').parentElement.hidden") is False
    options = js(browser, "return [...document.querySelectorAll('#stat-select option')].map(o => o.value)")
    assert options == list(nope.stat_names)
    head = "const h = document.getElementById('head'); "
    bins = Bins.of(2048, POINTS)
    for stat, unit, bound in (
        ("distance", "tokens", "i"),
        ("max_prob", "probability", None),
        ("collision_entropy", "nats", "ln(i + 1)"),
        ("entropy", "bits", "log₂(i + 1)"),
    ):
        Select(browser.find_element("id", "stat-select")).select_by_value(stat)
        z = js(browser, "return document.getElementById('heatmap').data[0].z")
        np.testing.assert_allclose(z, head_statistics(nope, stat=stat).values["converged"], rtol=1e-12)
        assert js(browser, "return document.body.dataset.stat") == stat
        assert js(browser, head + "return h.layout.yaxis.title.text") == f"{stat} ({unit})"
        traces = js(browser, head + "return h.data.filter(t => t.name).map(t => [t.name, t.x, t.y])")
        named = {name: (x, y) for name, x, y in traces}
        factor = 1 / LN2 if stat == "entropy" else 1.0
        want = bins.reduce(nope.stat(stat)[0, 0].astype(np.float64) * factor)[0]
        np.testing.assert_allclose(named["NoPE"][1], want, rtol=1e-6, atol=1e-7)
        assert ("RoPE" in named) == (stat == "entropy") and "RoPE loss" in named  # RoPE has no --stats
        if stat != "entropy":
            assert "not recorded in RoPE" in js(browser, head + "return h.layout.title.text")
        assert {n for n in named if n not in ("NoPE", "NoPE loss", "RoPE", "RoPE loss")} == ({bound} - {None})
        if stat == "distance":
            x, y = named["i"]
            assert y == x and x[-1] == 2047  # the diagonal: the largest distance a causal row can have
        range_ = js(browser, head + "return h.layout.yaxis.range")
        assert (range_ == [-0.02, 1.02]) == (unit == "probability")
    Select(browser.find_element("id", "view-select")).select_by_visible_text("NoPE − RoPE")
    assert js(browser, "return [...document.querySelectorAll('#stat-select option')].map(o => o.value)") == [
        "entropy"
    ]
    assert console_errors(browser) == []


def test_attention_received_by_key_position(browser, tmp_path):
    """A results file with key statistics beside a result without: below the clicked head's curves, its
    attention received by key position on a log scale, in the chosen key statistic's unit, the numbers of
    ScanResult.received binned as the page's curves are (keys at 0 left out, counted in the legend and the
    hover), key 0's own value, L marked; the menu switches statistic; no console error."""
    from selenium.webdriver.support.ui import Select

    path = with_keys(planted(T=2048, L=256), query_window=512).save(tmp_path / "keys.npz")
    nope = ScanResult.load(path)
    view([("NoPE", nope), ("RoPE", planted(T=2048, L=256, shift=0.5))], points=POINTS).save(
        tmp_path / "p.html"
    )
    open_page(browser, tmp_path / "p.html")
    assert console_errors(browser) == []
    options = js(
        browser, "return [...document.querySelectorAll('#key-select option')].map(o => o.textContent)"
    )
    assert options == ["received (attention)", "received_max (probability)", "received_mean (probability)"]
    click_cell(browser, *ZERO_HEAD)
    for _ in range(2000):
        if js(browser, "return [document.body.dataset.layer, document.body.dataset.head]") == ["1", "2"]:
            break
        time.sleep(0.05)
    plot = "const g = document.getElementById('received'); "
    bins = Bins.of(2048, POINTS)
    zeros = ZERO_KEYS[1] - ZERO_KEYS[0]
    for key, unit in (("received", "attention"), ("received_mean", "probability")):
        Select(browser.find_element("id", "key-select")).select_by_value(key)
        assert js(browser, "return document.body.dataset.key") == key
        layout = js(browser, plot + "return g.layout")
        assert (
            layout["yaxis"]["type"] == "log"
            and layout["yaxis"]["title"]["text"] == f"{key} ({unit}), log scale"
        )
        assert layout["shapes"][0]["x0"] == 256 and layout["annotations"][0]["text"] == " L = 256"  # L
        title = layout["title"]["text"]
        assert f"layer 1, head 2: {key} by key position, over the last 512 query rows" in title
        assert "not recorded in RoPE" in title
        traces = js(
            browser, plot + "return g.data.map(t => [t.name, t.y, t.customdata, t.meta && t.meta.role])"
        )
        named = {name: (y, custom) for name, y, custom, _ in traces if name}
        assert list(named) == [f"NoPE, {zeros} keys at 0 omitted"]
        y, custom = named[f"NoPE, {zeros} keys at 0 omitted"]
        mean, low, high = bins.reduce(nope.received(key)[ZERO_HEAD], positive=True)
        assert [k for k, v in enumerate(y) if v is None] == np.flatnonzero(np.isnan(mean)).tolist() != []
        kept = ~np.isnan(mean)
        np.testing.assert_allclose(np.array(y, dtype=float)[kept], mean[kept], rtol=1e-6)
        np.testing.assert_allclose([c[2] for c in custom if c[2] is not None], low[kept], rtol=1e-3)
        np.testing.assert_allclose([c[3] for c in custom if c[3] is not None], high[kept], rtol=1e-3)
        assert max(y[k] for k in np.flatnonzero(kept)) / min(y[k] for k in np.flatnonzero(kept)) > 100
        shapes = js(browser, plot + "return g.data.filter(t => t.fill).map(t => [t.fill, t.y])")
        assert [fill for fill, _ in shapes] == ["toself"]  # the envelope: one shape per run between gaps
        assert shapes[0][1].count(None) == 2  # [0, 40) and [80, 2048): never filled across the gap
        (first,) = [y for _, y, _, role in traces if role == "first"]
        assert first == [pytest.approx(float(nope.received(key)[ZERO_HEAD][0]), rel=1e-6)]  # key 0 itself
        k = [role for *_, role in traces].index(key)
        text = hover(browser, "received", f"[{{curveNumber: {k}, pointNumber: 100}}]", "keys receive 0")
        assert f"{zeros} keys receive 0: omitted" in text and text.startswith("NoPE")
    browser.execute_script("window.entropyLens.showHead(0, 1)")
    names = js(browser, plot + "return g.data.filter(t => t.name).map(t => t.name)")
    assert names == ["NoPE"]  # a head without zeros says none
    assert console_errors(browser) == []


# ---- hostile strings and holes (issue 39): the page stays interactive and shows them literally -------


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory):
    """One page with HOSTILE as a label and in every meta field, NAME as a file and a folder name (of a
    sweep whose scans carry HOSTILE meta), and a result with NaN/inf entropy and loss."""
    folder = tmp_path_factory.mktemp("hostile")
    hostile(planted(T=2048, L=256)).save(folder / f"{NAME}.npz")
    results, _ = quadratic_sweep(0.3, 64, 512, np.round(np.arange(0.8, 2.01, 0.1), 2))
    (folder / NAME).mkdir()
    save_sweep(folder / NAME, [hostile(r) for r in results])
    holes = planted(T=2048, L=256)
    holes.entropy[0, 0, 40] = np.nan  # bin 2 of head (0, 0) at POINTS bins
    holes.entropy[0, 0, 100] = np.inf  # bin 6
    holes.loss[50] = np.nan  # bin 3
    first = hostile(planted(T=2048, L=256))
    first.stats[NAME] = first.entropy.copy()  # a row statistic named and measured in hostile strings
    first.meta["stats"] = {NAME: HOSTILE}
    items = [
        (HOSTILE, first),
        folder / f"{NAME}.npz",
        folder / NAME,
        ("holes", holes),
    ]
    view(items, points=POINTS).save(folder / "page.html")
    return folder / "page.html"


def test_hostile_strings_leave_the_page_interactive_and_literal(browser, hostile_page):
    open_page(browser, hostile_page)  # waits for data-ready: the explorer's script ran to the end
    assert console_errors(browser) == [] and js(browser, "return window.pwned") is None
    assert js(browser, "return document.querySelectorAll('img').length") == 0
    text = lambda selector: js(
        browser, f"return [...document.querySelectorAll({selector!r})].map(e => e.textContent)"
    )
    assert HOSTILE in text("h1")[0] and NAME in text("h1")[0]
    (meta,) = text("#meta")
    assert meta.count(HOSTILE) >= 2 * len(META_FIELDS) + 1 and f"{NAME}.npz" in meta  # meta, labels, file
    assert any(f"sweep {NAME}" in note and HOSTILE in note for note in text("p.note"))
    labels = text("#view-select option")
    assert labels[:3] == [HOSTILE, NAME, f"{NAME} s=1"] and f"{HOSTILE} − {NAME}" in labels
    assert HOSTILE in text("#heatmap .gtitle")[0]  # plotly's title: escaped for its HTML-like text
    legend = text("#head .legendtext")
    assert HOSTILE in legend and NAME in legend
    k = js(
        browser,
        "return document.getElementById('head').data.findIndex(t => t.meta && t.meta.role === 'entropy')",
    )
    shown = hover(browser, "head", f"[{{curveNumber: {k}, pointNumber: 3}}]", "positions")
    assert shown.startswith(HOSTILE) and "%{y}" in shown  # not a template
    assert any(f"{NAME}: loss by position" in t for t in text("#sweep-0-loss .gtitle"))
    assert any(f"{NAME}: best scale" in t for t in text("#sweep-0-best .gtitle"))
    assert f"{NAME} ({HOSTILE})" in text("#stat-select option")
    browser.execute_script(
        "const s = document.getElementById('stat-select'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('change'));",
        NAME,
    )
    assert js(browser, "return document.body.dataset.stat") == NAME
    assert NAME in text("#head .gtitle")[0] and f"{NAME} ({HOSTILE})" in text("#head .ytitle")
    assert NAME in text("#heatmap .gtitle")[0] and HOSTILE in text("#statistic-note")[0]
    assert console_errors(browser) == [] and js(browser, "return window.pwned") is None


def test_nan_and_inf_are_gaps_in_the_page(browser, hostile_page):
    open_page(browser, hostile_page)
    curve = js(
        browser,
        "return document.getElementById('head').data.filter(t => t.name === 'holes' || t.name === 'holes loss')"
        ".map(t => [t.name, t.y, t.connectgaps || false])",
    )
    named = {name: (y, connect) for name, y, connect in curve}
    y, connect = named["holes"]
    assert [k for k, v in enumerate(y) if v is None] == [2, 6] and not connect  # breaks in the line
    assert [k for k, v in enumerate(named["holes loss"][0]) if v is None] == [3]
    bands = js(
        browser,
        "return document.getElementById('head').data.filter(t => t.legendgroup === 'holes')"
        ".map(t => t.y.map(v => v === null))",
    )
    assert all(b[2] and b[6] for b in bands)  # the envelope has the same gaps
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "view-select")).select_by_visible_text("holes")
    z = js(browser, "return document.getElementById('heatmap').data[0].z")
    assert z[0][0] is None and all(v is not None for row in z for v in row[1:])  # a blank cell
    assert "1 of 6 heads hold NaN/inf" in browser.find_element("id", "meta").find_element("xpath", "..").text
    assert console_errors(browser) == []


# ---- monitor histories (issue 50): a statistic by step × head per layer, curves per head ----------------


@pytest.fixture(scope="module")
def history_page(tmp_path_factory):
    """A page of a scan and a tiny Llama's monitor history (6 training steps, 2 layers, 4 heads)."""
    folder = tmp_path_factory.mktemp("history")
    monitored_history(folder / "run" / HISTORY_FILE)
    view([("NoPE", planted()), folder / "run"]).save(folder / "page.html")
    return folder


def test_history_switches_statistic_and_layer(browser, history_page):
    from selenium.webdriver.support.ui import Select

    history = load_history(history_page / "run" / HISTORY_FILE)
    open_page(browser, history_page / "page.html")
    assert console_errors(browser) == []
    assert js(browser, "return document.getElementById('heads-section').hidden") is False  # the scan's too
    assert "LlamaForCausalLM" in browser.find_element("id", "history-meta").text
    options = js(browser, "return [...document.querySelectorAll('#history-stat option')].map(o => o.value)")
    assert options == list(HISTORY_STATS)
    heat = "const g = document.getElementById('history-heatmap'); "
    curves = "const c = document.getElementById('history-curves'); "
    for stat, layer in (("entropy", 0), ("max_logit", 0), ("max_logit", 1), ("max_prob", 1)):
        Select(browser.find_element("id", "history-stat")).select_by_value(stat)
        Select(browser.find_element("id", "history-layer")).select_by_value(str(layer))
        assert js(
            browser, "return [document.body.dataset.historyStat, document.body.dataset.historyLayer]"
        ) == [
            stat,
            str(layer),
        ]
        z = js(browser, heat + "return g.data[0].z")  # (heads, steps)
        np.testing.assert_allclose(z, history.values[stat][:, layer].T, rtol=1e-6)
        assert js(browser, heat + "return g.data[0].x") == history.steps.tolist()
        assert f"{stat} (" in js(browser, heat + "return g.layout.title.text") and f"layer {layer}" in js(
            browser, heat + "return g.layout.title.text"
        )
        traces = js(
            browser, curves + "return c.data.filter(t => t.name).map(t => [t.name, t.y, t.line.width])"
        )
        assert sorted(name for name, _, _ in traces) == [f"head {h}" for h in range(4)]
        for name, y, _ in traces:
            np.testing.assert_allclose(y, history.values[stat][:, layer, int(name.split()[1])], rtol=1e-6)
        assert [name for name, _, width in traces if width == 3] == ["head 0"]  # the chosen head
    title = js(browser, heat + "return g.layout.title.text")
    assert "max over a step" not in title and "mean over a step" in title  # max_prob: a mean
    Select(browser.find_element("id", "history-stat")).select_by_value("max_logit")
    assert "max over a step" in js(browser, heat + "return g.layout.title.text")
    assert console_errors(browser) == []


def test_clicking_a_history_cell_highlights_that_head(browser, history_page):
    from selenium.webdriver.common.action_chains import ActionChains

    open_page(browser, history_page / "page.html")
    x, y, w, h = js(
        browser,
        """const gd = document.getElementById('history-heatmap'), f = gd._fullLayout, r = gd.getBoundingClientRect();
        return [f.xaxis._offset + f.xaxis.l2p(3), f.yaxis._offset + f.yaxis.l2p(2), r.width, r.height];""",
    )
    heatmap = browser.find_element("id", "history-heatmap")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", heatmap)
    ActionChains(browser).move_to_element_with_offset(
        heatmap, int(x - w / 2), int(y - h / 2)
    ).click().perform()
    for _ in range(2000):
        if js(browser, "return document.body.dataset.historyHead") == "2":
            break
        time.sleep(0.05)
    curves = "const c = document.getElementById('history-curves'); "
    widths = js(browser, curves + "return c.data.filter(t => t.name).map(t => [t.name, t.line.width])")
    assert [name for name, width in widths if width == 3] == ["head 2"]
    assert "head 2 highlighted" in js(browser, curves + "return c.layout.title.text")
    assert console_errors(browser) == []
