"""Where the attention goes by key position (Figure 19), as pure functions of a scan's key statistics
(`scan --stats received,received_mean [--query-window W]`): which share of the counted rows' mass lands
on the keys beyond the training length L, what the first key receives, and how evenly the keys beyond
L share it, by position and from window to window, each beside what rows attending uniformly would
give (row i: 1/(i + 1) to each of its keys).

    n = counted_rows(512, 384)                 # rows i >= j among the last 384 of each window
    mass, share = uniform_received(512, 384)   # what uniform rows give each key
    shares = key_shares(result, train_len=128) # per layer: beyond, first, spread, evenness

Every window is taken to be full (no padding): a key j is then attended by the same counted rows in
every window, and `received_mean` is `received / n_j`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import QUERY_WINDOW, RECEIVED, RECEIVED_MEAN

if TYPE_CHECKING:
    from entropy_lens.results import ScanResult

__all__ = ["SPREAD_PERCENTILES", "KeyShares", "counted_rows", "key_shares", "spread", "uniform_received"]

# a head's spread over the keys beyond L: the ratio of these percentiles of its mean share per key
SPREAD_PERCENTILES = (5, 95)


def counted_rows(length: int, window: int | None) -> np.ndarray:
    """How many counted query rows can attend each key of a full window.

    Args:
        length: tokens per window (the scan's --len).
        window: the scan's --query-window: only the last `window` rows are counted (None: every row).

    Returns:
        np.ndarray: (length,) int64, n_j, the counted rows i >= j.
    """
    first = length - (window or length)
    return length - np.maximum(np.arange(length), first)


def uniform_received(length: int, window: int | None) -> tuple[np.ndarray, np.ndarray]:
    """What counted rows attending uniformly (row i gives 1/(i + 1) to each key j <= i) give each key.

    Args:
        length: tokens per window.
        window: the counted rows are the last `window` (None: every row).

    Returns:
        tuple[np.ndarray, np.ndarray]: (mass, share), (length,) float64 each, as `received` (the sum over
        the counted rows) and `received_mean` (that sum over n_j, `counted_rows`) record them.
    """
    first = length - (window or length)
    per_key = 1.0 / np.arange(first + 1, length + 1)  # rows first..length-1
    tail = np.cumsum(per_key[::-1])[::-1]  # tail[k]: the sum over rows first + k and later
    mass = tail[np.maximum(np.arange(length) - first, 0)]
    return mass, mass / counted_rows(length, window)


def spread(shares: np.ndarray, percentiles: tuple[float, float] = SPREAD_PERCENTILES) -> np.ndarray:
    """How unevenly keys share the attention: the ratio of two percentiles of the mean share per key.

    Args:
        shares: (..., keys) mean shares (received_mean), the keys to compare on the last axis.
        percentiles: (low, high); the default (5, 95).

    Returns:
        np.ndarray: (...) float64, the high over the low percentile (1: every key the same share; inf
        where the low one is 0).
    """
    low, high = np.percentile(np.asarray(shares, dtype=np.float64), percentiles, axis=-1)
    with np.errstate(divide="ignore"):
        return high / low


@dataclass(frozen=True)
class KeyShares:
    """Figure 19's numbers for one scan (`key_shares`), per layer, beside what counted rows attending
    uniformly would give over the same rows (the fields ending in `_uniform`).

    Args:
        train_len: L, tokens: keys j >= L are beyond it.
        length: tokens per window.
        window: the counted rows, the last `window` of each window (None: every row).
        by_key: (layers, keys) mean share (received_mean), mean over heads.
        beyond: (layers,) the share of the counted rows' mass (received, heads pooled) on keys j >= L.
        first: (layers,) the first key's mean share, mean over heads.
        spread: (layers,) each head's `spread` over the keys j >= L, geometric mean over heads.
        tilt: (layers,) the mean share (`by_key`) of the last L/2 keys over that of the first L/2 keys
            beyond L, [L, 1.5L): above 1, the later keys receive more.
        evenness: (layers, heads) mean² over mean square of a key's mass over the windows, mean over the
            keys j >= L: 1 where every window gives a key the same mass, near 1/k where one window in k
            gives it all.
        by_key_uniform: (keys,) uniform rows' mean share.
        beyond_uniform: uniform rows' share on keys j >= L.
        first_uniform: uniform rows' share of the first key.
        spread_uniform: uniform rows' spread over keys j >= L.
        tilt_uniform: uniform rows' tilt (their evenness is 1).
    """

    train_len: int
    length: int
    window: int | None
    by_key: np.ndarray
    beyond: np.ndarray
    first: np.ndarray
    spread: np.ndarray
    tilt: np.ndarray
    evenness: np.ndarray
    by_key_uniform: np.ndarray
    beyond_uniform: float
    first_uniform: float
    spread_uniform: float
    tilt_uniform: float


def _tilt(shares: np.ndarray, L: int) -> np.ndarray:
    """The mean share of the last L/2 keys over that of [L, 1.5L)."""
    half = max(1, L // 2)
    return shares[..., -half:].mean(axis=-1) / shares[..., L : L + half].mean(axis=-1)


def key_shares(result: ScanResult, train_len: int) -> KeyShares:
    """Figure 19's numbers from a scan with `received` and `received_mean` (mean and mean square).

    Args:
        result: a scan with --stats received,received_mean, per head, of full windows.
        train_len: L, tokens; keys j >= L are beyond it.

    Returns:
        KeyShares: per layer, with the uniform rows' values over the same counted rows.

    Raises:
        EntropyLensError: the scan holds no received or received_mean, or no key lies beyond L.
    """
    T, L = result.length, train_len
    if not 0 < L < T:
        raise EntropyLensError(f"L = {L} lies outside the scan's {T}-token windows; no key is beyond it")
    window = QUERY_WINDOW.read(result.meta)
    mass, share = result.received(RECEIVED.name), result.received(RECEIVED_MEAN.name)
    mass_sq = result.received(RECEIVED.name, squared=True)
    uniform_mass, uniform_share = uniform_received(T, window)
    far, far_sq = mass[..., L:].astype(np.float64), mass_sq[..., L:].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # a key no window gives anything: evenness 1
        even = np.where(far_sq > 0, far**2 / far_sq, 1.0)
    pooled = mass.astype(np.float64).sum(axis=1)  # (layers, keys): heads pooled
    by_key = share.astype(np.float64).mean(axis=1)
    return KeyShares(
        train_len=L,
        length=T,
        window=window,
        by_key=by_key,
        beyond=pooled[:, L:].sum(axis=-1) / pooled.sum(axis=-1),
        first=by_key[:, 0],
        spread=np.exp(np.log(spread(share[..., L:])).mean(axis=1)),
        tilt=_tilt(by_key, L),
        evenness=even.mean(axis=-1),
        by_key_uniform=uniform_share,
        beyond_uniform=float(uniform_mass[L:].sum() / uniform_mass.sum()),
        first_uniform=float(uniform_share[0]),
        spread_uniform=float(spread(uniform_share[L:])),
        tilt_uniform=float(_tilt(uniform_share, L)),
    )
