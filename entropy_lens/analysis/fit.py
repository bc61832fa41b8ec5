"""Best uniform scale per position and the paper's fit s = 1 + a·ln(i/L) (Appendix B, Figure 7).

Choices:
- Positions are 0-based indices t into the loss array (t holds the NLL of token t+1), and the fit
  uses ln(t/L) with that t, as the spec does; the default fit range is [L, len).
- The best scale is the argmin over the raw (unsmoothed) loss curves, as the paper takes it; ties go
  to the smallest scale, i.e. the first minimum in ascending-scale order. With few samples per
  position the raw argmin is noisy (R² drops though a barely moves): `smooth=w` first takes a centred
  moving average of half-width w of every scale's loss along positions (an extension; off by default).
- The model has no intercept and is linear in a, so least squares has the closed form
  a = Σxy / Σx² with x = ln(t/L), y = s − 1. This is what the paper's `curve_fit` converges to.
  The standard error of a uses the residual variance with n − 1 degrees of freedom (one parameter).
- R² = 1 − SS_res/SS_tot on the fitted points, SS_tot taken around the mean best scale (the
  paper's definition; for a model without intercept it can be negative).
- An argmin at the grid's smallest or largest scale is a censored value: the true best scale may lie
  beyond. A fit to a Sweep counts such fitted positions (`ScaleFit.at_edge`), and
  `grid_edge_problem` says, in words, when there are any and how to widen the grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from entropy_lens.analysis.inflection import moving_average
from entropy_lens.analysis.sweep import Sweep
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import printable

__all__ = ["ScaleFit", "best_scale_per_position", "fit_scale_curve", "grid_edge_problem", "yarn_scale"]


@dataclass
class ScaleFit:
    """The fit of s = 1 + a·ln(t/L) to the best scale per position (`fit_scale_curve`).

    Args:
        a: the fitted slope of s = 1 + a·ln(t/L).
        a_stderr: its standard error.
        r2: the fit's coefficient of determination.
        train_len: L, tokens.
        n_points: the positions fitted.
        fit_range: [start, stop) in positions.
        residuals: position, best_scale, fitted, residual (fitted points only).
        smooth: moving-average half-width taken before the argmin (0: the raw argmin).
        grid: the sweep's smallest and largest scale (None: not a Sweep).
        at_edge: fitted positions whose best scale is grid[0], grid[1].
    """

    a: float
    a_stderr: float
    r2: float
    train_len: int
    n_points: int
    fit_range: tuple[int, int]  # [start, stop) in positions
    residuals: pd.DataFrame  # position, best_scale, fitted, residual (fitted points only)
    smooth: int = 0  # moving-average half-width taken before the argmin (0: the raw argmin)
    grid: tuple[float, float] | None = None  # the sweep's smallest and largest scale (None: not a Sweep)
    at_edge: tuple[int, int] | None = None  # fitted positions whose best scale is grid[0], grid[1]

    def predict(self, positions) -> np.ndarray:
        """Fitted multiplier 1 + a·ln(t/L) at `positions` (NaN where t ≤ 0).

        Args:
            positions: query positions t (any shape).

        Returns:
            float64 multipliers of 1/√d, the shape of `positions`.
        """
        t = np.asarray(positions, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(t > 0, 1.0 + self.a * np.log(t / self.train_len), np.nan)

    def implied(self, factors=(2, 4, 8)) -> dict:
        """{k: 1 + a·ln k}: the multiplier the fit gives at k times the training length.

        Args:
            factors: the extension factors k (multiples of the training length).

        Returns:
            dict: {k: multiplier}.
        """
        return {k: 1.0 + self.a * float(np.log(k)) for k in factors}


def yarn_scale(factor: float) -> float:
    """YaRN's multiplier (1 + 0.1·ln k)² at extension factor k, for comparison with `ScaleFit.implied`.

    Args:
        factor: the extension factor k > 0 (target length / training length).

    Returns:
        float: the multiplier of 1/√d.
    """
    return (1.0 + 0.1 * float(np.log(factor))) ** 2


def grid_edge_problem(fit: ScaleFit, *, edges=("lower", "upper"), tolerance: float = 0.0) -> str | None:
    """None when at most a share `tolerance` of the fitted positions has its best scale on the sweep
    grid's `edges` ("lower", "upper"), or the grid is unknown; else what is wrong and how to fix it,
    in words.

    Args:
        fit: a fit of a Sweep (one with `grid` and `at_edge`; else None is returned).
        edges: which grid edges to check, "lower" and/or "upper".
        tolerance: the share of fitted positions (0 to 1) allowed on those edges.

    Returns:
        str | None: the problem and its fix, or None.

    Raises:
        EntropyLensError: an edge other than "lower" or "upper".
    """
    unknown = set(edges) - {"lower", "upper"}
    if unknown:
        raise EntropyLensError(f"grid edges are 'lower' and 'upper', not {sorted(unknown)}")
    if fit.grid is None or fit.at_edge is None:
        return None
    parts, fixes = [], []
    for n, value, edge, side, way in zip(
        fit.at_edge, fit.grid, ("lower", "upper"), ("smallest", "largest"), ("down", "up")
    ):
        if n > tolerance * fit.n_points and edge in edges:
            parts.append(f"the grid's {side} scale {value:g} at {n}")
            fixes.append(f"{way}ward past {value:g}")
    if not parts:
        return None
    return (
        f"the best scale is {' and '.join(parts)} of the {fit.n_points} fitted positions (the true best "
        f"may lie beyond the grid); extend the sweep's scales {' and '.join(fixes)}"
    )


def best_scale_per_position(sweep: Sweep, *, smooth: int = 0) -> pd.DataFrame:
    """For each position t: the scale with the lowest loss (ties: smallest scale) and that loss,
    on the raw curves or, with `smooth=w`, on their moving averages of half-width w.

    Args:
        sweep: loss by scale (ascending) and position.
        smooth: half-width of the moving average of each loss curve before the argmin; 0: raw.

    Returns:
        DataFrame with columns position, best_scale, best_loss (nats), one row per position.
    """
    loss = np.stack([moving_average(row, smooth) for row in sweep.loss]) if smooth else sweep.loss
    best = np.argmin(loss, axis=0)  # first minimum = smallest scale, since scales ascend
    return pd.DataFrame(
        {
            "position": np.arange(loss.shape[1]),
            "best_scale": sweep.scales[best],
            "best_loss": loss[best, np.arange(loss.shape[1])],
        }
    )


def fit_scale_curve(
    sweep_or_best, *, train_len: int | None = None, fit_range=None, smooth: int = 0
) -> ScaleFit:
    """Least-squares fit of s = 1 + a·ln(t/L) to the best scale per position.

    Args:
        sweep_or_best: a `Sweep`, or a DataFrame with columns position, best_scale (as returned by
            `best_scale_per_position`).
        train_len: L; default the sweep's recorded training length.
        fit_range: (start, stop), positions start <= t < stop; default (L, len).
        smooth: half-width of the moving average taken before the argmin (a Sweep only; 0 = raw).

    Returns:
        ScaleFit: a with its standard error, r², the fitted range and the residuals.

    Raises:
        EntropyLensError: fewer than 3 scales, an input of another type, no training length, or a fit
            range with too few positions, each with its fix.
    """
    if isinstance(sweep_or_best, Sweep):
        if len(sweep_or_best.scales) < 3:
            raise EntropyLensError(
                f"the sweep has {len(sweep_or_best.scales)} scale(s): a fit needs at least 3 scales; sweep "
                "more scales"
            )
        best, length = best_scale_per_position(sweep_or_best, smooth=smooth), sweep_or_best.length
        train_len = train_len if train_len is not None else sweep_or_best.train_len
        grid = (float(sweep_or_best.scales[0]), float(sweep_or_best.scales[-1]))
    elif isinstance(sweep_or_best, pd.DataFrame) and {"position", "best_scale"} <= set(sweep_or_best.columns):
        best, grid, smooth = sweep_or_best, None, 0
        length = int(best["position"].max()) + 1 if len(best) else 0
    else:
        raise EntropyLensError("fit_scale_curve takes a Sweep or the DataFrame from best_scale_per_position")
    if train_len is None:
        raise EntropyLensError("the scans record no training length; pass --train-len (train_len=L)")
    if not isinstance(train_len, (int, np.integer)) or isinstance(train_len, bool):  # a file's meta
        raise EntropyLensError(
            f"training length {printable(repr(train_len))} is not a whole number of positions; pass "
            "--train-len L (train_len=L)"
        )
    if not 0 < int(train_len) < length:
        raise EntropyLensError(
            f"training length {train_len} must be positive and below the sweep length {length}; pass "
            "another --train-len"
        )
    L = int(train_len)
    start, stop = (L, length) if fit_range is None else (int(fit_range[0]), int(fit_range[1]))
    if start < 1:
        raise EntropyLensError(
            f"fit range starts at {start}, but ln(t/L) needs t >= 1; start the fit at 1 or later"
        )
    t = best["position"].to_numpy(dtype=np.float64)
    keep = (t >= start) & (t < stop)
    n = int(keep.sum())
    if n < 2:
        raise EntropyLensError(
            f"fit range [{start}, {stop}) holds {n} position(s); a fit needs at least 2, widen --from/--to"
        )
    s = best["best_scale"].to_numpy(dtype=np.float64)[keep]
    x, y = np.log(t[keep] / L), s - 1.0
    sxx = float(x @ x)
    if sxx == 0:
        raise EntropyLensError(f"every fitted position equals L = {L}; widen the fit range past L")
    a = float(x @ y) / sxx
    fitted = 1.0 + a * x
    ss_res = float(np.sum((s - fitted) ** 2))
    ss_tot = float(np.sum((s - s.mean()) ** 2))
    residuals = pd.DataFrame(
        {"position": t[keep].astype(np.int64), "best_scale": s, "fitted": fitted, "residual": s - fitted}
    )
    return ScaleFit(
        a=a,
        a_stderr=float(np.sqrt(ss_res / (n - 1) / sxx)),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        train_len=L,
        n_points=n,
        fit_range=(start, stop),
        residuals=residuals,
        smooth=int(smooth),
        grid=grid,
        at_edge=None if grid is None else (int(np.sum(s == grid[0])), int(np.sum(s == grid[1]))),
    )
