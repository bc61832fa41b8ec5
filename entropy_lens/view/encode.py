"""How the page's numbers are written into its JSON (payload.py for results and sweeps, histories.py
for monitor histories): curves as base64 float32 means per bin with a uint16 min–max envelope, other
numbers as plain JSON where NaN and ±inf become null (a gap the page draws as a break)."""

from __future__ import annotations

import base64
import math

import numpy as np

from entropy_lens.view.reduce import Bins

__all__ = ["GAP", "b64", "bins_json", "encode_curves", "number", "numbers", "text"]

GAP = 65535  # the uint16 envelope code of a bin with NaN/inf (a gap); values use 0..65534


def encode_curves(bins: Bins, values: np.ndarray, *, log: bool = False) -> dict:
    """(..., len) -> the float32 mean per bin (base64, row-major (..., bins)) and, where bins hold several
    points, the uint16 envelope between the lowest and the highest value: step = (high − low) / 65534,
    GAP for a bin holding NaN/inf (payload.py's module docstring). With `log` (a log scale's curve:
    attention received) values <= 0 are left out of their bin (`Bins.reduce(positive=True)`; a bin of
    none is NaN, a gap) and the envelope's steps are in ln(value): value = exp(floor + code · step),
    marked `"log": true`, so values orders of magnitude apart keep the same relative precision."""
    mean, low, high = bins.reduce(values, positive=log)
    out = {"mean": b64(mean.astype(np.float32))}
    if not bins.exact:
        if log:
            low, high = np.log(low), np.log(high)  # each bin's are > 0 or NaN (a gap), which stays NaN
        finite = np.isfinite(low)
        floor = float(low[finite].min()) if finite.any() else 0.0
        top = float(high[finite].max()) if finite.any() else 0.0
        step = (top - floor) / (GAP - 1) if top > floor else 1.0
        code = lambda x: np.where(finite, np.round((np.where(finite, x, floor) - floor) / step), GAP)
        out.update(
            low=b64(code(low).astype(np.uint16)),
            high=b64(code(high).astype(np.uint16)),
            floor=floor,
            step=step,
            gap=GAP,
        )
        if log:
            out["log"] = True
    return out


def bins_json(bins: Bins) -> dict:
    return {"starts": bins.starts.tolist(), "stops": bins.stops.tolist(), "exact": bins.exact}


def numbers(x) -> list:
    """Nested lists of floats (float32 precision is what the file holds), NaN and ±inf as null (a gap)."""
    a = np.asarray(x, dtype=np.float64)
    return [number(v) for v in a.tolist()] if a.ndim == 1 else [numbers(row) for row in a]


def number(v: float) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def text(value) -> str:
    """`value` as a string that can be written as UTF-8: a lone surrogate (from a file's JSON `\\ud800`)
    becomes U+FFFD; a valid surrogate pair becomes its character."""
    s = value if isinstance(value, str) else str(value)
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
