"""--monitor on the project's own training runs (issue 50): train-tiny and search-heads record the
attention history of their optimiser steps beside their outputs, and change no number of the run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from training_runs import crash_at, weights

import entropy_lens.data as data_module
from entropy_lens.capture import ScaleSession
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor import AttentionMonitor, load_history
from entropy_lens.monitor.settings import MonitorSettings
from entropy_lens.training import TinyRecipe, train_tiny
from entropy_lens.training.head_search import HeadSearchConfig, history_path, search_head_scales
from entropy_lens.training.watch import HISTORY

ENTROPY = MonitorSettings(monitor="entropy")


def micro(text_file, **overrides) -> TinyRecipe:
    fields = {"hidden": 32, "intermediate": 32, "layers": 2, "heads": 2, "kv_heads": 2, "vocab": 300}
    fields |= {"train_len": 16, "batch": 2, "steps": 4, "warmup": 1, "data": str(text_file)}
    return TinyRecipe(**{**fields, **overrides})


def same_weights(a, b) -> bool:
    a, b = weights(a), weights(b)
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def plain(text_file, tmp_path_factory):
    """The micro run without --monitor."""
    return train_tiny(micro(text_file), tmp_path_factory.mktemp("plain") / "m", progress=False)


def test_train_tiny_monitor_records_each_step_and_changes_no_weight(text_file, plain, tmp_path):
    out = train_tiny(micro(text_file), tmp_path / "m", progress=False, monitor=ENTROPY)
    history = load_history(out / HISTORY)
    assert history.steps.tolist() == [1, 2, 3, 4] and history.meta["step_unit"] == "step"
    entropy = history.values["entropy"]
    assert entropy.shape == (4, 2, 2) and np.isfinite(entropy).all() and (entropy > 0).all()
    assert history.rows.tolist() == [2 * 16] * 4  # every query row of the step's batch
    assert same_weights(out, plain)
    every = MonitorSettings(monitor="entropy,max_prob", monitor_every=2)
    other = train_tiny(micro(text_file), tmp_path / "e", progress=False, monitor=every)
    again = load_history(other / HISTORY)
    assert again.steps.tolist() == [2, 4] and again.stats == ("entropy", "max_prob")
    np.testing.assert_array_equal(again.values["entropy"], entropy[[1, 3]])
    assert same_weights(other, plain)


def test_train_tiny_resumed_history_continues_the_interrupted_one(text_file, tmp_path, monkeypatch, capsys):
    whole = load_history(
        train_tiny(micro(text_file), tmp_path / "w", progress=False, monitor=ENTROPY) / HISTORY
    )
    real = data_module.random_windows
    monkeypatch.setattr(data_module, "random_windows", crash_at(3))  # interrupted after step 3
    with pytest.raises(KeyboardInterrupt):
        train_tiny(micro(text_file), tmp_path / "r", progress=False, checkpoint_every=2, monitor=ENTROPY)
    assert load_history(tmp_path / "r.partial" / HISTORY).steps.tolist() == [1, 2, 3]  # saved on interrupt
    monkeypatch.setattr(data_module, "random_windows", real)
    with pytest.raises(EntropyLensError, match="monitored entropy every 1 steps; pass its --monitor"):
        train_tiny(
            micro(text_file), tmp_path / "r", progress=False, monitor=MonitorSettings(monitor="max_prob")
        )
    out = train_tiny(micro(text_file), tmp_path / "r", progress=False, monitor=ENTROPY)
    resumed = load_history(out / HISTORY)
    assert resumed.steps.tolist() == [1, 2, 3, 4]
    np.testing.assert_array_equal(resumed.values["entropy"], whole.values["entropy"])


def test_train_tiny_history_restarts_when_the_interrupted_run_kept_none(
    text_file, tmp_path, monkeypatch, capsys
):
    real = data_module.random_windows
    monkeypatch.setattr(data_module, "random_windows", crash_at(3))
    with pytest.raises(KeyboardInterrupt):
        train_tiny(micro(text_file), tmp_path / "r", progress=False, checkpoint_every=2)
    monkeypatch.setattr(data_module, "random_windows", real)
    out = train_tiny(micro(text_file), tmp_path / "r", progress=True, monitor=ENTROPY)
    assert "kept no attention history; --monitor's history starts at step 4" in capsys.readouterr().out
    assert load_history(out / HISTORY).steps.tolist() == [4]  # the interrupt saved steps 1-3


def test_train_tiny_monitor_refusals(text_file, tmp_path):
    with pytest.raises(
        EntropyLensError,
        match="--monitor entropy,nope: AttentionMonitor cannot record unknown statistic 'nope'",
    ):
        train_tiny(micro(text_file), tmp_path / "m", monitor=MonitorSettings(monitor="entropy,nope"))
    assert not list(tmp_path.iterdir())  # refused before any work


@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_train_tiny_monitor_changes_no_weight_of_rope_or_alibi(text_file, tmp_path, kind):
    """RoPE as NoPE (above); BLOOM's monitored steps keep its layers' own attention code for the output
    ("own-then-entropy"), not sdpa's float mask (which changed the weights in their last bits): the
    weights are bit-identical with and without the monitor."""
    recipe = micro(text_file, kind=kind)
    plain = train_tiny(recipe, tmp_path / "plain", progress=False)
    watched = train_tiny(
        recipe, tmp_path / "m", progress=False, monitor=MonitorSettings(monitor="entropy,max_logit")
    )
    history = load_history(watched / HISTORY)
    assert history.steps.tolist() == [1, 2, 3, 4] and np.isfinite(history.values["max_logit"]).all()
    assert same_weights(watched, plain)


def test_train_tiny_cli_monitor(text_file, plain, tmp_path, capsys):
    args = ["train-tiny", "--kind", "nope", "--quiet", "--out", str(tmp_path / "m")]
    for name, value in dataclasses.asdict(micro(text_file)).items():
        if name != "kind" and value != getattr(TinyRecipe(), name):
            args += [f"--{name.replace('_', '-')}", str(value)]
    assert main([*args, "--monitor", "entropy", "--monitor-every", "3"]) == 0
    assert f"wrote {tmp_path / 'm'}/attention-history.npz" in capsys.readouterr().out
    assert load_history(tmp_path / "m" / HISTORY).steps.tolist() == [3]
    assert same_weights(tmp_path / "m", plain)


SEARCH = HeadSearchConfig(model="tiny-nope", length=32, steps=3, batch=2, init=1.2, data="stdlib")


@pytest.mark.slow  # two searches, ~30 s on 2 cores
def test_search_heads_monitor_records_through_its_own_session(tmp_path):
    """The search's trainable λ(h) stay in force while it records (the monitor's own installation would
    replace them), and the scales found are bit-identical to an unmonitored search's."""
    plain = search_head_scales(SEARCH, progress=False)
    watched = search_head_scales(SEARCH, progress=False, monitor=MonitorSettings(monitor="entropy"))
    np.testing.assert_array_equal(watched.scales, plain.scales)
    assert [r["loss"] for r in watched.log] == [r["loss"] for r in plain.log]
    history = watched.history
    assert history.steps.tolist() == [1, 2, 3] and history.forwards.tolist() == [2, 2, 2]  # micro-batches
    assert history.values["entropy"].shape == (
        3,
        4,
        6,
    )  # tiny-nope: 4 layers of 6 heads and np.isfinite(history.values["entropy"]).all()


