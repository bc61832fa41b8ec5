"""Scale plots: searched λ(h) vs converged entropy (Figure 5) and the best uniform scale per
position with the fitted log law (Figure 7).

Figure 5 differs from the paper's seaborn `lmplot` in one respect: the 95% band of each layer's
linear fit is the analytic (t-distribution) confidence band of the regression line, not a bootstrap.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from entropy_lens.analysis import ScaleFit, Sweep, best_scale_per_position
from entropy_lens.errors import EntropyLensError
from entropy_lens.plotting.style import TAB10, scale_formatter

__all__ = ["best_scale_by_position", "scale_vs_entropy"]


def scale_vs_entropy(
    table: pd.DataFrame,
    *,
    ax=None,
    layers: Sequence[int] | None = None,
    palette: Sequence[str] = TAB10,
    ylim: tuple[float, float] | None = None,
    band: bool = True,
):
    """Scatter of converged entropy (bits) against each head's multiplier, hue = layer, with a linear
    fit and its 95% confidence band per layer. `table` is `head_entropy_vs_scale(...).table`."""
    import matplotlib.pyplot as plt

    missing = {"layer", "scale", "entropy_bits"} - set(table.columns)
    if missing:
        raise EntropyLensError(
            f"the table lacks columns {sorted(missing)}; pass head_entropy_vs_scale(...).table"
        )
    layers = sorted(table["layer"].unique()) if layers is None else list(layers)
    ax = ax if ax is not None else plt.subplots(figsize=(6, 4.5))[1]
    for i, layer in enumerate(layers):
        rows = table[table["layer"] == layer]
        if rows.empty:
            raise EntropyLensError(
                f"layer {layer} is not in the table (layers {sorted(table['layer'].unique())})"
            )
        x, y = rows["scale"].to_numpy(float), rows["entropy_bits"].to_numpy(float)
        color = palette[i % len(palette)]
        ax.scatter(x, y, s=18, color=color, label=str(layer), alpha=0.85)
        if len(x) >= 3 and np.ptp(x) > 0:
            grid, fit, lo, hi = _fit_band(x, y)
            ax.plot(grid, fit, color=color, lw=1.5)
            if band:
                ax.fill_between(grid, lo, hi, color=color, alpha=0.15, lw=0)
    ax.xaxis.set_major_formatter(scale_formatter())
    ax.set_xlabel("$\\lambda$")
    ax.set_ylabel("Entropy $\\bar{H}_i$ (bits)")
    if ylim:
        ax.set_ylim(*ylim)
    ax.legend(
        title="Layers",
        ncol=min(len(layers), 7),
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        frameon=False,
        fontsize="small",
        handletextpad=0.1,
        columnspacing=0.8,
    )
    return ax


def _fit_band(x, y, level: float = 0.95, n: int = 50):
    """Least-squares line of y on x over [min x, max x] and its `level` confidence band."""
    k = len(x)
    slope, intercept = np.polyfit(x, y, 1)
    grid = np.linspace(x.min(), x.max(), n)
    fit = intercept + slope * grid
    resid = y - (intercept + slope * x)
    s = np.sqrt(resid @ resid / (k - 2)) if k > 2 else 0.0
    se = s * np.sqrt(1 / k + (grid - x.mean()) ** 2 / np.sum((x - x.mean()) ** 2))
    t = stats.t.ppf(0.5 + level / 2, k - 2)
    return grid, fit, fit - t * se, fit + t * se


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
    loss on a twin axis (tab:red) and a dashed line at L; returns the left Axes (twin: `ax.right_ax`).
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
            label=f"{how}: $1 + {f.a:.3f}\\,\\ln(i/L)$, $R^2$ = {f.r2:.3f}",
            **style,
        )
    L = fit.train_len if fit is not None else sweep.train_len
    if L:
        ax.axvline(L, color="black", ls="--", lw=1)
    if ylim is not None:
        lo, hi = float(sweep.scales[0]), float(sweep.scales[-1])
        ax.set_ylim(min(ylim[0], lo), max(ylim[1], hi))
    ax.yaxis.set_major_formatter(scale_formatter())
    ax.set_ylabel("$\\lambda$")
    ax.set_xlabel("Position $i$")
    ax.set_xlim(0, len(x) - 1)
    right = ax.twinx()
    ax.right_ax = right
    right.plot(x, best["best_loss"], color="tab:red", lw=1)
    right.set_ylabel("log Perplexity (nats)")
    ax.legend(loc="upper left", frameon=False, fontsize="small")
    if title:
        ax.set_title(title)
    return ax
