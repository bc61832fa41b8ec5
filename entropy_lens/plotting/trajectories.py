"""A per-head statistic over training steps (Figure 18): one line per head, coloured by its layer
(tab10, as the layer grids), the step on x.

    ax = stat_by_step(history.steps, history.values["entropy"], ylabel="entropy (bits)", to_bits=True)
"""

from __future__ import annotations

import numpy as np

from entropy_lens.plotting.style import TAB10, bits, palette_colors

__all__ = ["stat_by_step"]


def stat_by_step(
    steps,
    values,
    *,
    ylabel: str,
    to_bits: bool = False,
    log: bool = False,
    legend: bool = True,
    xlabel: str = "training step",
    ax=None,
):
    """`values` (n, layers, heads) over `steps` (n,): a thin line per head, the colour of its layer (a
    legend entry per layer says so); `to_bits` converts nats to bits; `log` a log y axis."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ax = ax if ax is not None else plt.gca()
    steps = np.asarray(steps)
    values = bits(values) if to_bits else np.asarray(values, dtype=np.float64)
    colors = palette_colors(TAB10)
    n_layers, n_heads = values.shape[1:]
    for layer in range(n_layers):
        for head in range(n_heads):
            ax.plot(steps, values[:, layer, head], color=colors[layer % len(colors)], lw=0.9, alpha=0.8)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend:
        handles = [Line2D([], [], color=colors[i % len(colors)], lw=1.5) for i in range(n_layers)]
        labels = [f"layer {i} ({n_heads} heads)" for i in range(n_layers)]
        ax.legend(handles, labels, fontsize="x-small", frameon=False, loc="best")
    return ax
