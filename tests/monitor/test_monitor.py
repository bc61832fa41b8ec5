"""AttentionMonitor, EntropyLensCallback and qk_clip (issue 50) on tiny random Llama models, against
float64 statistics of the model's own eager attention."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from architectures import eager_probabilities
from tiny import make_tiny_model

import entropy_lens
from entropy_lens.capture.paths import PATH_NAMES
from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor import (
    MONITOR_STATS,
    AttentionMonitor,
    AttentionThresholdWarning,
    Thresholds,
    load_history,
    qk_clip,
)
from entropy_lens.monitor.summary import ForwardSums
from entropy_lens.statistics import BY_NAME, MAX, STATISTICS

STATS = ("entropy", "max_prob", "first_mass")


def padded_batch(B=3, T=20, seed=0):
    """(ids, mask (B, T) long): row 1 left-padded by 4, row 2 right-padded by 6, row 0 whole."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 300, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :4] = 0
    if B > 2:
        mask[2, T - 6 :] = 0
    return ids, mask


def float64_row_stats(model, ids, mask, first_keys, recent_keys=64):
    """Per layer {stat: (B, H, T) float64} of the model's own eager attention probabilities."""
    _, probs = eager_probabilities(model, ids, mask)
    first = (mask != 0).long().argmax(dim=1)  # each row's first real key
    keys = torch.arange(ids.shape[1])
    in_first = (keys >= first[:, None]) & (keys < first[:, None] + first_keys)  # (B, S)
    behind = keys[:, None] - keys[None, :]  # (T, S): pos_i − j
    recent = (behind >= 0) & (behind < recent_keys)  # each row's last W keys
    return [
        {
            "entropy": -torch.special.xlogy(p, p).sum(-1),
            "max_prob": p.amax(-1),
            "first_mass": (p * in_first[:, None, None, :]).sum(-1),
            "recent_mass": (p * recent).sum(-1),
        }
        for p in probs
    ]


def mean_over_real_rows(values, mask):
    """(B, H, T) -> (H,): the mean over the rows the 2-D mask calls real."""
    keep = mask.bool()[:, None, :]
    return (torch.where(keep, values, 0.0).sum((0, 2)) / keep.sum((0, 2))).numpy()


def test_latest_equals_float64_eager_statistics_on_a_padded_training_batch(monkeypatch):
    """Train mode, grad on, GQA, left and right padding (recent_mass over each row's last 3 keys): the mean
    over the real query rows; with a "max" reduction (statistics.MAX) the maximum over them, padded rows
    left out of both."""
    model = make_tiny_model(n_heads=4, n_kv_heads=2).train()
    ids, mask = padded_batch()
    as_max = dataclasses.replace(STATISTICS["max_prob"], reduction=MAX)  # the path max_logit takes
    monkeypatch.setitem(STATISTICS, "max_prob", as_max)
    monkeypatch.setitem(BY_NAME, "max_prob", as_max)
    with AttentionMonitor(model, stats=(*STATS, "recent_mass"), first_keys=2, recent_keys=3) as mon:
        model(ids, attention_mask=mask, labels=ids).loss.backward()
    got = mon.latest()
    reference = float64_row_stats(model, ids, mask, first_keys=2, recent_keys=3)
    keep = mask.bool()[:, None, :]
    assert mon.meta()["recent_keys"] == 3 and mon.measure["recent_keys"] == 3
    for layer, ref in enumerate(reference):
        for stat in ("entropy", "first_mass", "recent_mass"):
            assert got[stat].dtype == np.float32 and got[stat].shape == (2, 4)
            np.testing.assert_allclose(got[stat][layer], mean_over_real_rows(ref[stat], mask), atol=2e-5)
        top = ref["max_prob"].masked_fill(~keep, -1.0).amax((0, 2)).numpy()
        np.testing.assert_allclose(got["max_prob"][layer], top, atol=2e-5)
    assert mon.history.rows.tolist() == [int(mask.sum())]


