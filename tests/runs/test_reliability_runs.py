"""Issue 48, the runs' part: no wrong number without a word, no work lost. Ranks started with other flags
refuse to scan, naming the first setting that differs (and so does every "other flags" refusal); a
reordered --stats is the same scan; a rank without samples still holds every sum (in the torchrun launches
of tests/runs/test_context_parallel.py); SIGTERM is Ctrl-C (a scan checkpoints, exit 143); a stalled or
killed rank is one line on the others, after --dist-timeout at most."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult
from entropy_lens.runs.configs import ScanConfig
from entropy_lens.runs.output import CHECKPOINT, Output, partial_path, scan_difference
from entropy_lens.settings import first_difference

DATA = "austen:northanger"
ARRAYS = ("entropy", "entropy_sq", "loss", "loss_sq", "count")
ROOT = Path(__file__).parents[2]


def _env(tmp_path: Path, **extra) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "ENTROPY_LENS_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        **extra,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _error_lines(err: str) -> list[str]:
    """The lines of a rank's stderr that are ours (gloo and c10d log their own lines beside them)."""
    return [line for line in err.splitlines() if line.startswith("entropy-lens:")]


def _cpu_seconds(pid: int) -> float:
    """The CPU time process `pid` has used (Linux /proc), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _written(folder: Path) -> list[str]:
    """What a run left in `folder` (the cache folder aside)."""
    return sorted(p.name for p in folder.iterdir() if p.name != "cache")


def _wait_for(condition, what: str, seconds: float = 300.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# ---- the first setting that differs -----------------------------------------------------------------


def test_first_difference_names_the_flag_of_the_first_setting_that_differs():
    a = ScanConfig(model="m", length=48, seed=0, samples=4).to_dict()
    b = ScanConfig(model="m", length=48, seed=1, samples=5).to_dict()
    assert first_difference(a, b, cls=ScanConfig) == "--samples (4 here, 5 there)"  # the fields' order
    c = ScanConfig(model="n", length=48, first_keys=3, samples=4).to_dict()
    old = {k: v for k, v in a.items() if k != "first_keys"}  # a file written before --first-keys...
    assert first_difference(a, old, cls=ScanConfig) is None  # ...reads it as its default
    assert first_difference(a, c, cls=ScanConfig, names=("A", "C")) == "CKPT ('m' A, 'n' C)"
    d = ScanConfig(model="m", length=48, first_keys=3, samples=4).to_dict()
    assert first_difference(old, d, cls=ScanConfig) == "--first-keys (1 here, 3 there)"
    assert first_difference({"x": {"y": (1, 2)}}, {"x": {"y": [1, 2]}}) is None  # as JSON reads it back
    assert first_difference({"x": {"y": 1}}, {"x": {"y": 2}}, labels={"y": "why"}) == "why (1 here, 2 there)"
    assert first_difference(a, a, cls=ScanConfig) is None


def test_a_reordered_stats_is_the_same_scan_and_another_set_is_named():
    def record(stats: str) -> dict:
        return ScanConfig(model="m", length=48, stats=stats).to_dict()

    assert scan_difference(record("max_prob,distance"), record("distance,max_prob")) is None
    assert scan_difference(record("entropy,max_prob"), record("max_prob")) is None
    every = "first_mass,varentropy,max_logit,recent_mass,max_prob,distance,collision_entropy"
    assert scan_difference(record("all"), record(every)) is None
    assert scan_difference(record("max_prob"), record("first_mass")) == (
        "--stats ('max_prob' here, 'first_mass' there)"
    )
    # an identity holds the config under "scan_config"; the other keys are named in words
    ours = {"scan_config": record("max_prob,distance"), "config_hash": "a", "chunks": [1, 2]}
    theirs = {"scan_config": record("distance,max_prob"), "config_hash": "a", "chunks": [1, 3]}
    assert scan_difference(ours, theirs, names=CHECKPOINT).startswith("the chunks drawn from --data")
    # what is stored is what was given: results files and cache keys do not change
    assert record("max_prob,distance")["stats"] == "max_prob,distance"


def _interrupted(tiny_dir: Path, out: Path, monkeypatch, config: ScanConfig) -> None:
    """Scan `config` into `out`, interrupted (Ctrl-C) in its third batch: only the checkpoint is left."""
    from entropy_lens.runs import batches
    from entropy_lens.runs.scan import scan

    real, calls = batches.next_token_nll, {"n": 0}

    def third_interrupted(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(batches, "next_token_nll", third_interrupted)
    with pytest.raises(KeyboardInterrupt):
        scan(config, out=out, progress=False, checkpoint_every_s=1e9)
    monkeypatch.setattr(batches, "next_token_nll", real)
    assert partial_path(out).exists() and not out.exists()


def test_other_flags_are_named_and_a_reordered_stats_resumes_the_checkpoint(tiny_dir, tmp_path, monkeypatch):
    from entropy_lens.capture.fused import PathChoices
    from entropy_lens.runs.scan import scan

    config = ScanConfig(model=str(tiny_dir), length=32, samples=4, data=DATA, stats="max_prob,distance")
    out = tmp_path / "r.npz"
    _interrupted(tiny_dir, out, monkeypatch, config)
    with pytest.raises(
        EntropyLensError, match=re.escape("other flags (--seed (1 here, 0 in the checkpoint))")
    ):
        scan(dataclasses.replace(config, seed=1), out=out, progress=False)
    reordered = dataclasses.replace(config, stats="distance,max_prob")
    resumed = scan(reordered, out=out, progress=False)  # the same set of statistics: resumed
    whole = scan(config, progress=False, choices=PathChoices(replay=resumed.meta.get("fused_choices")))
    for name in ARRAYS:
        assert np.array_equal(getattr(resumed, name), getattr(whole, name)), name
    assert resumed.stats.keys() == whole.stats.keys() and all(
        np.array_equal(resumed.stats[k], whole.stats[k]) for k in whole.stats
    )
    # the finished file: reused with the stats in any order, another scan named
    assert Output.of(out, resume=True).finished(config.to_dict()) is not None
    assert Output.of(out, resume=True).finished(reordered.to_dict()) is not None
    other = dataclasses.replace(config, stats="max_prob,first_mass").to_dict()
    with pytest.raises(
        EntropyLensError, match=re.escape("different scan (--stats ('max_prob,first_mass' here")
    ):
        Output.of(out, resume=True).finished(other)


def test_a_checkpoint_of_another_model_is_named_by_restore(tiny_dir, tmp_path, monkeypatch):
    """The checkpoint's own identity check (ScanSums.restore) names what differs beyond the flags."""
    from entropy_lens.runs.sums import ScanSums

    path = tmp_path / "c.npz"
    scan_config = ScanConfig(model="m", length=8).to_dict()
    ScanSums(1, 1, 8).save(path, {"scan_config": scan_config, "config_hash": "a", "chunks": [0]}, 1.0)
    with pytest.raises(
        EntropyLensError, match=re.escape("scan (the checkpoint's config.json ('b' here, 'a' in")
    ):
        ScanSums(1, 1, 8).restore(path, {"scan_config": scan_config, "config_hash": "b", "chunks": [0]})


