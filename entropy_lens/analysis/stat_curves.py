"""Row statistics by position, averaged into bins of positions: what Figure 17 draws and keeps.

A scan with `--stats all` holds, per statistic, a mean and a mean square of shape (layers, heads, len):
twelve float32 arrays, about 200 MB for SmolLM2 per head at 16K positions. Their means over bins of
`width` consecutive positions keep the shape of every curve at a few hundred points, and any span
[a, b) whose ends are multiples of `width` has exactly the mean the full file gives: a bin's value is
the count-weighted mean of its positions (every position of a scan counts `samples` rows), so the mean
over a span of whole bins is the mean over its positions.
A maximum (max_logit) is binned the same way: a scan keeps each position's mean over its samples, so a
bin holds the mean of its rows' max logits; the largest over rows, QK-clip's per-head quantity, is the
scan summary's (`results.summary`, the table `entropy-lens scan` prints: the max over heads and positions).

    curves = StatCurves.of(result, width=64)   # every statistic of the scan, (layers, heads, bins)
    curves.save("x.npz"); StatCurves.load("x.npz")
    curves.mean("max_prob")                     # (bins,) unweighted mean over layers and heads (Eq. 1)
    curves.span("max_prob", 4096, 8192)         # (layers, heads) mean over positions [4096, 8192)
    curves.positions                            # (bins,) the mean position of each bin

The file is an ordinary `.npz` that numpy opens alone: one (layers, heads, bins) float32 array per
statistic (entropy and the scan's --stats, means only: the squares are dropped), `count` (bins,) the
rows each bin averages, `meta` the scan's own meta (JSON; its wall time, threads, stats units) and
`binning` (JSON: kind, width, length).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, atomic_savez
from entropy_lens.statistics import ENTROPY

__all__ = ["STAT_CURVES_KIND", "StatCurves"]

STAT_CURVES_KIND = "entropy_lens.stat_curves"


@dataclass(frozen=True)
class StatCurves:
    """A scan's row statistics binned by position (`StatCurves.of`), for Figure 17.

    Args:
        values: {statistic: (layers, heads, bins) float32}: the mean over samples and the bin, in the
            statistic's unit.
        count: (bins,) int64: rows averaged in each bin (positions × samples).
        width: positions per bin (the last bin may hold fewer).
        length: positions of the scan.
        meta: the scan's meta, as its results file records it.
    """

    values: dict[str, np.ndarray]  # statistic -> (layers, heads, bins) float32: mean over samples and the bin
    count: np.ndarray  # (bins,) int64: rows averaged in each bin (positions × samples)
    width: int  # positions per bin (the last bin may hold fewer)
    length: int  # positions of the scan
    meta: dict  # the scan's meta, as its results file records it

    @classmethod
    def of(cls, result: ScanResult, width: int) -> StatCurves:
        """The binned means of `result`'s entropy and every statistic it recorded (not their squares).

        Args:
            result: a scan that recorded row statistics (--record heads or mean).
            width: positions per bin (>= 1).

        Returns:
            StatCurves: the binned means.

        Raises:
            EntropyLensError: width < 1, or a loss-only scan.
        """
        if width < 1:
            raise EntropyLensError(f"a bin holds at least one position, not {width}")
        if not result.n_heads:
            raise EntropyLensError(
                "the scan recorded no row statistics (--record none); scan with --record heads or mean"
            )
        T = result.length
        starts = np.arange(0, T, width)
        count = result.count.astype(np.float64)
        weight = np.add.reduceat(count, starts)  # (bins,)
        arrays = {ENTROPY.name: result.entropy}
        arrays |= {k: v for k, v in result.stats.items() if not k.endswith("_sq")}
        values = {}
        for name, array in arrays.items():
            summed = np.add.reduceat(array.astype(np.float64) * count, starts, axis=2)
            values[name] = (summed / np.where(weight > 0, weight, 1.0)).astype(np.float32)
        return cls(values, weight.astype(np.int64), int(width), int(T), dict(result.meta))

    @property
    def bins(self) -> int:
        """The number of position bins."""
        return int(self.count.shape[0])

    @property
    def starts(self) -> np.ndarray:
        """(bins,) the first position of each bin."""
        return np.arange(self.bins) * self.width

    @property
    def positions(self) -> np.ndarray:
        """(bins,) float64, the mean position i of each bin's rows."""
        ends = np.minimum(self.starts + self.width, self.length)
        return (self.starts + ends - 1) / 2.0

    @property
    def units(self) -> dict[str, str]:
        """statistic -> its unit, as the scan's meta records them (entropy in nats)."""
        return {ENTROPY.name: ENTROPY.unit, **self.meta.get("stats", {})}

    @property
    def n_layers(self) -> int:
        """The number of layers."""
        return int(next(iter(self.values.values())).shape[0])

    @property
    def n_heads(self) -> int:
        """The number of heads per layer."""
        return int(next(iter(self.values.values())).shape[1])

    def get(self, name: str) -> np.ndarray:
        """(layers, heads, bins) float64 means of statistic `name`.

        Args:
            name: a statistic the scan recorded.

        Returns:
            (layers, heads, bins) float64, in the statistic's unit.

        Raises:
            EntropyLensError: a statistic not recorded.
        """
        if name not in self.values:
            raise EntropyLensError(
                f"the scan recorded no {name} (it holds {', '.join(self.values)}); rescan with --stats all"
            )
        return self.values[name].astype(np.float64)

    def mean(self, name: str) -> np.ndarray:
        """(bins,) the unweighted mean over every layer and head (the paper's Eq. 1, for any statistic).

        Args:
            name: a statistic the scan recorded.

        Returns:
            (bins,) float64, in the statistic's unit.
        """
        return self.get(name).mean(axis=(0, 1))

    def weights(self, a: int, b: int) -> np.ndarray:
        """(bins,) each bin's rows that lie in positions [a, b) (a bin's rows spread evenly over its
        positions: exact where a and b are multiples of the width).

        Args:
            a: the span's first position.
            b: the position after its last, a < b <= length.

        Returns:
            (bins,) float64 rows.

        Raises:
            EntropyLensError: a span outside the positions.
        """
        if not 0 <= a < b <= self.length:
            raise EntropyLensError(f"span [{a}, {b}) is not within the {self.length} positions")
        ends = np.minimum(self.starts + self.width, self.length)
        inside = np.clip(np.minimum(ends, b) - np.maximum(self.starts, a), 0, None)
        return self.count * inside / (ends - self.starts)

    def span(self, name: str, a: int, b: int) -> np.ndarray:
        """(layers, heads) the mean of `name` over the rows at positions [a, b).

        Args:
            name: a statistic the scan recorded.
            a: the span's first position.
            b: the position after its last.

        Returns:
            (layers, heads) float64, in the statistic's unit.
        """
        w = self.weights(a, b)
        return self.get(name) @ w / w.sum()

    def save(self, path: str | Path) -> Path:
        """Write the binned means to `path` atomically (`load` reads them back).

        Args:
            path: the .npz file (str or Path).

        Returns:
            Path: the file written.
        """

        binning = {"kind": STAT_CURVES_KIND, "width": self.width, "length": self.length}
        return atomic_savez(
            path,
            meta=np.array(json.dumps(self.meta, sort_keys=True)),
            binning=np.array(json.dumps(binning, sort_keys=True)),
            count=self.count,
            **self.values,
        )

    @classmethod
    def load(cls, path: str | Path) -> StatCurves:
        """Binned means read back from a file `save` wrote.

        Args:
            path: the .npz file (str or Path), as `save` wrote it.

        Returns:
            StatCurves: the binned means.

        Raises:
            EntropyLensError: a file that is not readable binned statistics, with its fix.
        """

        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
            meta, binning = (json.loads(str(data.pop(k))) for k in ("meta", "binning"))
            count = data.pop("count")
        except (OSError, ValueError, KeyError, EOFError) as err:
            raise EntropyLensError(
                f"{path} is not a readable file of binned statistics ({type(err).__name__}: {err}); delete it "
                "to compute it again"
            ) from None
        if not isinstance(binning, dict) or binning.get("kind") != STAT_CURVES_KIND:
            raise EntropyLensError(
                f"{path} is not a file of binned statistics; delete it to compute it again"
            )
        bins = count.shape[0]
        width, length = int(binning["width"]), int(binning["length"])
        bad = [k for k, v in data.items() if v.ndim != 3 or v.shape[2] != bins]
        if bad or not data or bins != -(-length // width):
            raise EntropyLensError(
                f"{path}: arrays {bad or list(data)} disagree with {bins} bins of {width} over {length} "
                "positions; the file is damaged, delete it to compute it again"
            )
        return cls(data, count, width, length, meta)
