"""The page's data: everything the browser draws, computed here in numpy and written as one JSON object.

Per result: its meta (the fields a reader needs to tell results apart) and, under `stats`, one entry per
row statistic it holds (`ScanResult.stat_names`: entropy, then those of `scan --stats`), each with its
unit (entropy in bits, the others as stored: entropy_lens.statistics), its bound where one grows with
position (sampled: log₂(i + 1) for entropy, ln(i + 1) for collision_entropy, i for distance), the range
[0, 1] of a probability, the per-head statistics of `analysis.head_statistics` ((layers, heads) each,
and why any is undefined), and its curves reduced by `Bins`: a float32 mean per bin (base64, row-major
(layers, heads, bins)) with its min–max envelope as uint16 steps between the statistic's lowest and
highest value (base64; step = (high − low) / 65534; `encode.py`); then the loss in nats as plain
numbers; and, only for a result holding key statistics (attention received by key position, `scan
--stats received,...`), their curves binned alike for a log scale under `keys` (received.py). Per
sweep: loss by scale × bin, the best scale per position (binned), the fit s = 1 + a ln(i/L) and s*.
Per monitor history: each statistic by step × layer × head, binned alike (histories.py). Per
generation: its text token by token and every generated token's statistics, unbinned (generations.py).
Values are computed in float64 and rounded once, on the way out; the page shows them as they are.

NaN/inf in a file are gaps, never an error: a bin holding one is NaN (`Bins.reduce`), written as JSON null
(float32 NaN in a curve's mean, the code `GAP` in its envelope) and drawn as a break in the line; a head
whose statistic holds one gets blank (null) per-head statistics and a note saying so. Every string is
made encodable (lone surrogates become U+FFFD, `text`); escaping for where it lands is page.py's job.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from entropy_lens.analysis import (
    best_scale_per_position,
    best_uniform_scale,
    fit_scale_curve,
    head_statistics,
    stat_display,
)
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult
from entropy_lens.statistics import (
    ENTROPY,
    LOG_BOUND,
    PARAMETERS,
    POSITION_BOUND,
    PROBABILITY,
    STATISTICS,
)
from entropy_lens.view.encode import GAP, bins_json, encode_curves, number, numbers, text
from entropy_lens.view.generations import generation_payload
from entropy_lens.view.histories import history_curves, history_payload
from entropy_lens.view.received import key_payload
from entropy_lens.view.reduce import Bins, points_for
from entropy_lens.view.sources import GenerationItem, HistoryItem, ResultItem, SweepItem

__all__ = ["GAP", "META_FIELDS", "build_payload", "meta_rows", "text"]
# the statistics of a window of keys, with its parameter (first_mass's K, ...); of another size, another
WINDOWED = {name: stat.parameters[0] for name, stat in STATISTICS.items() if stat.parameters}

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
    "stats",
    *PARAMETERS,  # the statistics' parameters
    "entropy_lens_version",
    "git_hash",
    "created_utc",
    "wall_time_s",
)


def build_payload(
    results: list[ResultItem],
    sweeps: list[SweepItem],
    *,
    points: int | None = None,
    train_len=None,
    histories: list[HistoryItem] = (),
    generations: list[GenerationItem] = (),
) -> dict:
    """The JSON-ready dict the page reads (see the module docstring; a history's: histories.py; a
    generation's: generations.py)."""
    curves = sum(
        r.result.n_layers * r.result.n_heads * (len(r.result.stat_names) + len(r.result.key_names))
        for r in results
    )
    curves += sum(history_curves(h.history) for h in histories)
    longest = max(
        [r.result.length for r in results]
        + [s.sweep.length for s in sweeps]
        + [len(h.history) for h in histories]
        + [1]  # a page of generations alone: they are not binned
    )
    points = points if points is not None else points_for(curves, longest)
    out = {
        "points": points,
        "results": [_result(item, points, train_len) for item in results],
        "sweeps": [_sweep(item, points, train_len) for item in sweeps],
        "histories": [history_payload(item, points) for item in histories],
        "generations": [generation_payload(item) for item in generations],
    }
    _note_keys(out["results"])
    return out


def _window(meta: dict, name: str) -> int:
    """The parameter of the statistic `name` of WINDOWED in a result's `meta` (or its scan_config), else
    its default."""
    return WINDOWED[name].read(meta)


def _note_keys(results: list[dict]) -> None:
    """first_mass of different K (recent_mass of different W) is not one statistic: the page offers no
    difference of two such results (explorer.js compares each statistic's `keys`), and says so in a note
    on each."""
    for name, parameter in WINDOWED.items():
        letter = parameter.letter
        keys = {r["label"]: r["stats"][name]["keys"] for r in results if name in r["stats"]}
        if len(set(keys.values())) < 2:
            continue
        for r in results:
            if r["label"] in keys:
                others = ", ".join(
                    f"{letter} = {n} in {label}" for label, n in keys.items() if label != r["label"]
                )
                r["notes"].append(
                    f"{name} is the mass on the {parameter.spanned(keys[r['label']])} here ({others}): the "
                    f"page shows no difference of {name} between results of different {letter}"
                )


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
        if key == "stats" and isinstance(value, dict):  # {statistic: unit}
            value = ", ".join(f"{name} ({unit})" for name, unit in value.items())
        rows[key] = text(value)
    return rows


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
        "bins": bins_json(bins),
        "loss": {"mean": numbers(loss[0]), "low": numbers(loss[1]), "high": numbers(loss[2])},
        "train_len": None,
        "stats": {},  # row statistic -> what the page draws of it (_stat)
        "undefined": {},  # row statistic -> why the result has none to draw
        "notes": [],
    }
    if not np.all(np.isfinite(r.loss)):
        out["notes"].append(f"{_count(~np.isfinite(r.loss))} loss values are NaN/inf: drawn as gaps")
    if not r.n_heads:
        out["undefined"][ENTROPY.name] = "a loss-only scan (--record none): no per-head entropy to show"
        return out
    L, why = train_len_of(r.meta, train_len, item.source)
    for stat in r.stat_names:
        out["stats"][text(stat)] = _stat(r, stat, bins, L, why, out["notes"])
    keys = key_payload(r, bins, out["notes"])
    if keys:  # only then: a result without key statistics has the payload it had before them
        out["keys"] = keys
    for name, parameter in WINDOWED.items():  # K, W: first_mass of another K differs
        if name in out["stats"]:
            out["stats"][name] |= {"keys": _window(r.meta, name), "letter": parameter.letter}
    out["train_len"] = L if L is not None and 2 <= L < r.length else None  # as head_statistics takes it
    if why:
        out["notes"].append(why)
    return out


