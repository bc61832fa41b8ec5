"""Scale plots: searched λ(h) vs converged entropy (Figure 5) and the best uniform scale per
position with the fitted log law (Figure 7).

Figure 5 draws each layer's linear fit and its 95% bootstrap confidence band with seaborn's
`regplot`, as the paper's `lmplot` does, and its colours from seaborn's tab10; heads whose searched
scale sits on the search's clamp (the focus bound) are drawn hollow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from entropy_lens.analysis import ScaleFit, Sweep, best_scale_per_position
from entropy_lens.errors import EntropyLensError
from entropy_lens.plotting.style import TAB10, palette_colors, scale_formatter

__all__ = ["best_scale_by_position", "scale_vs_entropy"]


def scale_vs_entropy(
    table: pd.DataFrame,
    *,
    ax=None,
    layers: Sequence[int] | None = None,
    palette: str | Sequence[str] = TAB10,
    ylim: tuple[float, float] | None = None,
    band: bool = True,
    n_boot: int = 1000,
    seed: int = 0,
    legend: bool = True,
):
    """Scatter of converged entropy (bits) against each head's multiplier, hue = layer, with each layer's
    linear fit and its 95% bootstrap band (`seaborn.regplot`; `band=False`: the line only). Heads with
    `on_clamp` true are drawn hollow. `table` is `head_entropy_vs_scale(...).table`; returns the Axes."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    missing = {"layer", "scale", "entropy_bits"} - set(table.columns)
    if missing:
        raise EntropyLensError(
            f"the table lacks columns {sorted(missing)}; pass head_entropy_vs_scale(...).table"
        )
    layers = sorted(table["layer"].unique()) if layers is None else list(layers)
    colors = palette_colors(palette)
    ax = ax if ax is not None else plt.subplots(figsize=(6, 4.5))[1]
    clamped_any = False
    for i, layer in enumerate(layers):
        rows = table[table["layer"] == layer]
        if rows.empty:
            raise EntropyLensError(
                f"layer {layer} is not in the table (layers {sorted(table['layer'].unique())})"
            )
        color = colors[i % len(colors)]
        if len(rows) >= 3 and np.ptp(rows["scale"].to_numpy(float)) > 0:
            sns.regplot(
                data=rows,
                x="scale",
                y="entropy_bits",
                ax=ax,
                scatter=False,
                color=color,
                ci=95 if band else None,
                n_boot=n_boot,
                seed=seed,
                line_kws={"lw": 1.5},
            )
        clamp = rows["on_clamp"].to_numpy(bool) if "on_clamp" in rows else np.zeros(len(rows), bool)
        ax.scatter(rows["scale"][~clamp], rows["entropy_bits"][~clamp], s=18, color=color, label=str(layer))
        if clamp.any():
            clamped_any = True
            ax.scatter(
                rows["scale"][clamp], rows["entropy_bits"][clamp], s=24, facecolors="none", edgecolors=color
            )
    ax.xaxis.set_major_formatter(scale_formatter())
    ax.xaxis.set_major_locator(MaxNLocator(6))  # "k/√d" labels are wide
    ax.set_xlabel("$\\lambda$")
    ax.set_ylabel("Entropy $\\bar{H}_i$ (bits)")
    if ylim:
        ax.set_ylim(*ylim)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        if clamped_any:
            handles.append(Line2D([], [], ls="", marker="o", mfc="none", mec="black"))
            labels.append("on the clamp")
        ax.legend(
            handles,
            labels,
            title="Layers",
            ncol=min(len(handles), 8),
            loc="lower center",
            bbox_to_anchor=(0.5, 1.0),
            frameon=False,
            fontsize="small",
            handletextpad=0.1,
            columnspacing=0.8,
        )
    return ax


def best_scale_by_position(
    sweep: Sweep,
    fit: ScaleFit | None = None,
    *,
    ax=None,
    smooth: int = 0,
    smoothed_fit: ScaleFit | None = None,
    ylim: tuple[float, float] | None = (0.9, 2.0),
    title: str | None = None,
):
    """Figure 7: best multiplier per position (tab:blue; raw argmin unless `smooth`), the fitted
    1 + a ln(i/L) (black), optionally a second fit made on smoothed loss curves (dash-dot, grey), the best
    loss on a twin axis (tab:red) and a dashed line at L, each named in one legend below the axes; returns the left Axes (twin: `ax.right_ax`).
    `ylim` is widened to the sweep's grid, so no best scale is drawn off the axes; None: autoscale."""
    import matplotlib.pyplot as plt

    best = best_scale_per_position(sweep, smooth=smooth)
    ax = ax if ax is not None else plt.subplots(figsize=(6, 4))[1]
    x = best["position"].to_numpy()
    argmin = f"best $\\lambda$ (loss smoothed ±{smooth})" if smooth else "best $\\lambda$"
    ax.plot(x, best["best_scale"], color="tab:blue", lw=1, label=argmin)
    for f, style in (
        (fit, {"color": "black", "lw": 1.5}),
        (smoothed_fit, {"color": "0.45", "lw": 1.5, "ls": "-."}),
    ):
        if f is None:
            continue
        how = f"smoothed ±{f.smooth}" if f.smooth else "raw argmin"
        ax.plot(
            x[1:],
            f.predict(x[1:]),
            label=f"{how}: $1 {'-' if f.a < 0 else '+'} {abs(f.a):.3f}\\,\\ln(i/L)$, $R^2$ = {f.r2:.3f}",
            **style,
        )
    L = fit.train_len if fit is not None else sweep.train_len
    if L:
        ax.axvline(L, color="black", ls="--", lw=1, label=f"$L$ = {L} (training length)")
    if ylim is not None:
        lo, hi = float(sweep.scales[0]), float(sweep.scales[-1])
        ax.set_ylim(min(ylim[0], lo), max(ylim[1], hi))
    ax.yaxis.set_major_formatter(scale_formatter())
    ax.set_ylabel("$\\lambda$")
    ax.set_xlabel("Position $i$")
    ax.set_xlim(0, len(x) - 1)
    right = ax.twinx()
    ax.right_ax = right
    right.plot(x, best["best_loss"], color="tab:red", lw=1, label="its loss (right axis)")
    right.set_ylabel("log Perplexity (nats)", color="tab:red")
    # below the axes: the argmin spans the whole grid, so no corner inside is free of it; one legend for
    # both axes, so the red trace is named beside the blue
    (left_h, left_l), (right_h, right_l) = ax.get_legend_handles_labels(), right.get_legend_handles_labels()
    handles, labels = left_h + right_h, left_l + right_l
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0, -0.16), frameon=False, fontsize="small")
    if title:
        ax.set_title(title)
    return ax
