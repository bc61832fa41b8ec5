"""An interrupted head-scale search (Ctrl-C or SIGTERM: a KeyboardInterrupt) keeps its last whole step in
`<out>.partial/`, and a rerun continues it to the uninterrupted search's scales, losses and monitor
history, bit for bit; other flags are refused, --force starts over, an interrupt mid-update saves nothing."""

from __future__ import annotations

import dataclasses
import shutil
import signal

import numpy as np
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from training_runs import crash_at

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor.settings import MonitorSettings
from entropy_lens.training import head_search
from entropy_lens.training.head_search import HeadSearchConfig, search_head_scales
from entropy_lens.training.head_search_state import CHECKPOINT, HISTORY, checkpoint_folder
from entropy_lens.training.resumable import read_checkpoint

DATA = "austen:persuasion"
WATCH = MonitorSettings(monitor="entropy", monitor_every=2)


@pytest.fixture
def config(tiny_dir):
    return HeadSearchConfig(model=str(tiny_dir), length=16, init=1.2, steps=6, lr=0.5, batch=2, data=DATA)


def search(config, out=None, **options):
    return search_head_scales(config, progress=False, monitor=WATCH, out=out, **options)


def state_at(out) -> dict:
    from entropy_lens.training.head_search_state import FIELDS

    return read_checkpoint(checkpoint_folder(out) / CHECKPOINT, FIELDS, what="search-heads", start_over="x")


def assert_same_search(a, b):
    np.testing.assert_array_equal(a.scales, b.scales)
    assert [r["loss"] for r in a.log] == [r["loss"] for r in b.log] and a.log == b.log
    for name in ("steps", "forwards", "rows"):
        np.testing.assert_array_equal(getattr(a.history, name), getattr(b.history, name))
    np.testing.assert_array_equal(a.history.values["entropy"], b.history.values["entropy"])


@pytest.mark.slow  # trains twice (a run and its resumption)
def test_an_interrupted_search_resumes_exactly(config, tmp_path, monkeypatch, capsys):
    """Interrupted when step 5's windows are drawn (4 steps whole, none checkpointed on the way): the
    checkpoint is step 4's, and the resumed search is the uninterrupted one."""
    whole = search(config)
    out = tmp_path / "hs.safetensors"
    monkeypatch.setattr(head_search, "random_windows", crash_at(4))
    with pytest.raises(KeyboardInterrupt):
        search(config, out, checkpoint_every=100)
    state = state_at(out)
    assert state["step"] == 4 and [r["step"] for r in state["log"]] == [1, 2, 3, 4]
    assert state["config"] == config.to_dict() and (checkpoint_folder(out) / HISTORY).is_file()
    monkeypatch.undo()
    capsys.readouterr()
    resumed = search_head_scales(config, progress=True, monitor=WATCH, out=out)
    assert f"resuming the interrupted search in {checkpoint_folder(out)} at step 4" in capsys.readouterr().out
    assert_same_search(whole, resumed)
    assert resumed.history.steps.tolist() == [2, 4, 6]