def test_every_n_records_exactly_every_nth_forward_and_the_others_run_untouched():
    """every=3 over 7 forwards records forwards 3 and 6, each as a monitor of that forward alone would;
    the others give bit-identical outputs to the unmonitored model (its own eager attention)."""
    model = make_tiny_model()
    model.set_attn_implementation("eager")
    batches = [padded_batch(seed=i) for i in range(7)]
    with torch.no_grad():
        plain = [model(ids, attention_mask=mask).logits for ids, mask in batches]
        with AttentionMonitor(model, stats=STATS, every=3) as mon:
            seen = []
            for ids, mask in batches:
                seen.append(model(ids, attention_mask=mask).logits)
                assert model.config._attn_implementation == "eager"  # uninstalled after each forward
    assert mon.forwards == 7 and mon.history.steps.tolist() == [3, 6]
    for i, (a, b) in enumerate(zip(plain, seen, strict=True)):
        if (i + 1) % 3:
            assert torch.equal(a, b), f"forward {i + 1} changed"
        else:
            real = batches[i][1].bool()  # a padded row's output is nobody's: eager and sdpa differ there
            torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=0)
    for step in (3, 6):
        with torch.no_grad(), AttentionMonitor(model, stats=STATS) as alone:
            model(batches[step - 1][0], attention_mask=batches[step - 1][1])
        for stat in STATS:
            np.testing.assert_allclose(mon.history.at(step)[stat], alone.latest()[stat], rtol=1e-6)
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_monitored_gradients_equal_unmonitored():
    """A monitored training step's gradients equal a plain step's at float32 tolerances."""
    model = make_tiny_model(n_heads=4, n_kv_heads=2).train()
    ids, mask = padded_batch()

    def grads(monitored):
        model.zero_grad()
        if monitored:
            with AttentionMonitor(model, stats=STATS) as mon:
                model(ids, attention_mask=mask, labels=ids).loss.backward()
            assert mon.recorded == 1
            # what computed the step is named (capture/paths.py): the one pass with flash's backward
            assert mon.paths <= set(PATH_NAMES) and mon.paths & {"fused-train", "sdpa-then-entropy"}
        else:
            model(ids, attention_mask=mask, labels=ids).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain, monitored = grads(False), grads(True)
    for name, g in plain.items():
        assert torch.allclose(monitored[name], g, rtol=1e-4, atol=1e-6), name


def test_the_trainers_loss_normaliser_passes_through_the_capture():
    """transformers.Trainer passes `num_items_in_batch` down to every attention layer: not refused."""
    model = make_tiny_model().train()
    ids, mask = padded_batch()
    with AttentionMonitor(model, stats=("entropy",)) as mon:
        model(ids, attention_mask=mask, labels=ids, num_items_in_batch=torch.tensor(40)).loss.backward()
    assert mon.recorded == 1


def test_a_forward_that_raises_leaves_the_models_own_attention():
    """The recorded forward's installation is undone when the forward raises; the monitor goes on, and
    with gradient checkpointing (attention recomputed in the backward) the gradients are the plain ones."""
    model = make_tiny_model().train()
    model.activation_checkpointing_enable()
    ids, mask = padded_batch()
    with AttentionMonitor(model, stats=("entropy",)) as mon:
        with pytest.raises(IndexError):
            model(torch.full((1, 4), 10_000))  # past the vocabulary: the embedding raises
        assert model.config._attn_implementation == "sdpa" and mon.recorded == 0
        model(ids, attention_mask=mask, labels=ids).loss.backward()
    monitored = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(ids, attention_mask=mask, labels=ids).loss.backward()
    assert mon.recorded == 1 and mon.history.steps.tolist() == [2]
    assert mon.paths == {"sdpa-then-entropy"}  # the route whose saved tensors the recomputation matches
    for name, p in model.named_parameters():
        assert torch.allclose(monitored[name], p.grad, rtol=1e-4, atol=1e-6), name


