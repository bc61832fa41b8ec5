"""What AttentionMonitor can record on a model, decided before any training step.

A recorded forward is refused (summary.ForwardSums.check_reports) where a layer does not report once
(Jamba's Mamba layers, DiffLlama's two softmaxes) or a statistic does not apply to every layer
(`sink_mass` without attention sinks: kernels/stats.py's `applies`). Both depend on the model alone, so
`check_applies` asks them when the monitor is made, of a probe: one forward of two tokens through the
model's decoder and the capture, exactly as a recorded forward's layers report. `train-tiny --monitor
entropy,sink_mass --monitor-every 1000` is then refused before step 1, not after 999 steps. The probe
changes nothing a training loop sees: no gradients, every module in eval mode for it (each module's
own mode restored), the random number generators' states restored, no cache. It is skipped inside an
entropy_lens session already entered (an EntropyRecorder would count the probe): there the first
recorded forward refuses, as before.

What the inputs decide cannot be known then: a multimodal model (Llava, Gemma 3) given an image runs its
vision tower, whose attention a recorded forward would switch to the capture too, where it is refused
(or, with layer numbers of its own, would be summed into the decoder's). `tower_hooks` refuses the first
forward that runs a tower while the monitor is active and enabled, whatever `every`, in one line that
says how to keep those forwards out.
"""

from __future__ import annotations

import torch

from entropy_lens.capture import ScaleSession
from entropy_lens.capture.call import active_session
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Fused, Measure
from entropy_lens.monitor.install import Hook
from entropy_lens.monitor.summary import ForwardSums

PROBE_TOKENS = 2  # a query row that sees one key and one that sees two


def check_applies(model, stats: tuple[str, ...], *, measure: Measure, n_layers: int) -> None:
    """EntropyLensError in one line where a recorded forward of `model` would be refused for `stats`
    (see the module docstring); nothing inside an entered entropy_lens session. `stats`: the monitor's
    (row statistics and received); `measure`: the monitor's record, with the statistics' parameters."""
    if active_session() is not None:
        return
    sums = ForwardSums(n_layers, stats, None, model=type(model).__name__)
    probe = ScaleSession(model, measure=measure.replace(fused=Fused.OFF))
    probe.session.on_stats, probe.session.on_key_state = sums.add, sums.add_keys
    probe.session.on_nonfinite = sums.add_nonfinite  # NaN weights: the probe cannot tell; steps will
    embeddings = model.get_input_embeddings().weight
    ids = torch.zeros(1, PROBE_TOKENS, dtype=torch.long, device=embeddings.device)
    modes = {module: module.training for module in model.modules()}
    cuda = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    try:
        with torch.random.fork_rng(devices=cuda), torch.no_grad(), probe:
            model.eval()
            model.get_decoder()(input_ids=ids, use_cache=False)
    finally:
        for module, training in modes.items():
            module.training = training
    if sums.nonfinite is None:
        sums.check_reports()


def tower_hooks(model, enabled) -> list:
    """Forward pre-hooks (their handles) on each tower of `model`: a sub-model beside its decoder (a vision
    tower), which refuse a forward that runs it while `enabled()` (the monitor is on)."""
    from transformers import PreTrainedModel

    decoder = model.get_decoder()
    at = next(name for name, m in model.named_modules() if m is decoder)  # "model.language_model"
    towers = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, PreTrainedModel)
        and not (name == "" or f"{at}.".startswith(f"{name}."))  # the decoder, or what holds it
        and not (at == "" or name.startswith(f"{at}."))  # a part of the decoder
    ]

    def hook(name, tower):
        def refuse(module, args):
            if enabled():
                raise EntropyLensError(
                    f"{type(model).__name__} ran its {name} ({type(tower).__name__}: an image or another "
                    "input beside the text) in a monitored forward; AttentionMonitor measures the language "
                    "model's attention only, and its recorded forwards would switch the tower's too. "
                    "Monitor text-only forwards: set mon.enabled = False around the others"
                )

        return tower.register_forward_pre_hook(Hook(refuse))  # inert in a copy of the model

    return [hook(name, tower) for name, tower in towers]