@pytest.mark.slow  # trains twice (a run and its resumption)
def test_an_interrupt_mid_update_keeps_the_checkpoint_before(config, tmp_path):
    """Between the optimiser's step and the loss log's entry the update is not whole: an interrupt there
    (here: after step 3's AdamW step) saves nothing, so step 2's checkpoint (every 2 steps) stands."""
    whole = search(config)
    out = tmp_path / "hs.safetensors"
    calls = []

    def interrupt(optimizer, args, kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    handle = register_optimizer_step_post_hook(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            search(config, out, checkpoint_every=2)
    finally:
        handle.remove()
    state = state_at(out)
    assert len(calls) == 3 and state["step"] == 2 and [r["step"] for r in state["log"]] == [1, 2]
    assert_same_search(whole, search(config, out))


def test_other_flags_are_refused_and_force_starts_over(config, tmp_path, monkeypatch, capsys):
    out = tmp_path / "hs.safetensors"
    monkeypatch.setattr(head_search, "random_windows", crash_at(2))
    with pytest.raises(KeyboardInterrupt):
        search(config, out)
    monkeypatch.undo()
    other = dataclasses.replace(config, lr=0.2)
    with pytest.raises(
        EntropyLensError, match=r"other flags \(--lr \(0.2 here, 0.5 in the checkpoint\)\)"
    ) as err:
        search(other, out)
    assert "--force" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EntropyLensError, match="monitored entropy every 2 steps.*--force"):
        search_head_scales(config, progress=False, out=out, monitor=MonitorSettings(monitor="entropy"))
    capsys.readouterr()
    fresh = search_head_scales(other, progress=True, monitor=WATCH, out=out, force=True)
    assert "discarded the interrupted search" in capsys.readouterr().out
    assert_same_search(fresh, search(other))
    assert state_at(out)["config"]["lr"] == 0.2  # the new search's checkpoints (every step of 6)


def test_a_damaged_checkpoint_is_one_line(config, tmp_path):
    out = tmp_path / "hs.safetensors"
    checkpoint_folder(out).mkdir()
    torch.save({"config": config.to_dict(), "step": 1}, checkpoint_folder(out) / CHECKPOINT)
    with pytest.raises(EntropyLensError, match="not a search-heads checkpoint.*'log'.*--force to search"):
        search(config, out)
    shutil.rmtree(checkpoint_folder(out))
    checkpoint_folder(out).write_text("")
    with pytest.raises(EntropyLensError, match="is a file where search-heads keeps its checkpoint"):
        search(config, out)


def test_cli_resumes_and_removes_the_checkpoint(tiny_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "hs.safetensors"
    args = ["search-heads", str(tiny_dir), "--len", "16", "--steps", "4", "--batch", "2", "--data", DATA]
    args += ["--init", "1.2", "--out", str(out)]
    monkeypatch.setattr(head_search, "random_windows", crash_at(3))
    assert main(args) == 130  # interrupted
    assert state_at(out)["step"] == 3 and not out.exists()
    monkeypatch.undo()
    assert main([*args, "--lr", "0.3"]) == 2
    assert "rerun with its flags to finish it, or pass --force" in capsys.readouterr().err
    assert main(args) == 0
    assert "resuming the interrupted search" in capsys.readouterr().out
    assert out.is_file() and not checkpoint_folder(out).exists()
    resumed = out.read_bytes()
    assert main([*args, "--quiet", "--force"]) == 0 and out.read_bytes() == resumed  # the uninterrupted bytes


SLOWED_CLI = """
import sys, time
from pathlib import Path
import entropy_lens.training.head_search as head_search
from entropy_lens.cli import main
real = head_search.random_windows
def marked(stream, length, n, seed, step):
    if step == 5:
        Path(sys.argv[1]).touch()
    if step >= 5:
        time.sleep(0.2)
    return real(stream, length, n, seed, step)
head_search.random_windows = marked
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_sigterm_keeps_the_last_whole_step_and_a_rerun_finishes_it_bit_for_bit(tiny_dir, tmp_path):
    """A real SIGTERM (as a batch scheduler stops a job) through the CLI: exit 143, the checkpoint of the
    last whole step (past the periodic one of step 4), no lock left; the same command then writes the
    uninterrupted search's bytes. The interrupted search is a process of its own (the signal's); the rerun
    and the uninterrupted search run the CLI in this process (entropy_lens.cli.main), with the interrupted
    process's one thread (--threads 1), without the seconds of torch's import in a new process."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    argv = ["search-heads", str(tiny_dir), "--len", "16", "--steps", "40", "--batch", "2", "--data", DATA]
    argv += ["--init", "1.2", "--quiet"]
    out, whole, marker = tmp_path / "hs.safetensors", tmp_path / "whole.safetensors", tmp_path / "step-5"
    run = subprocess.Popen(
        [sys.executable, "-c", SLOWED_CLI, str(marker), *argv, "--out", str(out)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # a few steps past the checkpoint of step 4 (every tenth of 40 steps)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 143 and "terminated (SIGTERM)" in err, err[-3000:]
    step = state_at(out)["step"]
    assert 5 <= step < 40 and not out.exists() and not Path(f"{out}.lock").exists()
    threads = torch.get_num_threads()
    try:
        assert main([*argv, "--threads", "1", "--out", str(out)]) == 0  # the rerun
        assert main([*argv, "--threads", "1", "--out", str(whole)]) == 0  # uninterrupted
    finally:
        torch.set_num_threads(threads)  # the command's --threads stays in the command
    assert out.read_bytes() == whole.read_bytes() and not checkpoint_folder(out).exists()


def test_a_deleted_history_is_said_lost_on_stderr_under_quiet(config, tmp_path, monkeypatch, capsys):
    """Issue 57: the checkpoint notes which steps its history recorded, so a resume whose history file has
    gone says which records are lost (steps 2 and 4, every 2), on stderr with progress off."""
    out = tmp_path / "hs.safetensors"
    monkeypatch.setattr(head_search, "random_windows", crash_at(4))
    with pytest.raises(KeyboardInterrupt):
        search(config, out, checkpoint_every=100)
    monkeypatch.undo()
    (checkpoint_folder(out) / HISTORY).unlink()
    capsys.readouterr()
    resumed = search(config, out)
    assert "is missing, and with it the records of steps 2-4 (2)" in capsys.readouterr().err
    assert resumed.history.steps.tolist() == [6]