@pytest.mark.slow
def test_search_heads_cli_writes_the_history_beside_out(tmp_path, capsys):
    out = tmp_path / "hs.safetensors"
    args = ["search-heads", "tiny-nope", "--len", "32", "--steps", "2", "--batch", "2", "--data", "stdlib"]
    assert main([*args, "--out", str(out), "--quiet", "--monitor", "entropy,max_prob"]) == 0
    assert str(tmp_path / "hs.history.npz") in capsys.readouterr().out
    history = load_history(history_path(out))
    assert history.steps.tolist() == [1, 2] and history.stats == ("entropy", "max_prob")
    assert (
        main([*args, "--out", str(out), "--quiet", "--force"]) == 0
    )  # replaced as --out is: no stale history
    assert not history_path(out).exists()


def test_recording_needs_a_session_that_records_the_monitors_stats():
    from entropy_lens.models import load_model

    model = load_model("tiny-nope").model
    mon = AttentionMonitor(model, stats=("entropy", "max_prob"))
    scaling = ScaleSession(model, stats=("entropy",))
    refused = pytest.raises(EntropyLensError, match=r"does not record max_prob; make it with ScaleSession")
    with refused, mon.recording(scaling):
        pass


@pytest.mark.slow  # two runs at L = 192: ~10 s
def test_train_tiny_init_from_history_starts_at_the_passkey_phase(text_file, tmp_path, capsys):
    recipe = micro(text_file, train_len=192, steps=2, passkey_share=0.5, passkey_steps=2)  # passkeys need 180
    first = train_tiny(recipe.pretraining(), tmp_path / "pre", progress=False)
    out = train_tiny(recipe, tmp_path / "pk", init_from=first, progress=True, monitor=ENTROPY)
    assert "--monitor's history starts at step 3 (--init-from)" in capsys.readouterr().out
    assert load_history(out / HISTORY).steps.tolist() == [3, 4]


