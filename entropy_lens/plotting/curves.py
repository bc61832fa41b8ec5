"""Mean entropy (solid, left axis, bits) and smoothed log-PPL (dashed, right axis, nats) by
position: Figures 1, 2 and 4.

    ax = entropy_loss([("NoPE", nope), ("NoPE λ=1.2/√d", scaled)], colors=[NOPE, NOPE_DARK])
    ax.right_ax  # the twin axis holding the loss lines (as pandas names its secondary axis)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from entropy_lens.analysis import moving_average
from entropy_lens.errors import EntropyLensError
from entropy_lens.plotting.style import bits
from entropy_lens.results import ScanResult

__all__ = ["entropy_loss", "loss_curves"]


def entropy_loss(
    curves: Sequence[tuple[str, ScanResult]],
    *,
    colors: Sequence[str] | None = None,
    ax=None,
    length: int | None = None,
    smooth: int = 50,
    train_len: int | None = None,
    entropy_label: str | None = "Entropy $\\bar{H}_i$ (bits)",
    loss_label: str | None = "log Perplexity (nats)",
    legend: str | None = "above",
    linewidth: float = 2.0,
    style_key: bool = False,
):
    """One solid entropy line and one dashed loss line per (label, result); returns the left Axes.

    length: truncate every curve to its first `length` positions (default: the shortest result).
    smooth: half-width of the centred moving average applied to the loss only (spec §0.7; 0: raw).
    train_len: draw a dotted vertical line there (None: none, as in the paper's final figures).
    legend: "above" (a row above the axes, clear of the curves; the paper: "upper left"), any
        matplotlib location, or None.
    style_key: add two grey legend entries saying what the line styles are (solid: entropy, left axis;
        dashed: log-perplexity, right axis), so the figure reads without its caption.
    """
    import matplotlib.pyplot as plt

    if not curves:
        raise EntropyLensError("entropy_loss needs at least one (label, ScanResult) pair")
    for label, result in curves:
        if result.n_heads == 0:
            raise EntropyLensError(
                f"{label}: the scan captured no entropy (--record none); rescan with --record mean or heads"
            )
    colors = list(colors) if colors is not None else [None] * len(curves)
    if len(colors) != len(curves):
        raise EntropyLensError(f"{len(curves)} curves but {len(colors)} colours; pass one colour per curve")
    T = min(r.length for _, r in curves) if length is None else int(length)
    if T > min(r.length for _, r in curves):
        raise EntropyLensError(f"length {T} exceeds the shortest result ({min(r.length for _, r in curves)})")
    ax = ax if ax is not None else plt.subplots(figsize=(8, 4))[1]
    right = ax.twinx()
    ax.right_ax = right
    x = np.arange(T)
    for (label, result), color in zip(curves, colors):
        (line,) = ax.plot(x, bits(result.mean_entropy[:T]), color=color, lw=linewidth, label=label)
        loss = moving_average(result.loss[:T], smooth) if smooth else result.loss[:T]
        right.plot(x, loss, color=line.get_color(), lw=linewidth, ls="--", label=f"{label} (loss)")
    if train_len:
        ax.axvline(train_len, color="0.3", ls=":", lw=1, label=f"$L$ = {train_len}")
    ax.set_xlim(0, T - 1)
    ax.set_xlabel("Position $i$")
    extra = []
    if style_key:
        from matplotlib.lines import Line2D

        extra = [
            Line2D([], [], color="0.35", lw=linewidth, label="solid: entropy (left axis)"),
            Line2D([], [], color="0.35", lw=linewidth, ls="--", label="dashed: log-perplexity (right axis)"),
        ]
    if entropy_label:
        ax.set_ylabel(entropy_label)
    if loss_label:
        right.set_ylabel(loss_label)
    _legend(ax, legend, len(curves), extra)
    return ax


def loss_curves(
    curves: Sequence[tuple[str, np.ndarray]],
    *,
    colors: Sequence[str] | None = None,
    styles: Sequence[str] | None = None,
    ax=None,
    smooth: int = 50,
    train_len: int | None = None,
    legend: str | None = "above",
):
    """One loss-by-position line per (label, loss (T,) nats), smoothed ±`smooth`; returns the Axes.
    train_len: a dotted vertical line there and tick labels in multiples of L."""
    import matplotlib.pyplot as plt

    if not curves:
        raise EntropyLensError("loss_curves needs at least one (label, loss) pair")
    colors = list(colors) if colors is not None else [None] * len(curves)
    styles = list(styles) if styles is not None else ["-"] * len(curves)
    if not len(colors) == len(styles) == len(curves):
        raise EntropyLensError(f"{len(curves)} curves: pass as many colours and styles")
    ax = ax if ax is not None else plt.subplots(figsize=(8, 4))[1]
    T = min(len(loss) for _, loss in curves)
    x = np.arange(T)
    for (label, loss), color, style in zip(curves, colors, styles):
        loss = np.asarray(loss[:T], dtype=np.float64)
        ax.plot(
            x, moving_average(loss, smooth) if smooth else loss, color=color, ls=style, lw=1.8, label=label
        )
    if train_len:
        ax.axvline(train_len, color="0.3", ls=":", lw=1)
        ticks = np.arange(0, T + 1, train_len)
        ax.set_xticks(ticks, [f"{t // train_len}L" if t else "0" for t in ticks])
    ax.set_xlim(0, T - 1)
    ax.set_xlabel("Position $i$")
    ax.set_ylabel("log Perplexity (nats)")
    _legend(ax, legend, len(curves))
    return ax


def _legend(ax, legend: str | None, n: int, extra: Sequence = ()) -> None:
    """ "above": a row of up to two columns above the axes, clear of the curves; a matplotlib location;
    or None. `extra`: handles added after the Axes' own (a key to the line styles)."""
    handles, labels = ax.get_legend_handles_labels()
    handles, labels = handles + list(extra), labels + [h.get_label() for h in extra]
    if legend == "above":
        ax.legend(
            handles,
            labels,
            loc="lower left",
            bbox_to_anchor=(0, 1.0),
            ncol=min(n, 2),
            frameon=False,
            fontsize="small",
            handlelength=1.5,
            columnspacing=1.0,
        )
    elif legend:
        ax.legend(handles, labels, loc=legend, frameon=False)


def perplexity_by_length(
    rows: dict,
    *,
    colors: Sequence[str] | None = None,
    styles: Sequence[str] | None = None,
    ax=None,
    train_len=None,
):
    """The paper's Table 2 drawn: sliding-window perplexity against window length W, one line per row
    {label: [WindowPPL, ...] (ascending W)}, 95% intervals as error bars, both axes logarithmic;
    returns the Axes. train_len: tick labels in multiples of L."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    if not rows:
        raise EntropyLensError("perplexity_by_length needs at least one row")
    colors = list(colors) if colors is not None else [None] * len(rows)
    styles = list(styles) if styles is not None else ["-"] * len(rows)
    ax = ax if ax is not None else plt.subplots(figsize=(7, 4.5))[1]
    for (label, cells), color, style in zip(rows.items(), colors, styles):
        W = np.array([c.length for c in cells])
        ppl = np.array([c.ppl for c in cells])
        below = ppl - np.array([c.ppl_low for c in cells])
        above = np.array([c.ppl_high for c in cells]) - ppl
        ax.errorbar(
            W, ppl, yerr=[below, above], color=color, ls=style, marker="o", ms=4, capsize=3, label=label
        )
    lengths = sorted({c.length for cells in rows.values() for c in cells})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 20, 50, 100, 200, ...
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    names = [f"{W // train_len}L" if train_len and W % train_len == 0 else str(W) for W in lengths]
    ax.set_xticks(lengths, names)
    ax.minorticks_off()
    ax.set_xlabel("window length W (tokens of context)")
    ax.set_ylabel("sliding-window perplexity")
    _legend(ax, "above", len(rows))
    return ax