def test_a_sweep_of_other_flags_is_named(tiny_dir, tmp_path):
    from entropy_lens.runs.sweep import sweep

    config = ScanConfig(model=str(tiny_dir), length=16, samples=1, data=DATA, entropy="mean")
    sweep(config, [1.0], tmp_path / "sw", progress=False)
    with pytest.raises(
        EntropyLensError, match=re.escape("other flags (--samples (2 here, 1 in the folder))")
    ):
        sweep(dataclasses.replace(config, samples=2), [1.0], tmp_path / "sw", resume=True, progress=False)
    # a reordered --stats is this sweep: nothing to scan again
    first = dataclasses.replace(config, stats="max_prob,distance")
    sweep(first, [1.0], tmp_path / "st", progress=False)
    done = (tmp_path / "st" / "s1.npz").stat().st_mtime_ns
    sweep(dataclasses.replace(first, stats="distance,max_prob"), [1.0], tmp_path / "st", progress=False)
    assert (tmp_path / "st" / "s1.npz").stat().st_mtime_ns == done


# ---- SIGTERM is Ctrl-C ---------------------------------------------------------------------------------


def test_sigterm_inside_the_sums_update_waits_for_it_and_then_is_handled():
    from entropy_lens.cli import Terminated, sigterm_as_interrupt
    from entropy_lens.runs.sums import interrupts_deferred

    done, before = [], signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt(), pytest.raises(Terminated), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the signal arrives here and is held
        done.append(True)
    assert done == [True] and signal.getsignal(signal.SIGTERM) == before


