"""Where a per-position curve (mean entropy or loss) leaves its in-distribution level.

The paper says the entropy and loss curves have an "inflection point" at the same position, but
does not define one. This module fixes a definition, so the claim becomes a number:

1. Smooth the curve with the paper's centred moving average (half-width `smooth`; the window
   shrinks at the edges and divides by the number of points it holds): `moving_average`.
2. Level: the median of the smoothed curve over the baseline window [b0·L, b1·L) (default
   [L/2, L): in distribution, past the early positions where loss is high and entropy low).
3. Spread: the noise of one smoothed value, MAD·1.4826 of (raw − smoothed) over the baseline
   window divided by √(2·smooth + 1), floored at 1e-8·max(1, |level|) so a noise-free curve
   does not get a zero threshold.
4. Threshold: max(abs_threshold, k·spread, rel·|level|), defaults abs 0, k = 6, rel = 0.02.
   k = 6 keeps white noise from ever crossing (a 6σ excursion of a smoothed value is ~1e-9 per
   position). The relative term matters on real curves: noise shared between positions (a whole
   sample being hard) is low-frequency, the (raw − smoothed) residual cannot see it, and the
   in-distribution curve drifts slowly (entropy grows like log i for dispersed heads); 2% of the
   level (≈0.05 nats of loss, ≈0.1 nats of mean entropy) is above that drift yet far below the
   rises the paper calls inflections (loss climbing by a nat or more).
5. Reference: by default (`trend="log"`) the line c + b·ln(i+1) least-squares fitted to the
   smoothed baseline window and extrapolated, so in-distribution growth like log i (entropy of
   dispersed heads) is not a departure; `trend="flat"` uses the level itself.
6. Inflection: the first position p ≥ b0·L at which the smoothed curve is beyond the reference ±
   threshold (up by default: entropy and loss both rise) at every position of [p, p + persist).
   The default persist is max(32, 2·smooth + 2): one raw spike moves the smoothed curve over
   exactly 2·smooth + 1 positions, so no single spike, however tall, can count. A departure that
   starts within `persist` positions of the end is not seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from entropy_lens.analysis.correlation import undefined_because
from entropy_lens.analysis.sweep import Sweep, uniform_scale
from entropy_lens.errors import EntropyLensError

__all__ = [
    "Inflection",
    "InflectionAgreement",
    "find_inflection",
    "inflection_agreement",
    "inflections",
    "moving_average",
]


@dataclass
class Inflection:
    position: int | None  # first position of the departure, None if the curve never departs
    level: float  # in-distribution level (median of the smoothed curve over the baseline window)
    spread: float  # noise of one smoothed value
    threshold: float  # departure size used
    persist: int  # positions the departure had to last


@dataclass
class InflectionAgreement:
    n: int  # scans where both inflections exist
    pearson_r: float
    pearson_p: float
    mean_abs_diff: float  # mean |entropy − loss| inflection position, in positions
    undefined: str | None = None  # why pearson_r/p are NaN (correlation.undefined_because), None if defined


def moving_average(x, half_width: int) -> np.ndarray:
    """Centred moving average: out[i] = mean of x[max(0, i−w) : i+w+1] (the window shrinks at the edges)."""
    if half_width < 0:
        raise EntropyLensError(f"smoothing half-width must be >= 0 (got {half_width})")
    x = np.asarray(x, dtype=np.float64)
    csum = np.concatenate([[0.0], np.cumsum(x)])
    i = np.arange(len(x))
    lo, hi = np.maximum(i - half_width, 0), np.minimum(i + half_width + 1, len(x))
    return (csum[hi] - csum[lo]) / (hi - lo)


def find_inflection(
    curve,
    *,
    train_len: int,
    smooth: int = 50,
    baseline: tuple[float, float] = (0.5, 1.0),
    k: float = 6.0,
    rel: float = 0.02,
    abs_threshold: float = 0.0,
    threshold: float | None = None,
    persist: int | None = None,
    direction: str = "up",
    trend: str = "log",
) -> Inflection:
    """First position where the smoothed `curve` leaves its in-distribution level (see module docstring).

    Parameters
    ----------
    curve : (T,) per-position values (mean entropy or loss).
    train_len : L, the training length; the baseline window is [baseline[0]·L, baseline[1]·L).
    threshold : use this departure size instead of max(abs_threshold, k·spread, rel·|level|).
    persist : positions the departure must last; default max(32, 2·smooth + 2).
    direction : "up", "down" or "both".
    trend : "log" (default): departures are measured from c + b·ln(i+1) fitted to the smoothed
        baseline window, so a curve that keeps its in-distribution growth (entropy of dispersed
        heads grows like log i) does not count; "flat": from the baseline's median `level`.
    """
    y = np.asarray(curve, dtype=np.float64)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise EntropyLensError(
            "the curve must be one finite value per position; drop NaN/inf positions first"
        )
    if trend not in ("log", "flat"):
        raise EntropyLensError(f"trend={trend!r}; pass 'log' or 'flat'")
    if direction not in ("up", "down", "both"):
        raise EntropyLensError(f"direction={direction!r}; pass 'up', 'down' or 'both'")
    if train_len is None or train_len < 1:
        raise EntropyLensError(f"training length {train_len} must be a positive int; pass --train-len")
    lo, hi = int(baseline[0] * train_len), min(int(baseline[1] * train_len), len(y))
    if hi - lo < 2:
        raise EntropyLensError(
            f"baseline window [{lo}, {hi}) holds {max(hi - lo, 0)} positions of a {len(y)}-position curve; "
            "pass a longer curve or another baseline"
        )
    smoothed = moving_average(y, smooth)
    level = float(np.median(smoothed[lo:hi]))
    resid = y[lo:hi] - smoothed[lo:hi]
    mad = float(np.median(np.abs(resid - np.median(resid)))) * 1.4826
    spread = max(mad / np.sqrt(2 * smooth + 1), 1e-8 * max(1.0, abs(level)))
    if threshold is None:
        threshold = max(abs_threshold, k * spread, rel * abs(level))
    persist = max(32, 2 * smooth + 2) if persist is None else int(persist)
    if persist < 1:
        raise EntropyLensError(f"persist={persist} must be at least 1 position")
    if trend == "log":
        x = np.log(np.arange(len(y)) + 1.0)
        slope, intercept = np.polyfit(x[lo:hi], smoothed[lo:hi], 1)
        dev = smoothed - (intercept + slope * x)
    else:
        dev = smoothed - level
    beyond = {"up": dev > threshold, "down": dev < -threshold, "both": np.abs(dev) > threshold}[direction]
    beyond[:lo] = False  # search from the baseline start: early positions sit far from the level
    # p counts when all of beyond[p : p + persist] hold, i.e. their sum (from a cumulative sum) is persist.
    csum = np.concatenate([[0], np.cumsum(beyond)])
    hits = np.flatnonzero(csum[persist:] - csum[:-persist] == persist) if persist <= len(y) else []
    return Inflection(
        position=int(hits[0]) if len(hits) else None,
        level=level,
        spread=float(spread),
        threshold=float(threshold),
        persist=persist,
    )


def inflections(sweep_or_results, *, train_len: int | None = None, **options) -> pd.DataFrame:
    """Entropy and loss inflection of every scan of a `Sweep` or a list of `ScanResult`.

    `options` go to `find_inflection`. Returns a DataFrame with columns scan, scale (NaN for
    per-head scales), entropy_inflection, loss_inflection (nullable Int64: <NA> when none or
    when entropy was not captured), entropy_level, loss_level, entropy_threshold, loss_threshold.
    """
    if isinstance(sweep_or_results, Sweep):
        sw = sweep_or_results
        curves = [
            (s, None if sw.entropy is None else sw.entropy[i], sw.loss[i], sw.train_len)
            for i, s in enumerate(sw.scales)
        ]
    else:
        curves = []
        for r in sweep_or_results:
            scale = uniform_scale(r.meta)
            captured = r.n_heads > 0 and r.meta.get("entropy_reduction") != "not_captured"
            entropy = r.mean_entropy if captured else None
            curves.append((np.nan if scale is None else scale, entropy, r.loss, r.meta.get("train_len")))
    rows = []
    for i, (scale, entropy, loss, recorded_len) in enumerate(curves):
        L = train_len if train_len is not None else recorded_len
        if L is None:
            raise EntropyLensError(f"scan {i} records no training length; pass --train-len (train_len=L)")
        row = {"scan": i, "scale": float(scale)}
        for name, curve in (("entropy", entropy), ("loss", loss)):
            found = None if curve is None else find_inflection(curve, train_len=L, **options)
            row[f"{name}_inflection"] = pd.NA if found is None or found.position is None else found.position
            row[f"{name}_level"] = np.nan if found is None else found.level
            row[f"{name}_threshold"] = np.nan if found is None else found.threshold
        rows.append(row)
    df = pd.DataFrame(
        rows,
        columns=[
            "scan",
            "scale",
            "entropy_inflection",
            "loss_inflection",
            "entropy_level",
            "loss_level",
            "entropy_threshold",
            "loss_threshold",
        ],
    )
    return df.astype({"entropy_inflection": "Int64", "loss_inflection": "Int64"})


def inflection_agreement(df: pd.DataFrame) -> InflectionAgreement:
    """Pearson r between entropy and loss inflections, and their mean |difference|, over scans with both."""
    both = df[["entropy_inflection", "loss_inflection"]].dropna().astype(np.float64)
    x, y = both["entropy_inflection"].to_numpy(), both["loss_inflection"].to_numpy()
    n = len(x)
    r = p = float("nan")
    why = undefined_because(
        x, y, items="scans", x_name="entropy inflection position", y_name="loss inflection position"
    )
    if why is None:
        result = stats.pearsonr(x, y)
        r, p = float(result.statistic), float(result.pvalue)
    mean_diff = float(np.mean(np.abs(x - y))) if n else float("nan")
    return InflectionAgreement(n=n, pearson_r=r, pearson_p=p, mean_abs_diff=mean_diff, undefined=why)
