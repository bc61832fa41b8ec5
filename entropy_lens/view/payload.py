"""The page's data: everything the browser draws, computed here in numpy and written as one JSON object.

Per result: its meta (the fields a reader needs to tell results apart), the per-head statistics of
`analysis.head_statistics` ((layers, heads) each), and its curves reduced by `Bins`: entropy in bits
as a float32 mean per bin (base64, row-major (layers, heads, bins)) with its min–max envelope as
uint16 steps between the result's lowest and highest value (base64; step = (high − low) / 65535), and
the loss in nats as plain numbers. Per sweep: loss by scale × bin, the best scale per position
(binned), the fit s = 1 + a ln(i/L) and s*. Values are computed in float64 and rounded once, on the
way out; the page shows them as they are.

NaN/inf in a file are gaps, never an error: a bin holding one is NaN (`Bins.reduce`), written as JSON null
(float32 NaN in the entropy mean, the code `GAP` in its envelope) and drawn as a break in the line; a head
whose entropy holds one gets blank (null) statistics and a note saying so. Every string is made
encodable (lone surrogates become U+FFFD, `text`); escaping for where it lands is page.py's job.
"""

from __future__ import annotations

import base64
import dataclasses
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

__all__ = ["GAP", "META_FIELDS", "build_payload", "meta_rows", "text"]

LN2 = math.log(2.0)
GAP = 65535  # the uint16 envelope code of a bin with NaN/inf (a gap); values use 0..65534
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
        if key == "scales" and not isinstance(value, str):  # sources.check_result refused non-numbers
            flat = np.asarray(value, dtype=np.float64).ravel()
            value = (
                f"{flat[0]:g} (uniform)"
                if flat.size and np.all(flat == flat[0])
                else (f"per head, {flat.min():g}..{flat.max():g}" if flat.size else "none")
            )
            schedule = (meta.get("scan_config") or {}).get("scale_schedule")
            value += f", schedule {schedule}" if schedule else ""
        rows[key] = text(value)
    return rows


def text(value) -> str:
    """`value` as a string that can be written as UTF-8: a lone surrogate (from a file's JSON `\\ud800`)
    becomes U+FFFD; a valid surrogate pair becomes its character."""
    s = value if isinstance(value, str) else str(value)
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def train_len_of(meta: dict, flag, source: str) -> tuple[int | None, str | None]:
    """(L, why): `flag` (--train-len) if given, else the meta's `train_len` where it is a whole number of
    positions, 2 or more; `why` says what is wrong with a meta value that is not (then L is None)."""
    if flag is not None:
        return flag, None
    value = meta.get("train_len")
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 2):
        return value, None
    return None, (
        f"{text(source)}: meta train_len {text(repr(value))} is not a training length (a whole number of "
        "positions, 2 or more); pass --train-len L (train_len=L) to set one"
    )


def _result(item: ResultItem, points: int, train_len) -> dict:
    r = item.result
    bins = Bins.of(r.length, points)
    loss = bins.reduce(r.loss)
    out = {
        "label": text(item.label),
        "source": text(item.source),
        "meta": meta_rows(r.meta),
        "layers": r.n_layers,
        "heads": r.n_heads,
        "length": r.length,
        "reduction": text(r.entropy_reduction),
        "bins": _bins(bins),
        "loss": {"mean": _numbers(loss[0]), "low": _numbers(loss[1]), "high": _numbers(loss[2])},
        "train_len": None,
        "stats": {},
        "undefined": {},
        "entropy": None,
        "notes": [],
    }
    if not np.all(np.isfinite(r.loss)):
        out["notes"].append(f"{_count(~np.isfinite(r.loss))} loss values are NaN/inf: drawn as gaps")
    if not r.n_heads:
        out["undefined"]["entropy"] = "a loss-only scan (--entropy none): no per-head entropy to show"
        return out
    L, why = train_len_of(r.meta, train_len, item.source)
    bad = ~(np.isfinite(r.entropy) & np.isfinite(r.entropy_sq)).all(axis=2)  # (layers, heads)
    if bad.any():  # statistics of the finite heads; the others blank
        keep = ~bad[:, :, None]
        r = dataclasses.replace(
            r, entropy=np.where(keep, r.entropy, 0), entropy_sq=np.where(keep, r.entropy_sq, 0)
        )
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        out["notes"].append(
            f"{_count(bad)} of {bad.size} heads hold NaN/inf entropy at some positions (first: layer "
            f"{first[0]}, head {first[1]}): drawn as gaps, their statistics left blank"
        )
    stats = head_statistics(r, train_len=L)
    out["train_len"] = stats.train_len
    out["stats"] = {
        name: {
            "values": _numbers(np.where(bad, np.nan, v)),
            "description": stats.descriptions[name],
            "units": _units(name),
        }
        for name, v in stats.values.items()
    }
    out["undefined"] = {name: why or reason for name, reason in stats.undefined.items()}
    if why:
        out["notes"].append(why)
    mean, low, high = bins.reduce(item.result.entropy.astype(np.float64) / LN2)
    out["entropy"] = {"mean": _b64(mean.astype(np.float32))}
    if not bins.exact:
        finite = np.isfinite(low)
        floor = float(low[finite].min()) if finite.any() else 0.0
        top = float(high[finite].max()) if finite.any() else 0.0
        step = (top - floor) / (GAP - 1) if top > floor else 1.0
        code = lambda x: np.where(finite, np.round((np.where(finite, x, floor) - floor) / step), GAP)
        out["entropy"].update(
            low=_b64(code(low).astype(np.uint16)),
            high=_b64(code(high).astype(np.uint16)),
            floor=floor,
            step=step,
            gap=GAP,
        )
    return out


def _sweep(item: SweepItem, points: int, train_len) -> dict:
    sweep = item.sweep
    L, why = train_len_of({"train_len": sweep.train_len}, train_len, f"sweep {item.source}")
    bins = Bins.of(sweep.length, points)
    best = best_scale_per_position(sweep)["best_scale"].to_numpy()
    best_mean, best_low, best_high = bins.reduce(best)
    out = {
        "label": text(item.label),
        "source": text(item.source),
        "model": text(sweep.model),
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
            "a": _number(fit.a),
            "a_stderr": _number(fit.a_stderr),
            "r2": _number(fit.r2),
            "train_len": fit.train_len,
            "range": [start, stop],
            "x": x.tolist(),
            "y": _numbers(fit.predict(x)),
        }
    except EntropyLensError as err:
        out["fit_undefined"] = why or text(err)
    if L and L < sweep.length:
        choice = best_uniform_scale(sweep, train_len=L)
        out["s_star"] = {
            "scale": _number(choice.scale),
            "span": list(choice.span),
            "loss": _number(choice.loss),
        }
    return out


def _bins(bins: Bins) -> dict:
    return {"starts": bins.starts.tolist(), "stops": bins.stops.tolist(), "exact": bins.exact}


def _units(name: str) -> str:
    return "position" if name == "departure" else "bits"


def _numbers(x) -> list:
    """Nested lists of floats (float32 precision is what the file holds), NaN and ±inf as null (a gap)."""
    a = np.asarray(x, dtype=np.float64)
    return [_number(v) for v in a.tolist()] if a.ndim == 1 else [_numbers(row) for row in a]


def _number(v: float) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")
