"""AttentionMonitor in the training loops people run (issue 57): mixed precision, exceptions and Ctrl-C
inside a recorded forward, non-finite steps, the model's own outputs, nesting with a recorder, a deep
copy, and models it cannot watch, each on a tiny random Llama (GQA)."""

import pytest
import torch
from tiny import make_tiny_model

from entropy_lens.monitor import AttentionMonitor


def step_grads(model, ids, *, dtype=None, monitor=False):
    """{name: float64 gradient} of one training step's loss (under CPU autocast in `dtype`, if given),
    monitored or not; and the monitor (None unmonitored)."""
    model.zero_grad(set_to_none=True)
    mon = AttentionMonitor(model) if monitor else None
    with mon if mon is not None else torch.enable_grad():
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = model(ids, labels=ids).loss
        loss.backward()
    return {n: p.grad.double().clone() for n, p in model.named_parameters() if p.grad is not None}, mon


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_step_trains_fused_within_flash_rule(dtype):
    """A monitored step under CPU autocast runs the fused route (it crashed in the backward: float32
    queries after RoPE beside autocast's values) and every parameter's gradient stays within twice the
    plain autocast step's own error against the float32 step; the statistics are finite."""
    model = make_tiny_model(seed=3)
    model.train()
    ids = torch.randint(2, 300, (2, 48), generator=torch.Generator().manual_seed(0))
    truth, _ = step_grads(model, ids)
    plain, _ = step_grads(model, ids, dtype=dtype)
    ours, mon = step_grads(model, ids, dtype=dtype, monitor=True)
    assert mon.paths == {"fused-train"} and mon.recorded == 1
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in mon.latest().values())
    assert ours.keys() == truth.keys()
    for name, want in truth.items():
        err = (ours[name] - want).norm().item()
        err_plain = (plain[name] - want).norm().item()
        assert err <= 2 * err_plain + 1e-6 * want.norm().item(), (name, err, err_plain)