# -- issue 57: refused before step 1; what a resume keeps, refuses and says (training/resumable.py) ---------
SINKS = MonitorSettings(monitor="entropy,sink_mass", monitor_every=1000)


@pytest.mark.slow
def test_train_tiny_and_search_heads_refuse_a_statistic_that_cannot_apply_before_step_1(text_file, tmp_path):
    """sink_mass without sinks, every 1000: refused at start-up, not after 999 steps (nor, with fewer
    steps, never), so no checkpoint holds the flag."""
    with pytest.raises(EntropyLensError, match="does not report sink_mass in every layer"):
        train_tiny(micro(text_file), tmp_path / "m", progress=False, monitor=SINKS)
    assert not list(tmp_path.iterdir())  # refused before any work
    with pytest.raises(EntropyLensError, match="does not report sink_mass in every layer"):
        search_head_scales(dataclasses.replace(SEARCH, steps=1), progress=False, monitor=SINKS)


def interrupted(text_file, out, monitor, monkeypatch):
    """train-tiny of `micro` with `monitor`, interrupted (Ctrl-C) after step 3: its checkpoint kept."""
    real = data_module.random_windows
    monkeypatch.setattr(data_module, "random_windows", crash_at(3))
    with pytest.raises(KeyboardInterrupt):
        train_tiny(micro(text_file), out, progress=False, checkpoint_every=2, monitor=monitor)
    monkeypatch.setattr(data_module, "random_windows", real)
    return out.with_name(out.name + ".partial") / HISTORY


def test_a_resume_takes_any_monitor_where_the_interrupted_run_recorded_nothing(
    text_file, tmp_path, monkeypatch
):
    never = MonitorSettings(monitor="entropy,max_prob", monitor_every=1000)
    assert not len(load_history(interrupted(text_file, tmp_path / "r", never, monkeypatch)))
    out = train_tiny(micro(text_file), tmp_path / "r", progress=False, monitor=ENTROPY)
    resumed = load_history(out / HISTORY)
    assert resumed.steps.tolist() == [4] and resumed.stats == ("entropy",)


