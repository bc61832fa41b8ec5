"""Long curves reduced for display: equal-width bins of positions, each drawn as its mean with a min–max
envelope, so a 16K-position curve costs a few hundred points and no peak disappears.

    bins = Bins.of(16384, 512)                  # [0, 32), [32, 64), ...: starts, stops (exclusive)
    mean, low, high = bins.reduce(curves)       # (..., T) -> (..., bins) each, float64

With `points >= T` every bin holds one position: the curve is shown as it is (`bins.exact`).
A bin holding a NaN or ±inf position is NaN in all three (a gap in the drawn line), so a hole in a file
shows as a hole on the page instead of vanishing into a mean or turning a whole envelope infinite.
With `positive=True` (a curve on a log scale: attention received, 0 where no counted row attends a key)
values of 0 or below are left out of their bin, whose mean, min and max are over the rest (NaN where none
is left).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from entropy_lens.errors import EntropyLensError

__all__ = ["Bins", "points_for"]

PAGE_CURVE_BYTES = 2_900_000  # what one page spends on per-head curves by default (8 bytes a point)


@dataclass(frozen=True)
class Bins:
    starts: np.ndarray  # (bins,) int64, first position of each bin
    stops: np.ndarray  # (bins,) int64, one past its last position

    @classmethod
    def of(cls, length: int, points: int) -> Bins:
        """At most `points` bins of (nearly) equal width covering positions [0, length)."""
        if points < 1 or length < 1:
            raise EntropyLensError(
                f"points={points} and length={length} must be positive; pass --points 1 or more"
            )
        edges = np.unique(np.linspace(0, length, min(points, length) + 1).round().astype(np.int64))
        return cls(starts=edges[:-1], stops=edges[1:])

    @property
    def exact(self) -> bool:
        """Every bin is one position: the reduction changes nothing."""
        return bool(np.all(self.stops - self.starts == 1))

    @property
    def centers(self) -> np.ndarray:
        """(bins,) the middle position of each bin, (start + stop − 1) / 2."""
        return (self.starts + self.stops - 1) / 2

    def reduce(self, curves, *, positive: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(..., T) -> mean, min, max over each bin's positions, (..., bins) float64 each; NaN where the
        bin holds a NaN or ±inf. With `positive`, values <= 0 are left out of their bin (NaN where the
        bin holds no other): a log scale's curve."""
        x = np.asarray(curves, dtype=np.float64)
        x = np.where(np.isfinite(x), x, np.nan)  # inf too: NaN propagates through sum, minimum, maximum
        if x.shape[-1] != self.stops[-1]:
            raise EntropyLensError(f"curves of {x.shape[-1]} positions do not fit bins over {self.stops[-1]}")
        if positive:
            out = x <= 0  # False for NaN: a NaN still makes its bin a gap
            kept = np.add.reduceat((~out).astype(np.float64), self.starts, axis=-1)
            none = kept == 0
            mean = np.add.reduceat(np.where(out, 0.0, x), self.starts, axis=-1) / np.where(none, 1, kept)
            low = np.minimum.reduceat(np.where(out, np.inf, x), self.starts, axis=-1)
            high = np.maximum.reduceat(np.where(out, -np.inf, x), self.starts, axis=-1)
            return tuple(np.where(none, np.nan, a) for a in (mean, low, high))
        width = (self.stops - self.starts).astype(np.float64)
        mean = np.add.reduceat(x, self.starts, axis=-1) / width
        return (
            mean,
            np.minimum.reduceat(x, self.starts, axis=-1),
            np.maximum.reduceat(x, self.starts, axis=-1),
        )


def points_for(curves: int, length: int, *, budget: int = PAGE_CURVE_BYTES, most: int = 512) -> int:
    """The default bin count: `most`, fewer when `curves` per-head curves (all results together) would
    spend more than `budget` bytes at 8 bytes a point (float32 mean, two uint16 envelope values), never
    below 64 and never above `length`."""
    fit = budget // max(1, 8 * curves)
    return int(min(length, max(64, min(most, fit))))
