"""Per-head entropy by position: one line per head (Figure 3's panels, Figures 10–12's grids).

Entropy is plotted in bits; the optional dashed bound is log₂(i+1), a uniform row over i+1 keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.plotting.style import PAIRED, TAB10, bits, palette_colors, upper_bound_bits
from entropy_lens.results import ScanResult

__all__ = ["all_heads_grid", "head_lines", "models_by_layers"]


def head_lines(
    result: ScanResult,
    layer: int,
    *,
    ax=None,
    heads: Sequence[int] | None = None,
    stride: int = 1,
    bound: bool = False,
    palette: str | Sequence[str] = PAIRED,
    linewidth: float = 1.0,
):
    """Entropy (bits) of each head of `layer` at positions 0, stride, 2·stride, ...; returns the Axes.

    `palette` is a seaborn palette name or a list of colours; head h gets colour h mod its length (the
    palette repeats, as seaborn's does).
    """
    import matplotlib.pyplot as plt

    if result.entropy_reduction != "heads":
        raise EntropyLensError(
            f"this scan stored entropy as {result.entropy_reduction!r}; per-head "
            "plots need a scan with --record heads"
        )
    if not 0 <= layer < result.n_layers:
        raise EntropyLensError(f"layer {layer} is outside the scan's 0..{result.n_layers - 1}")
    heads = range(result.n_heads) if heads is None else heads
    bad = [h for h in heads if not 0 <= h < result.n_heads]
    if bad:
        raise EntropyLensError(f"heads {bad} are outside the scan's 0..{result.n_heads - 1}")
    if stride < 1:
        raise EntropyLensError(f"stride must be at least 1 (got {stride})")
    ax = ax if ax is not None else plt.subplots(figsize=(4, 3))[1]
    x = np.arange(0, result.length, stride)
    palette = palette_colors(palette)
    for h in heads:
        ax.plot(x, bits(result.entropy[layer, h, ::stride]), color=palette[h % len(palette)], lw=linewidth)
    if bound:
        ax.plot(np.arange(result.length), upper_bound_bits(result.length), "k--", lw=1)
    ax.set_xlim(0, result.length - 1)
    return ax


def models_by_layers(
    results: Mapping[str, ScanResult],
    layers: Sequence[int],
    *,
    heads: Sequence[int] | None = None,
    bound: bool = False,
    figsize=(9, 5),
):
    """Figure 3: rows = models (in the mapping's order), columns = layers; returns the Figure."""
    import matplotlib.pyplot as plt

    if not results or not layers:
        raise EntropyLensError("models_by_layers needs at least one result and one layer")
    fig, axes = plt.subplots(len(results), len(layers), figsize=figsize, squeeze=False, sharex=True)
    middle = len(layers) // 2
    for row, (name, result) in enumerate(results.items()):
        for col, layer in enumerate(layers):
            ax = head_lines(result, layer, ax=axes[row, col], heads=heads, bound=bound)
            ax.set_title(f"{name} - Layer {layer}" if col == middle else f"Layer {layer}", fontsize="medium")
    first = next(iter(results.values()))
    _label_grid(fig, range(first.n_heads) if heads is None else heads, PAIRED, bound)
    return fig


def all_heads_grid(result: ScanResult, *, stride: int = 1, ncols: int = 4, bound: bool = True, title=None):
    """Figures 10–12: every layer's heads, layer l at row l // ncols, column l % ncols, on A4 portrait
    (scaled down for few layers); unused cells removed; returns the Figure."""
    import matplotlib.pyplot as plt

    nrows = -(-result.n_layers // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(8.27, min(11.69, 2.0 * nrows + 0.6)), squeeze=False, sharex=True, sharey=True
    )
    for layer in range(nrows * ncols):
        ax = axes[layer // ncols, layer % ncols]
        if layer >= result.n_layers:
            ax.remove()
            continue
        head_lines(result, layer, ax=ax, stride=stride, bound=bound, palette=TAB10)
        ax.set_title(f"Layer {layer}", fontsize="medium")
    if title:
        fig.suptitle(title)
    _label_grid(fig, range(result.n_heads), TAB10, bound)
    return fig


def _label_grid(fig, heads: Sequence[int], palette: str | Sequence[str], bound: bool) -> None:
    """Shared axis labels and one legend of the heads' colours (and the bound) below the panels."""
    from matplotlib.lines import Line2D

    palette = palette_colors(palette)
    handles = [Line2D([], [], color=palette[h % len(palette)], label=f"head {h}") for h in heads]
    if bound:
        handles.append(Line2D([], [], color="k", ls="--", label="log₂(i+1)"))
    ncol = min(len(handles), 8)
    inch = 1 / fig.get_figheight()  # one inch as a fraction of the figure's height
    legend_h = 0.3 * inch * -(-len(handles) // ncol)  # the legend's rows at the bottom, 0.3 in each
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize="small", frameon=False)
    fig.supxlabel("position i", y=legend_h, va="bottom")
    fig.supylabel("entropy (bits)")
    fig.tight_layout(rect=(0, legend_h, 1, 1))  # tight_layout makes room for the sup-labels itself