def test_the_callback_replaces_a_monitor_an_interrupted_train_left():
    from entropy_lens import EntropyLensCallback

    model = make_tiny_model()
    callback = EntropyLensCallback(stats=("entropy",))
    callback.on_train_begin(None, None, None, model=model)
    first = callback.monitor
    callback.on_train_begin(None, None, None, model=model)  # train() again after an exception
    assert not first.active and callback.monitor.active and len(model._forward_pre_hooks) == 1
    with torch.no_grad():
        model(*padded_batch())  # outside a training step: not recorded
    assert callback.monitor.recorded == 0
    callback.close()
    assert not model._forward_pre_hooks and not model._forward_hooks


def test_a_set_step_merges_its_micro_batches():
    """Two micro-batches of step 4 make one record: means over all their real rows (weighted by rows)."""
    model = make_tiny_model()
    (a, ma), (b, mb) = padded_batch(seed=1), padded_batch(B=2, seed=2)
    with torch.no_grad(), AttentionMonitor(model, stats=STATS, every=2) as mon:
        mon.step = 3
        model(a, attention_mask=ma)  # step 3: not a multiple of 2
        mon.step = 4
        model(a, attention_mask=ma)
        model(b, attention_mask=mb)
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as each:
        model(a, attention_mask=ma)
        model(b, attention_mask=mb)
    history, parts = mon.history, each.history
    assert history.steps.tolist() == [4] and history.forwards.tolist() == [2]
    assert history.rows.tolist() == [parts.rows.sum()] and history.meta["step_unit"] == "step"
    for stat in STATS:
        weighted = (parts.values[stat] * parts.rows[:, None, None]).sum(0) / parts.rows.sum()
        np.testing.assert_allclose(history.values[stat][0], weighted, rtol=1e-6)


def test_scalars_name_each_layer_and_head():
    model = make_tiny_model()
    with torch.no_grad(), AttentionMonitor(model, stats=("entropy",)) as mon:
        model(*padded_batch())
    latest = mon.latest()["entropy"]
    flat = mon.scalars()
    assert len(flat) == 1 + 2 * 3 and all(isinstance(v, float) for v in flat.values())
    assert flat["attention/nonfinite"] == 0.0
    assert flat["attention/entropy/layer_1/max"] == pytest.approx(float(latest[1].max()))
    assert flat["attention/entropy/layer_0/mean"] == pytest.approx(float(latest[0].mean()))
    per_head = mon.scalars("train/attn", per_head=True)
    assert per_head["train/attn/entropy/layer_1/head_3"] == pytest.approx(float(latest[1, 3]))
    assert len(per_head) == 1 + 2 * (3 + 4)


def test_save_and_load_round_trip_and_damage_is_refused(tmp_path):
    model = make_tiny_model()
    with torch.no_grad(), AttentionMonitor(model, stats=STATS, every=2) as mon:
        for i in range(4):
            model(*padded_batch(seed=i))
    path = tmp_path / "attention.npz"
    mon.save(path)
    loaded = load_history(path)
    assert loaded.steps.tolist() == [2, 4] and loaded.stats == STATS
    for stat in STATS:
        np.testing.assert_array_equal(loaded.values[stat], mon.history.values[stat])
    meta = loaded.meta
    assert meta["schema_version"] == 4 and meta["every"] == 2 and meta["stats"] == list(STATS)
    assert meta["model_class"] == "LlamaForCausalLM" and meta["reductions"]["entropy"] == "mean"
    assert not list(tmp_path.glob(".*tmp*"))  # the atomic write left no temporary file

    cut = tmp_path / "cut.npz"
    cut.write_bytes(path.read_bytes()[:200])
    with pytest.raises(EntropyLensError, match="not a readable monitor history") as err:
        load_history(cut)
    assert "\n" not in str(err.value)
    bad = dict(np.load(path, allow_pickle=False))
    bad["entropy"] = bad["entropy"].copy()
    bad["entropy"][0, 0, 0] = np.nan
    np.savez(tmp_path / "nan.npz", **bad)
    with pytest.raises(EntropyLensError, match="NaN"):
        load_history(tmp_path / "nan.npz")
    np.savez(tmp_path / "foreign.npz", steps=np.arange(2))
    with pytest.raises(EntropyLensError, match="no meta"):
        load_history(tmp_path / "foreign.npz")


