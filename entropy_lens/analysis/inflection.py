"""Where a per-position curve (mean entropy or loss) leaves its in-distribution level.

The paper says the entropy and loss curves have an "inflection point" at the same position, but
does not define one. This module fixes a definition, so the claim becomes a number:

1. Smooth the curve with the paper's centred moving average (half-width `smooth`; the window
   shrinks at the edges and divides by the number of points it holds): `moving_average`. A
   centred window sees w positions ahead, so a departure can show up to w positions early.
2. Level: the median of the smoothed curve over the baseline window [b0·L, b1·L) (default
   [L/2, L): in distribution, past the early positions where loss is high and entropy low).
3. Noise σ of one smoothed value over the baseline window, the larger of two estimates of the
   same quantity: from the curve itself, MAD·1.4826 of (raw − smoothed) / √(2·smooth + 1); and
   from the sample count, √(mean(sd²/n) / (2·smooth + 1)), where sd is the per-position standard
   deviation over the n samples (a scan records both). Both treat the 2·smooth + 1 positions as
   independent; a whole window being hard shifts the baseline as much as the later positions and
   cancels in the departure. Floored at 1e-8·max(1, `|level|`) so a noise-free curve does not get a
   zero threshold.
4. Threshold: k·σ with k chosen from the number of independent smoothed values searched,
   m = (positions searched) / (2·smooth + 1): k = Φ⁻¹(1 − α/m) (Bonferroni, α = 0.05), so white
   noise crosses anywhere with probability at most α (and the persistence below makes it rarer).
   `k`, `rel` (a share of `|level|`) and `abs_threshold` override or raise it.
5. Reference: by default (`trend="log"`) the line c + b·ln(i+1) least-squares fitted to the
   smoothed baseline window and extrapolated, so in-distribution growth like log i (entropy of
   dispersed heads) is not a departure; `trend="flat"` uses the level itself. The reference is
   itself estimated from n = (baseline positions) / (2·smooth + 1) independent values, so the
   threshold at position i is the one above times √(1 + 1/n + (x_i − x̄)²/(n·var x)) (the
   prediction error of a least-squares line, x = ln(i+1) over the baseline; √(1 + 1/n) for the
   flat level): the further a position lies from the baseline, the larger a departure must be.
6. Inflection: the first position p ≥ b0·L at which the smoothed curve is beyond the reference ±
   threshold (up by default: entropy and loss both rise) at every position of [p, p + persist).
   The default persist is max(32, 2·smooth + 2): one raw spike moves the smoothed curve over
   exactly 2·smooth + 1 positions, so no single spike, however tall, can count. A departure that
   starts within `persist` positions of the end is not seen.
7. Uncertainty: `low` and `high` are where the curve shifted up and down by one σ would depart
   (the detector with threshold ∓ σ): the positions between which a ±1σ band around the smoothed
   curve crosses the threshold. A departure whose `high` is None is within one σ of not being one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from entropy_lens.analysis.correlation import undefined_because
from entropy_lens.analysis.sweep import Sweep, uniform_scale
from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import ENTROPY

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
    """Where a curve leaves its in-distribution level (`find_inflection`).

    Args:
        position: first position of the departure, None if the curve never departs.
        level: in-distribution level (median of the smoothed curve over the baseline window), the curve's unit.
        spread: noise σ of one smoothed value, the curve's unit.
        threshold: departure size used at the baseline (it widens with distance: step 5), the curve's unit.
        persist: positions the departure had to last.
        k: threshold / spread.
        low: where the curve one σ higher departs (None: nowhere).
        high: where the curve one σ lower departs (None: nowhere).
    """

    position: int | None  # first position of the departure, None if the curve never departs
    level: float  # in-distribution level (median of the smoothed curve over the baseline window)
    spread: float  # noise σ of one smoothed value
    threshold: float  # departure size used at the baseline (it widens with distance: step 5)
    persist: int  # positions the departure had to last
    k: float = float("nan")  # threshold / spread
    low: int | None = None  # where the curve one σ higher departs (None: nowhere)
    high: int | None = None  # where the curve one σ lower departs (None: nowhere)


@dataclass
class InflectionAgreement:
    """How entropy and loss inflections agree over scans (`inflection_agreement`).

    Args:
        n: scans where both inflections exist.
        pearson_r: Pearson r of the entropy and loss inflection positions (NaN where undefined).
        pearson_p: its p-value.
        mean_abs_diff: mean `|entropy − loss|` inflection position, in positions.
        undefined: why pearson_r/p are NaN (correlation.undefined_because), None if defined.
    """

    n: int  # scans where both inflections exist
    pearson_r: float
    pearson_p: float
    mean_abs_diff: float  # mean |entropy − loss| inflection position, in positions
    undefined: str | None = None  # why pearson_r/p are NaN (correlation.undefined_because), None if defined


def moving_average(x, half_width: int) -> np.ndarray:
    """Centred moving average: out[i] = mean of x[max(0, i−w) : i+w+1] (the window shrinks at the edges).

    Args:
        x: (T,) values.
        half_width: w >= 0; 0 returns x as float64.

    Returns:
        (T,) float64.

    Raises:
        EntropyLensError: half_width < 0.
    """
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
    alpha: float = 0.05,
    k: float | None = None,
    rel: float = 0.0,
    abs_threshold: float = 0.0,
    threshold: float | None = None,
    persist: int | None = None,
    direction: str = "up",
    trend: str = "log",
    sd=None,
    count=None,
) -> Inflection:
    """First position where the smoothed `curve` leaves its in-distribution level (see module docstring).

    Args:
        curve: (T,) per-position values (mean entropy or loss), e.g. nats.
        train_len: L, the training length; the baseline window is [baseline[0]·L, baseline[1]·L).
        smooth: half-width of the moving average taken before the search (positions).
        baseline: the baseline window as fractions of L, [baseline[0]·L, baseline[1]·L).
        alpha: chance that white noise alone departs anywhere; sets k = Φ⁻¹(1 − alpha/m).
        k: use this many σ instead.
        rel: a floor on the threshold, as a share of `|level|`.
        abs_threshold: a floor on the threshold, in the curve's unit.
        threshold: use this departure size instead of max(abs_threshold, k·σ, rel·`|level|`).
        persist: positions the departure must last; default max(32, 2·smooth + 2).
        direction: "up", "down" or "both".
        trend: "log" (default): departures are measured from c + b·ln(i+1) fitted to the smoothed
            baseline window, so a curve that keeps its in-distribution growth (entropy of dispersed
            heads grows like log i) does not count; "flat": from the baseline's median `level`.
        sd: (T,) standard deviation over samples per position, in the curve's unit; with `count`, σ
            also comes from the sample count.
        count: (T,) samples per position (needed with `sd`).

    Returns:
        Inflection: the position (None if the curve never departs), the level, σ, the threshold and
        where the curve ±1σ departs.

    Raises:
        EntropyLensError: a curve with NaN/inf or not 1-D, an unknown trend or direction, a training
            length, alpha or persist out of range, a baseline window outside the curve, or sd without
            count.
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
    if not 0 < alpha < 1:
        raise EntropyLensError(f"alpha={alpha} must lie in (0, 1)")
    lo, hi = int(baseline[0] * train_len), min(int(baseline[1] * train_len), len(y))
    if hi - lo < 2:
        raise EntropyLensError(
            f"baseline window [{lo}, {hi}) holds {max(hi - lo, 0)} positions of a {len(y)}-position curve; "
            "pass a longer curve or another baseline"
        )
    width = 2 * smooth + 1
    smoothed = moving_average(y, smooth)
    level = float(np.median(smoothed[lo:hi]))
    resid = y[lo:hi] - smoothed[lo:hi]
    sigma_curve = float(np.median(np.abs(resid - np.median(resid)))) * 1.4826 / np.sqrt(width)
    sigma_count = 0.0
    if sd is not None:
        if count is None:
            raise EntropyLensError("sd without count: pass the samples per position too")
        per_point = np.asarray(sd, np.float64) ** 2 / np.maximum(np.asarray(count, np.float64), 1)
        if per_point.shape != y.shape or not np.all(np.isfinite(per_point)):
            raise EntropyLensError(f"sd and count must be finite and shaped like the curve {y.shape}")
        sigma_count = float(np.sqrt(np.mean(per_point[lo:hi]) / width))
    spread = max(sigma_curve, sigma_count, 1e-8 * max(1.0, abs(level)))
    if k is None:
        searched = max(1.0, (len(y) - lo) / width)
        k = float(stats.norm.isf(alpha / searched))
    if threshold is None:
        threshold = max(abs_threshold, k * spread, rel * abs(level))
    persist = max(32, 2 * smooth + 2) if persist is None else int(persist)
    if persist < 1:
        raise EntropyLensError(f"persist={persist} must be at least 1 position")
    x = np.log(np.arange(len(y)) + 1.0)
    n = (hi - lo) / width  # independent smoothed values in the baseline
    if trend == "log":
        x0 = x[lo:hi]
        widen = np.sqrt(1 + 1 / n + (x - x0.mean()) ** 2 / (n * x0.var()))
        slope, intercept = np.polyfit(x0, smoothed[lo:hi], 1)
        dev = smoothed - (intercept + slope * x)
    else:
        widen = np.full(len(y), np.sqrt(1 + 1 / n))
        dev = smoothed - level
    at, low, high = (
        _first_departure(dev, lo, t * widen, persist, direction)
        for t in (threshold, threshold - spread, threshold + spread)
    )
    return Inflection(
        position=at,
        level=level,
        spread=float(spread),
        threshold=float(threshold),
        persist=persist,
        k=float(threshold / spread),
        low=low,
        high=high,
    )