# The CLI in a process whose scan (or its shard of a --context-parallel scan) marks its fifth batch in a
# file and from then on waits a minute before each batch, so that a signal reaches a scan under way with
# work done, on any machine, and a rerun has little left to do
SLOWED_CLI = """
import sys, time
from pathlib import Path
import entropy_lens.runs.batches as batches
from entropy_lens.cli import main
real, calls = batches.next_token_nll, []
def marked(*args, **kw):
    calls.append(1)
    if len(calls) == 5:
        Path(sys.argv[1]).touch()
    if len(calls) >= 5:
        time.sleep(60)
    return real(*args, **kw)
batches.next_token_nll = marked
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_sigterm_checkpoints_the_scan_releases_the_lock_and_a_rerun_finishes_it_bit_for_bit(
    tiny_dir, tmp_path
):
    from entropy_lens.capture.fused import PathChoices
    from entropy_lens.runs.scan import scan

    out, samples, marker = tmp_path / "t.npz", 24, tmp_path / "fifth-batch"
    argv = [
        "scan",
        str(tiny_dir),
        "--len",
        "48",
        "--samples",
        str(samples),
        "--data",
        DATA,
        "--out",
        str(out),
    ]
    cmd = [sys.executable, "-c", SLOWED_CLI, str(marker), *argv, "--quiet"]
    run = subprocess.Popen(cmd, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: marker.exists() or run.poll() is not None, "the scan's fifth batch")
    assert run.poll() is None, run.communicate()[1][-3000:]
    run.send_signal(signal.SIGTERM)  # as a batch scheduler stops a job
    _, err = run.communicate(timeout=120)
    assert run.returncode == 143, err
    assert _error_lines(err) == ["entropy-lens: terminated (SIGTERM)"]
    with np.load(partial_path(out)) as z:
        done = int(z["samples"])
    assert 4 <= done < samples and _written(tmp_path) == ["fifth-batch", "t.npz.partial.npz"]  # no lock
    rerun = subprocess.run(
        [sys.executable, "-m", "entropy_lens", *argv, "--quiet"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming {out} from its checkpoint: {done} of {samples} samples done" in rerun.stderr
    resumed = ScanResult.load(out)
    config = ScanConfig(model=str(tiny_dir), length=48, samples=samples, data=DATA)
    whole = scan(config, progress=False, choices=PathChoices(replay=resumed.meta["fused_choices"]))
    for name in ARRAYS:
        assert np.array_equal(getattr(resumed, name), getattr(whole, name)), name


# ---- ranks ---------------------------------------------------------------------------------------------


def _ranks(
    tmp_path: Path, commands: list[list[str]], *, timeout: float = 300.0
) -> list[subprocess.CompletedProcess]:
    """Start one process per command as the ranks of one world (as torchrun would, by hand) and wait.
    The ranks meet at this process's store, as torchrun's agent hosts it (TORCHELASTIC_USE_AGENT_STORE):
    it is up before any rank starts and stays up after one has gone, so no rank's start-up races another's
    (a rank that connected before rank 0 hosted the store retried on a back-off longer than rank 0's
    3 s --dist-timeout, on a loaded machine)."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)

    def start(rank: int) -> subprocess.Popen:
        env = _env(
            tmp_path, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), WORLD_SIZE=str(len(commands))
        )
        env |= {"RANK": str(rank), "LOCAL_RANK": str(rank), "TORCHELASTIC_USE_AGENT_STORE": "True"}
        return subprocess.Popen(
            [sys.executable, *commands[rank]],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    runs = [start(rank) for rank in range(len(commands))]
    done = []
    for rank in range(len(commands)):
        out, err = runs[rank].communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(runs[rank].args, runs[rank].returncode, out, err))
    return done


