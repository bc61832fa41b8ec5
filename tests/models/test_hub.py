"""Hub ids (org/name) resolve through huggingface_hub's cache, offline, with a cache laid out here.

The scans run the CLI in this process (`_here`: huggingface_hub's cache folder pointed at the test's, as
HF_HUB_CACHE points a new process's), without the seconds of torch's import in a new process; one command
runs as a process of its own (`_cli`), where HF_HUB_CACHE itself names the cache it reads."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture
def hub_cache(tiny_dir, tmp_path):
    """HF_HUB_CACHE holding models--org--tiny at `main` (COMMIT) and at tag v0 (OTHER), as
    huggingface_hub lays a downloaded repository out (refs name snapshots by commit)."""
    repo = tmp_path / "hub" / "models--org--tiny"
    for commit in (COMMIT, OTHER):
        shutil.copytree(tiny_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "refs" / "v0").write_text(OTHER)
    return tmp_path / "hub"


def _here(args, cache: Path, cwd: Path, monkeypatch, capsys) -> subprocess.CompletedProcess:
    """`entropy-lens ARGS` in this process (entropy_lens.cli.main), in `cwd`, reading the hub cache
    `cache` (huggingface_hub's constant, which HF_HUB_CACHE sets at its import): a finished process."""
    from huggingface_hub import constants

    from entropy_lens.cli import main

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["entropy-lens", *args], code, out, err)


def _cli(args, cache: Path, cwd: Path):
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "entropy_lens", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )


def test_scan_of_a_hub_id_reads_the_cached_snapshot_at_a_revision(hub_cache, tmp_path, monkeypatch, capsys):
    from entropy_lens.results import ScanResult

    args = ["scan", "org/tiny", "--len", "16", "--samples", "2", "--data", "austen:persuasion", "--quiet"]
    run = _here([*args, "--out", "main.npz"], hub_cache, tmp_path, monkeypatch, capsys)
    assert run.returncode == 0, run.stderr
    meta = ScanResult.load(tmp_path / "main.npz").meta
    assert meta["model"] == "org/tiny" and meta["model_source"].endswith(COMMIT)
    run = _here([*args, "--revision", "v0", "--out", "v0.npz"], hub_cache, tmp_path, monkeypatch, capsys)
    assert run.returncode == 0, run.stderr
    meta = ScanResult.load(tmp_path / "v0.npz").meta
    assert meta["model_source"].endswith(OTHER) and meta["scan_config"]["revision"] == "v0"


@pytest.mark.slow  # a new process: 5 to 7 s on a loaded machine
def test_a_hub_id_missing_from_the_cache_offline_is_one_line(hub_cache, tmp_path):
    """In a process of its own: the cache the line names is the one HF_HUB_CACHE names."""
    run = _cli(["scan", "org/absent", "--len", "16", "--out", "x.npz"], hub_cache, tmp_path)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1, run.stderr
    assert "not in the Hugging Face cache" in err[0] and "HF_HUB_OFFLINE" in err[0]
    assert f"({hub_cache})" in err[0]
    assert not (tmp_path / "x.npz").exists()


def test_revision_on_a_local_folder_is_refused(tiny_dir):
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.models import load_model

    with pytest.raises(EntropyLensError, match="--revision applies to Hugging Face Hub ids"):
        load_model(str(tiny_dir), revision="main")


def test_a_local_folder_named_like_a_hub_id_is_the_folder(tiny_dir, tmp_path, monkeypatch):
    from entropy_lens.models import load_model

    shutil.copytree(tiny_dir, tmp_path / "org" / "tiny")
    monkeypatch.chdir(tmp_path)
    assert load_model("org/tiny").source == str((tmp_path / "org" / "tiny").resolve())


def test_a_nope_named_hub_id_with_rotary_config_needs_a_choice(tiny_dir, tmp_path, monkeypatch, capsys):
    repo = tmp_path / "hub" / "models--org--Tiny-NoPE"
    shutil.copytree(tiny_dir, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    args = [
        "scan",
        "org/Tiny-NoPE",
        "--len",
        "16",
        "--samples",
        "1",
        "--data",
        "austen:persuasion",
        "--quiet",
    ]
    run = _here([*args, "--out", "x.npz"], tmp_path / "hub", tmp_path, monkeypatch, capsys)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1 and "says NoPE in its name" in err[0], run.stderr
    run = _here([*args, "--nope", "--out", "x.npz"], tmp_path / "hub", tmp_path, monkeypatch, capsys)
    assert run.returncode == 0, run.stderr