def test_mistakes_are_refused_in_one_line():
    model = make_tiny_model()
    with pytest.raises(TypeError):
        AttentionMonitor(model, evry=2)
    for kwargs, words in (
        ({"every": 0}, "every=1"),
        ({"every": 1.5}, "every"),
        ({"stats": ("entropy", "nonsense")}, "'nonsense'"),
        ({"stats": ()}, "distinct names"),
    ):
        with pytest.raises(EntropyLensError, match=words) as err:
            AttentionMonitor(model, **kwargs)
        assert "\n" not in str(err.value)
    mon = AttentionMonitor(model, stats=("entropy",), every=5)
    with pytest.raises(EntropyLensError, match="recorded no finite step yet"):
        mon.latest()
    with mon, pytest.raises(EntropyLensError, match="already has an active AttentionMonitor"):
        AttentionMonitor(model).__enter__()
    with pytest.raises(EntropyLensError, match="sink_mass"), AttentionMonitor(model, stats=("sink_mass",)):
        model(torch.randint(0, 300, (1, 8)))
    assert model.config._attn_implementation == "sdpa" and not model._forward_hooks


def test_padded_rows_are_left_out_of_means_and_maxima(monkeypatch):
    """A padded row's value, however large, changes neither reduction; the layer's queries are the last
    T of the mask's keys (key_offset)."""
    as_max = dataclasses.replace(STATISTICS["max_prob"], reduction=MAX)
    monkeypatch.setitem(STATISTICS, "max_prob", as_max)
    monkeypatch.setitem(BY_NAME, "max_prob", as_max)
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    values = torch.tensor([[[100.0, 1.0, 2.0]], [[3.0, 4.0, 100.0]]])  # (B=2, H=1, T=3)
    sums = ForwardSums(1, ("entropy", "max_prob"), mask, model="Tiny")
    sums.report_stats(0, {"entropy": values, "max_prob": values}, 0)
    summary = sums.finish(1)
    assert summary.rows == 4 and summary.values()["entropy"][0, 0] == pytest.approx(2.5)
    assert summary.values()["max_prob"][0, 0] == 4.0
    tail = ForwardSums(1, ("entropy",), mask, model="Tiny")  # decoding: the last query of 3 keys
    tail.report_stats(0, {"entropy": values[:, :, 2:]}, 2)
    assert tail.finish(1).rows == 1 and tail.finish(1).values()["entropy"][0, 0] == 2.0


def test_a_statistic_that_is_not_finite_makes_a_nonfinite_step():
    """A statistic that came out NaN: the step has no numbers and says where (the loop decides)."""
    sums = ForwardSums(1, ("entropy",), None, model="Tiny")
    sums.report_stats(0, {"entropy": torch.tensor([[[0.5, float("nan")]]])}, 0)
    summary = sums.finish(7)
    assert summary.values() == {} and summary.nonfinite.startswith("layer 0: entropy of head 0 is nan")


