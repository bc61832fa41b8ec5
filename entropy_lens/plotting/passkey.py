"""Figure 6's passkey heat map (also Figures 8 and 9): depth × length accuracy, as the paper draws it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from entropy_lens.analysis.passkey import passkey_average
from entropy_lens.plotting.style import PASSKEY_COLORS

__all__ = ["passkey_heatmap"]


def passkey_heatmap(table: pd.DataFrame, *, context_length: int, name: str, ax=None):
    """`analysis.passkey_table`'s accuracy (rows: depth, 0% at the top; columns: length ascending),
    annotated to one decimal, coloured #F0496E → #EBB839 → #0CD79F over [0, 1] without a colour bar, a
    black dashed line after the last length within `context_length`, titled "name acc avg" (the mean
    over those lengths). Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LinearSegmentedColormap

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 5))
    cmap = LinearSegmentedColormap.from_list("passkey", list(PASSKEY_COLORS))
    values = table.to_numpy(dtype=np.float64)
    ax.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(values.shape[1]), [str(w) for w in table.columns], rotation=45)
    ax.set_yticks(range(values.shape[0]), [f"{d:.0%}" for d in table.index])
    ax.set_xlabel("Context Length")
    ax.set_ylabel("Passkey Depth")
    inside = sum(w <= context_length for w in table.columns)
    if 0 < inside < values.shape[1]:
        ax.axvline(inside - 0.5, color="black", linestyle="--")
    ax.set_title(f"{name} acc {passkey_average(table, context_length):.2f}")
    return ax
