"""One number per head, for a layers × heads heat map: where a head's row statistic (entropy by default;
any other a scan recorded with --stats) ends up and how it moves beyond the training length L.

Every value is computed from the statistic's (layers, heads, len) means (`ScanResult.stat`) in its own
unit: entropy in bits (÷ ln 2, as the figures draw it), the others as stored (max_prob, first_mass and
sink_mass a probability, collision_entropy nats, varentropy nats², distance tokens); the departure is a
position:

1. `converged`: the mean over the last span of positions (the last span of `results.spans_by_l`, or
   the last tenth without an L below the length): where the head's statistic settles.
2. `span [a, b)`: the mean over each span of `spans_by_l` (or the first, middle and last tenth).
3. `growth`: mean over [L, 2L) minus mean over [L/2, L): how much the statistic moves in the first
   span beyond L (needs 2L ≤ length).
4. `slope`: the least-squares slope of the statistic against the variable of its bound over [L, length)
   (needs L + 2 ≤ length), for the statistics whose largest value grows with position
   (the `bound` of its entropy_lens.statistics declaration): against ln(i + 1) for entropy (bits per e-fold; a head at the
   bound log₂(i + 1) has slope 1/ln 2 ≈ 1.44) and collision_entropy (nats per e-fold; 1 at its bound
   ln(i + 1)); against i for distance (tokens per position: 1 at the bound i, 1/2 for a head that spreads
   evenly over its keys). A probability (at most 1 everywhere) and varentropy have none.
5. `departure`: `analysis.find_inflection` of the head's curve (direction "both", its per-position
   sd where the file holds the statistic's mean square, and the sample count, smoothing
   ±min(50, L/16) so that the baseline [L/2, L) holds 8 or more independent smoothed values: a window
   as wide as L bends a log curve enough to count): the first position past L/2 where it leaves its
   in-distribution trend c + b·ln(i + 1); NaN where it never does (needs L < length and L ≥ 4). Not
   for distance, whose bound grows like i: a head that keeps spreading evenly would count as departing.

A statistic whose declared reduction is a maximum (`Statistic.reduction` MAX: max_logit, whose per-head
summary is QK-clip's quantity) reduces each span by the maximum over its positions instead of the mean,
in 1–3 alike (`Reduction.summarize`); the descriptions say which.

A statistic that needs L (or a bound) but cannot have it is left out, and `undefined` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from entropy_lens.analysis.inflection import find_inflection
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult, spans_by_l
from entropy_lens.statistics import (
    ENTROPY,
    LOG_BOUND,
    MEAN,
    POSITION_BOUND,
    PROBABILITY,
    STATISTICS,
    reduction_of,
)

__all__ = ["HeadStatistics", "head_statistics", "position_spans", "stat_display"]

LN2 = float(np.log(2.0))


@dataclass
class HeadStatistics:
    """Per-head statistics of one row statistic of a scan (`head_statistics`).

    Args:
        values: {name: (layers, heads) float64} in `units[name]` (departure: a position).
        descriptions: {name: what it is, with its units}.
        spans: {span label: (a, b)} positions [a, b), as `position_spans`.
        train_len: L, or None.
        undefined: {statistic: why it is left out}.
        stat: the row statistic they are of.
        unit: the unit of its values: bits for entropy, else the statistic's own.
        units: {name: the unit of its values} (a slope's unit per e-fold or per position, departure's
            "position"), for axes and colour bars.
    """

    values: dict[str, np.ndarray]  # name -> (layers, heads) float64, in `unit` (departure: a position)
    descriptions: dict[str, str]  # name -> what it is, with its units
    spans: dict[str, tuple[int, int]]  # span label -> [a, b) positions, as `position_spans`
    train_len: int | None
    undefined: dict[str, str] = field(default_factory=dict)  # statistic -> why it is left out
    stat: str = ENTROPY.name  # the row statistic they are of
    unit: str = "bits"  # the unit of its values: bits for entropy, else the statistic's own
    units: dict[str, str] = field(default_factory=dict)  # name -> the unit of its values (a slope's
    # unit per e-fold or per position, departure's "position"), for axes and colour bars


def position_spans(length: int, train_len: int | None) -> dict[str, tuple[int, int]]:
    """`spans_by_l(length, L)` when 2 ≤ L < length, else the first, middle and last tenth (as `summary`).

    Args:
        length: the scan's positions.
        train_len: L, or None.

    Returns:
        dict: {label: (a, b)}, positions [a, b).
    """
    if train_len is not None and 2 <= train_len < length:
        return spans_by_l(length, train_len)
    tenth = max(1, length // 10)
    middle = (length - tenth) // 2
    return {
        "first tenth": (0, tenth),
        "middle tenth": (middle, middle + tenth),
        "last tenth": (length - tenth, length),
    }


def stat_display(result: ScanResult, stat: str) -> tuple[float, str]:
    """(factor, unit): `stat` as stored times factor is in unit: entropy in bits (1/ln 2), others as stored.

    Args:
        result: the scan (its meta gives a statistic's unit).
        stat: a row statistic's name.

    Returns:
        tuple: (factor, unit).
    """
    return (1 / LN2, "bits") if stat == ENTROPY.name else (1.0, result.stat_unit(stat))


def head_statistics(
    result: ScanResult, *, stat: str = ENTROPY.name, train_len: int | None = None, departure: bool = True
) -> HeadStatistics:
    """Per-head statistics of `result`'s row statistic `stat` (see the module docstring; `stat_names`
    lists those it holds); `train_len` defaults to the meta's.

    `departure=False` skips the one statistic that costs a pass of `find_inflection` per head.

    Args:
        result: a scan with per-head (or per-layer mean) row statistics.
        stat: one of `result.stat_names`.
        train_len: L; default the meta's `train_len`.
        departure: compute the departure position per head (a `find_inflection` per head).

    Returns:
        HeadStatistics: {name: (layers, heads)} values with their descriptions, units and spans, and why
        any statistic is left out.

    Raises:
        EntropyLensError: a loss-only result, or a statistic it does not hold.
    """
    if not result.n_heads:
        raise EntropyLensError(
            "the result holds no entropy (a loss-only scan, --record none); scan with --record heads"
        )
    L = train_len if train_len is not None else result.meta.get("train_len")
    L = int(L) if isinstance(L, (int, np.integer)) and 2 <= L < result.length else None
    T = result.length
    factor, unit = stat_display(result, stat)
    y = result.stat(stat).astype(np.float64) * factor  # (layers, heads, T); refuses a stat it lacks
    spans = position_spans(T, L)
    how = reduction_of(stat)
    over = lambda a, b: how.summarize(y[:, :, a:b], 2)  # (layers, heads): the span's mean or max
    word = "mean" if how is MEAN else "max over positions"
    last_label, (a, b) = list(spans.items())[-1]
    values = {"converged": over(a, b)}
    descriptions = {
        "converged": f"converged {stat}: {word} over the last span, {last_label} (positions [{a}, {b})), {unit}"
    }
    for label, (a, b) in spans.items():
        values[f"span {label}"] = over(a, b)
        descriptions[f"span {label}"] = (
            f"mean {stat} over {label} (positions [{a}, {b})), {unit}"
            if how == "mean"
            else f"{stat}, max over positions {label} ([{a}, {b})), {unit}"
        )
    undefined = {}
    bound = STATISTICS[stat].bound if stat in STATISTICS else None
    if L is None:
        why = "the result records no training length below its length; pass train_len=L (--train-len)"
        undefined.update(growth=why, slope=why, departure=why)
        if bound is None:  # the reason that holds whatever L is
            undefined["slope"] = _no_slope(stat, unit)
        if bound == POSITION_BOUND:
            undefined["departure"] = _no_departure(stat)
        return HeadStatistics(
            values, descriptions, spans, None, undefined, stat, unit, dict.fromkeys(values, unit)
        )
    if 2 * L <= T:
        values["growth"] = over(L, 2 * L) - over(L // 2, L)
        descriptions["growth"] = f"growth beyond L: {word} over [L, 2L) minus {word} over [L/2, L), {unit}"
    else:
        undefined["growth"] = f"[L, 2L) needs a length of at least 2L = {2 * L}; the result has {T}"
    if bound is None:
        undefined["slope"] = _no_slope(stat, unit)
    elif L + 2 <= T:
        i = np.arange(L, T, dtype=np.float64)
        x = np.log(i + 1.0) if bound == LOG_BOUND else i
        x -= x.mean()
        values["slope"] = (y[:, :, L:] - y[:, :, L:].mean(axis=2, keepdims=True)) @ x / float(x @ x)
        descriptions["slope"] = (
            f"slope of {stat} against ln(i + 1) over [L, len), {unit} per e-fold (at the bound: {factor:.3g})"
            if bound == LOG_BOUND
            else f"slope of {stat} against i over [L, len), {unit} per position (at the bound i: 1; a "
            "head spread evenly over its keys: 1/2)"
        )
    else:
        undefined["slope"] = f"a slope needs two positions past L = {L}; the result has {T}"
    if departure and bound == POSITION_BOUND:
        undefined["departure"] = _no_departure(stat)
    elif departure and L - L // 2 < 2:
        undefined["departure"] = f"the baseline [L/2, L) of L = {L} holds fewer than 2 positions"
    elif departure:
        values["departure"] = _departures(result, stat, L)
        descriptions["departure"] = (
            f"departure: first position where the head's {stat} leaves its in-distribution trend "
            "(analysis.find_inflection, both directions); blank: never"
        )
    units = dict.fromkeys(values, unit) | {"departure": "position"}
    units["slope"] = f"{unit} per e-fold" if bound == LOG_BOUND else f"{unit} per position"
    return HeadStatistics(
        values, descriptions, spans, L, undefined, stat, unit, {n: units[n] for n in values}
    )


def _no_slope(stat: str, unit: str) -> str:
    what = "is a probability, at most 1 at every position" if unit == PROBABILITY else "has no bound"
    return f"{stat} {what}: no bound grows with i to measure a slope against (entropy_lens.statistics)"


def _no_departure(stat: str) -> str:
    return (
        f"a departure is measured from a c + b·ln(i + 1) trend, and {stat}'s bound grows like i: a head "
        "that keeps spreading evenly would count as departing; read its growth and slope instead"
    )


def _departures(result: ScanResult, stat: str, L: int) -> np.ndarray:
    """(layers, heads) first departure position of each head's curve, NaN where none."""
    curves = result.stat(stat)
    squares = result.stat(stat, squared=True)  # None for sink_mass: the noise is read off the curve
    sd = None if squares is None else np.sqrt(np.clip(squares - curves.astype(np.float64) ** 2, 0, None))
    out = np.full(curves.shape[:2], np.nan)
    smooth = min(50, max(1, L // 16))
    for layer, head in np.ndindex(*out.shape):
        found = find_inflection(
            curves[layer, head],
            train_len=L,
            smooth=smooth,
            direction="both",
            sd=None if sd is None else sd[layer, head],
            count=result.count,
        )
        if found.position is not None:
            out[layer, head] = found.position
    return out
