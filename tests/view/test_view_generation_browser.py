"""A generation's page in a real browser (browser.py; skipped, saying why, where no Chromium can run): a
generation of the bundled tiny-nope (view_inputs.generated) loads without console errors, its bars are the
file's statistic of the chosen head, an ended sequence is drawn as ended, and hovering a generated token
with the mouse shows its span masses and its top keys with their probabilities and texts."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest
from browser import chromium, console_errors, missing, open_page
from view_inputs import HOSTILE, LN2, NAME, generated

from entropy_lens.view import view

pytestmark = [
    pytest.mark.slow,  # a headless Chromium per module: seconds per test
    pytest.mark.skipif(missing() is not None, reason=f"browser tests: {missing()}"),
]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(the generation, its tokenizer, the page's path)."""
    folder = tmp_path_factory.mktemp("generation")
    result, tok = generated()
    result.save(folder / "gen.npz")
    view(folder / "gen.npz").save(folder / "page.html")
    return result, tok, folder / "page.html"


@pytest.fixture(scope="module")
def loaded(made):
    with chromium() as driver:
        open_page(driver, made[2])
        yield driver


def js(driver, code: str):
    return driver.execute_script(code)


def choose(driver, select: str, value) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", select)).select_by_value(str(value))


def test_the_page_draws_the_generation_without_errors(loaded):
    assert console_errors(loaded) == []
    assert js(loaded, "return document.getElementById('heads-section').hidden") is True  # no scan
    assert "tiny-nope" in loaded.find_element("id", "generation-meta").text
    options = js(
        loaded, "return [...document.querySelectorAll('#generation-stat option')].map(o => o.textContent)"
    )
    assert options[:3] == ["entropy (bits)", "max_prob (probability)", "span_mass: prompt (probability)"]
    assert "top_key_prob: rank 2 (probability)" in options


def test_bars_are_the_files_statistic_and_an_ended_sequence_is_ended(loaded, made):
    result = made[0]
    plot = "const g = document.getElementById('generation-plot'); "
    for row, stat, layer, head in ((1, 0, 2, 3), (0, 0, 1, 1), (0, 2, 3, 0)):
        choose(loaded, "generation-row", row)
        choose(loaded, "generation-stat", stat)
        choose(loaded, "generation-layer", layer)
        choose(loaded, "generation-head", head)
        assert js(
            loaded,
            "const d = document.body.dataset; return [d.generationRow, d.generationLayer, d.generationHead]",
        ) == [str(row), str(layer), str(head)]
        y = js(loaded, plot + "return g.data[0].y")
        n = int(result.lengths[row])
        want = (
            result.stat("entropy")[row, :, layer, head] / LN2
            if stat == 0
            else result.stat("span_mass")[row, :, layer, head, 0]
        )
        np.testing.assert_allclose(y[:n], want[:n], rtol=1e-6)
        assert y[n:] == [None] * (len(y) - n)  # ended: no bar, never a number
        annotations = [a["text"] for a in js(loaded, plot + "return g.layout.annotations")]
        assert annotations == (["ended"] if n < len(y) else [])
        chips = js(
            loaded, "return [...document.querySelectorAll('#generation-text .ended')].map(s => s.textContent)"
        )
        assert chips == (["ended"] if n < len(y) else [])
        written = js(loaded, "return document.querySelectorAll('#generation-text .written').length")
        assert written == n
        # the text's colour scale (issue 80 item 7): its ends the live values' lowest and highest (entropy
        # in bits), a probability's 0 and 1, each labelled with its unit
        scale = js(
            loaded,
            "const s = document.getElementById('generation-scale'); return [s.dataset.low, "
            "s.dataset.high, s.textContent]",
        )
        ends = [0.0, 1.0] if stat != 0 else [float(np.min(want[:n])), float(np.max(want[:n]))]
        np.testing.assert_allclose([float(scale[0]), float(scale[1])], ends, rtol=1e-6)
        assert f"{ends[0]:.4f} {'bits' if stat == 0 else 'probability'}" in scale[2]
    assert console_errors(loaded) == []


def hover_token(driver, n: int) -> str:
    """The detail panel's text once the mouse rests on generated token n."""
    from selenium.webdriver.common.action_chains import ActionChains

    token = driver.find_element("css selector", f"#generation-text .written[data-n='{n}']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", token)
    ActionChains(driver).move_to_element(token).perform()
    for _ in range(400):
        if js(driver, "return document.body.dataset.generationToken") == str(n):
            return driver.find_element("id", "generation-detail").text
        time.sleep(0.05)
    raise AssertionError(f"the mouse on generated token {n} did not show it")


