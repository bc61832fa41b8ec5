"""AttentionMonitor(stats=(..., "received")) (issue 59): per layer and head, the first real key's share of
the attention (received_first: a sink forming) and the largest share any later key receives
(received_max_later: a heavy hitter), equal to what the model's own eager attention gives, on training
steps whose gradients stay exactly what they are without it; the other key statistics refused when the
monitor is made; the scalars logged by the Trainer callback; the history's file version 3."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from architectures import eager_probabilities
from tiny import make_tiny_model
from train_cases import step_grads

from entropy_lens.capture import ScaleSession
from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor import AttentionMonitor, AttentionThresholdWarning, load_history
from entropy_lens.monitor.settings import (
    MonitorSettings,
    check_monitor,
    monitored,
    session_stats,
    summaries,
)
from entropy_lens.statistics import ranked_rows

STATS = ("entropy", "received")
SUMMARIES = ("entropy", "received_first", "received_max_later")


def batch(padding: str, B: int = 3, T: int = 20, seed: int = 0):
    """(ids, mask (B, T) long): "none" unpadded; "left": rows 1 and 2 (where B holds them) left-padded by
    4 and 7; "mixed": row 1 left-padded by 4, row 2 right-padded by 6."""
    ids = torch.randint(2, 300, (B, T), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(B, T, dtype=torch.long)
    if padding != "none":
        mask[1:2, :4] = 0
        if padding == "left":
            mask[2:3, :7] = 0
        else:
            mask[2:3, T - 6 :] = 0
    return ids, mask


def eager_summaries(model, ids, mask):
    """(received_first, received_max_later), each (layers, heads) float64, from the model's eager
    probabilities, batch row by batch row: the attention the first real key receives from the real query
    rows over their number (the mean over batch rows), and the largest mean share Σ_i p_ij / n_j of a
    later key, n_j the real rows at or after the real key j, among the keys with n_j >= ranked_rows
    (statistics: a mean over a few rows is noise; the max over batch rows)."""
    _, probs = eager_probabilities(model, ids, mask)
    real = mask.bool()
    first_share, later_share = [], []
    for p in probs:  # (B, H, T, S)
        per_row_first, per_row_later = [], []
        for b in range(p.shape[0]):
            rows = real[b].nonzero().flatten()
            first = int(rows[0])
            received = p[b][:, rows].sum(1)  # (H, S)
            per_row_first.append(received[:, first] / len(rows))
            n = torch.tensor([int((rows >= j).sum()) if real[b, j] else 0 for j in range(p.shape[-1])])
            mean = torch.where(n > 0, received / n.clamp_min(1), 0.0)
            seen = n >= ranked_rows(len(rows))  # the keys enough rows see: a mean over few is noise
            per_row_later.append(torch.where(seen, mean, -torch.inf)[:, first + 1 :].amax(1))
        first_share.append(torch.stack(per_row_first).mean(0))
        later_share.append(torch.stack(per_row_later).amax(0))
    return torch.stack(first_share).numpy(), torch.stack(later_share).numpy()


@pytest.mark.parametrize("fused", ["auto", "off"])
@pytest.mark.parametrize("padding", ["none", "left", "mixed"])
def test_the_two_summaries_equal_eager_attentions_on_a_training_step(padding, fused):
    """A training step (grad on: its route gives no log-sum-exp, received.py computes it), GQA."""
    model = make_tiny_model(n_heads=4, n_kv_heads=2).train()
    ids, mask = batch(padding)
    with AttentionMonitor(model, stats=STATS, fused=fused) as mon:
        model(ids, attention_mask=mask, labels=ids).loss.backward()
    assert mon.summaries == SUMMARIES and mon.paths  # a training route ran
    got = mon.latest()
    first, later = eager_summaries(model, ids, mask)
    assert set(got) == set(SUMMARIES) and got["received_first"].shape == (2, 4)
    np.testing.assert_allclose(got["received_first"], first, atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(got["received_max_later"], later, atol=2e-6, rtol=1e-5)
    assert np.ptp(first) > 0.03 and np.ptp(later) > 0.03, "alike heads: the case would not test much"
    assert mon.history.sequences.tolist() == [3] and mon.history.rows.tolist() == [int(mask.sum())]


def test_a_forward_without_gradients_and_without_a_mask():
    """No grad (the row pass's log-sum-exp feeds the column pass) and no attention_mask at all."""
    model = make_tiny_model(n_heads=4, n_kv_heads=4)
    ids, mask = batch("none", B=2)
    with torch.no_grad(), AttentionMonitor(model, stats=("received",)) as mon:
        model(ids)
    first, later = eager_summaries(model, ids, mask)
    assert mon.summaries == ("received_first", "received_max_later")
    np.testing.assert_allclose(mon.latest()["received_first"], first, atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(mon.latest()["received_max_later"], later, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("fused", ["auto", "off"])
def test_received_leaves_a_training_steps_gradients_exactly_as_without_it(fused):
    model = make_tiny_model(n_heads=4, n_kv_heads=2).train()
    ids, mask = batch("mixed")

    def grads(stats):
        mon = AttentionMonitor(model, stats=stats, fused=fused)
        return step_grads(model, ids, mask, context=mon), mon

    (without, plain_mon), (with_keys, keys_mon) = grads(("entropy",)), grads(STATS)
    assert plain_mon.paths == keys_mon.paths and keys_mon.recorded == 1
    for a, b in zip(without, with_keys, strict=True):
        assert torch.equal(a, b)
    if fused == "off":  # sdpa's own output and backward: the unmonitored step's, bit for bit
        for a, b in zip(step_grads(model, ids, mask), with_keys, strict=True):
            assert torch.equal(a, b)


def test_micro_batches_merge_over_their_batch_rows():
    """Two forwards of one step: received_first is the mean over all their batch rows (weighted by
    each forward's), received_max_later the larger; sequences count the batch rows."""
    model = make_tiny_model()
    (a, ma), (b, mb) = batch("mixed", seed=1), batch("left", B=2, seed=2)
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as mon:
        mon.step = 1
        model(a, attention_mask=ma)
        model(b, attention_mask=mb)
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as each:
        model(a, attention_mask=ma)
        model(b, attention_mask=mb)
    merged, parts = mon.history, each.history
    assert merged.sequences.tolist() == [5] and parts.sequences.tolist() == [3, 2]
    weighted = (parts.values["received_first"] * parts.sequences[:, None, None]).sum(0) / 5
    np.testing.assert_allclose(merged.values["received_first"][0], weighted, rtol=1e-6)
    # the same forwards twice: equal up to float32 rounding of the attention (threaded matmuls may sum
    # in another order from one call to the next)
    np.testing.assert_allclose(
        merged.values["received_max_later"][0], parts.values["received_max_later"].max(0), rtol=1e-6
    )


def test_other_key_statistics_are_refused_in_one_line_when_the_monitor_is_made():
    model = make_tiny_model()
    for stats, words in (
        (("entropy", "received_max"), r"cannot record received_max: .* records received's two summaries"),
        (("received_mean",), "pass received"),
        (("received_first",), "received_first and received_max_later"),
        (("entropy", "recieved"), "unknown statistic 'recieved'.*received"),
        (("received", "received"), "distinct names"),
    ):
        with pytest.raises(EntropyLensError, match=words) as err:
            AttentionMonitor(model, stats=stats)
        assert "\n" not in str(err.value)
    assert not model._forward_pre_hooks and model.config._attn_implementation == "sdpa"
    with pytest.raises(EntropyLensError, match="--monitor entropy,received_max: AttentionMonitor") as err:
        check_monitor(MonitorSettings(monitor="entropy,received_max"))
    assert "\n" not in str(err.value)
    assert check_monitor(MonitorSettings(monitor="entropy,received")) == STATS


def test_the_names_a_monitor_of_received_uses():
    assert summaries(STATS) == SUMMARIES and monitored(SUMMARIES) == STATS
    assert session_stats(STATS) == ("entropy", "received", "received_mean")
    assert session_stats(("entropy", "max_logit")) == ("entropy", "max_logit")


def test_recording_through_the_callers_session_records_received_as_the_monitor_does():
    model = make_tiny_model()
    ids, mask = batch("left")
    mon = AttentionMonitor(model, stats=STATS)
    lacking = ScaleSession(model, stats=STATS)  # received alone: received_max_later needs received_mean
    refused = pytest.raises(EntropyLensError, match=r"does not record received_mean; make it with")
    with refused, mon.recording(lacking):
        pass
    scaling = ScaleSession(model, stats=session_stats(STATS))
    with torch.no_grad(), scaling, mon.recording(scaling, attention_mask=mask):
        model(ids, attention_mask=mask)
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as alone:
        model(ids, attention_mask=mask)
    for name in SUMMARIES:
        np.testing.assert_allclose(mon.latest()[name], alone.latest()[name], rtol=1e-6, err_msg=name)


def test_the_history_file_holds_the_summaries_and_a_version_2_file_still_reads(tmp_path):
    model = make_tiny_model()
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as mon:
        for seed in range(2):
            model(*batch("mixed", seed=seed))
    path = tmp_path / "attention.npz"
    mon.save(path)
    loaded = load_history(path)
    assert loaded.stats == SUMMARIES and loaded.sequences.tolist() == [3, 3]
    assert loaded.meta["schema_version"] == 4 and loaded.meta["stats"] == list(SUMMARIES)
    assert loaded.meta["reductions"] == {
        "entropy": "mean",
        "received_first": "mean",
        "received_max_later": "max",
    }
    for name in SUMMARIES:
        np.testing.assert_array_equal(loaded.values[name], mon.history.values[name])

    with torch.no_grad(), AttentionMonitor(model, stats=("entropy",)) as rows_only:
        model(*batch("mixed"))
    rows_only.save(path)
    old = dict(np.load(path, allow_pickle=False))
    del old["sequences"]
    old["meta"] = np.array(json.dumps({**json.loads(str(old["meta"])), "schema_version": 2}))
    np.savez(tmp_path / "v2.npz", **old)
    before = load_history(tmp_path / "v2.npz")
    assert before.sequences.tolist() == [0] and before.stats == ("entropy",)
    np.testing.assert_array_equal(before.values["entropy"], rows_only.history.values["entropy"])


def test_the_callback_logs_the_summaries_and_warns_on_them():
    """The Trainer's events, called as Trainer calls them: the step's scalars reach the training log,
    and a threshold on received_first (a sink forming) warns once per head."""
    from entropy_lens import EntropyLensCallback

    callback = EntropyLensCallback(stats=STATS, thresholds={"received_first": ("above", 0.0)})
    with pytest.raises(EntropyLensError, match="not recorded"):
        EntropyLensCallback(stats=("entropy",), thresholds={"received_first": ("above", 0.5)})
    model = make_tiny_model(n_heads=4, n_kv_heads=2).train()
    ids, mask = batch("left")
    state = SimpleNamespace(global_step=0, log_history=[])
    callback.on_train_begin(None, state, None, model=model)
    callback.on_step_begin(None, state, None)
    model(ids, attention_mask=mask, labels=ids).loss.backward()
    state.global_step = 1
    with pytest.warns(AttentionThresholdWarning) as caught:
        callback.on_step_end(None, state, None)
    assert len(caught) == 2 * 4 and "attention received_first of layer 0, head 0" in str(caught[0].message)
    logs = {"loss": 1.0}
    callback.on_log(None, state, None, logs=logs)
    callback.on_train_end(None, state, None)
    values = callback.monitor.history.at(1)
    for layer in range(2):
        for name in ("received_first", "received_max_later"):
            heads = values[name][layer]
            assert logs[f"attention/{name}/layer_{layer}/mean"] == pytest.approx(float(heads.mean()))
            assert logs[f"attention/{name}/layer_{layer}/max"] == pytest.approx(float(heads.max()))
    assert not model._forward_hooks and not model._forward_pre_hooks


@pytest.mark.slow  # transformers' Trainer: seconds to import and set up on 2 cores
def test_trainer_logs_the_received_scalars(tmp_path):
    from transformers import Trainer, TrainingArguments

    from entropy_lens import EntropyLensCallback

    model = make_tiny_model(n_layers=2, n_heads=4, n_kv_heads=2).train()
    ids, mask = batch("left", B=4, T=16, seed=10)
    data = [
        {"input_ids": i, "attention_mask": m, "labels": i.masked_fill(m == 0, -100)}
        for i, m in zip(ids, mask)
    ]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    callback = EntropyLensCallback(stats=STATS)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    history = callback.monitor.history
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logged] == [1, 2] and history.steps.tolist() == [1, 2]
    for entry in logged:
        values = history.at(entry["step"])
        for name in ("received_first", "received_max_later"):
            assert entry[f"attention/{name}/layer_1/min"] == pytest.approx(float(values[name][1].min()))
    assert history.sequences.tolist() == [2, 2]
