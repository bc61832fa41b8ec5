"""Writers own their targets: each refuses, in one line and before any work, a path that exists and is not
a regular file (a device node, a FIFO, a socket, a link to one; a file where a folder is expected), which
a rename over it would replace (as root, /dev/null itself); and a write the system refuses is one line.

The targets are made in tmp_path: a FIFO (os.mkfifo needs no root), a symlink to it, and, where this
process may make one (root), a character device with /dev/null's numbers, so a failing test replaces
that copy, never the real /dev/null."""

import errno
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest
from tiny import make_tiny_model

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, atomic_write_text
from entropy_lens.results.history import History
from entropy_lens.training.resumable import write_checkpoint

SPECIAL = r"is a (named pipe \(FIFO\)|character device), not a regular file, and writing would replace it"


def _device(tmp_path: Path) -> Path:
    """A character device node 1:3 (/dev/null's) in tmp_path; skipped where mknod is not allowed."""
    path = tmp_path / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pytest.skip("making a device node needs root")
    return path


@pytest.fixture(params=["fifo", "link-to-fifo", "device", "link-to-device"])
def special(request, tmp_path):
    """A path that is no regular file, and a check that it is still what it was."""
    if request.param.endswith("fifo"):
        target, same = tmp_path / "fifo", stat.S_ISFIFO
        os.mkfifo(target)
    else:
        target, same = _device(tmp_path), stat.S_ISCHR
    path = target
    if request.param.startswith("link"):
        path = tmp_path / "link"
        path.symlink_to(target)
    yield path
    assert same(os.stat(target).st_mode), f"{target} was replaced"
    assert path.is_symlink() == request.param.startswith("link")


def _history() -> History:
    values = {"entropy": np.zeros((1, 2, 2), np.float32)}
    return History(np.array([1]), np.array([1]), np.array([4]), values, {"every": 1})


def _one_line(capsys, pattern: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("entropy-lens: error:"), err
    assert re.search(pattern, err), err


def test_history_save_refuses_a_special_file(special):
    with pytest.raises(EntropyLensError, match=SPECIAL):
        _history().save(special)


def test_monitor_save_refuses_special_files_folders_and_empty_paths_in_one_line(special, tmp_path):
    from entropy_lens.monitor import AttentionMonitor

    mon = AttentionMonitor(make_tiny_model(n_layers=1))
    with pytest.raises(EntropyLensError, match=SPECIAL):
        mon.save(special)
    with pytest.raises(EntropyLensError, match="is a folder; pass a file name inside it"):
        mon.save(tmp_path)
    with pytest.raises(EntropyLensError, match="is empty; pass a file name"):
        mon.save("")
    with pytest.raises(EntropyLensError, match=r"could not write /proc/x.npz \(.+\); free space"):
        mon.save("/proc/x.npz")  # was: FileNotFoundError


def test_scan_result_save_and_atomic_write_text_refuse_a_special_file(special):
    from view_inputs import planted

    with pytest.raises(EntropyLensError, match=SPECIAL):
        planted().save(special)
    with pytest.raises(EntropyLensError, match=SPECIAL):
        atomic_write_text(special, "text")
    assert isinstance(planted(), ScanResult)


def test_a_refused_atomic_write_leaves_no_temporary_file(tmp_path):
    os.mkfifo(tmp_path / "x.npz")
    with pytest.raises(EntropyLensError):
        atomic_write_text(tmp_path / "x.npz", "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_an_atomic_write_the_system_refuses_is_one_line(tmp_path, monkeypatch, code):
    def refused(*args):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(EntropyLensError, match=rf"could not write .*x.txt \({os.strerror(code)}\); free"):
        atomic_write_text(tmp_path / "x.txt", "text")
    assert list(tmp_path.iterdir()) == []


def test_scan_out_force_refuses_a_special_file_before_any_work(special, tiny_dir, capsys):
    argv = [
        "scan",
        str(tiny_dir),
        "--len",
        "16",
        "--samples",
        "1",
        "--out",
        str(special),
        "--force",
        "--quiet",
    ]
    assert main(argv) == 2
    _one_line(capsys, "--out .*" + SPECIAL)


def test_scan_refuses_a_special_checkpoint_path(tmp_path, tiny_dir, capsys):
    os.mkfifo(tmp_path / "x.npz.partial.npz")
    argv = [
        "scan",
        str(tiny_dir),
        "--len",
        "16",
        "--samples",
        "1",
        "--out",
        str(tmp_path / "x.npz"),
        "--quiet",
    ]
    assert main(argv) == 2
    _one_line(capsys, "x.npz.partial.npz " + SPECIAL)
    assert not (tmp_path / "x.npz").exists()


def test_view_out_refuses_a_special_file(special, tmp_path, capsys):
    from view_inputs import planted

    planted().save(tmp_path / "r.npz")
    assert main(["view", str(tmp_path / "r.npz"), "--out", str(special)]) == 2
    _one_line(capsys, "--out .*" + SPECIAL)


def test_figures_refuse_a_special_file_in_their_folder_before_drawing(tmp_path, monkeypatch, capsys):
    from entropy_lens.figures import pipeline

    def no_work(*args, **kwargs):
        raise AssertionError("the runs were read before the outputs were checked")

    monkeypatch.setattr(pipeline, "figure_data", no_work)
    out = tmp_path / "figs"
    out.mkdir()
    os.mkfifo(tmp_path / "fifo")
    (out / "README.md").symlink_to(tmp_path / "fifo")
    assert main(["figures", "1", "--out", str(out), "--cached-only"]) == 2
    _one_line(capsys, "README.md .*" + SPECIAL)
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)


@pytest.mark.parametrize("where", ["out", "partial"])
def test_train_tiny_refuses_a_special_out_or_checkpoint_folder(tmp_path, text_file, where):
    from entropy_lens.training import TinyRecipe, train_tiny

    recipe = TinyRecipe(
        hidden=32, intermediate=64, layers=1, heads=2, kv_heads=1, vocab=280, data=str(text_file)
    )
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / ("m" if where == "out" else "m.partial")).symlink_to(tmp_path / "fifo")
    with pytest.raises(EntropyLensError, match=r"is a named pipe \(FIFO\), not a folder"):
        train_tiny(recipe, tmp_path / "m", progress=False)
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)


