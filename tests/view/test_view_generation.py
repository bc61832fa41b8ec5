"""`entropy-lens view gen.npz` without a browser: a generation file is told by its schema, and every
number, id and text its page carries is the file's (ended tokens NaN, never a number); files without
token texts (or without prompt ids) still view, and malformed ones are refused in one line
(test_view_generation_browser.py drives the page)."""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil

import numpy as np
import pytest
from view_inputs import LN2, generated, page_data, planted

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.results.generation import TOKEN_TEXTS, GenerationResult
from entropy_lens.view import view
from entropy_lens.view.sources import gather


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(path of the saved generation, the tokenizer): view_inputs.generated()."""
    result, tok = generated()
    return result.save(tmp_path_factory.mktemp("gen") / "gen.npz"), tok


def decoded(g: dict, name: str, dtype=np.float32) -> np.ndarray:
    """A payload array (generations.py) as (B, N, layers, heads, slots)."""
    raw = np.frombuffer(base64.b64decode(g["values"][name] if dtype is np.float32 else g[name]), dtype)
    return raw.reshape(len(g["rows"]), g["steps"], g["layers"], g["heads"], -1)


def test_page_carries_the_generations_numbers_ids_and_texts(made):
    path, tok = made
    r = GenerationResult.load(path)
    data = page_data(view(path))
    assert not data["results"] and not data["histories"]
    (g,) = data["generations"]
    B, N, layers, heads = r.stat("entropy").shape
    assert (g["steps"], g["layers"], g["heads"], len(g["rows"])) == (N, layers, heads, B)
    for b, row in enumerate(g["rows"]):
        P = int(r.prompt_len[b])
        assert row["tokens"] == r.tokens[b].tolist() and row["prompt"] == r.prompt[b, :P].tolist()
        assert (row["length"], row["prompt_len"]) == (int(r.lengths[b]), P)
    ids = {int(i) for i in np.concatenate([r.tokens.ravel(), r.prompt.ravel()]) if i >= 0}
    assert g["texts"] == {
        str(i): tok.decode([i], clean_up_tokenization_spaces=False) for i in ids
    }  # each id's own text, every one held
    names = [e["name"] for e in g["stats"]]
    assert names == [
        "entropy",
        "max_prob",
        "span_mass[0]",
        "span_mass[1]",
        "span_mass[2]",
        "offset_prob[0]",
        "offset_prob[1]",
        "distance_mass[0]",
        "distance_mass[1]",
        "distance_mass[2]",
        "top_key_prob[0]",
        "top_key_prob[1]",
    ]
    assert [(s["array"], s["parts"]) for s in g["slices"]] == [
        ("span_mass", ["prompt", "generated", "opening"]),
        ("offset_prob", ["0 behind", "1 behind"]),
        ("distance_mass", ["0+ back", "2+ back", "6+ back"]),
    ]
    assert [e["label"] for e in g["stats"] if e["array"] == "offset_prob"] == [
        "offset_prob: 0 behind",
        "offset_prob: 1 behind",
    ]
    ended = ~r.live  # (B, N): sequence 0 wrote its end token early
    assert ended[0].any() and not ended[1].any()
    for e in g["stats"]:
        got = decoded(g, e["array"])[..., e["slot"]]  # (B, N, layers, heads)
        stored = r.stat(e["array"]) if e["array"] != "top_key_prob" else r.values["top_key_prob"]
        want = stored.astype(np.float64)
        want = want[..., e["slot"]] if want.ndim == 5 else want
        want = want / LN2 if e["name"] == "entropy" else want  # entropy in bits, as the head explorer
        assert e["unit"] == ("bits" if e["name"] == "entropy" else "probability")
        np.testing.assert_allclose(got[r.live], want[r.live], rtol=1e-6, err_msg=e["name"])
        assert np.isnan(got[ended]).all(), e["name"]  # ended: no number
    keys = decoded(g, "top_key", np.int32)
    np.testing.assert_array_equal(keys[r.live], r.stat("top_key")[r.live])
    assert (keys[ended] == -1).all()


def test_a_generation_is_known_by_its_schema_not_its_name(made, tmp_path):
    path, _ = made
    shutil.copy(path, tmp_path / "results.npz")
    planted().save(tmp_path / "generation.npz")
    found = gather([tmp_path / "results.npz", tmp_path / "generation.npz"])
    assert [g.label for g in found.generations] == ["results"]
    assert [r.label for r in found.results] == ["generation"] and not found.histories
    data = page_data(view([tmp_path / "generation.npz", tmp_path / "results.npz"]))
    assert len(data["results"]) == 1 and len(data["generations"]) == 1  # a scan and a generation, one page


def test_a_version_1_generation_without_texts_or_prompt_ids_shows_ids(made, tmp_path):
    """A file of before token_texts (here version 1's: no prompt ids, no row-slice arrays) still views:
    its statistics, ids shown, and notes saying why and how to record texts."""
    r = GenerationResult.load(made[0])
    with np.load(made[0]) as z:
        arrays = {
            k: z[k]
            for k in z.files
            if k not in ("prompt", "span_mass", "offset_prob", "top_key", "top_key_prob")
        }
    meta = {k: v for k, v in json.loads(str(arrays.pop("meta"))).items() if k != TOKEN_TEXTS}
    meta |= {"schema_version": 1, "stats": ["entropy", "max_prob"]}
    np.savez(tmp_path / "v1.npz", meta=np.array(json.dumps(meta)), **arrays)
    (g,) = page_data(view(tmp_path / "v1.npz"))["generations"]
    assert g["texts"] is None and g["top_key"] is None and all(row["prompt"] is None for row in g["rows"])
    notes = " ".join(g["notes"])
    assert "tokens are shown by id" in notes and "with_token_texts(tokenizer)" in notes
    assert "no prompt ids" in notes
    assert [e["name"] for e in g["stats"]] == ["entropy", "max_prob"]
    got = decoded(g, "max_prob")[..., 0]
    np.testing.assert_allclose(got[r.live], r.stat("max_prob")[r.live], rtol=1e-6)
    assert g["rows"][1]["tokens"] == r.tokens[1].tolist()


@pytest.mark.parametrize(
    "texts", [["a", "b"], {"12": 3}, {"x": "a"}], ids=["a list", "a number", "not an id"]
)
def test_malformed_token_texts_are_refused_in_one_line(made, tmp_path, capsys, texts):
    r = GenerationResult.load(made[0])
    path = dataclasses.replace(r, meta={**r.meta, TOKEN_TEXTS: texts}).save(tmp_path / "bad.npz")
    with pytest.raises(EntropyLensError, match="meta token_texts is not {id: text}"):
        view(path)
    assert main(["view", str(path), "--out", str(tmp_path / "p.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.npz: meta token_texts is not {id: text}" in err and len(err.splitlines()) == 1


def test_cli_views_a_generation(made, tmp_path, capsys):
    path, _ = made
    out = tmp_path / "gen.html"
    assert main(["view", str(path), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert 'id="generation-section"' in page and "window.entropyLensDrawGenerations" in page
    assert (
        json.loads(page.split('id="entropy-lens-data">')[1].split("</script>")[0])["generations"][0]["label"]
        == "gen"
    )


def test_a_page_without_generations_has_no_generation_script(tmp_path):
    page = view([("NoPE", planted())])
    assert "window.entropyLensDrawGenerations = function" not in page.html  # generation.js left out
    assert 'id="generation-section"' not in page.html and page_data(page)["generations"] == []


def test_the_table_lists_a_parameter_only_where_a_recorded_statistic_reads_it(made, tmp_path):
    """Issue 80 item 7: the table listed first_keys and recent_keys (the recorder keeps every parameter's
    value) beside entropy and max_prob, which read neither; they are listed where first_mass or
    recent_mass was recorded."""
    r = GenerationResult.load(made[0])
    assert {"first_keys", "recent_keys"} <= set(r.meta) and "first_mass" not in r.stats
    (g,) = page_data(view(made[0]))["generations"]
    assert "first_keys" not in g["meta"] and "recent_keys" not in g["meta"] and "stats" in g["meta"]
    meta = {**r.meta, "stats": [*r.meta["stats"], "recent_mass"]}
    values = {**r.values, "recent_mass": r.values["max_prob"]}
    path = dataclasses.replace(r, meta=meta, values=values).save(tmp_path / "recent.npz")
    (g,) = page_data(view(path))["generations"]
    assert g["meta"]["recent_keys"] == str(r.meta["recent_keys"]) and "first_keys" not in g["meta"]