def batch(T=24, B=2, seed=0):
    return torch.randint(2, 300, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_exception_inside_a_recorded_forward_does_not_end_monitoring(error):
    """Ctrl-C (which torch's always-called forward hooks never see) or an error raised in a recorded
    forward and caught by the loop: the next forward records, and then the model's own attention is back."""
    model = make_tiny_model()
    ids = batch()

    def interrupt(module, args):
        raise error("in the middle of the forward")

    with torch.no_grad(), AttentionMonitor(model, stats=("entropy",)) as mon:
        hook = model.model.layers[1].mlp.register_forward_pre_hook(interrupt)
        with pytest.raises(error):
            model(ids)
        hook.remove()
        model(ids)
        assert mon.recorded == 1 and mon.latest_step == 2 and mon.forwards == 2
        assert model.config._attn_implementation == "sdpa"  # left at the end of the recorded forward
        model(ids)
    assert mon.recorded == 2 and not model._forward_hooks and not model._forward_pre_hooks


def test_a_nonfinite_step_is_recorded_not_fatal(tmp_path):
    """NaN weights in one layer: the monitored forward returns what the unmonitored one does (NaN loss,
    for the loop to handle), the step is recorded as non-finite (no numbers, a flag in scalars() and the
    saved history), one warning names the layer and step; the next finite step records as usual."""
    from entropy_lens.monitor import load_history
    from entropy_lens.monitor.summary import NonFiniteStepWarning

    model = make_tiny_model()
    ids = batch()
    weight = model.model.layers[1].self_attn.q_proj.weight
    good = weight.detach().clone()
    with torch.no_grad():
        weight[0, 0] = float("nan")
    plain = model(ids, labels=ids).loss
    with AttentionMonitor(model, stats=("entropy", "max_logit")) as mon:
        with pytest.warns(NonFiniteStepWarning, match="step 1 is not finite .*layer 1") as caught:
            losses = [model(ids, labels=ids).loss for _ in range(2)]
        losses[-1].backward()  # the loop's business: here, as without the monitor, NaN gradients
        loss = losses[-1]
        assert len(caught) == 1 and loss.isnan() and plain.isnan()
        assert mon.nonfinite_steps == [1, 2] and mon.scalars() == {"attention/nonfinite": 1.0}
        with torch.no_grad():
            weight.copy_(good)
        model(ids)
    assert mon.latest_step == 3 and mon.latest_finite and mon.scalars()["attention/nonfinite"] == 0.0
    mon.save(tmp_path / "h.npz")
    saved = load_history(tmp_path / "h.npz")
    assert saved.steps.tolist() == [3] and saved.nonfinite.tolist() == [1, 2]


def test_output_attentions_of_an_eager_model_are_its_own():
    """output_attentions=True on an eager model returns eager's weights and output on a recorded step, as
    without the monitor (it returned ()), and the step records."""
    model = make_tiny_model()
    model.set_attn_implementation("eager")
    ids = batch()
    with torch.no_grad():
        plain = model(ids, output_attentions=True)
        with AttentionMonitor(model, stats=("entropy",)) as mon:
            watched = model(ids, output_attentions=True)
    assert mon.recorded == 1 and mon.paths == {"eager-then-entropy"}
    assert len(watched.attentions) == len(plain.attentions) == 2
    for a, b in zip(watched.attentions, plain.attentions, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(watched.logits, plain.logits, rtol=0, atol=0)


def test_a_monitor_and_a_recorder_nest_deliberately():
    """A monitor inside an EntropyRecorder or around one is refused, saying how to combine them;
    `mon.recording(recorder)` records both (the recorder's own sums go on)."""
    from entropy_lens import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    model = make_tiny_model()
    ids = batch()
    with torch.no_grad():
        with (
            EntropyRecorder(model),
            pytest.raises(EntropyLensError, match=r"one capture runs per forward.*recording"),
        ):
            AttentionMonitor(model).__enter__()
        with (
            AttentionMonitor(model) as mon,
            EntropyRecorder(model),
            pytest.raises(EntropyLensError, match="one capture runs per forward"),
        ):
            model(ids)
        assert not model._forward_pre_hooks and model.config._attn_implementation == "sdpa"
        mon = AttentionMonitor(model, stats=("entropy",))
        with EntropyRecorder(model) as rec, mon.recording(rec):
            model(ids)
    assert mon.recorded == 1 and rec.count.sum() == ids.numel()
    assert mon.latest()["entropy"] == pytest.approx(rec.entropy.mean(-1), rel=1e-5)


def test_a_deep_copy_of_a_monitored_model_carries_no_monitor():
    """copy.deepcopy of a monitored model: the copy's forwards record nothing anywhere, a monitor of its
    own records it, and closing the original leaves the copy plain."""
    import copy

    model = make_tiny_model()
    ids = batch()
    with torch.no_grad(), AttentionMonitor(model, stats=("entropy",)) as mon:
        twin = copy.deepcopy(model)
        twin(ids)
        assert mon.forwards == 0 and twin.config._attn_implementation == "sdpa"
        with AttentionMonitor(twin, stats=("entropy",)) as own:
            twin(ids)
        model(ids)
    assert own.recorded == 1 and mon.recorded == 1


def test_what_is_not_a_model_with_attention_is_refused_in_one_line():
    from transformers import MambaConfig, MambaForCausalLM

    from entropy_lens.errors import EntropyLensError

    for model, words in (
        (None, "got NoneType"),
        (torch.nn.Linear(2, 2), "got Linear"),
        (
            MambaForCausalLM(MambaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1)),
            "no softmax attention",
        ),
    ):
        with pytest.raises(EntropyLensError, match=words) as err:
            AttentionMonitor(model)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("model_type", ["gemma2", "gpt_oss", "bloom", "falcon (alibi=True)"])
def test_autocast_steps_of_the_separate_routes_keep_flash_rule(model_type):
    """Under bfloat16 autocast the routes beside fused-train (softcap, sinks: eager; BLOOM: its own code,
    which crashed on autocast's mixed dtypes; Falcon's ALiBi: sdpa's float mask) train, and every
    gradient stays within twice the plain autocast step's error against the float32 step."""
    from architectures import SUPPORTED, build

    model = build(model_type, SUPPORTED[model_type][0]).train()
    ids = batch(T=16, seed=1) % 90
    truth, _ = step_grads(model, ids)
    plain, _ = step_grads(model, ids, dtype=torch.bfloat16)
    ours, mon = step_grads(model, ids, dtype=torch.bfloat16, monitor=True)
    assert mon.recorded == 1 and "fused-train" not in mon.paths
    for name, want in truth.items():
        err, err_plain = (ours[name] - want).norm().item(), (plain[name] - want).norm().item()
        assert err <= 2 * err_plain + 1e-6 * want.norm().item(), (name, err, err_plain)
