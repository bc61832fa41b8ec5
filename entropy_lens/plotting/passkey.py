"""Figure 6's passkey heat map (also Figures 8 and 9): depth × length accuracy, as the paper draws it;
Figure 16's accuracy beside the retrieval head's needle mass and the entropy, by length."""

from __future__ import annotations

import numpy as np
import pandas as pd

from entropy_lens.analysis.passkey import passkey_average
from entropy_lens.errors import EntropyLensError
from entropy_lens.plotting.style import PASSKEY_COLORS

__all__ = ["passkey_heatmap", "passkey_retrieval"]


def passkey_heatmap(table: pd.DataFrame, *, context_length: int, name: str, ax=None):
    """`analysis.passkey_table`'s accuracy (rows: depth, 0% at the top; columns: length ascending),
    annotated to one decimal, coloured #F0496E → #EBB839 → #0CD79F over [0, 1] without a colour bar, a
    black dashed line after the last length within `context_length`, titled "name acc avg" (the mean
    over those lengths; where every length is beyond it, the title says so). A missing cell (NaN) is
    left blank; a value that is no accuracy is refused in one line. Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LinearSegmentedColormap

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 5))
    values = _accuracies(table)
    cmap = LinearSegmentedColormap.from_list("passkey", list(PASSKEY_COLORS))
    ax.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(values.shape[1]), [str(w) for w in table.columns], rotation=45)
    ax.set_yticks(range(values.shape[0]), [f"{d:.0%}" for d in table.index])
    ax.set_xlabel("Context Length")
    ax.set_ylabel("Passkey Depth")
    inside = sum(w <= context_length for w in table.columns)
    if 0 < inside < values.shape[1]:
        ax.axvline(inside - 0.5, color="black", linestyle="--")
    if inside:
        ax.set_title(f"{name} acc {passkey_average(table, context_length):.2f}")
    else:  # the average is undefined
        ax.set_title(f"{name} (every length > context {context_length})")
    return ax


def _accuracies(table: pd.DataFrame) -> np.ndarray:
    """The table's values as float64 in [0, 1] (NaN: a missing cell), lengths as whole numbers."""
    fix = "build it with analysis.passkey_table(record)"
    try:
        values = table.to_numpy(dtype=np.float64)
        lengths = [int(w) for w in table.columns]
    except (TypeError, ValueError):
        raise EntropyLensError(f"the passkey table holds something other than numbers; {fix}") from None
    if lengths != list(table.columns) or ((values < 0) | (values > 1)).any():
        raise EntropyLensError(
            f"the passkey table must hold accuracies in [0, 1] under whole lengths in tokens; {fix}"
        )
    return values


def passkey_retrieval(rows: dict[str, pd.DataFrame], contexts: dict[str, int], *, axes=None):
    """Three stacked panels against prompt length (log2 axis), one line per model of `rows`
    ({name: `analysis.passkey_by_length` frame}): accuracy with its Wilson interval, the retrieval head's
    needle mass with its interval, the answer rows' mean entropy (nats); each model's context length
    (`contexts`) dotted in its colour where it lies within the lengths. `axes`: three Axes to draw into (default: a new figure). Returns
    the Figure."""
    import matplotlib.pyplot as plt

    from entropy_lens.plotting.style import TAB10, palette_colors

    if axes is None:
        _, axes = plt.subplots(3, 1, figsize=(7, 9), sharex=True)
    colors = palette_colors(TAB10)
    panels = [
        ("accuracy", "accuracy_low", "accuracy_high", "accuracy"),
        ("needle_mass", "needle_mass_low", "needle_mass_high", "retrieval head's mass on the key"),
        ("entropy", None, None, "answer-row entropy (nats)"),
    ]
    for i, (name, frame) in enumerate(rows.items()):
        color = colors[i % len(colors)]
        x = frame.index.to_numpy()
        for ax, (value, low, high, _) in zip(axes, panels):
            ax.plot(x, frame[value], marker="o", ms=3, color=color, label=name)
            if low is not None and np.isfinite(frame[low]).all():
                ax.fill_between(x, frame[low], frame[high], color=color, alpha=0.15, lw=0)
            if (
                x[0] <= contexts[name] <= x[-1]
            ):  # a context outside the lengths tested would only widen the axis
                ax.axvline(contexts[name], color=color, linestyle=":", lw=1)
    for ax, (*_, label) in zip(axes, panels):
        ax.set_ylabel(label)
        ax.set_xscale("log", base=2)
    axes[0].set_ylim(-0.02, 1.02)
    axes[-1].set_xlabel("prompt length (tokens)")
    axes[0].legend(fontsize=7, ncol=2)
    fig = axes[0].figure
    fig.tight_layout()
    return fig
