"""Plots of scan results in the paper's style: every function takes `ax=None` and returns the Axes
(grids return the Figure). Imports results and analysis, never the capture machinery.

    from entropy_lens.plotting import entropy_loss, head_lines, paper_style
    with paper_style():
        ax = entropy_loss([("NoPE", ScanResult.load("nope.npz"))])
"""

from entropy_lens.plotting.curves import entropy_loss, loss_curves, perplexity_by_length
from entropy_lens.plotting.heads import all_heads_grid, head_lines, models_by_layers
from entropy_lens.plotting.passkey import passkey_heatmap, passkey_retrieval
from entropy_lens.plotting.received import layer_bars, received_by_key
from entropy_lens.plotting.scales import best_scale_by_position, scale_vs_entropy
from entropy_lens.plotting.stats import STAT_NAMES, stat_by_position, stat_label, window_label
from entropy_lens.plotting.style import (
    ALIBI,
    DASHED,
    HEADS,
    NOPE,
    NOPE_DARK,
    NOPE_PLAIN,
    NOPE_SCALES,
    PAIRED,
    PASSKEY_COLORS,
    REAL,
    ROPE,
    ROPE_DARK,
    ROPE_SCALES,
    SOLID,
    TAB10,
    VARIANTS,
    bits,
    family_colors,
    palette_colors,
    paper_style,
    upper_bound_bits,
)
from entropy_lens.plotting.trajectories import stat_by_step

__all__ = [
    "ALIBI",
    "DASHED",
    "HEADS",
    "NOPE",
    "NOPE_DARK",
    "NOPE_PLAIN",
    "NOPE_SCALES",
    "PAIRED",
    "PASSKEY_COLORS",
    "REAL",
    "ROPE",
    "ROPE_DARK",
    "ROPE_SCALES",
    "SOLID",
    "STAT_NAMES",
    "TAB10",
    "VARIANTS",
    "all_heads_grid",
    "best_scale_by_position",
    "bits",
    "entropy_loss",
    "family_colors",
    "head_lines",
    "layer_bars",
    "loss_curves",
    "models_by_layers",
    "palette_colors",
    "paper_style",
    "passkey_heatmap",
    "passkey_retrieval",
    "perplexity_by_length",
    "received_by_key",
    "scale_vs_entropy",
    "stat_by_position",
    "stat_by_step",
    "stat_label",
    "upper_bound_bits",
    "window_label",
]