def _stat(r: ScanResult, stat: str, bins: Bins, L, why, notes: list) -> dict:
    """One row statistic of `r` as the page draws it (the module docstring); `notes` gets its gaps."""
    values, squares = r.stat(stat), r.stat(stat, squared=True)
    finite = np.isfinite(values) & (True if squares is None else np.isfinite(squares))
    bad = ~finite.all(axis=2)  # (layers, heads)
    if bad.any():  # per-head statistics of the finite heads; the others blank (their 0 fill never shown)
        keep = ~bad[:, :, None]
        clean = {stat: np.where(keep, values, 0)}
        if squares is not None:
            clean[stat + "_sq"] = np.where(keep, squares, 0)
        r = (
            dataclasses.replace(r, entropy=clean[stat], entropy_sq=clean[stat + "_sq"])
            if stat == ENTROPY.name
            else dataclasses.replace(r, stats={**r.stats, **clean})
        )
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        notes.append(
            f"{_count(bad)} of {bad.size} heads hold NaN/inf {text(stat)} at some positions (first: layer "
            f"{first[0]}, head {first[1]}): drawn as gaps, their statistics left blank"
        )
    heads = head_statistics(r, stat=stat, train_len=L)
    factor, unit = stat_display(r, stat)
    info = STATISTICS.get(stat)
    return {
        "unit": text(unit),
        "description": info.description if info else "",
        "bound": _bound(info.bound if info else None, unit, r.length),
        "range": [0, 1] if unit == PROBABILITY else None,
        "per_head": {
            name: {
                "values": numbers(np.where(bad, np.nan, v)),
                "description": heads.descriptions[name],
                "units": text(heads.units[name]),
            }
            for name, v in heads.values.items()
        },
        "undefined": {name: why or reason for name, reason in heads.undefined.items()},
        "curves": encode_curves(bins, values.astype(np.float64) * factor),
    }


def _bound(kind: str | None, unit: str, length: int) -> dict | None:
    """The largest value a causal row at position i can take, in `unit`, sampled at about 400 positions:
    log₂(i + 1) bits or ln(i + 1) nats (LOG_BOUND), i tokens (POSITION_BOUND); None without such a bound."""
    x = np.unique(np.append(np.arange(0, length, max(1, length // 400)), length - 1))
    if kind == POSITION_BOUND:
        label, hover, y = "i", "i = %{x}", x.astype(np.float64)
    elif kind == LOG_BOUND:
        log = "log₂" if unit == "bits" else "ln"
        label, hover = f"{log}(i + 1)", f"{log}(%{{x}} + 1) = %{{y:.4f}}"
        y = np.log2(x + 1.0) if unit == "bits" else np.log(x + 1.0)
    else:
        return None
    return {"label": label, "hover": hover, "x": x.tolist(), "y": numbers(y)}


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
        "bins": bins_json(bins),
        "loss": numbers(bins.reduce(sweep.loss)[0]),
        "best": {"mean": numbers(best_mean), "low": numbers(best_low), "high": numbers(best_high)},
        "fit": None,
        "fit_undefined": None,
        "s_star": None,
    }
    try:
        fit = fit_scale_curve(sweep, train_len=L)
        start, stop = fit.fit_range
        x = np.unique(np.geomspace(start, stop - 1, 200).round().astype(np.int64))
        out["fit"] = {
            "a": number(fit.a),
            "a_stderr": number(fit.a_stderr),
            "r2": number(fit.r2),
            "train_len": fit.train_len,
            "range": [start, stop],
            "x": x.tolist(),
            "y": numbers(fit.predict(x)),
        }
    except EntropyLensError as err:
        out["fit_undefined"] = why or text(err)
    if L and L < sweep.length:
        choice = best_uniform_scale(sweep, train_len=L)
        out["s_star"] = {
            "scale": number(choice.scale),
            "span": list(choice.span),
            "loss": number(choice.loss),
        }
    return out


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))
