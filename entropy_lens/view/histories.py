"""A monitor history as the page draws it (`AttentionMonitor.save`, results/history.py): each statistic
by training step × head, per layer, and each head's curve over the steps.

Per history: its meta (HISTORY_FIELDS, the recorded steps' range), `layers`, `heads`, `records`, and
the records reduced by `Bins` as a scan's positions are: up to `points` bins of consecutive records,
each drawn as its mean with its min–max envelope (a history no longer than `points` is shown record by
record, `bins.exact`); `steps` gives each bin's first and last step and the mean step (the x of its
point). Per statistic: its unit (as recorded: entropy in nats, max_logit in its score), its reduction
over a step's rows (meta `reductions`: "mean", or "max" for a maximum such as max_logit; received's
summaries, statistics.SUMMARIES, over its batch rows), and its
curves, row-major (layers, heads, bins), written as payload.py writes a scan's (`encode.encode_curves`).
The history's values were checked finite by `load_history`, but for a summary undefined at a step
(received_max_later where no batch row had a key after its first one: results/history.UNDEFINABLE), a gap
that the meta's `undefined` row explains; values made in Python that are not finite are gaps, as in a scan.
"""

from __future__ import annotations

import numpy as np

from entropy_lens.results.history import UNDEFINABLE, History
from entropy_lens.statistics import BY_NAME, ROW_PARAMETERS, reduction_of
from entropy_lens.view.encode import bins_json, encode_curves, numbers, text
from entropy_lens.view.reduce import Bins
from entropy_lens.view.sources import HistoryItem

__all__ = ["HISTORY_FIELDS", "history_curves", "history_payload"]

HISTORY_FIELDS = (  # shown in the history's table, in this order, where its meta has them
    "model",
    "model_class",
    "model_type",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "stats",
    "reductions",
    "every",
    *ROW_PARAMETERS,  # the row statistics' parameters
    "step_unit",
    "entropy_lens_version",
    "schema_version",
)
ROWS = {"mean": "the mean over the step's real query rows", "max": "the max over the step's real query rows"}
BATCH_ROWS = {"mean": "the mean over the step's batch rows", "max": "the max over the step's batch rows"}


def history_curves(history: History) -> int:
    """How many curves (layer, head, statistic) the page draws of `history`: `reduce.points_for`'s count."""
    layers, heads = history.values[history.stats[0]].shape[1:] if history.stats else (0, 0)
    return layers * heads * len(history.stats)


def history_payload(item: HistoryItem, points: int) -> dict:
    """The JSON-ready dict of one history (see the module docstring)."""
    h = item.history
    bins = Bins.of(len(h), points)
    mean, first, last = bins.reduce(h.steps)
    layers, heads = h.values[h.stats[0]].shape[1:] if h.stats else (0, 0)
    out = {
        "label": text(item.label),
        "source": text(item.source),
        "meta": _meta_rows(h),
        "layers": int(layers),
        "heads": int(heads),
        "records": len(h),
        "bins": bins_json(bins),
        "steps": {"x": numbers(mean), "first": _ints(first), "last": _ints(last)},
        "step_unit": text(h.meta.get("step_unit", "step")),
        "stats": {},
    }
    reductions = h.meta.get("reductions")
    for stat, values in h.values.items():
        info = BY_NAME.get(stat)
        how = reductions.get(stat) if isinstance(reductions, dict) else None
        how = how if how in ROWS else reduction_of(stat).name
        over = (BATCH_ROWS if info is not None and info.of else ROWS)[how]
        out["stats"][text(stat)] = {
            "unit": text(info.unit if info else "as recorded"),
            "description": text(
                f"{stat}: {info.description if info else 'a row statistic'}; per head, {over}"
            ),
            "reduction": how,
            "curves": encode_curves(bins, np.moveaxis(np.asarray(values, np.float64), 0, -1)),
        }
    return out


def _meta_rows(h: History) -> dict[str, str]:
    rows = {}
    for key in HISTORY_FIELDS:
        if key in h.meta:
            value = h.meta[key]
            if isinstance(value, dict):
                value = ", ".join(f"{k}: {v}" for k, v in value.items())
            elif isinstance(value, list):
                value = ", ".join(map(str, value))
            rows[key] = text(value)
    rows["steps"] = f"{len(h)} recorded, {int(h.steps.min())}..{int(h.steps.max())}" if len(h) else "none"
    undefined = [(stat, h.undefined(stat)) for stat in UNDEFINABLE if stat in h.values]
    undefined = [
        f"{stat} at {len(steps)} steps ({_listed(steps)})" for stat, steps in undefined if len(steps)
    ]
    if undefined:  # recorded, but no number exists: a gap
        rows["undefined"] = (
            f"{'; '.join(undefined)}: not drawn, no batch row of those steps had a real key after its first"
        )
    if len(h.nonfinite):  # recorded, but without numbers: not drawn
        rows["non-finite steps"] = (
            f"{len(h.nonfinite)} not drawn (attention not finite): {_listed(h.nonfinite)}"
        )
    return rows


def _listed(steps) -> str:
    """The first ten steps, comma-separated ("..." after them)."""
    return ", ".join(str(int(s)) for s in steps[:10]) + (", ..." if len(steps) > 10 else "")


def _ints(x) -> list:
    return [int(v) for v in np.asarray(x).tolist()]
