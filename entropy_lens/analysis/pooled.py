"""One correlation for all layers at once: the pooled within-layer correlation of head scale and entropy,
with a bootstrap confidence interval (Figure 5, beside the per-layer correlations).

Within each layer, x (the head's scale) and y (its converged entropy) are centred on the layer's
means; r is Pearson's correlation of the centred values over every head of every layer. Centring
removes what differs between layers (the paper: lower layers are more dispersed), which would
otherwise mix a between-layer trend into the within-layer one the paper describes.

The interval resamples heads with replacement within each layer (each layer keeps its head count),
recomputes r, and takes the percentiles (1 ± level)/2 of those r: a percentile bootstrap, seeded,
so the same table gives the same interval. Resamples in which a layer has no variance left add
nothing to that layer's centred sums; a resample with no variance at all is dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from entropy_lens.analysis.correlation import undefined_because
from entropy_lens.errors import EntropyLensError

__all__ = ["PooledCorrelation", "pooled_within_layer"]


@dataclass(frozen=True)
class PooledCorrelation:
    """A pooled within-layer correlation and its bootstrap interval (`pooled_within_layer`).

    Args:
        r: Pearson r of the within-layer-centred values (NaN when undefined).
        low: the bootstrap percentile interval's lower end, at `level`.
        high: its upper end.
        level: the interval's level, in (0, 1).
        n: heads.
        n_layers: layers.
        n_boot: resamples drawn.
        dropped: resamples with no variance left (not in the interval).
        undefined: why r is NaN, in words; None when defined.
    """

    r: float  # Pearson r of the within-layer-centred values (NaN when undefined)
    low: float  # bootstrap percentile interval at `level`
    high: float
    level: float
    n: int  # heads
    n_layers: int
    n_boot: int  # resamples drawn
    dropped: int  # resamples with no variance left (not in the interval)
    undefined: str | None  # why r is NaN, in words; None when defined


def pooled_within_layer(
    table: pd.DataFrame,
    *,
    x: str = "scale",
    y: str = "entropy_bits",
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> PooledCorrelation:
    """Pooled within-layer Pearson r of `x` and `y` over the rows of `table` (columns layer, x, y: one row
    per head, e.g. `head_entropy_vs_scale(...).table`) and its stratified percentile-bootstrap interval.

    Args:
        table: one row per head, with columns layer, x and y.
        x: the first column's name.
        y: the second column's name.
        n_boot: bootstrap resamples (>= 1).
        level: the interval's level, in (0, 1).
        seed: the resampling seed.

    Returns:
        PooledCorrelation: r, its interval, and why r is undefined where it is.

    Raises:
        EntropyLensError: a column missing, level outside (0, 1) or n_boot < 1.
    """
    missing = {"layer", x, y} - set(table.columns)
    if missing:
        raise EntropyLensError(
            f"the table lacks columns {sorted(missing)}; pass head_entropy_vs_scale(...).table"
        )
    if not 0 < level < 1 or n_boot < 1:
        raise EntropyLensError(f"level must lie in (0, 1) and n_boot be at least 1 (got {level}, {n_boot})")
    groups = [
        (g[x].to_numpy(np.float64), g[y].to_numpy(np.float64)) for _, g in table.groupby("layer", sort=True)
    ]
    cx = np.concatenate([gx - gx.mean() for gx, _ in groups]) if groups else np.zeros(0)
    cy = np.concatenate([gy - gy.mean() for _, gy in groups]) if groups else np.zeros(0)
    why = undefined_because(
        cx,
        cy,
        items="heads",
        x_name="head's scale less its layer's mean",
        y_name="head's entropy less its layer's mean",
    )
    nan = float("nan")
    if why is not None:
        return PooledCorrelation(nan, nan, nan, level, len(cx), len(groups), 0, 0, why)
    rng = np.random.default_rng(seed)
    rs = []
    for _ in range(n_boot):
        sxy = sxx = syy = 0.0
        for gx, gy in groups:
            pick = rng.integers(0, len(gx), len(gx))
            bx, by = gx[pick] - gx[pick].mean(), gy[pick] - gy[pick].mean()
            sxy, sxx, syy = sxy + bx @ by, sxx + bx @ bx, syy + by @ by
        if sxx > 0 and syy > 0:
            rs.append(sxy / np.sqrt(sxx * syy))
    low, high = np.quantile(rs, [(1 - level) / 2, (1 + level) / 2]) if rs else (nan, nan)
    r = float(cx @ cy / np.sqrt((cx @ cx) * (cy @ cy)))
    return PooledCorrelation(
        r, float(low), float(high), level, len(cx), len(groups), n_boot, n_boot - len(rs), None
    )