def test_hovering_a_token_shows_its_span_masses_and_top_keys_with_their_texts(loaded, made):
    result, tok, _ = made
    row, layer, head = 1, 3, 2
    choose(loaded, "generation-row", row)
    choose(loaded, "generation-stat", 0)
    choose(loaded, "generation-layer", layer)
    choose(loaded, "generation-head", head)
    P = int(result.prompt_len[row])
    shown_keys = set()
    for n in range(int(result.lengths[row])):
        detail = hover_token(loaded, n)
        quoted = lambda i: json.dumps(
            tok.decode([int(i)], clean_up_tokenization_spaces=False), ensure_ascii=False
        )
        assert f"token {n}: {quoted(result.tokens[row, n])} (id {int(result.tokens[row, n])}" in detail
        mass = result.stat("span_mass")[row, n, layer, head]
        spans = ", ".join(f"{s} {m:.4f}" for s, m in zip(result.span_names, mass, strict=True))
        assert f"span mass: {spans}" in detail
        keys, probs = (
            result.stat("top_key")[row, n, layer, head],
            result.values["top_key_prob"][row, n, layer, head],
        )
        ids = result.ids_at(result.stat("top_key"))[row, n, layer, head]
        for rank, (pos, p, i) in enumerate(zip(keys, probs, ids, strict=True)):
            where = "prompt" if pos < P else f"generated token {pos - P}"
            line = f"top key {rank + 1}: position {pos}, {where}, {quoted(i)} (id {i}), p = {p:.4f}"
            assert line in detail, (line, detail)
            shown_keys.add(where.split()[0])
        outlined = js(
            loaded,
            "return [...document.querySelectorAll('#generation-text .key')].map(s => Number(s.dataset.pos))",
        )
        assert sorted(outlined) == sorted(
            {k for k in keys.tolist() if k >= 0}
        )  # the top keys, outlined in the text
    assert "prompt" in shown_keys  # a key's text from the prompt (and, where one was, the generated)
    assert console_errors(loaded) == []


def test_hovering_an_ended_sequence_says_ended(loaded, made):
    from selenium.webdriver.common.action_chains import ActionChains

    result = made[0]
    choose(loaded, "generation-row", 0)
    chip = loaded.find_element("css selector", "#generation-text .ended")
    ActionChains(loaded).move_to_element(chip).perform()
    n = int(result.lengths[0])
    for _ in range(400):
        if js(loaded, "return document.body.dataset.generationToken") == str(n):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the mouse on the ended mark did not show it")
    detail = loaded.find_element("id", "generation-detail").text
    assert f"sequence 0 ended after {n} generated tokens" in detail and "nan" not in detail.lower()


def test_a_hostile_token_text_is_shown_as_text(made, tmp_path):
    """A file's token text (and label) full of markup, template and script reaches the page as text: the
    detail panel, the token and the bar's hover show it literally, nothing runs, no console error."""
    from selenium.webdriver.common.action_chains import ActionChains

    result = made[0]
    first = str(int(result.tokens[1, 0]))
    texts = {**result.meta["token_texts"], first: HOSTILE}
    path = dataclasses.replace(result, meta={**result.meta, "token_texts": texts}).save(tmp_path / "h.npz")
    view([(NAME, path)]).save(tmp_path / "h.html")
    with chromium() as driver:
        open_page(driver, tmp_path / "h.html")
        choose(driver, "generation-row", 1)
        token = driver.find_element("css selector", "#generation-text .written[data-n='0']")
        ActionChains(driver).move_to_element(token).perform()
        for _ in range(400):
            if js(driver, "return document.body.dataset.generationToken") == "0":
                break
            time.sleep(0.05)
        assert token.get_attribute("textContent") == HOSTILE
        assert (
            json.dumps(HOSTILE, ensure_ascii=False)[:40]
            in driver.find_element("id", "generation-detail").text
        )
        label = ""
        for _ in range(400):
            js(driver, "Plotly.Fx.hover('generation-plot', [{curveNumber: 0, pointNumber: 0}])")
            label = js(
                driver,
                "const e = document.querySelector('#generation-plot .hovertext'); "
                "return e ? e.textContent : ''",
            )
            if label:
                break
            time.sleep(0.06)
        assert "<b>x<img src=x onerror=window.pwned=1>" in label  # the markup as text, not a tag
        assert NAME in js(
            driver, "return document.getElementById('generation-plot').layout.title.text"
        ).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&#37;", "%")
        assert js(driver, "return window.pwned === undefined") is True
        assert console_errors(driver) == []
