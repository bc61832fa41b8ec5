"""Never lose finished work: outputs checked before any work, one writer per output, interrupted scans
resumed exactly, damaged files repaired by the command that made them. Each case as a user meets it:
real processes, real signals, real files. A command that meets another process (a run it interrupts,
kills or finds holding a lock), or that must start as a fresh process (a plain rerun resuming with the
interrupted run's threads), is a process of its own; the other commands run in this process through
`entropy_lens.cli.main` (`here`), the same code without the seconds of torch's import in a new process."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, read_sweep_index
from entropy_lens.runs.output import partial_path

DATA = "austen:northanger"
ARRAYS = ("entropy", "entropy_sq", "loss", "loss_sq", "count")
UNWRITABLE = Path("/sys/entropy-lens-test")  # sysfs: no file can be made there, not even by root


def _env(tmp_path) -> dict:
    return {**os.environ, "ENTROPY_LENS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}


def _cli(args, tmp_path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "entropy_lens", *args],
        check=False,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=300,
        **kw,
    )


@pytest.fixture
def here(tmp_path, capsys, monkeypatch):
    """run(args) -> the CLI command `entropy-lens ARGS` run in this process (entropy_lens.cli.main), with
    the environment of `_cli`'s processes, as a finished process: returncode, stdout, stderr."""
    import torch

    monkeypatch.setenv("ENTROPY_LENS_CACHE", str(tmp_path / "cache"))

    def run(args) -> subprocess.CompletedProcess:
        capsys.readouterr()
        threads = torch.get_num_threads()
        try:
            code = main(list(args))
        finally:
            torch.set_num_threads(threads)  # a --threads of the command stays in the command
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["entropy-lens", *args], code, out, err)

    return run


