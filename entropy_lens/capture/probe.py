"""What a model's layers report, asked before any recorded forward: a probe forward.

Whether a statistic applies to a layer depends on the model alone (`sink_mass` without attention sinks:
kernels/stats.py's `applies`), and so does whether each layer reports once (Jamba's Mamba layers, DiffLlama's
two softmaxes). `probe_forward` asks them of one forward of two tokens through the model's decoder and
the capture, exactly as a recorded forward's layers report, handing each report to the consumer a
recording session would (capture/reports.py); AttentionMonitor (monitor/applies.py) and GenerationRecorder refuse with it when
they are made, not after the first step. The probe changes nothing the caller's loop sees: no gradients,
every module in eval mode for it (each module's own mode restored), the random number generators' states
restored, no cache. It is skipped inside an entropy_lens session already entered (an EntropyRecorder
would count the probe): there the first recorded forward refuses, as before.
"""

from __future__ import annotations

import torch

from entropy_lens.capture.call import active_session
from entropy_lens.capture.reports import Reports
from entropy_lens.capture.scale_session import ScaleSession
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Fused, Measure

__all__ = ["PROBE_TOKENS", "check_row_stats_apply", "probe_forward", "unreported"]

PROBE_TOKENS = 2  # a query row that sees one key and one that sees two


def probe_forward(model, measure: Measure, reports: Reports) -> bool:
    """Run the probe forward of `model` measuring `measure` (module docstring), each layer's report handed
    to `reports`, the consumer (capture/reports.py) a recording session would have. False, and nothing
    run, inside an entered entropy_lens session."""
    if active_session() is not None:
        return False
    probe = ScaleSession(model, measure=measure.replace(fused=Fused.OFF))
    probe.session.reports = reports
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
    return True


def check_row_stats_apply(model, measure: Measure, *, n_layers: int, drop: str) -> None:
    """EntropyLensError in one line where a row statistic of `measure` is not reported by every one of
    the `n_layers` layers of a probe forward (sink_mass on a model without attention sinks); `drop` names
    where to drop it ("GenerationRecorder's stats"). Nothing where the probe cannot tell: inside an
    entered session, or where the model's attention is not finite."""
    reported = _Reported()
    ran = probe_forward(model, measure, reported)
    if not ran or reported.nonfinite:
        return
    layers = reported.layers
    missing = [s for s in measure.stats if any(s not in layers.get(i, ()) for i in range(n_layers))]
    if missing:
        raise unreported(type(model).__name__, missing, drop=drop)


class _Reported(Reports):
    """The probe's consumer for `check_row_stats_apply`: the names each layer reports, and whether a
    layer's inputs were not finite."""

    def __init__(self):
        self.layers: dict[int, set[str]] = {}
        self.nonfinite: list[str] = []

    def report_stats(self, layer: int, stats: dict, key_offset: int, *, inputs_finite=None) -> None:
        self.layers.setdefault(layer, set()).update(stats)

    def report_nonfinite(self, layer: int, why: str) -> None:
        self.nonfinite.append(why)


def unreported(model: str, missing, *, drop: str) -> EntropyLensError:
    """The one-line refusal of row statistics `missing` that some layer of `model` does not report; `drop`
    names where to drop them from."""
    return EntropyLensError(
        f"{model} does not report {', '.join(missing)} in every layer (sink_mass needs attention sinks); "
        f"drop it from {drop}"
    )
