"""The paper's look in one place: palettes, rcParams, units and the "k/√d" tick labels.

Entropy is stored in nats and plotted in bits (the paper's code uses log₂; its bound "log i" is
drawn as log₂(i+1)); loss is plotted as stored, in nats ("log Perplexity"). Deliberate differences
from the paper's notebooks: mathtext instead of LaTeX rendering (no TeX install needed) and a
serif font that falls back from Times New Roman to DejaVu Serif.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

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
    "TAB10",
    "VARIANTS",
    "bits",
    "family_colors",
    "palette_colors",
    "paper_style",
    "scale_formatter",
    "upper_bound_bits",
]

# The paper's notebooks pick these by hand from seaborn 0.13's palettes (spec §0.8): kept as listed.
NOPE_SCALES = ("#c6dbef", "#a6cee3", "#3787c0", "#084488")  # light → dark blue: s ascending
ROPE_SCALES = ("#fcbba1", "#fb9a99", "#ca181d", "#8c0912")  # light → dark red
# seaborn's own palettes, by name (resolved by `palette_colors`): heads (Paired), layers and grids (tab10)
PAIRED, TAB10 = "Paired", "tab10"
NOPE, NOPE_DARK, ROPE, ROPE_DARK = "#a6cee3", "#084488", "#fb9a99", "#8c0912"  # Figures 1 and 4
# Loss comparisons (Figures 4, 13, 14), from seaborn's Paired: λ(h) green wherever it is drawn, NoPE at
# its trained scale blue beside scaled variants, and the variants set against a baseline red, orange and
# purple, in that order (Figure 13: piecewise, log, λ(h) × log; Figure 14: its two ablations)
HEADS, NOPE_PLAIN = "#33a02c", "#1f78b4"
VARIANTS = ("#e31a1c", "#ff7f00", "#6a3d9a")
SOLID, DASHED = "-", "--"  # line styles: a baseline, a variant set against it
ALIBI, REAL = "#6a3d9a", "#b15928"  # Figure 17, from Paired: the ALiBi model, a real pretrained model
PASSKEY_COLORS = ("#F0496E", "#EBB839", "#0CD79F")  # Figures 6, 8, 9: accuracy 0 → 0.5 → 1, linear

RC = {
    "font.family": "serif",
    "font.serif": ["Times New Roman", "Times", "DejaVu Serif"],
    "mathtext.fontset": "dejavuserif",
    "font.size": 12,
    "axes.spines.top": False,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
}


@contextmanager
def paper_style(font_size: float | None = None):
    """rcParams for the paper's figures, restored on exit."""
    import logging

    import matplotlib as mpl

    rc = dict(RC, **({"font.size": font_size} if font_size else {}))
    quiet = logging.getLogger("matplotlib.font_manager")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "findfont: Times New Roman not found" once per figure otherwise
    try:
        with mpl.rc_context(rc):
            yield
    finally:
        quiet.setLevel(level)


def bits(nats):
    """Entropy in bits from nats."""
    return np.asarray(nats, dtype=np.float64) / math.log(2)


def upper_bound_bits(length: int) -> np.ndarray:
    """log₂(i+1) for positions i = 0..length−1: the entropy of a uniform row over i+1 keys."""
    return np.log2(np.arange(length) + 1.0)


def palette_colors(palette) -> list[str]:
    """Hex colours of a seaborn palette name ("Paired": 12, "tab10": 10) or of a list of colours, in order;
    callers repeat them (colour i mod len), as seaborn does for more hue levels than colours."""
    if isinstance(palette, str):
        import seaborn as sns

        return list(sns.color_palette(palette).as_hex())
    return list(palette)


def family_colors(palette, n: int) -> list[str]:
    """`n` colours from a light→dark family (evenly spread; repeats when n exceeds it)."""
    if n <= len(palette):
        idx = np.round(np.linspace(0, len(palette) - 1, n)).astype(int) if n > 1 else [len(palette) - 1]
        return [palette[i] for i in idx]
    return [palette[i % len(palette)] for i in range(n)]


def scale_formatter():
    """Tick labels "k/√d" for axes in units of the multiplier s (λ = s/√d)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:g}/$\\sqrt{{d}}$")