def test_thresholds_warn_once_per_head():
    limits = Thresholds({"entropy": ("below", 1.0)}, stats=("entropy",))
    values = {"entropy": np.array([[0.5, 2.0], [0.1, 0.2]], dtype=np.float32)}
    with pytest.warns(AttentionThresholdWarning) as caught:
        limits.check(values, 3)
    assert len(caught) == 3
    assert "attention entropy of layer 1, head 0 is 0.1 at step 3, below the threshold 1" in str(
        caught[1].message
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert limits.check(values, 4) == []  # the same heads: no second warning
    for bad in ({"entropy": ("under", 1.0)}, {"max_prob": ("below", 1.0)}, {"entropy": ("below", np.nan)}):
        with pytest.raises(EntropyLensError):
            Thresholds(bad, stats=("entropy",))


def test_public_names():
    assert entropy_lens.AttentionMonitor is AttentionMonitor
    assert {"AttentionMonitor", "EntropyLensCallback"} <= set(entropy_lens.__all__)
    assert MONITOR_STATS == ("entropy", "max_logit")


def token_dataset(n=8, T=16):
    """n tokenized examples for the Trainer, padded on the left to T (labels -100 at the padding)."""
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(100 + i)
        ids = torch.randint(2, 300, (T,), generator=g)
        mask = torch.ones(T, dtype=torch.long)
        mask[: i % 4] = 0
        out.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return out


@pytest.mark.slow  # transformers' Trainer: seconds to import and set up on 2 cores
def test_trainer_logs_the_scalars_at_its_optimizer_steps(tmp_path):
    """gradient_accumulation_steps=2, logging_steps=1: every optimizer step's log holds the scalars of
    that step's record (two micro-batches merged); the thresholds warn once per head; the model leaves
    train() without hooks and with its own attention."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from entropy_lens import EntropyLensCallback

    class Reporter(TrainerCallback):  # what a report_to integration sees
        def __init__(self):
            self.seen = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.seen.append(dict(logs))

    model = make_tiny_model(n_layers=2, n_heads=4, n_kv_heads=2).train()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    callback = EntropyLensCallback(stats=("entropy", "max_prob"), thresholds={"entropy": ("above", 0.0)})
    reporter = Reporter()
    trainer = Trainer(model=model, args=args, train_dataset=token_dataset(), callbacks=[reporter])
    callback.add_to(trainer)  # ahead of the reporter
    with pytest.warns(AttentionThresholdWarning) as caught:
        trainer.train()
    history = callback.monitor.history
    assert history.steps.tolist() == [1, 2, 3] and history.forwards.tolist() == [2, 2, 2]
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logged] == [1, 2, 3]
    for entry in logged:
        values = history.at(entry["step"])
        assert entry["attention/entropy/layer_1/min"] == pytest.approx(float(values["entropy"][1].min()))
        assert entry["attention/max_prob/layer_0/mean"] == pytest.approx(float(values["max_prob"][0].mean()))
    assert [e["attention/entropy/layer_0/max"] for e in reporter.seen if "loss" in e] == [
        e["attention/entropy/layer_0/max"] for e in logged
    ]
    messages = [str(w.message) for w in caught if w.category is AttentionThresholdWarning]
    assert len(messages) == 2 * 4 and all("at step 1, above the threshold 0" in m for m in messages)
    assert model.config._attn_implementation == "sdpa" and not model._forward_hooks
    assert not model._forward_pre_hooks


@pytest.mark.slow  # transformers' Trainer: seconds to import and set up on 2 cores
def test_trainer_bf16_every_step_with_evaluation(tmp_path):
    """Trainer(bf16=True) (CPU autocast) with EntropyLensCallback(every=1) trains (its backward crashed),
    logs finite attention scalars on every training log, and none on the evaluation logs (they took the
    training step's, and the next training log then had none)."""
    from transformers import Trainer, TrainingArguments

    from entropy_lens import EntropyLensCallback

    model = make_tiny_model(n_layers=2, n_heads=4, n_kv_heads=2).train()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        max_steps=3,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        bf16=True,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    callback = EntropyLensCallback(every=1)
    data = token_dataset()
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:2], callbacks=[callback])
    trainer.train()
    assert callback.monitor.paths == {"fused-train"} and callback.monitor.history.steps.tolist() == [1, 2, 3]
    training = [e for e in trainer.state.log_history if "loss" in e]
    evaluation = [e for e in trainer.state.log_history if "eval_loss" in e]
    assert [e["step"] for e in training] == [1, 2, 3] and len(evaluation) == 3
    for entry in training:
        attention = {k: v for k, v in entry.items() if k.startswith("attention/")}
        assert attention["attention/nonfinite"] == 0.0 and len(attention) == 1 + 2 * 2 * 3
        assert all(np.isfinite(v) for v in attention.values())
    assert not any(k.startswith("attention/") for e in evaluation for k in e)


