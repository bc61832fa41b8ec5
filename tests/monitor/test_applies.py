"""What AttentionMonitor cannot record is refused before training (monitor/applies.py, issue 57 item 3): a
statistic some layer does not report and a layer that does not report once, when the monitor is made
(a probe forward that changes nothing a training loop sees); an image given to a multimodal model, at
the first forward that runs its vision tower, whatever `every`."""

import pytest
import torch
from architectures import COMMON, SUPPORTED, build
from tiny import make_tiny_model

from entropy_lens.capture import EntropyRecorder
from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor import AttentionMonitor

SINKS = ("entropy", "sink_mass")


def test_a_statistic_a_layer_cannot_report_is_refused_when_the_monitor_is_made():
    """sink_mass on a model without sinks: refused at AttentionMonitor(...), with every=1000 and no
    forward run, and the probe leaves the RNG, each module's mode and the attention as they were."""
    model = make_tiny_model().train()
    model.model.layers[1].mlp.eval()  # a module with a mode of its own
    rng = torch.get_rng_state()
    with pytest.raises(EntropyLensError, match="does not report sink_mass in every layer.*drop it") as err:
        AttentionMonitor(model, stats=SINKS, every=1000)
    assert "\n" not in str(err.value)
    assert torch.equal(torch.get_rng_state(), rng)
    assert model.training and not model.model.layers[1].mlp.training and model.model.layers[0].mlp.training
    assert model.config._attn_implementation == "sdpa" and not model._forward_pre_hooks
    sinks = build("gpt_oss", SUPPORTED["gpt_oss"][0])  # a model with sinks records them
    with AttentionMonitor(sinks, stats=SINKS) as mon, torch.no_grad():
        sinks(torch.randint(3, 300, (1, 8)))
    assert mon.latest()["sink_mass"].shape == (2, 4) and (mon.latest()["sink_mass"] > 0).all()


def test_the_callback_refuses_it_at_train_begin():
    from entropy_lens import EntropyLensCallback

    callback = EntropyLensCallback(stats=SINKS, every=1000)
    with pytest.raises(EntropyLensError, match="sink_mass"):
        callback.on_train_begin(None, None, None, model=make_tiny_model())


def test_layers_outside_the_attention_interface_are_refused_when_the_monitor_is_made():
    """Jamba: a Mamba layer beside an attention layer reports nothing; refused before any forward."""
    jamba = {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "num_experts": 2}
    model = build("jamba", jamba | {"expert_layer_offset": 1, "mamba_d_state": 4, "mamba_dt_rank": 4})
    with pytest.raises(EntropyLensError, match=r"JambaForCausalLM: the layers that reported .* were \[1\]"):
        AttentionMonitor(model, stats=("entropy",))


def test_the_probe_is_skipped_inside_an_entered_session():
    """An EntropyRecorder already entered would count the probe as one of its forwards: no probe there."""
    model = make_tiny_model()
    with EntropyRecorder(model) as rec:
        AttentionMonitor(model, stats=("entropy",))
    assert rec.count.size == 0


def llava():
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = LlavaConfig(
        text_config={"model_type": "llama", **COMMON},
        vision_config={"model_type": "clip_vision_model", "image_size": 28, "patch_size": 14, **vision},
        image_token_id=299,
    )
    torch.manual_seed(0)
    return LlavaForConditionalGeneration(config).float().eval()


def test_an_image_is_refused_at_the_first_forward_whatever_every():
    """Llava given an image runs its vision tower: refused at forward 1 (every=1000), where today's main
    ran 999 steps; text forwards record, and forwards with the monitor disabled run the image."""
    model = llava()
    ids = torch.randint(3, 290, (1, 10))
    ids[0, 1:5] = 299  # the image's tokens
    image = torch.randn(1, 3, 28, 28)
    with AttentionMonitor(model, stats=("entropy",), every=1000) as mon, torch.no_grad():
        with pytest.raises(
            EntropyLensError, match=r"ran its model.vision_tower .*mon.enabled = False"
        ) as err:
            model(ids, pixel_values=image)
        mon.enabled = False
        model(ids, pixel_values=image)
        mon.enabled = True
        mon.step = 1000
        model(ids[:, 5:])
    assert "\n" not in str(err.value) and mon.latest_step == 1000
    assert not model.model.vision_tower._forward_pre_hooks  # closed with the monitor