def test_a_resume_keeps_the_recorded_statistics_as_a_set(text_file, tmp_path, monkeypatch):
    interrupted(text_file, tmp_path / "r", MonitorSettings(monitor="entropy,max_prob"), monkeypatch)
    dropped = (
        "monitored entropy,max_prob every 1 steps; pass its --monitor .*records of steps 1-3 would be lost"
    )
    with pytest.raises(EntropyLensError, match=dropped):
        train_tiny(
            micro(text_file), tmp_path / "r", progress=False, monitor=MonitorSettings(monitor="max_prob")
        )
    reordered = MonitorSettings(monitor="max_prob,entropy")
    out = train_tiny(micro(text_file), tmp_path / "r", progress=False, monitor=reordered)
    resumed = load_history(out / HISTORY)
    assert resumed.steps.tolist() == [1, 2, 3, 4] and set(resumed.stats) == {"entropy", "max_prob"}


def test_train_tiny_monitors_received_and_resumes_it_without_changing_a_weight(
    text_file, plain, tmp_path, monkeypatch
):
    """--monitor received,entropy: received's two summaries per step, every weight the unwatched run's;
    a resume names the interrupted run's --monitor words (received, not its summaries) and continues."""
    interrupted(text_file, tmp_path / "r", MonitorSettings(monitor="received,entropy"), monkeypatch)
    with pytest.raises(
        EntropyLensError, match="monitored received,entropy every 1 steps; pass its --monitor"
    ):
        train_tiny(micro(text_file), tmp_path / "r", progress=False, monitor=ENTROPY)
    out = train_tiny(
        micro(text_file), tmp_path / "r", progress=False, monitor=MonitorSettings("entropy,received")
    )
    history = load_history(out / HISTORY)
    assert history.steps.tolist() == [1, 2, 3, 4] and history.sequences.tolist() == [2] * 4
    assert history.stats == ("entropy", "received_first", "received_max_later")  # the resumed run's order
    shares = np.stack([history.values["received_first"], history.values["received_max_later"]])
    assert np.isfinite(shares).all() and (shares > 0).all() and (shares <= 1).all()
    assert same_weights(out, plain)


def test_a_resume_refuses_an_unreadable_or_foreign_history_with_the_clis_fix(
    text_file, tmp_path, monkeypatch
):
    """A truncated history: the CLI's fix (delete it, or --force), not mon.save. One of other head counts:
    refused when it is read, not a ValueError at the next checkpoint or the end."""
    path = interrupted(text_file, tmp_path / "r", ENTROPY, monkeypatch)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(EntropyLensError, match=f"delete {path} to resume .* or pass --force") as err:
        train_tiny(micro(text_file), tmp_path / "r", progress=False, monitor=ENTROPY)
    assert "mon.save" not in str(err.value) and "\n" not in str(err.value)
    path.write_bytes(whole)
    prior = load_history(path)
    values = {"entropy": np.ones((len(prior), 2, 3), np.float32)}
    dataclasses.replace(prior, values=values, meta={**prior.meta, "n_heads": 3}).save(path)
    with pytest.raises(EntropyLensError, match="2 layers × 3 heads, not this model's 2 × 2; delete"):
        train_tiny(micro(text_file), tmp_path / "r", progress=False, monitor=ENTROPY)


def test_a_lost_history_is_said_on_stderr_under_quiet(text_file, tmp_path, monkeypatch, capsys):
    """A deleted history, and a resume without --monitor: the records of steps 1-3 are said lost, with
    progress off (--quiet), on stderr."""
    interrupted(text_file, tmp_path / "r", ENTROPY, monkeypatch).unlink()
    out = train_tiny(micro(text_file), tmp_path / "r", progress=False, monitor=ENTROPY)
    err = capsys.readouterr().err
    assert "history" in err and "is missing, and with it the records of steps 1-3 (3); --monitor's" in err
    assert load_history(out / HISTORY).steps.tolist() == [4]
    interrupted(text_file, tmp_path / "s", ENTROPY, monkeypatch)
    train_tiny(micro(text_file), tmp_path / "s", progress=False)
    assert (
        "resumed without --monitor, so the interrupted run's attention history (records of steps 1-3 (3))"
        in (capsys.readouterr().err)
    )