@pytest.mark.slow
def test_ranks_started_with_other_flags_refuse_to_scan_naming_the_flag(tiny_dir, tmp_path):
    out = tmp_path / "b.npz"
    scan = ["-m", "entropy_lens", "scan", str(tiny_dir), "--len", "32", "--samples", "2", "--data", DATA]
    scan += ["--context-parallel", "--quiet", "--out", str(out)]
    runs = _ranks(tmp_path, [[*scan, "--stats", "max_prob"], [*scan, "--stats", "first_mass"]])
    for run in runs:
        assert run.returncode == 2, run.stderr
        assert _error_lines(run.stderr) == [
            (
                "entropy-lens: error: rank 1 was started with other settings than rank 0: --stats ('max_prob' "
                "on rank 0, 'first_mass' on rank 1); relaunch every rank with the same flags (torchrun starts "
                "them so)"
            )
        ]
    assert _written(tmp_path) == []  # no file, no lock


@pytest.mark.slow
def test_a_stalled_rank_is_one_line_on_every_rank_after_the_dist_timeout(tiny_dir, tmp_path):
    out = tmp_path / "s.npz"
    argv = ["scan", str(tiny_dir), "--len", "32", "--samples", "2", "--data", DATA, "--context-parallel"]
    argv += ["--quiet", "--out", str(out), "--dist-timeout", "3"]
    ready = tmp_path / "rank-1-imported"
    # Rank 1 joins the world, then takes 8 s before it scans: rank 0 has given up by then (3 s after it
    # joined). Rank 0 imports beside rank 1 and starts its scan once rank 1 waits in the world, so its
    # --dist-timeout starts counting then, however slowly the machine imports.
    stalled = (
        "import datetime, pathlib, sys, time, torch.distributed as dist; from entropy_lens.cli import main; "
        f"pathlib.Path({str(ready)!r}).touch(); "
        "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=60)); time.sleep(8); "
        f"sys.exit(main({argv!r}))"
    )
    waits = f"""
import pathlib, sys, time
import transformers.models.llama.modeling_llama, entropy_lens.runs.scan
from entropy_lens.cli import main
while not pathlib.Path({str(ready)!r}).exists():
    time.sleep(0.05)
sys.exit(main({argv!r}))
"""
    waiting, late = _ranks(tmp_path, [["-c", waits], ["-c", stalled]])
    assert waiting.returncode == late.returncode == 2, (waiting.stderr, late.stderr)
    (line,) = _error_lines(waiting.stderr)
    assert line.startswith(
        "entropy-lens: error: the comparison of the ranks' settings between the ranks failed: another rank "
        "did not take part within --dist-timeout 3 s"
    )
    (line,) = _error_lines(late.stderr)
    assert line.startswith(
        "entropy-lens: error: the comparison of the ranks' settings between the ranks failed"
    )
    assert "Traceback" not in waiting.stderr + late.stderr
    ready.unlink()  # the test's own marker
    assert _written(tmp_path) == []


@pytest.mark.slow
def test_a_killed_rank_is_one_line_on_the_other(tiny_dir, tmp_path):
    out, marker = tmp_path / "k.npz", tmp_path / "fifth-batch"
    argv = ["scan", str(tiny_dir), "--len", "32", "--samples", "2000", "--data", DATA, "--context-parallel"]
    argv += ["--quiet", "--out", str(out)]
    port, runs = str(_free_port()), []
    for rank, command in enumerate([["-m", "entropy_lens", *argv], ["-c", SLOWED_CLI, str(marker), *argv]]):
        env = _env(tmp_path, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank))
        runs.append(
            subprocess.Popen(
                [sys.executable, *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    _wait_for(lambda: marker.exists() or runs[1].poll() is not None, "rank 1's fifth batch")
    assert runs[1].poll() is None, runs[1].communicate()[1][-3000:]
    runs[1].kill()  # the kernel's OOM killer, a node lost
    _, err = runs[0].communicate(timeout=120)
    runs[1].communicate(timeout=60)
    assert runs[0].returncode == 2, err
    (line,) = _error_lines(err)
    assert re.match(
        r"entropy-lens: error: the all_gather of the attention's keys and values .* another rank stopped",
        line,
    )
    assert "Traceback" not in err and _written(tmp_path) == ["fifth-batch"]  # no file, no lock


# A rank without samples still sums every statistic: tests/runs/test_context_parallel.py's
# test_a_rank_without_samples_still_sums_every_statistic, in that file's torchrun launches of 2 and 4
# processes (one launch's start-up for many cases).
