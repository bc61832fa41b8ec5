"""Attention received by key position (`scan --stats received,received_max,received_mean`) as the page
draws it: a result holding key statistics (`ScanResult.key_names`) gets, under `keys`, which query rows
they count (`rows`: every row, or the last W of each window under --query-window) and per key statistic
its unit, description, how samples combine (`samples`), and

    curves   by key position, (layers, heads, bins), binned as the result's row statistics are (its
             `Bins`), for a log scale: values of 0 (keys that no counted row can attend, e.g. before
             the reach of a --query-window's rows) are left out of their bin, a bin holding nothing else
             is a gap, and the envelope is coded in steps of ln(value) (`encode_curves(log=True)`)
    first    (layers, heads) the value at key 0 itself (null where 0): the sink that a bin's mean blurs
    zeros    (layers, heads) how many keys of each head hold 0 (left out; the page's legend names them)

A result without key statistics has no `keys`: its payload is the one it had before they existed.
"""

from __future__ import annotations

import numpy as np

from entropy_lens.results import ScanResult
from entropy_lens.statistics import KEY_STATISTICS, QUERY_WINDOW
from entropy_lens.view.encode import encode_curves, numbers, text
from entropy_lens.view.reduce import Bins

__all__ = ["key_payload"]


def key_payload(r: ScanResult, bins: Bins, notes: list) -> dict | None:
    """What the page draws of `r`'s key statistics (the module docstring), or None where it has none.

    Args:
        r: the result.
        bins: the bins of its row statistics' curves (key positions are binned alike).
        notes: the result's notes; gets how many values are 0 (left out) or NaN/inf (gaps).

    Returns:
        dict | None: {"rows": text, "stats": {name: entry}}, or None for a result without key statistics.
    """
    if not r.key_names:
        return None
    window = QUERY_WINDOW.read(r.meta)
    rows = f"the last {text(window)} query rows of each window" if window else "every query row"
    stats = {}
    for name in r.key_names:
        values = np.asarray(r.received(name), dtype=np.float64)
        finite = np.isfinite(values)
        zero = finite & (values <= 0)
        if zero.any():
            notes.append(
                f"{name}: {_count(zero)} of {zero.size} values (layer, head, key) are 0, keys that no counted "
                "query row can attend: left out of its log-scale plot"
            )
        if not finite.all():
            notes.append(f"{name}: {_count(~finite)} values are NaN/inf: drawn as gaps")
        first = values[..., 0]
        stats[name] = {
            "unit": text(r.stat_unit(name)),
            "description": KEY_STATISTICS[name].description,
            "samples": f"{KEY_STATISTICS[name].reduction.name} over samples",
            "curves": encode_curves(bins, values, log=True),
            "first": numbers(np.where(first > 0, first, np.nan)),
            "zeros": zero.sum(axis=2).tolist(),
        }
    return {"rows": rows, "stats": stats}


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))
