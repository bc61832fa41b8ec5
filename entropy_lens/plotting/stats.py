"""Row statistics beyond entropy by position (Figure 17): per model, a statistic's mean over every layer
and head (the paper's Eq. 1, applied to it) at each bin of positions, in the unit the scan recorded.

    ax = stat_by_position([("NoPE", nope), ("RoPE", rope)], "max_prob", colors=[NOPE, ROPE], train_len=128)
    ax = stat_by_position([("SmolLM2", real)], "distance", band=(10, 90), bound=True, train_len=8192)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from entropy_lens.analysis import StatCurves
from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import FIRST_MASS, STATISTICS

__all__ = ["STAT_NAMES", "stat_by_position", "stat_label", "window_label"]

# the axis names of the statistics (their `label`, entropy_lens.statistics; the units come from the scan's meta)
STAT_NAMES = {name: stat.label for name, stat in STATISTICS.items()}


def stat_label(curves: StatCurves, name: str) -> str:
    """'max probability (probability)', 'first-token mass (probability)', 'mean distance back (tokens)'."""
    return f"{window_label(curves.meta, name)} ({curves.units.get(name, '?')})"


def window_label(meta: dict, name: str) -> str:
    """The label of statistic `name` in a scan of `meta`: a statistic of a window of keys names its size
    ("mass on the last 64 keys"; first_mass at K = 1 keeps its own, "first-token mass")."""
    stat = STATISTICS.get(name)
    label = STAT_NAMES.get(name, name)
    for parameter in () if stat is None else stat.parameters:
        value = parameter.read(meta.get("scan_config") or {})
        if name != FIRST_MASS.name or value != parameter.default:
            label = f"mass on the {parameter.spanned(value, letter=False)}"
    return label


def stat_by_position(
    curves: Sequence[tuple[str, StatCurves]],
    name: str,
    *,
    colors: Sequence[str] | None = None,
    ax=None,
    train_len: int | None = None,
    band: tuple[float, float] | None = None,
    bound: bool = False,
    log: bool = False,
    legend: str | None = "above",
):
    """One line per (label, StatCurves) of statistic `name` averaged over layers and heads, against the
    mean position of each bin; returns the Axes.

    train_len: a dotted vertical line at L (named in the legend) and tick labels in multiples of L.
    band: (low, high) percentiles over the layers × heads drawn as a band around each line, named in the
        legend (None: none).
    bound: for `distance`, the bound i (dashed) and i/2, a uniform row's mean distance (dotted).
    log: a logarithmic y axis (probabilities spanning decades)."""
    import matplotlib.pyplot as plt

    if not curves:
        raise EntropyLensError("stat_by_position needs at least one (label, StatCurves) pair")
    colors = list(colors) if colors is not None else [None] * len(curves)
    if len(colors) != len(curves):
        raise EntropyLensError(f"{len(curves)} curves but {len(colors)} colours; pass one colour per curve")
    ax = ax if ax is not None else plt.subplots(figsize=(6, 4))[1]
    lowest = np.inf
    for (label, c), color in zip(curves, colors):
        x, mean = c.positions, c.mean(name)
        (line,) = ax.plot(x, mean, color=color, lw=1.8, label=label)
        lowest = min(lowest, float(mean.min()))
        if band is not None:
            values = c.get(name).reshape(-1, c.bins)
            low, high = np.percentile(values, band, axis=0)
            what = f"{band[0]:g}th–{band[1]:g}th percentile of layers × heads"
            what = f"{label}: {what}" if len(curves) > 1 else what
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, lw=0, label=what)
    T = max(c.length for _, c in curves)
    if bound:
        i = np.arange(T, dtype=np.float64)
        ax.plot(i, i, color="black", ls="--", lw=1, label="bound $i$")
        ax.plot(i, i / 2, color="0.5", ls=":", lw=1, label="uniform row $i/2$")
    if log and band is not None and lowest > 0:  # a band reaching 0 would stretch a log axis by decades
        ax.set_ylim(bottom=max(ax.get_ylim()[0], lowest / 100))
    if train_len:
        ax.axvline(train_len, color="0.3", ls=":", lw=1, label=f"$L$ = {train_len}")
        step = train_len * max(1, T // train_len // 8)  # at most about 8 ticks
        ticks = np.arange(0, T + 1, step)
        ax.set_xticks(ticks, [f"{t // train_len}L" if t else "0" for t in ticks])
    if log:
        ax.set_yscale("log")
    ax.set_xlim(0, T - 1)
    ax.set_xlabel("Position $i$")
    ax.set_ylabel(stat_label(curves[0][1], name))
    if legend == "above":
        # one column where a band's long entry would make the row wider than the axes
        ncol = 1 if band is not None else 2
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=ncol, frameon=False, fontsize="small")
    elif legend:
        ax.legend(loc=legend, frameon=False, fontsize="small")
    return ax