def test_the_callback_refuses_mistakes_before_training():
    from entropy_lens import EntropyLensCallback

    with pytest.raises(TypeError):
        EntropyLensCallback(evry=2)
    with pytest.raises(EntropyLensError, match="not recorded"):
        EntropyLensCallback(stats=("entropy",), thresholds={"max_prob": ("above", 0.5)})
    with pytest.raises(EntropyLensError, match="every=1"):
        EntropyLensCallback(every=0)


def float64_max_logits(model, ids, mask):
    """(layers, heads) float64: the largest λ·q·k over each head's real query rows and attendable keys,
    from each layer's own q and k (after RoPE) in float64. Until the kernels compute `max_logit`."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    found = {}

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        T, S = query.shape[2], key.shape[2]
        k = key.double().repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        scores = query.double() @ k.transpose(-1, -2) * scaling  # (B, H, T, S)
        seen = torch.ones(T, S, dtype=torch.bool).tril(S - T) if attention_mask is None else attention_mask
        seen = seen & mask.bool()[:, None, None, :] & mask.bool()[:, None, -T:, None]  # real rows, real keys
        found[module.layer_idx] = scores.masked_fill(~seen, -torch.inf).amax((0, 2, 3))
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling, dropout, **kwargs)

    AttentionInterface.register("max_logit_float64", attention)
    AttentionMaskInterface.register("max_logit_float64", sdpa_mask)
    prev = model.config._attn_implementation
    model.set_attn_implementation("max_logit_float64")
    try:
        with torch.no_grad():
            model(ids, attention_mask=mask)
    finally:
        model.set_attn_implementation(prev)
    return torch.stack([found[i] for i in range(len(found))]).numpy()


def test_qk_clip_scales_each_head_to_tau_exactly():
    """GQA: the heads over τ end at τ, the others keep their max logit, the shared key heads included (one
    layer: a later layer's logits also move with the earlier layers' outputs)."""
    model = make_tiny_model(n_layers=1, n_heads=4, n_kv_heads=2)
    ids, mask = padded_batch()
    before = float64_max_logits(model, ids, mask)
    tau = float(np.median(before))
    gamma = qk_clip(model, before, tau=tau)
    after = float64_max_logits(model, ids, mask)
    over = before > tau
    assert over.any() and (~over).any()
    np.testing.assert_allclose(after[over], tau, rtol=1e-5)
    np.testing.assert_allclose(after[~over], before[~over], rtol=1e-5)
    np.testing.assert_allclose(gamma, np.where(over, tau / before, 1.0))
    with pytest.raises(EntropyLensError, match="shape"):
        qk_clip(model, before[:, :2], tau=tau)
    with pytest.raises(EntropyLensError, match="tau"):
        qk_clip(model, before, tau=0)


def test_qk_clip_in_ten_lines_keeps_growing_logits_bounded():
    """The QK-clip loop of monitor/clip.py's docstring: a model memorising one batch at a high learning
    rate grows its max logit far past τ; with the clip after each optimizer step it stays near τ."""
    ids, mask = padded_batch(B=2, T=16)

    def train(clip, tau=None, steps=20):
        model = make_tiny_model(n_layers=1, n_heads=4, n_kv_heads=2).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        peaks = []
        with AttentionMonitor(model, stats=("max_logit",)) as mon:
            for _ in range(steps):  # the user's loop
                mon.enabled = False  # the float64 reference's own forward is not a step
                expected = float64_max_logits(model, ids, mask)  # of the weights this step's forward uses
                mon.enabled = True
                model(ids, attention_mask=mask, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad()
                max_logit = mon.latest()["max_logit"]  # (layers, heads): the largest score of each head
                np.testing.assert_allclose(max_logit, expected, rtol=1e-5, atol=1e-5)
                if clip:
                    qk_clip(model, max_logit, tau=tau)
                peaks.append(float(max_logit.max()))
        return peaks

    free = train(clip=False)
    tau = 1.2 * free[0]
    assert max(free) > 1.8 * tau  # the logits grow without the clip
    clipped = train(clip=True, tau=tau)  # clipped after each step: the next steps overshoot less and less
    assert max(clipped[8:]) < 1.05 * tau, [round(p / tau, 3) for p in clipped]
