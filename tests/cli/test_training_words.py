"""train-tiny's and search-heads' words and bars (issue 57, items 9 and 11): flags that would do nothing are
refused in one line, ALiBi's heads need no --kv-heads, `figures -1` is no figure, --quiet silences the
libraries' bars too, and search-heads' bar counts its steps as they finish."""

import re

import pytest

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.figures.registry import select
from entropy_lens.training import TinyRecipe

DATA = "austen:persuasion"


def _train_tiny(text_file, out, *extra) -> list[str]:
    return [
        "train-tiny",
        *(
            "--kind",
            "rope",
            "--hidden",
            "32",
            "--intermediate",
            "64",
            "--layers",
            "1",
            "--heads",
            "2",
            "--kv-heads",
            "1",
        ),
        *("--vocab", "280", "--train-len", "8", "--batch", "2", "--steps", "2", "--warmup", "1"),
        *("--data", str(text_file), "--out", str(out), *extra),
    ]


def _search_heads(tiny_dir, out, *extra) -> list[str]:
    return [
        "search-heads",
        str(tiny_dir),
        *("--len", "16", "--steps", "4", "--batch", "2", "--data", DATA, "--out", str(out), *extra),
    ]


def _one_line(capsys, pattern: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("entropy-lens: error:"), err
    assert re.search(pattern, err), err


def test_alibi_takes_any_heads_because_its_kv_heads_follow_them():
    TinyRecipe(kind="alibi", hidden=32, heads=2).check()  # was: "heads a multiple of kv_heads 6"
    with pytest.raises(EntropyLensError, match="--heads 2 must be a multiple of --kv-heads 6"):
        TinyRecipe(kind="nope", hidden=32, heads=2).check()


@pytest.mark.parametrize("name", ["-1", "-17", "0", "99"])
def test_figures_refuses_a_negative_number_as_it_refuses_0_and_99(name, tmp_path, capsys):
    with pytest.raises(EntropyLensError, match=f"no figure or table '{name}'"):
        select([name])
    assert main(["figures", name, "--cached-only", "--out", str(tmp_path / "f")]) == 2
    _one_line(capsys, f"no figure or table '{name}'")
    assert not (tmp_path / "f").exists()


@pytest.mark.parametrize(
    ("flags", "pattern"),
    [
        (("--monitor", ""), "--monitor '' names no statistic; pass one or more"),
        (("--monitor", ","), "--monitor ',' names no statistic"),
        (("--monitor-every", "3"), "--monitor-every 3 needs --monitor"),
    ],
)
def test_a_monitor_flag_that_would_do_nothing_is_refused(
    flags, pattern, text_file, tiny_dir, tmp_path, capsys
):
    assert main(_train_tiny(text_file, tmp_path / "m", *flags, "--quiet")) == 2
    _one_line(capsys, pattern)
    assert main(_search_heads(tiny_dir, tmp_path / "s.safetensors", *flags, "--quiet")) == 2
    _one_line(capsys, pattern)
    assert list(tmp_path.iterdir()) == []


def test_train_tiny_quiet_prints_no_bar_of_transformers(text_file, tmp_path, capsys):
    assert main(_train_tiny(text_file, tmp_path / "m", "--quiet")) == 0
    captured = capsys.readouterr()
    assert "Writing model shards" not in captured.err + captured.out  # save_pretrained's bar
    assert "%|" not in captured.err


def test_search_heads_bar_counts_each_finished_step(tiny_dir, tmp_path, monkeypatch, capsys):
    """Every line the bar prints (here one per redraw: every_s=0) that carries a step's loss counts that
    step as done; the bar sat at 0/4 through the whole search."""
    from entropy_lens import progress

    plain = progress.progress_bar
    monkeypatch.setattr(progress, "progress_bar", lambda *a, **kw: plain(*a, **{**kw, "every_s": 0}))
    assert main(_search_heads(tiny_dir, tmp_path / "s.safetensors")) == 0
    counts = [int(n) for n in re.findall(r"\| (\d)/4 \[.*loss=", capsys.readouterr().err)]
    assert sorted(set(counts)) == [1, 2, 3, 4] and counts == sorted(counts), counts  # close: 4/4 again


def test_search_heads_replaces_a_finished_search_only_with_force(tiny_dir, tmp_path, capsys):
    """A finished search at --out is not replaced silently (a 4-step rerun replaced a long one), as a
    scan's --out; --force searches again."""
    out = tmp_path / "s.safetensors"
    assert main(_search_heads(tiny_dir, out, "--quiet")) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert main(_search_heads(tiny_dir, out, "--quiet", "--steps", "2")) == 2
    _one_line(capsys, r"already holds a finished search; pass --force")
    assert out.read_bytes() == before
    assert main(_search_heads(tiny_dir, out, "--quiet", "--force")) == 0


def test_a_warmup_beyond_the_steps_names_its_flags():
    with pytest.raises(EntropyLensError, match=r"--warmup 100 must lie in 0..--steps 6; pass --warmup 6"):
        TinyRecipe(kind="nope", steps=6, warmup=100).check()
