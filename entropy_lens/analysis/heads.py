"""Searched per-head scale vs converged entropy, per layer (Figure 5).

Choices:
- "Converged entropy" is the value at one position, by default the last one (`at=-1`), as the
  paper's notebook takes it; `tail=n` averages the last n positions instead (less noisy). Giving
  both is an error rather than a silent preference.
- Entropy is stored in nats; the table carries nats and bits (bits are what the paper plots), and
  the per-layer linear fit is entropy in bits on the scale multiplier, like seaborn's `lmplot`.
- A layer whose scales or entropies are all equal has no correlation: its r, p (and, for equal
  scales, the slope) are NaN, with no exception and no scipy warning.
- With `lower_bound` (the search's focus constraint, 1 in the paper), a head whose scale is within
  1e-6 of it is marked `on_clamp`: the search pushed it to the bound, so its scale is censored (the
  unconstrained optimum may lie below), not an optimum like the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from entropy_lens.analysis.correlation import undefined_because
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult

__all__ = ["HeadScaleTable", "converged_entropy_vs_scale", "head_entropy_vs_scale"]


@dataclass
class HeadScaleTable:
    """Converged entropy of every head against its scale (`head_entropy_vs_scale`), with per-layer correlations.

    Args:
        table: one row per head: layer, head, entropy_nats, entropy_bits, scale, on_clamp.
        correlations: one row per layer: layer, n, pearson_r, pearson_p, spearman_r, spearman_p, slope,
            intercept, and `undefined` (why the correlations are NaN; missing where they are defined).
        at: the position used, or None when a tail mean was taken.
        tail: the number of last positions averaged, or None.
    """

    table: pd.DataFrame  # layer, head, entropy_nats, entropy_bits, scale, on_clamp: one row per head
    # layer, n, pearson_r, pearson_p, spearman_r, spearman_p, slope, intercept, and `undefined`: why the
    # correlations are NaN (missing where they are defined)
    correlations: pd.DataFrame
    at: int | None  # the position used, or None when a tail mean was taken
    tail: int | None  # number of last positions averaged, or None


def head_entropy_vs_scale(
    result: ScanResult,
    scales=None,
    *,
    at: int | None = None,
    tail: int | None = None,
    layers=None,
    lower_bound: float | None = None,
) -> HeadScaleTable:
    """Converged entropy of every head against its scale multiplier, with per-layer correlations.

    Args:
        result: a scan with per-head entropy (layers, heads, T).
        scales: (layers, heads) multipliers; default the scan's own meta `scales`.
        at: position of the converged entropy; default -1 (the last position, as in the paper).
        tail: average the last `tail` positions instead of taking one position.
        layers: layers to include (0-based); default all.
        lower_bound: the search's clamp; heads at it are marked in the column `on_clamp` (None: none).

    Returns:
        HeadScaleTable: one row per head (entropy in nats and bits, scale, on_clamp) and the per-layer
        correlations.

    Raises:
        EntropyLensError: entropy not stored per head, scales of another shape, at and tail both given,
            or at, tail or layers outside the scan.
    """
    n_layers, n_heads, T = result.entropy.shape
    if n_heads <= 1 and result.entropy_reduction in ("mean", "none"):
        raise EntropyLensError(
            f"this scan stored entropy as {result.entropy_reduction!r}, not per head; "
            "rerun the scan with --record heads"
        )
    scales = np.asarray(result.meta.get("scales") if scales is None else scales, dtype=np.float64)
    if scales.shape != (n_layers, n_heads):
        raise EntropyLensError(
            f"scales have shape {scales.shape} but the scan has {n_layers} layers x {n_heads} heads; "
            "pass the head scales of the model that was scanned"
        )
    if at is not None and tail is not None:
        raise EntropyLensError(
            "pass either at= (one position) or tail= (mean of the last positions), not both"
        )
    if tail is not None:
        if not 1 <= tail <= T:
            raise EntropyLensError(f"tail={tail} must be between 1 and the scan length {T}")
        converged = result.entropy[:, :, T - tail :].astype(np.float64).mean(axis=2)
    else:
        at = -1 if at is None else int(at)
        if not -T <= at < T:
            raise EntropyLensError(f"at={at} is outside the scan's {T} positions; pass -{T} <= at < {T}")
        converged = result.entropy[:, :, at].astype(np.float64)
    table = converged_entropy_vs_scale(converged, scales, layers=layers, lower_bound=lower_bound)
    return HeadScaleTable(
        table=table.table,
        correlations=table.correlations,
        at=None if tail is not None else at,
        tail=tail,
    )


def converged_entropy_vs_scale(
    converged, scales, *, layers=None, lower_bound: float | None = None
) -> HeadScaleTable:
    """`head_entropy_vs_scale` from a converged entropy already taken: `converged` (layers, heads) nats
    (one position of a scan, or a search's last step: Figure 18) against `scales` (layers, heads).

    Args:
        converged: (layers, heads) converged entropy, nats.
        scales: (layers, heads) multipliers of 1/√d.
        layers: layers to include (0-based); default all.
        lower_bound: the search's clamp; heads at it are marked in the column `on_clamp` (None: none).

    Returns:
        HeadScaleTable: as `head_entropy_vs_scale`'s, with at and tail None.

    Raises:
        EntropyLensError: converged and scales not both (layers, heads), or a layer that does not exist.
    """
    converged = np.asarray(converged, dtype=np.float64)
    scales = np.asarray(scales, dtype=np.float64)
    if converged.ndim != 2 or scales.shape != converged.shape:
        raise EntropyLensError(
            f"scales have shape {scales.shape} but the entropy {converged.shape}; pass the head scales "
            "of the model whose entropy this is, (layers, heads) each"
        )
    n_layers, n_heads = converged.shape
    chosen = list(range(n_layers)) if layers is None else [int(layer) for layer in layers]
    bad = [layer for layer in chosen if not 0 <= layer < n_layers]
    if bad:
        raise EntropyLensError(f"layers {bad} do not exist; the scan has layers 0..{n_layers - 1}")

    heads = np.arange(n_heads)
    table = pd.DataFrame(
        {
            "layer": np.repeat(chosen, n_heads),
            "head": np.tile(heads, len(chosen)),
            "entropy_nats": converged[chosen].ravel(),
            "entropy_bits": converged[chosen].ravel() / np.log(2),
            "scale": scales[chosen].ravel(),
            "on_clamp": np.zeros(len(chosen) * n_heads, bool)
            if lower_bound is None
            else np.abs(scales[chosen].ravel() - lower_bound) <= 1e-6,
        }
    )
    rows = [
        _layer_stats(layer, g["scale"].to_numpy(), g["entropy_bits"].to_numpy())
        for layer, g in table.groupby("layer", sort=False)
    ]
    columns = [
        "layer",
        "n",
        "pearson_r",
        "pearson_p",
        "spearman_r",
        "spearman_p",
        "slope",
        "intercept",
        "undefined",
    ]
    return HeadScaleTable(
        table=table,
        correlations=pd.DataFrame(rows, columns=columns),
        at=None,
        tail=None,
    )


def _layer_stats(layer: int, x: np.ndarray, y: np.ndarray) -> dict:
    """Pearson/Spearman of (scale x, entropy bits y) and the least-squares line y = slope·x + intercept."""
    nan = float("nan")
    row = {
        "layer": int(layer),
        "n": len(x),
        "pearson_r": nan,
        "pearson_p": nan,
        "spearman_r": nan,
        "spearman_p": nan,
        "slope": nan,
        "intercept": nan,
        "undefined": undefined_because(x, y, items="heads", x_name="head's scale", y_name="head's entropy"),
    }
    if len(x) >= 2 and np.ptp(x) > 0:
        slope = float(np.cov(x, y, bias=True)[0, 1] / np.var(x))
        row.update(slope=slope, intercept=float(y.mean() - slope * x.mean()))
    if row["undefined"] is None:
        pearson, spearman = stats.pearsonr(x, y), stats.spearmanr(x, y)
        row.update(
            pearson_r=float(pearson.statistic),
            pearson_p=float(pearson.pvalue),
            spearman_r=float(spearman.statistic),
            spearman_p=float(spearman.pvalue),
        )
    return row
