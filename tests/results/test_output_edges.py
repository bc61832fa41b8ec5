"""Outputs at the edges users reach: a disk that is completely full (a real one: a 128 KB tmpfs filled
to the last byte) and a symlink to another run's output. Each is one line and leaves nothing behind."""

import errno
import os
import re
import subprocess
from pathlib import Path

import pytest

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import atomic_write_text
from entropy_lens.runs.lock import OutputLock


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a filesystem with no byte free (mounting needs root: skipped, saying so, elsewhere)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(disk)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"a full disk needs a tmpfs mount, which failed here: {mounted.stderr.decode().strip()}")
    try:
        with open(disk / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as err:
                assert err.errno == errno.ENOSPC
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _one_line(err: str, pattern: str) -> None:
    lines = [line for line in err.strip().splitlines() if not line.startswith("entropy-lens: warning")]
    assert len(lines) == 1 and lines[0].startswith("entropy-lens: error:"), err
    assert re.search(pattern, lines[0]), lines[0]


def test_a_full_disk_is_one_line_at_the_lock_and_leaves_no_lock(full_disk):
    with pytest.raises(EntropyLensError, match=r"x.npz.lock cannot be written \(No space left on device\)"):
        OutputLock(full_disk / "x.npz").__enter__()
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # was: a 0-byte x.npz.lock


def test_a_scan_onto_a_full_disk_is_one_line_and_leaves_nothing(full_disk, tiny_dir, capsys):
    code = main(
        ["scan", str(tiny_dir), "--len", "16", "--samples", "1", "--out", str(full_disk / "x.npz"), "--quiet"]
    )
    assert code == 2
    _one_line(capsys.readouterr().err, "No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_a_symlink_to_another_runs_output_shares_its_lock(tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("{}")
    link.symlink_to(real)
    with OutputLock(real), pytest.raises(EntropyLensError, match="being written by another run"):
        OutputLock(link).__enter__()
    # and the other way round, also for a link to a file not written yet
    with OutputLock(link), pytest.raises(EntropyLensError, match="being written by another run"):
        OutputLock(real).__enter__()
    pending = tmp_path / "pending.json"
    (tmp_path / "link2.json").symlink_to(pending)
    with OutputLock(pending), pytest.raises(EntropyLensError, match="being written by another run"):
        OutputLock(tmp_path / "link2.json").__enter__()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "link2.json", "real.json"]


def test_an_atomic_write_through_a_symlink_keeps_the_link(tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real) and real.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_lock_in_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(EntropyLensError, match="cannot be written .*pass another --out"):
        OutputLock(afile / "sub" / "x.npz").__enter__()
    assert Path(afile).read_text() == "x"


def test_a_view_onto_a_full_disk_keeps_the_page_elsewhere_in_one_line(full_disk, tmp_path, capsys):
    from view_inputs import planted

    results = tmp_path / "r.npz"
    planted().save(results)
    code = main(["view", str(results), "--out", str(full_disk / "page.html")])
    assert code == 2
    err = capsys.readouterr().err
    _one_line(err, r"could not write .*page.html \(No space left on device\); the finished page is saved in")
    rescued = Path(re.search(r"saved in (\S+) instead", err).group(1))
    assert rescued.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_any_write_that_finds_the_disk_full_is_one_line(full_disk, monkeypatch, capsys):
    """Whatever write meets a full disk (here a command's own, as a figure's savefig would), main says
    so in one line, not a traceback."""
    import entropy_lens.cli.view as view_command

    def writes(args):
        with open(full_disk / "figure.png", "wb", buffering=0) as f:
            f.write(b"\0" * 8192)
        return 0

    monkeypatch.setattr(view_command, "cmd_view", writes)
    assert main(["view", "x.npz"]) == 2
    _one_line(capsys.readouterr().err, r"a write failed: No space left on device; free space on that disk")


def test_a_results_file_of_the_wrong_rank_is_one_line(tmp_path):
    import json

    import numpy as np
    from view_inputs import planted

    from entropy_lens.results import ScanResult

    good = planted()
    arrays = {name: getattr(good, name) for name in ("entropy", "entropy_sq", "loss", "loss_sq", "count")}
    arrays["entropy"] = arrays["entropy"][0]  # (heads, len): was "not enough values to unpack"
    np.savez(tmp_path / "r.npz", meta=np.array(json.dumps(good.meta)), **arrays)
    with pytest.raises(
        EntropyLensError,
        match=r"entropy has shape \(3, 256\), not \(layers, heads, positions\); .*rerun the scan",
    ):
        ScanResult.load(tmp_path / "r.npz")


def test_every_row_statistic_in_a_results_file_round_trips_and_is_shape_checked(tmp_path):
    """A results file holds each row statistic the scan recorded under its name (`ScanResult.stats`,
    sink_mass for a model with sinks); one whose shape is not entropy's is refused in one line."""
    import numpy as np
    from view_inputs import planted

    from entropy_lens.results import ScanResult

    result = planted()
    rng = np.random.default_rng(0)
    result.stats = {"sink_mass": rng.random(result.entropy.shape).astype(np.float32)}
    result.save(tmp_path / "s.npz")
    back = ScanResult.load(tmp_path / "s.npz")
    assert back.stats.keys() == {"sink_mass"} and np.array_equal(back.sink_mass, result.sink_mass)
    result.stats = {"sink_mass": result.stats["sink_mass"][:, :1]}
    result.save(tmp_path / "bad.npz")
    with pytest.raises(EntropyLensError, match=r"sink_mass has shape \(\d+, 1, \d+\), not entropy's"):
        ScanResult.load(tmp_path / "bad.npz")
    assert planted().sink_mass is None