def _first_departure(dev, lo: int, threshold, persist: int, direction: str) -> int | None:
    """Step 6 of the module docstring: the first p >= lo where `dev` (curve − reference) is beyond the
    per-position `threshold` at every position of [p, p + persist)."""
    beyond = {"up": dev > threshold, "down": dev < -threshold, "both": np.abs(dev) > threshold}[direction]
    beyond[:lo] = False  # search from the baseline start: early positions sit far from the level
    # p counts when all of beyond[p : p + persist] hold, i.e. their sum (from a cumulative sum) is persist.
    csum = np.concatenate([[0], np.cumsum(beyond)])
    hits = np.flatnonzero(csum[persist:] - csum[:-persist] == persist) if persist <= len(dev) else []
    return int(hits[0]) if len(hits) else None


def inflections(sweep_or_results, *, train_len: int | None = None, **options) -> pd.DataFrame:
    """Entropy and loss inflection of every scan of a `Sweep` or a list of `ScanResult`.

    `options` go to `find_inflection`. A ScanResult also gives each curve's noise from its samples:
    the loss's standard deviation over samples, and for mean entropy the mean of the heads' standard
    deviations (an upper bound on the deviation of their mean). Returns a DataFrame with columns
    scan, scale (NaN for per-head scales), then for name in (entropy, loss): {name}_inflection,
    {name}_low, {name}_high (nullable Int64: <NA> when none or when entropy was not captured; low
    and high: the curve ±1σ), {name}_level, {name}_threshold, {name}_k.

    Args:
        sweep_or_results: a Sweep, or a list of ScanResult.
        train_len: L; default each scan's recorded training length.
        **options: `find_inflection`'s keywords (smooth, alpha, trend, ...).

    Returns:
        DataFrame: one row per scan, the columns above.

    Raises:
        EntropyLensError: a scan without a training length (and no train_len), or find_inflection's.
    """
    if isinstance(sweep_or_results, Sweep):
        sw = sweep_or_results
        curves = [
            (
                s,
                None if sw.entropy is None else (sw.entropy[i], None, None),
                (sw.loss[i], None, None),
                sw.train_len,
            )
            for i, s in enumerate(sw.scales)
        ]
    else:
        curves = []
        for r in sweep_or_results:
            scale = uniform_scale(r.meta)
            captured = r.n_heads > 0 and r.entropy_reduction != "none"
            loss_sd = np.sqrt(np.clip(r.loss_sq - r.loss.astype(np.float64) ** 2, 0, None))
            entropy = (r.mean_entropy, r.entropy_std.mean(axis=(0, 1)), r.count) if captured else None
            loss = (r.loss, loss_sd, r.count)
            curves.append((np.nan if scale is None else scale, entropy, loss, r.meta.get("train_len")))
    rows = []
    for i, (scale, entropy, loss, recorded_len) in enumerate(curves):
        L = train_len if train_len is not None else recorded_len
        if L is None:
            raise EntropyLensError(f"scan {i} records no training length; pass --train-len (train_len=L)")
        row = {"scan": i, "scale": float(scale)}
        for name, given in ((ENTROPY.name, entropy), ("loss", loss)):
            found = None
            if given is not None:  # (curve, sd over samples or None, samples per position or None)
                curve, sd, count = given
                found = find_inflection(curve, train_len=L, sd=sd, count=count, **options)
            for key in ("position", "low", "high"):
                value = None if found is None else getattr(found, key)
                row[f"{name}_{'inflection' if key == 'position' else key}"] = (
                    pd.NA if value is None else value
                )
            for key in ("level", "threshold", "k"):
                row[f"{name}_{key}"] = np.nan if found is None else getattr(found, key)
        rows.append(row)
    columns = ["scan", "scale"] + [
        f"{name}_{key}"
        for name in (ENTROPY.name, "loss")
        for key in ("inflection", "low", "high", "level", "threshold", "k")
    ]
    ints = {f"{n}_{k}": "Int64" for n in (ENTROPY.name, "loss") for k in ("inflection", "low", "high")}
    return pd.DataFrame(rows, columns=columns).astype(ints)


def inflection_agreement(df: pd.DataFrame) -> InflectionAgreement:
    """Pearson r between entropy and loss inflections, and their mean `|difference|`, over scans with both.

    Args:
        df: `inflections`'s DataFrame (columns entropy_inflection, loss_inflection).

    Returns:
        InflectionAgreement: n, Pearson r and p (NaN with the reason where undefined), the mean `|difference|`
        in positions.
    """
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
