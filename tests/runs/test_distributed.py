"""`torchrun --nproc-per-node 2 -m entropy_lens scan` (gloo, CPU) equals the 1-process scan."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from tolerances import sum_tolerance

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult
from entropy_lens.runs.distributed import World, world

ARGS = [
    "scan",
    "tiny-nope",
    "--len",
    "48",
    "--samples",
    "5",
    "--batch-size",
    "2",
    "--data",
    "austen:persuasion",
    "--fused",  # one attention path in every process ("auto" may choose differently per rank)
    "off",
    "--stats",  # the row statistics beyond entropy are summed across ranks as entropy is (a maximum:
    "max_prob,distance,max_logit",  # the largest rank's)
    "--quiet",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
    from entropy_lens.cli import main

    assert main([*ARGS, "--out", str(tmp_path / "one.npz")]) == 0
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "-m",
        "entropy_lens",
        *ARGS,
        "--out",
        str(tmp_path / "two.npz"),
    ]
    env = {"OMP_NUM_THREADS": "1", **os.environ}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("wrote") == 1  # rank 0 alone reports
    one, two = ScanResult.load(tmp_path / "one.npz"), ScanResult.load(tmp_path / "two.npz")
    assert two.meta["world_size"] == 2 and one.meta["world_size"] == 1
    np.testing.assert_array_equal(one.count, two.count)
    # each rank's batches of other shapes, other float32 GEMMs: tiny-nope's sums over 48 keys, its hidden
    # size 192 and its vocabulary of 2,048 (squares: twice the relative error)
    tol = 2 * sum_tolerance(48 + 192 + 2048)
    for key in ("entropy", "entropy_sq", "loss", "loss_sq"):
        np.testing.assert_allclose(getattr(two, key), getattr(one, key), rtol=tol, atol=tol)
    want = {"max_prob", "max_prob_sq", "distance", "distance_sq", "max_logit"}
    assert set(one.stats) == set(two.stats) == want
    for key, values in one.stats.items():
        np.testing.assert_allclose(two.stats[key], values, rtol=tol, atol=tol)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.npz", "two.npz"]  # no partial files


def test_world_from_environment(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert world() == World()
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    w = world()
    assert (w.rank, w.size, w.main) == (2, 3, False) and w.samples(0, 8) == [2, 5]
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(EntropyLensError, match="outside WORLD_SIZE"):
        world()


def test_resume_refused_under_torchrun(monkeypatch, tmp_path):
    from entropy_lens.runs.scan import ScanConfig, scan

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(EntropyLensError, match="--resume is not supported under torchrun"):
        scan(ScanConfig(model="tiny-nope", length=16, samples=1), out=tmp_path / "x.npz", resume=True)


def test_interrupt_under_torchrun_leaves_no_file(monkeypatch, tmp_path):
    """Ranks write no checkpoints (resume is single-process), so Ctrl-C leaves the folder as it was."""
    import contextlib

    import entropy_lens.runs.scan as scan_mod
    from entropy_lens.runs import batches

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(scan_mod, "process_group", lambda w, device: contextlib.nullcontext())
    real, calls = batches.next_token_nll, {"n": 0}

    def interrupted_second_batch(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(batches, "next_token_nll", interrupted_second_batch)
    config = scan_mod.ScanConfig(model="tiny-nope", length=16, samples=4, data="austen:persuasion")
    with pytest.raises(KeyboardInterrupt):
        scan_mod.scan(config, out=tmp_path / "x.npz", progress=False, checkpoint_every_s=0.0)
    assert calls["n"] == 2 and list(tmp_path.iterdir()) == []