def test_search_heads_refuses_a_special_checkpoint_folder(tmp_path):
    from entropy_lens.training.head_search import check_out

    os.mkfifo(tmp_path / "s.safetensors.partial")
    with pytest.raises(
        EntropyLensError, match=r"s.safetensors.partial is a named pipe \(FIFO\), not a folder"
    ):
        check_out(tmp_path / "s.safetensors")


def test_a_checkpoint_write_refuses_a_special_file(special):
    with pytest.raises(EntropyLensError, match=SPECIAL):
        write_checkpoint({"step": 1}, special)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0"),
        OSError(errno.ENOSPC, "No space left on device"),
    ],
    ids=["torch-zip-writer", "enospc"],
)
def test_a_checkpoint_on_a_full_disk_is_one_line_and_the_last_one_stands(tmp_path, monkeypatch, error):
    import torch

    path = tmp_path / "checkpoint.pt"
    write_checkpoint({"step": 1}, path)

    def full(state, file):
        Path(file).write_bytes(b"half")
        raise error

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(
        EntropyLensError,
        match=r"could not write the checkpoint .*checkpoint.pt \(.*(full disk|No space).*\): the last checkpoint stands",
    ) as got:
        write_checkpoint({"step": 2}, path)
    assert "\n" not in str(got.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    assert torch.load(path, weights_only=True) == {"step": 1}


def test_an_output_that_turns_special_during_a_run_keeps_the_finished_work(special, monkeypatch, tmp_path):
    """A target that became a pipe or device while the run ran (after the up-front check) is refused at
    the write as a refused write is: the finished work is rescued elsewhere, the message says where, and
    the special file stands."""
    from entropy_lens.runs import output

    monkeypatch.setattr(output, "rescue_path", lambda path: tmp_path / "rescued" / path.name)
    before = os.stat(special).st_mode
    with pytest.raises(EntropyLensError, match=r"saved in .*rescued.* instead: move it") as err:
        output.save_or_rescue(special, lambda p: atomic_write_text(p, "finished"), what="table")
    assert "\n" not in str(err.value) and "stands there" in str(err.value)
    assert (tmp_path / "rescued" / special.name).read_text() == "finished" and os.stat(
        special
    ).st_mode == before
