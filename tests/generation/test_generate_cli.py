"""`entropy-lens generate`: writes the statistics of every generated token of a bundled model, prints its
summary, checks --out before the model loads, and refuses what cannot run in one line."""

import numpy as np
import pytest

from entropy_lens import GenerationResult, load_model
from entropy_lens.cli import main


def test_generate_writes_every_token_and_prints_the_heads(tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("It is a truth universally acknowledged, that a single man", encoding="utf-8")
    out = tmp_path / "gen.npz"
    argv = ["generate", "tiny-nope", "--prompt-file", str(prompt), "--max-new-tokens", "5"]
    assert main([*argv, "--stats", "entropy,varentropy", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    result = GenerationResult.load(out)
    assert result.tokens.shape == (1, 5) and result.stats == ("entropy", "varentropy")
    assert np.isfinite(result.stat("entropy")[result.live]).all()
    assert "sequence 0:" in shown and "varentropy (nats²), mean over" in shown and f"wrote {out}" in shown
    assert result.meta["generate_config"]["max_new_tokens"] == 5
    # each id of the prompt and of the text written, decoded alone, for entropy-lens view
    tok = load_model("tiny-nope").tokenizer
    ids = {int(i) for i in (*result.prompt[0], *result.tokens[0]) if i >= 0}
    assert result.token_texts == {i: tok.decode([i], clean_up_tokenization_spaces=False) for i in ids}
    # an existing --out is kept unless --force, before the model loads
    assert main([*argv, "--out", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main([*argv, "--data", "austen:emma", "--out", str(tmp_path / "x.npz")]) == 2
    assert "give the prompt as --prompt-file F or as --data D" in capsys.readouterr().err


def test_a_bundled_model_is_named_as_scans_name_it_never_by_its_install_folder(tmp_path, capsys):
    """Issue 80 item 6: the file's meta and its view page named tiny-nope by its absolute install folder
    (the model's _name_or_path). Now `model` is the name as given and `model_source` its place among the
    packages, as a scan's meta; GenerationRecorder's own meta on a model load_model gave says the name."""
    import json

    from entropy_lens import GenerationRecorder
    from entropy_lens.models import BUNDLED_MODELS
    from entropy_lens.view import view

    folder = str(BUNDLED_MODELS["tiny-nope"].path())
    out = tmp_path / "gen.npz"
    argv = ["generate", "tiny-nope", "--data", "austen:emma", "--prompt-len", "16", "--max-new-tokens", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    capsys.readouterr()
    meta = GenerationResult.load(out).meta
    assert meta["model"] == "tiny-nope" and meta["model_source"] == BUNDLED_MODELS["tiny-nope"].identity
    assert folder not in json.dumps(meta)
    assert folder not in view(out).html and "tiny-nope" in view(out).html
    lm = load_model("tiny-nope")
    with GenerationRecorder(lm.model) as rec:
        lm.model.generate(lm.tokenizer("It is", return_tensors="pt").input_ids, max_new_tokens=1)
    assert rec.result().meta["model"] == "tiny-nope"


def test_generate_records_spans_offsets_and_top_keys_and_names_the_heads(tmp_path, capsys):
    """--spans, --offsets and --top-keys: the arrays in the file, and the summary's heads are the file's
    (the copy share recomputed here from the prompt and generated ids by hand)."""
    out = tmp_path / "gen.npz"
    argv = ["generate", "tiny-nope", "--data", "austen:emma", "--prompt-len", "48", "--max-new-tokens", "6"]
    argv += ["--stats", "entropy,span_mass,offset_prob,top_key", "--spans", "doc=0:10", "--offsets", "0,1"]
    assert main([*argv, "--top-keys", "2", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    r = GenerationResult.load(out)
    assert r.span_names == ("prompt", "generated", "doc") and r.offsets == (0, 1)
    assert r.stat("top_key").shape == (1, 6, 4, 6, 2) and r.prompt.shape == (1, 48)
    mass = r.stat("span_mass")[r.live].mean(0)[..., 0]  # (layers, heads): the prompt's
    layer, head = divmod(int(np.argmax(mass)), mass.shape[1])
    assert f"span_mass prompt: the heads with the largest mean: L{layer}.H{head} ({mass.max():.3f})" in shown
    sequence = np.concatenate([r.prompt[0], r.tokens[0]])  # one sequence, unpadded: index = position
    copied = sequence[r.stat("top_key")[0, :, :, :, 0]] == r.tokens[0][:, None, None]
    share = copied.mean(0)
    layer, head = divmod(int(np.argmax(share)), share.shape[1])
    assert (
        f"top_key copies the token written (share of generated tokens): L{layer}.H{head} ({share.max():.3f})"
        in shown
    )
    assert "offset_prob 1 behind: the heads with the largest mean: L" in shown


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--stats", "received"], "--stats: received: a key statistic"),
        (["--spans", "doc=0:4"], "--spans is read by span_mass: add it to --stats"),
        (["--stats", "offset_prob"], "--stats offset_prob needs --offsets, e.g. --offsets 0,1"),
        (["--stats", "span_mass", "--spans", "doc=4"], "--spans: 'doc=4' is not NAME=START:STOP"),
        (["--stats", "offset_prob", "--offsets", "1,x"], "--offsets: '1,x' holds what is not a whole number"),
        (["--prompt-file", "no-such.txt"], "--prompt-file no-such.txt: no such file"),
        (["--data", "austen:emma", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    ],
)
def test_refusals_in_one_line(tmp_path, capsys, extra, words):
    argv = ["generate", "tiny-nope", *extra, "--out", str(tmp_path / "g.npz")]
    if "--prompt-file" not in extra and "--data" not in extra:
        argv += ["--data", "austen:emma"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_generating_past_the_models_positions_is_said_in_one_line_of_ours(tmp_path, capfd):
    """Issue 80 item 7: the guide's command (a 128-token prompt on tiny-nope, 128 positions) printed
    transformers' "friendly reminder ... exceeded the model's predefined maximum length (128)"; it says
    once, in its own words, that running past them is the point, and the reminder is held back."""
    out = tmp_path / "g.npz"
    argv = ["generate", "tiny-nope", "--data", "austen:emma", "--prompt-len", "128", "--max-new-tokens", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    err = capfd.readouterr().err
    said = "the prompt's 128 tokens and 2 new ones run past its max_position_embeddings (128)"
    assert err.count(said) == 1 and "friendly reminder" not in err, err
    within = ["generate", "tiny-nope", "--data", "austen:emma", "--prompt-len", "16", "--max-new-tokens", "2"]
    assert main([*within, "--out", str(tmp_path / "h.npz")]) == 0
    assert "max_position_embeddings" not in capfd.readouterr().err  # within them: nothing said
