"""The page's data: everything the browser draws, computed here in numpy and written as one JSON object.

Per result: its meta (the fields a reader needs to tell results apart), the per-head statistics of
`analysis.head_statistics` ((layers, heads) each), and its curves reduced by `Bins`: entropy in bits
as a float32 mean per bin (base64, row-major (layers, heads, bins)) with its min–max envelope as
uint16 steps between the result's lowest and highest value (base64; step = (high − low) / 65535), and
the loss in nats as plain numbers. Per sweep: loss by scale × bin, the best scale per position
(binned), the fit s = 1 + a ln(i/L) and s*. Values are computed in float64 and rounded once, on the
way out; the page shows them as they are.
"""

from __future__ import annotations

import base64
import math

import numpy as np

from entropy_lens.analysis import (
    best_scale_per_position,
    best_uniform_scale,
    fit_scale_curve,
    head_statistics,
)
from entropy_lens.errors import EntropyLensError
from entropy_lens.view.reduce import Bins, points_for
from entropy_lens.view.sources import ResultItem, SweepItem

__all__ = ["META_FIELDS", "build_payload", "meta_rows"]

LN2 = math.log(2.0)
META_FIELDS = (  # shown in the page's table, in this order, where a result's meta has them
    "model",
    "length",
    "train_len",
    "nope",
    "scales",
    "scale_source",
    "data",
    "samples",
    "seed",
    "dtype",
    "device",
    "backend",
    "attention_path",
    "entropy_reduction",
    "entropy_lens_version",
    "git_hash",
    "created_utc",
    "wall_time_s",
)


def build_payload(
    results: list[ResultItem], sweeps: list[SweepItem], *, points: int | None = None, train_len=None
) -> dict:
    """The JSON-ready dict the page reads (see the module docstring)."""
    curves = sum(r.result.n_layers * r.result.n_heads for r in results)
    longest = max([r.result.length for r in results] + [s.sweep.length for s in sweeps])
    points = points if points is not None else points_for(curves, longest)
    return {
        "points": points,
        "results": [_result(item, points, train_len) for item in results],
        "sweeps": [_sweep(item, points, train_len) for item in sweeps],
    }


def meta_rows(meta: dict) -> dict[str, str]:
    """{field: text} of the META_FIELDS a result's meta holds, scales summarised."""
    rows = {}
    for key in META_FIELDS:
        if key not in meta:
            continue
        value = meta[key]
        if key == "scales":
            flat = np.asarray(value, dtype=np.float64).ravel()
            value = (
                f"{flat[0]:g} (uniform)"
                if flat.size and np.all(flat == flat[0])
                else (f"per head, {flat.min():g}..{flat.max():g}" if flat.size else "none")
            )
            schedule = (meta.get("scan_config") or {}).get("scale_schedule")
            value += f", schedule {schedule}" if schedule else ""
        rows[key] = value if isinstance(value, str) else str(value)
    return rows


def _result(item: ResultItem, points: int, train_len) -> dict:
    r = item.result
    bins = Bins.of(r.length, points)
    loss = bins.reduce(r.loss)
    out = {
        "label": item.label,
        "source": item.source,
        "meta": meta_rows(r.meta),
        "layers": r.n_layers,
        "heads": r.n_heads,
        "length": r.length,
        "reduction": r.entropy_reduction,
        "bins": _bins(bins),
        "loss": {"mean": _numbers(loss[0]), "low": _numbers(loss[1]), "high": _numbers(loss[2])},
        "train_len": None,
        "stats": {},
        "undefined": {},
        "entropy": None,
    }
    if not r.n_heads:
        out["undefined"]["entropy"] = "a loss-only scan (--entropy none): no per-head entropy to show"
        return out
    stats = head_statistics(r, train_len=train_len)
    out["train_len"] = stats.train_len
    out["stats"] = {
        name: {"values": _numbers(v), "description": stats.descriptions[name], "units": _units(name)}
        for name, v in stats.values.items()
    }
    out["undefined"] = dict(stats.undefined)
    mean, low, high = bins.reduce(r.entropy.astype(np.float64) / LN2)
    out["entropy"] = {"mean": _b64(mean.astype(np.float32))}
    if not bins.exact:
        floor, top = float(low.min()), float(high.max())
        step = (top - floor) / 65535 if top > floor else 1.0
        out["entropy"].update(
            low=_b64(np.round((low - floor) / step).astype(np.uint16)),
            high=_b64(np.round((high - floor) / step).astype(np.uint16)),
            floor=floor,
            step=step,
        )
    return out


def _sweep(item: SweepItem, points: int, train_len) -> dict:
    sweep = item.sweep
    L = train_len if train_len is not None else sweep.train_len
    bins = Bins.of(sweep.length, points)
    best = best_scale_per_position(sweep)["best_scale"].to_numpy()
    best_mean, best_low, best_high = bins.reduce(best)
    out = {
        "label": item.label,
        "source": item.source,
        "model": sweep.model,
        "length": sweep.length,
        "train_len": L,
        "scales": [float(s) for s in sweep.scales],
        "bins": _bins(bins),
        "loss": _numbers(bins.reduce(sweep.loss)[0]),
        "best": {"mean": _numbers(best_mean), "low": _numbers(best_low), "high": _numbers(best_high)},
        "fit": None,
        "fit_undefined": None,
        "s_star": None,
    }
    try:
        fit = fit_scale_curve(sweep, train_len=L)
        start, stop = fit.fit_range
        x = np.unique(np.geomspace(start, stop - 1, 200).round().astype(np.int64))
        out["fit"] = {
            "a": fit.a,
            "a_stderr": fit.a_stderr,
            "r2": None if math.isnan(fit.r2) else fit.r2,
            "train_len": fit.train_len,
            "range": [start, stop],
            "x": x.tolist(),
            "y": _numbers(fit.predict(x)),
        }
    except EntropyLensError as err:
        out["fit_undefined"] = str(err)
    if L and L < sweep.length:
        choice = best_uniform_scale(sweep, train_len=L)
        out["s_star"] = {"scale": choice.scale, "span": list(choice.span), "loss": choice.loss}
    return out


def _bins(bins: Bins) -> dict:
    return {"starts": bins.starts.tolist(), "stops": bins.stops.tolist(), "exact": bins.exact}


def _units(name: str) -> str:
    return "position" if name == "departure" else "bits"


def _numbers(x) -> list:
    """Nested lists of floats (float32 precision is what the file holds), NaN as null."""
    a = np.asarray(x, dtype=np.float64)
    return [None if math.isnan(v) else v for v in a.tolist()] if a.ndim == 1 else [_numbers(row) for row in a]


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")