def _start(args, tmp_path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "entropy_lens", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    """argv with `flag`'s value replaced."""
    i = argv.index(flag)
    return [*argv[: i + 1], value, *argv[i + 2 :]]


def _wait_for(condition, what: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _one_error_line(err: str, pattern: str) -> None:
    lines = [line for line in err.strip().splitlines() if not line.startswith("entropy-lens: warning")]
    assert len(lines) == 1 and lines[0].startswith("entropy-lens: error:"), err
    assert re.search(pattern, lines[0]), lines[0]


def _samples_done(partial: Path) -> int:
    try:
        with np.load(partial) as z:
            return int(z["samples"])
    except Exception:  # noqa: BLE001 - not written yet, or being replaced
        return 0


# ---- 1. every output location is checked before any model loads -----------------------------------


def _bad_outputs(tmp_path: Path) -> dict:
    """name -> (argv, pattern). The model does not exist: an error about it would mean the output
    check came after the model's loading."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    adir = tmp_path / "adir"
    adir.mkdir()
    m = str(tmp_path / "no-such-model")
    cases = {
        "scan under a file": (["scan", m, "--len", "16", "--out", str(afile / "x.npz")], "afile is a file"),
        "scan into a folder": (["scan", m, "--len", "16", "--out", str(adir)], "is a folder; pass a file"),
        "scan into a folder, --force": (
            ["scan", m, "--len", "16", "--out", str(adir), "--force"],
            "is a folder; pass a file",
        ),
        "sweep into a file": (
            ["sweep", m, "--len", "16", "--scales", "1,2", "--out", str(afile)],
            "is a file",
        ),
        "sweep under a file": (
            ["sweep", m, "--len", "16", "--scales", "1,2", "--out", str(afile / "d")],
            "afile is a file",
        ),
        "ppl into a folder": (["ppl", m, "--lens", "32", "--stride", "8", "--out", str(adir)], "is a folder"),
        "search-heads under a file": (
            ["search-heads", m, "--len", "16", "--out", str(afile / "h.safetensors")],
            "afile is a file",
        ),
        "figures into a file": (["figures", "--nope-ckpt", m, "--out", str(afile)], "is a file"),
        "figures cache a file": (
            ["figures", "--nope-ckpt", m, "--out", str(adir), "--cache", str(afile)],
            "--cache .*is a file",
        ),
        "train-tiny under a file": (
            ["train-tiny", "--kind", "nope", "--out", str(afile / "m")],
            "afile is a file",
        ),
    }
    if not os.access("/sys", os.W_OK) or _cannot_create_in("/sys"):
        cases |= {
            "scan unwritable": (
                ["scan", m, "--len", "16", "--out", str(UNWRITABLE / "x.npz")],
                "cannot write",
            ),
            "sweep unwritable": (
                ["sweep", m, "--len", "16", "--scales", "1", "--out", str(UNWRITABLE)],
                "cannot write",
            ),
            "ppl unwritable": (
                ["ppl", m, "--lens", "32", "--stride", "8", "--out", str(UNWRITABLE / "p.json")],
                "cannot write",
            ),
        }
    return cases


def _cannot_create_in(folder: str) -> bool:
    try:
        Path(folder, ".entropy-lens-probe").touch()
    except OSError:
        return True
    Path(folder, ".entropy-lens-probe").unlink()
    return False


def test_bad_output_locations_are_refused_before_any_model_loads(tmp_path, capsys):
    cases = _bad_outputs(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for name, (argv, pattern) in cases.items():
        code = main([*argv, "--quiet"])
        err = capsys.readouterr().err
        assert code == 2, f"{name}: exit {code}: {err}"
        _one_error_line(err, pattern)
        assert "no-such-model" not in err, name  # the output was checked first
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing was written
    assert "scan unwritable" in cases or sys.platform != "linux"


# ---- 2. one writer per output ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_run_on_the_same_output_is_refused_and_a_killed_runs_lock_is_taken_over(
    tiny_dir, tmp_path, here
):
    out = tmp_path / "r.npz"
    argv = ["scan", str(tiny_dir), "--len", "48", "--samples", "400", "--data", DATA, "--out", str(out)]
    first = _start([*argv, "--quiet"], tmp_path)
    lock = out.with_name(out.name + ".lock")
    _wait_for(lambda: lock.exists() and lock.read_text(), "the first run's lock")
    second = here([*argv, "--quiet", "--force"])
    assert second.returncode == 2
    _one_error_line(second.stderr, rf"being written by another run \(pid {first.pid} on ")
    first.kill()  # kill -9: no clean-up at all, the lock file stays
    first.wait()
    assert lock.exists() and not out.exists()
    third = here([*_with(argv, "--samples", "4"), "--quiet", "--force"])
    assert third.returncode == 0, third.stderr
    assert (
        f"taking over the lock of an earlier run that is no longer running (pid {first.pid}" in third.stderr
    )
    assert ScanResult.load(out).meta["samples"] == 4 and not lock.exists()


@pytest.mark.slow
def test_two_sweeps_into_one_folder(tiny_dir, tmp_path, here):
    folder = tmp_path / "sw"
    argv = ["sweep", str(tiny_dir), "--len", "48", "--samples", "300", "--data", DATA, "--out", str(folder)]
    first = _start([*argv, "--scales", "1,1.5", "--quiet"], tmp_path)
    _wait_for(lambda: (folder / ".entropy-lens.lock").exists(), "the first sweep's lock")
    second = here([*argv, "--scales", "1,1.5", "--quiet", "--resume"])
    assert second.returncode == 2
    _one_error_line(second.stderr, rf"{folder} is being written by another run \(pid {first.pid}")
    first.send_signal(signal.SIGINT)
    first.wait(timeout=60)


# ---- 3, 4. an interrupted scan resumes on a plain rerun, exactly ---------------------------------------


SAMPLES = 24  # the interrupted scan's


@pytest.fixture(scope="module")
def interrupted(tiny_dir, tmp_path_factory) -> tuple[Path, str]:
    """(the checkpoint, the stderr of its process) of one scan of SAMPLES samples after Ctrl-C, sent as a
    user presses it once at least 5 samples are checkpointed (it checkpoints after every batch, of one
    sample): made once for the tests that resume it, rerun it otherwise or discard it, each on a copy
    (`_interrupted_scan`). From its sixth batch on, each batch first waits a minute, so the Ctrl-C finds
    the scan under way however slowly this process notices the checkpoint, and the scans that finish it
    have few samples left to do."""
    folder = tmp_path_factory.mktemp("interrupted")
    out = folder / "r.npz"
    code = f"""
import time
import entropy_lens.runs.batches as batches
from entropy_lens.runs.scan import ScanConfig, scan
real, calls = batches.next_token_nll, []
def slowed(*args, **kw):
    calls.append(1)
    if len(calls) > 5:
        time.sleep(60)
    return real(*args, **kw)
batches.next_token_nll = slowed
config = ScanConfig(model={str(tiny_dir)!r}, length=48, samples={SAMPLES}, data={DATA!r})
scan(config, out={str(out)!r}, progress=False, checkpoint_every_s=0)
"""
    run = subprocess.Popen([sys.executable, "-c", code], env=_env(folder), stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: _samples_done(partial_path(out)) >= 5, "a checkpoint of 5 samples")
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode != 0 and not out.exists()  # only the checkpoint, never a half result
    return partial_path(out), err


def _interrupted_scan(tiny_dir, tmp_path, interrupted) -> tuple[list[str], Path, str]:
    """(the CLI argv of the interrupted scan, its --out, the stderr of its process), its checkpoint copied
    to that --out's (a checkpoint names no path: it is the scan's wherever it lies)."""
    import shutil

    partial, err = interrupted
    out = tmp_path / "r.npz"
    shutil.copy(partial, partial_path(out))
    argv = [
        "scan",
        str(tiny_dir),
        "--len",
        "48",
        "--samples",
        str(SAMPLES),
        "--data",
        DATA,
        "--out",
        str(out),
    ]
    return argv, out, err


# the tests of the interrupted scan run on the worker that interrupts it (the fixture `interrupted`)
@pytest.mark.slow
@pytest.mark.xdist_group("interrupted-scan")
def test_interrupted_scan_resumes_on_a_plain_rerun_bit_for_bit(tiny_dir, tmp_path, interrupted):
    from entropy_lens.capture.fused import PathChoices
    from entropy_lens.runs.scan import ScanConfig, scan

    argv, out, err = _interrupted_scan(tiny_dir, tmp_path, interrupted)
    partial = partial_path(out)
    done = _samples_done(partial)
    assert "KeyboardInterrupt" in err and 5 <= done < SAMPLES
    rerun = _cli([*argv, "--quiet"], tmp_path)  # no --resume: a plain rerun continues it
    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming {out} from its checkpoint: {done} of {SAMPLES} samples done" in rerun.stderr
    resumed = ScanResult.load(out)
    assert not partial.exists() and resumed.meta["fused_choices"]  # "auto" chose, and the meta says what
    # the same scan uninterrupted, taking the same paths ("auto" replays the recorded choice)
    config = ScanConfig(model=str(tiny_dir), length=48, samples=SAMPLES, data=DATA)
    whole = scan(config, progress=False, choices=PathChoices(replay=resumed.meta["fused_choices"]))
    for name in ARRAYS:
        assert np.array_equal(getattr(resumed, name), getattr(whole, name)), name


@pytest.mark.slow
@pytest.mark.xdist_group("interrupted-scan")
def test_force_discards_a_checkpoint_and_says_so_and_other_flags_are_refused(
    tiny_dir, tmp_path, interrupted, here
):
    argv, out, _ = _interrupted_scan(tiny_dir, tmp_path, interrupted)
    other = here([*argv[:4], "--seed", "1", *argv[4:], "--quiet"])
    assert other.returncode == 2
    _one_error_line(other.stderr, "checkpoint of an unfinished scan with other flags.*--force")
    forced = here([*_with(argv, "--samples", "3"), "--quiet", "--force"])
    assert forced.returncode == 0, forced.stderr
    assert f"discarded the checkpoint {partial_path(out)}" in forced.stderr
    assert ScanResult.load(out).meta["samples"] == 3


@pytest.mark.slow
@pytest.mark.xdist_group("interrupted-scan")
def test_resuming_with_another_thread_count_names_the_count_that_matches(
    tiny_dir, tmp_path, interrupted, here
):
    argv, out, _ = _interrupted_scan(tiny_dir, tmp_path, interrupted)
    with np.load(partial_path(out)) as z:
        threads = json.loads(str(z["decided"]))["threads"]
    other = 1 if threads > 1 else 2
    rerun = here([*argv, "--threads", str(other), "--quiet"])
    assert rerun.returncode == 0, rerun.stderr
    assert f"ran with {threads} CPU threads, this process has {other}" in rerun.stderr
    assert f"pass --threads {threads} to resume it exactly" in rerun.stderr


# ---- the end of a run: the location fails after the work is done --------------------------------------


@pytest.mark.slow
def test_a_folder_that_vanishes_during_the_scan_loses_nothing(tiny_dir, tmp_path):
    folder = tmp_path / "results"
    out = folder / "r.npz"
    argv = ["scan", str(tiny_dir), "--len", "48", "--samples", "200", "--data", DATA, "--out", str(out)]
    run = _start([*argv, "--quiet"], tmp_path)
    _wait_for(lambda: out.with_name("r.npz.lock").exists(), "the lock")
    import shutil

    shutil.rmtree(folder)
    folder.write_text("someone put a file here")  # neither the result nor its checkpoint can go there
    _, err = run.communicate(timeout=300)
    assert run.returncode == 2
    _one_error_line(err, "could not write .*the finished scan is saved in .* instead: move it with `mv ")
    saved = Path(re.search(r"saved in (\S+) instead", err).group(1))
    result = ScanResult.load(saved)
    assert saved.is_relative_to(tmp_path / "cache" / "rescued") and (result.count == 200).all()


@pytest.mark.slow
def test_an_output_that_cannot_be_replaced_keeps_the_scan_in_its_checkpoint(tiny_dir, tmp_path, here):
    out = tmp_path / "r.npz"
    argv = ["scan", str(tiny_dir), "--len", "48", "--samples", "200", "--data", DATA, "--out", str(out)]
    run = _start([*argv, "--quiet"], tmp_path)
    _wait_for(lambda: out.with_name("r.npz.lock").exists(), "the lock")
    (out / "in-the-way").mkdir(parents=True)  # a non-empty folder where the file goes: no os.replace
    _, err = run.communicate(timeout=300)
    assert run.returncode == 2
    _one_error_line(err, "finished scan is kept in its checkpoint .*rerun the same command")
    import shutil

    shutil.rmtree(out)
    again = here([*argv, "--quiet"])  # the suggested fix
    assert again.returncode == 0, again.stderr
    assert "200 of 200 samples done" in again.stderr and (ScanResult.load(out).count == 200).all()


# ---- 5, 6. damaged files are repaired by the command that made them -------------------------------------


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.slow
def test_a_damaged_sweep_is_repaired_by_the_command_the_error_names(tiny_dir, tmp_path, here):
    folder = tmp_path / "sw"
    argv = ["sweep", str(tiny_dir), "--len", "48", "--samples", "2", "--data", DATA, "--scales", "1,1.5,2"]
    assert here([*argv, "--out", str(folder), "--quiet"]).returncode == 0
    before = {p.name: ScanResult.load(p).loss for p in folder.glob("s*.npz")}
    _truncate(folder / "s1.5.npz")
    fit = here(["fit", str(folder)])
    assert fit.returncode == 2
    suggested = re.search(r"`(entropy-lens sweep [^`]+)`", fit.stderr).group(1)
    fixed = here([*shlex.split(suggested)[1:], "--quiet"])  # the command the error names
    assert fixed.returncode == 0, fixed.stderr
    assert "s1.5.npz is not a readable results file" in fixed.stderr
    index = read_sweep_index(folder)
    assert index["scales"] == [1.0, 1.5, 2.0] and index["complete"]  # the intact later scale kept
    for name, loss in before.items():
        assert np.array_equal(ScanResult.load(folder / name).loss, loss), name
    # a damaged index: its message's fix (rerun the sweep with --resume) rebuilds it from the files
    (folder / "sweep.json").write_text('{"kind": "entropy_lens.sw')
    fit = here(["fit", str(folder)])
    assert fit.returncode == 2 and "rerun the sweep with --resume" in fit.stderr
    rebuilt = here([*argv, "--out", str(folder), "--resume", "--quiet"])
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "sweep.json was unreadable: rebuilt from the 3 readable scale files" in rebuilt.stderr
    assert read_sweep_index(folder)["scales"] == [1.0, 1.5, 2.0]
    fit = here(["fit", str(folder), "--train-len", "16"])
    assert fit.returncode == 0, fit.stderr


@pytest.mark.slow
def test_a_damaged_results_file_is_a_clear_error_and_scan_resume_makes_it_again(tiny_dir, tmp_path, here):
    out = tmp_path / "r.npz"
    argv = ["scan", str(tiny_dir), "--len", "48", "--samples", "2", "--data", DATA, "--out", str(out)]
    assert here([*argv, "--quiet"]).returncode == 0
    good = ScanResult.load(out)
    with np.load(out) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(out, **{**arrays, "meta": np.array("{not json")})
    with pytest.raises(EntropyLensError, match="not a readable results file.*--resume"):
        ScanResult.load(out)
    again = here([*argv, "--resume", "--quiet"])
    assert again.returncode == 0, again.stderr
    assert "scanning it again" in again.stderr and np.array_equal(ScanResult.load(out).loss, good.loss)


def test_a_damaged_figures_cache_entry_is_computed_again(tiny_dir, tmp_path):
    from entropy_lens.figures.pipeline import FiguresConfig, Runs
    from entropy_lens.runs.scan import ScanConfig

    config = ScanConfig(model=str(tiny_dir), length=48, samples=2, data=DATA)
    cache = tmp_path / "runs"
    figures = FiguresConfig.build({}, source="test")
    first = Runs(figures, cache, progress=False).cached_scan(config)
    (entry,) = cache.glob("scan-*.npz")
    _truncate(entry)
    with pytest.raises(
        EntropyLensError, match="unreadable in the cache: .*not a readable.*without --cached-only"
    ):
        Runs(figures, cache, progress=False, cached_only=True).cached_scan(config)
    again = Runs(figures, cache, progress=False).cached_scan(config)  # what `entropy-lens figures` runs
    assert np.array_equal(again.loss, first.loss) and np.array_equal(ScanResult.load(entry).loss, first.loss)


# ---- 7. smaller ----------------------------------------------------------------------------------


def test_threads_above_the_cores_warn_once(tmp_path):
    # in a process of its own: more threads set here would slow every later test of this process
    n = len(os.sched_getaffinity(0)) + 1  # above the cores, below the ceiling (cli/test_input_bounds.py)
    run = _cli(["scan", str(tmp_path / "nothing"), "--len", "16", "--threads", str(n), "--quiet"], tmp_path)
    assert run.returncode == 2 and run.stderr.count(f"warning: --threads {n} is more than the") == 1


def test_head_scales_follow_the_rules_of_scale():
    from entropy_lens.models.scales import validate_head_scales

    with pytest.raises(EntropyLensError, match="is 0 .*must be positive, as --scale"):
        validate_head_scales([[1.0, 0.0]], 1, 2, source="test")


def test_config_errors_name_cli_flags(tmp_path):
    from entropy_lens.models import declared_train_len

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(EntropyLensError, match="--trust-remote-code"):
        declared_train_len(str(folder))


def test_save_or_rescue_saves_elsewhere_and_says_where(tmp_path):
    from entropy_lens.results import atomic_write_text
    from entropy_lens.runs.output import save_or_rescue

    blocked = tmp_path / "afile"
    blocked.write_text("x")  # a file where the output's folder should be, as ppl and search-heads meet it
    with pytest.raises(
        EntropyLensError, match=r"the finished table is saved in (\S+) instead: move it"
    ) as err:
        save_or_rescue(blocked / "ppl.json", lambda p: atomic_write_text(p, "{}\n"), what="table")
    saved = Path(re.search(r"saved in (\S+) instead", str(err.value)).group(1))
    assert saved.read_text() == "{}\n" and saved.is_relative_to(Path(os.environ["ENTROPY_LENS_CACHE"]))


def test_a_damaged_passkey_cache_entry_is_named_and_run_again(tiny_dir, tmp_path):
    """A cached passkey record whose cells are damaged (here an accuracy that is no number) is not
    used: with --cached-only it is named in one line, otherwise the run is made again."""
    from entropy_lens.figures.pipeline import FiguresConfig, Runs

    figures = FiguresConfig.build({"passkey_depths": 1, "passkey_keys": 1}, source="test")
    cache = tmp_path / "runs"
    first = Runs(figures, cache, progress=False).passkey(str(tiny_dir), [256])
    (entry,) = cache.glob("passkey-*.json")
    record = json.loads(entry.read_text())
    record["results"][0]["accuracy"] = "high"
    entry.write_text(json.dumps(record))
    with pytest.raises(EntropyLensError, match="unreadable in the cache: .*not a passkey record .*accuracy"):
        Runs(figures, cache, progress=False, cached_only=True).passkey(str(tiny_dir), [256])
    again = Runs(figures, cache, progress=False).passkey(str(tiny_dir), [256])
    timeless = [
        [{k: v for k, v in cell.items() if k != "wall_s"} for cell in r["results"]] for r in (first, again)
    ]
    assert timeless[0] == timeless[1] and again["results"][0]["accuracy"] != "high"
