"""What AttentionMonitor can record on a model, decided before any training step.

A recorded forward is refused (summary.ForwardSums.check_reports) where a layer does not report once
(Jamba's Mamba layers, DiffLlama's two softmaxes) or a statistic does not apply to every layer
(`sink_mass` without attention sinks: kernels/stats.py's `applies`). Both depend on the model alone, so
`check_applies` asks them when the monitor is made, of capture's probe forward (capture/probe.py: two
tokens through the model's decoder and the capture, exactly as a recorded forward's layers report, and
nothing a training loop sees changed). `train-tiny --monitor entropy,sink_mass --monitor-every 1000` is
then refused before step 1, not after 999 steps. Inside an entropy_lens session already entered there is
no probe: the first recorded forward refuses, as before.

What the inputs decide cannot be known then: a multimodal model (Llava, Gemma 3) given an image runs its
vision tower, whose attention a recorded forward would switch to the capture too, where it is refused
(or, with layer numbers of its own, would be summed into the decoder's). `tower_hooks` refuses the first
forward that runs a tower while the monitor is active and enabled, whatever `every`, in one line that
says how to keep those forwards out.
"""

from __future__ import annotations

from entropy_lens.capture.probe import probe_forward
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure
from entropy_lens.monitor.install import Hook
from entropy_lens.monitor.summary import ForwardSums


def check_applies(model, stats: tuple[str, ...], *, measure: Measure, n_layers: int) -> None:
    """EntropyLensError in one line where a recorded forward of `model` would be refused for `stats`
    (see the module docstring); nothing inside an entered entropy_lens session. `stats`: the monitor's
    (row statistics and received); `measure`: the monitor's record, with the statistics' parameters."""
    sums = ForwardSums(n_layers, stats, None, model=type(model).__name__)
    # NaN weights (a layer's non-finite inputs reported): the probe cannot tell; the steps will
    ran = probe_forward(model, measure, sums)
    if ran and sums.nonfinite is None:
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
