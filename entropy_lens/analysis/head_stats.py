"""One number per head, for a layers × heads heat map: where a head's entropy ends up and how it moves
beyond the training length L.

Every statistic is computed from `result.entropy` (nats) and returned in bits (÷ ln 2), except the
departure, a position:

1. `converged`: the mean over the last span of positions (the last span of `results.spans_by_l`, or
   the last tenth without an L below the length): where the head's entropy settles.
2. `span [a, b)`: the mean over each span of `spans_by_l` (or the first, middle and last tenth).
3. `growth`: mean over [L, 2L) minus mean over [L/2, L): how much the head disperses in the first
   span beyond L (needs 2L ≤ length).
4. `slope`: the least-squares slope of entropy against ln(i + 1) over [L, length), bits per e-fold
   of position; a head at the bound log₂(i + 1) has slope 1/ln 2 ≈ 1.44 (needs L + 2 ≤ length).
5. `departure`: `analysis.find_inflection` of the head's curve (direction "both", its per-position
   sd and sample count, smoothing ±min(50, L/16) so that the baseline [L/2, L) holds 8 or more
   independent smoothed values: a window as wide as L bends a log curve enough to count): the first
   position past L/2 where it leaves its in-distribution trend; NaN where it never does (needs
   L < length and L ≥ 4).

A statistic that needs L but cannot have it is left out, and `undefined` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from entropy_lens.analysis.inflection import find_inflection
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, spans_by_l

__all__ = ["HeadStatistics", "head_statistics", "position_spans"]

LN2 = float(np.log(2.0))


@dataclass
class HeadStatistics:
    values: dict[str, np.ndarray]  # name -> (layers, heads) float64: bits, or positions (departure)
    descriptions: dict[str, str]  # name -> what it is, with its units
    spans: dict[str, tuple[int, int]]  # span label -> [a, b) positions, as `position_spans`
    train_len: int | None
    undefined: dict[str, str] = field(default_factory=dict)  # statistic -> why it is left out


def position_spans(length: int, train_len: int | None) -> dict[str, tuple[int, int]]:
    """`spans_by_l(length, L)` when 2 ≤ L < length, else the first, middle and last tenth (as `summary`)."""
    if train_len is not None and 2 <= train_len < length:
        return spans_by_l(length, train_len)
    tenth = max(1, length // 10)
    middle = (length - tenth) // 2
    return {
        "first tenth": (0, tenth),
        "middle tenth": (middle, middle + tenth),
        "last tenth": (length - tenth, length),
    }


def head_statistics(
    result: ScanResult, *, train_len: int | None = None, departure: bool = True
) -> HeadStatistics:
    """Per-head statistics of `result` (see the module docstring); `train_len` defaults to the meta's.

    `departure=False` skips the one statistic that costs a pass of `find_inflection` per head
    (about 10 ms each at 16K positions)."""
    if not result.n_heads:
        raise EntropyLensError(
            "the result holds no entropy (a loss-only scan, --entropy none); scan with --entropy heads"
        )
    L = train_len if train_len is not None else result.meta.get("train_len")
    L = int(L) if isinstance(L, (int, np.integer)) and 2 <= L < result.length else None
    T = result.length
    bits = result.entropy.astype(np.float64) / LN2  # (layers, heads, T)
    spans = position_spans(T, L)
    last_label, (a, b) = list(spans.items())[-1]
    values = {"converged": bits[:, :, a:b].mean(axis=2)}
    descriptions = {"converged": f"converged entropy: mean over the last span {last_label}, bits"}
    for label, (a, b) in spans.items():
        values[f"span {label}"] = bits[:, :, a:b].mean(axis=2)
        descriptions[f"span {label}"] = f"mean entropy over {label} (positions [{a}, {b})), bits"
    undefined = {}
    if L is None:
        why = "the result records no training length below its length; pass train_len=L (--train-len)"
        undefined.update(growth=why, slope=why, departure=why)
        return HeadStatistics(values, descriptions, spans, None, undefined)
    if 2 * L <= T:
        values["growth"] = bits[:, :, L : 2 * L].mean(axis=2) - bits[:, :, L // 2 : L].mean(axis=2)
        descriptions["growth"] = "growth beyond L: mean over [L, 2L) minus mean over [L/2, L), bits"
    else:
        undefined["growth"] = f"[L, 2L) needs a length of at least 2L = {2 * L}; the result has {T}"
    if L + 2 <= T:
        x = np.log(np.arange(L, T, dtype=np.float64) + 1.0)
        x -= x.mean()
        y = bits[:, :, L:]
        values["slope"] = (y - y.mean(axis=2, keepdims=True)) @ x / float(x @ x)
        descriptions["slope"] = "slope of entropy against ln(i + 1) over [L, len), bits per e-fold"
    else:
        undefined["slope"] = f"a slope needs two positions past L = {L}; the result has {T}"
    if departure and L - L // 2 < 2:
        undefined["departure"] = f"the baseline [L/2, L) of L = {L} holds fewer than 2 positions"
    elif departure:
        values["departure"] = _departures(result, L)
        descriptions["departure"] = (
            "departure: first position where the head leaves its in-distribution trend "
            "(analysis.find_inflection, both directions); blank: never"
        )
    return HeadStatistics(values, descriptions, spans, L, undefined)


def _departures(result: ScanResult, L: int) -> np.ndarray:
    """(layers, heads) first departure position of each head's curve, NaN where none."""
    sd = result.entropy_std
    out = np.full(result.entropy.shape[:2], np.nan)
    smooth = min(50, max(1, L // 16))
    for layer, head in np.ndindex(*out.shape):
        found = find_inflection(
            result.entropy[layer, head],
            train_len=L,
            smooth=smooth,
            direction="both",
            sd=sd[layer, head],
            count=result.count,
        )
        if found.position is not None:
            out[layer, head] = found.position
    return out
