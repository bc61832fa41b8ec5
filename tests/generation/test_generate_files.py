"""`entropy-lens generate`'s files: a prompt file that is not UTF-8 text or not a file, an --out that is
the prompt file or a link, --top-keys beyond the keys a row sees, and `GenerationResult.load` of a path
that is no file: each one line (or a said cut), nothing the run reads replaced."""

import os

import pytest

from entropy_lens import GenerationResult
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_a_prompt_file_that_is_not_utf8_or_not_a_file_is_one_line(tmp_path, capsys):
    prompt = tmp_path / "latin1.txt"
    prompt.write_bytes("Caf\u00e9 au lait, said Mr. Knightley".encode("latin-1"))
    argv = ["generate", "tiny-nope", "--out", str(tmp_path / "g.npz"), "--prompt-file"]
    assert main([*argv, str(prompt)]) == 2
    assert f"--prompt-file {prompt} is not UTF-8 text (byte 0xe9 at offset 3); save it as UTF-8" in one_line(
        capsys
    )
    assert main([*argv, str(tmp_path)]) == 2  # a folder: what stands there, not "no such file"
    assert f"--prompt-file {tmp_path} is a folder, not a file; pass a text file" in one_line(capsys)
    assert not (tmp_path / "g.npz").exists()


def test_an_out_that_is_the_prompt_file_is_refused_even_with_force(tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    text = "It is a truth universally acknowledged"
    prompt.write_text(text, encoding="utf-8")
    link = tmp_path / "link.npz"
    link.symlink_to(prompt)
    argv = ["generate", "tiny-nope", "--prompt-file", str(prompt), "--max-new-tokens", "2", "--force"]
    for out in (prompt, link):  # the file itself, or a link to it
        assert main([*argv, "--out", str(out)]) == 2
        assert f"--out {out} is the --prompt-file file {prompt} this run reads" in one_line(capsys)
    assert prompt.read_text(encoding="utf-8") == text


@pytest.mark.slow  # a generation run (the model loaded)
def test_force_on_a_linked_out_names_the_file_it_replaces(tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("It is a truth universally acknowledged", encoding="utf-8")
    target, link = tmp_path / "real.npz", tmp_path / "gen.npz"
    target.write_bytes(b"old")
    link.symlink_to(target)
    argv = [
        "generate",
        "tiny-nope",
        "--prompt-file",
        str(prompt),
        "--max-new-tokens",
        "2",
        "--out",
        str(link),
    ]
    assert main(argv) == 2
    assert f"{link} (a link to {target}) already exists; pass --force" in one_line(capsys)
    assert target.read_bytes() == b"old"
    assert main([*argv, "--force"]) == 0
    err = capsys.readouterr().err
    assert f"--out {link} is a link to {target}: --force replaces that file (the link is kept)" in err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert GenerationResult.load(target).tokens.shape[1] == 2


@pytest.mark.slow  # a generation run (the model loaded)
def test_top_keys_is_cut_to_the_keys_a_row_sees_and_said(tmp_path, capsys):
    out = tmp_path / "g.npz"
    argv = ["generate", "tiny-nope", "--data", "austen:emma", "--prompt-len", "8", "--max-new-tokens", "2"]
    assert main([*argv, "--stats", "top_key", "--top-keys", "100000", "--out", str(out)]) == 0
    seen = 8 + 2 - 1  # the last generated token's row: the prompt and the one token written before it
    assert f"--top-keys 100000 cut to {seen}" in capsys.readouterr().err
    result = GenerationResult.load(out)
    assert result.stat("top_key").shape[-1] == seen and result.meta["generate_config"]["top_keys"] == seen
    assert (result.stat("top_key")[0, -1] >= 0).all()  # the last row fills every one of its k


def test_loading_a_path_that_is_no_file_says_so(tmp_path):
    with pytest.raises(
        EntropyLensError, match="missing.npz: no such file; pass a file GenerationResult.save"
    ):
        GenerationResult.load(tmp_path / "missing.npz")
    with pytest.raises(EntropyLensError, match="is a folder, not a file"):
        GenerationResult.load(tmp_path)
