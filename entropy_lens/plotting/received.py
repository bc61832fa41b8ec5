"""Attention received by key position (Figure 19): per model a line of the mean share each key receives,
beside what rows attending uniformly would give it, and per-layer numbers as grouped bars.

    ax = received_by_key([("NoPE", shares.by_key[2])], colors=[NOPE], uniform=shares.by_key_uniform,
                         train_len=128)
    ax = layer_bars([("NoPE", shares.beyond), ("RoPE", other.beyond)], ylabel="share beyond L",
                    reference=shares.beyond_uniform)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from entropy_lens.errors import EntropyLensError

__all__ = ["layer_bars", "received_by_key"]


def _colors(colors, n: int) -> list:
    colors = list(colors) if colors is not None else [None] * n
    if len(colors) != n:
        raise EntropyLensError(f"{n} series but {len(colors)} colours; pass one colour per series")
    return colors


def received_by_key(
    lines: Sequence[tuple[str, np.ndarray]],
    *,
    colors: Sequence[str] | None = None,
    uniform: np.ndarray | None = None,
    train_len: int | None = None,
    log: bool = True,
    ylabel: str = "mean share received",
    legend: str | None = "above",
    ax=None,
):
    """One line per (label, values by key position) against the key position j; returns the Axes.

    Args:
        lines: (label, (keys,) values) per model: a key statistic, e.g. received_mean over heads.
        colors: one colour per line (None: matplotlib's cycle).
        uniform: (keys,) what uniform rows give each key, drawn dashed (None: not drawn).
        train_len: L: a dotted vertical line there and ticks in multiples of L (None: neither).
        log: a logarithmic y axis (shares that span decades).
        ylabel: the y axis's label.
        legend: "above" the axes, a matplotlib location, or None for none.
        ax: the Axes to draw on (None: a new figure's).

    Returns:
        matplotlib.axes.Axes: the Axes drawn on.
    """
    import matplotlib.pyplot as plt

    if not lines:
        raise EntropyLensError("received_by_key needs at least one (label, values) pair")
    ax = ax if ax is not None else plt.subplots(figsize=(6, 4))[1]
    for (label, values), color in zip(lines, _colors(colors, len(lines))):
        ax.plot(np.arange(len(values)), values, color=color, lw=1.0, label=label)
    T = max(len(values) for _, values in lines)
    if uniform is not None:
        ax.plot(np.arange(len(uniform)), uniform, color="black", ls="--", lw=1, label="uniform rows")
    if train_len:
        ax.axvline(train_len, color="0.3", ls=":", lw=1, label=f"$L$ = {train_len}")
        step = train_len * max(1, T // train_len // 8)
        ticks = np.arange(0, T + 1, step)
        ax.set_xticks(ticks, [f"{t // train_len}L" if t else "0" for t in ticks])
    if log:
        ax.set_yscale("log")
    ax.set_xlim(0, T - 1)
    ax.set_xlabel("Key position $j$")
    ax.set_ylabel(ylabel)
    if legend == "above":
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False, fontsize="small")
    elif legend:
        ax.legend(loc=legend, frameon=False, fontsize="small")
    return ax


def layer_bars(
    values: Sequence[tuple[str, np.ndarray]],
    *,
    ylabel: str,
    colors: Sequence[str] | None = None,
    reference: float | None = None,
    reference_label: str = "uniform rows",
    log: bool = False,
    legend: str | None = None,
    ax=None,
):
    """Grouped bars: per layer one bar per (label, (layers,) values); returns the Axes.

    Args:
        values: (label, (layers,) values) per model, every model with the same layers.
        ylabel: the y axis's label.
        colors: one colour per model (None: matplotlib's cycle).
        reference: a dashed horizontal line at this value (None: none).
        reference_label: the reference line's legend entry.
        log: a logarithmic y axis.
        legend: a matplotlib location for a legend, or None for none.
        ax: the Axes to draw on (None: a new figure's).

    Returns:
        matplotlib.axes.Axes: the Axes drawn on.
    """
    import matplotlib.pyplot as plt

    if not values:
        raise EntropyLensError("layer_bars needs at least one (label, values) pair")
    layers = {len(v) for _, v in values}
    if len(layers) != 1:
        raise EntropyLensError(f"every model needs the same layers; got {sorted(layers)} values")
    n = layers.pop()
    ax = ax if ax is not None else plt.subplots(figsize=(4, 3))[1]
    width = 0.8 / len(values)
    x = np.arange(n)
    for k, ((label, v), color) in enumerate(zip(values, _colors(colors, len(values)))):
        ax.bar(x + (k - (len(values) - 1) / 2) * width, v, width, color=color, label=label)
    if reference is not None:
        ax.axhline(reference, color="black", ls="--", lw=1, label=reference_label)
    if log:
        ax.set_yscale("log")
    ax.set_xticks(x, [str(i) for i in x])
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend(loc=legend, frameon=False, fontsize="small")
    return ax
