"""`entropy-lens generate`: writes the statistics of every generated token of a bundled model, prints its
summary, checks --out before the model loads, and refuses what cannot run in one line."""

import numpy as np
import pytest

from entropy_lens import GenerationResult
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
    # an existing --out is kept unless --force, before the model loads
    assert main([*argv, "--out", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main([*argv, "--data", "austen:emma", "--out", str(tmp_path / "x.npz")]) == 2
    assert "give the prompt as --prompt-file F or as --data D" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--stats", "received"], "--stats: received: a key statistic"),
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
