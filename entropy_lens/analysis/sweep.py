"""A uniform-scale sweep as arrays: one loss (and mean-entropy) curve per scale multiplier s.

A sweep folder (written by `entropy-lens sweep`) holds one ordinary results file per scale plus
`sweep.json`. `load_sweep` reads it into a `Sweep`: scales ascending, curves stacked as (S, T)
float64, so `best_scale_per_position` is one `argmin` over axis 0.

Choices:
- A scan's scale is read from its own meta `scales` table (the value every head shares), not from
  the file name or the index; the index scale must agree with it. A file with per-head scales is
  not part of a uniform sweep and is rejected.
- Entropy is kept only as the mean over all layers and heads (the paper's Eq. 1), in nats. A file
  stored with `entropy_reduction="mean"` holds (layers, 1, T) head means; their mean over
  layers is the same number because every layer has the same head count. If any scan captured no
  entropy (heads axis of length 0), `Sweep.entropy` is None.
- An unfinished sweep (index `complete` false: interrupted, or still running) is refused with the
  scales it lacks and the command that finishes it; `partial=True` reads the scales that are done.
  The index is untrusted (`results.read_sweep_index` keeps its files inside the folder): that command
  is built from the index's settings, shell-quoted (`resume_command`), never the one the index stores,
  and file text reaches a message only through `results.printable`.
- Everything that makes curves comparable (model, config hash, data, length, training length) must
  match; a mismatch names the file, because the fix is to rerun that sweep into a fresh folder.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError, problem
from entropy_lens.results import ScanResult, printable, read_sweep_index

__all__ = ["Sweep", "load_sweep", "missing_scales", "resume_command", "uniform_scale"]

_MATCH = ("len", "model", "config_hash", "data", "train_len")  # meta keys every scan of a sweep shares


@dataclass
class Sweep:
    """Uniform-scale scans of one model, stacked by scale (`load_sweep`, `Sweep.from_results`).

    Args:
        scales: (S,) float64, ascending multipliers of 1/√d.
        loss: (S, T) float64, nats.
        entropy: (S, T) float64, nats, mean over layers and heads; None if not captured.
        train_len: L, or None.
        model: the model's name.
        length: T, tokens per sequence.
        meta: each scan's meta, in `scales` order.
        missing: requested scales not done (load_sweep partial=True).
    """

    scales: np.ndarray  # (S,) float64, ascending multipliers of 1/√d
    loss: np.ndarray  # (S, T) float64, nats
    entropy: np.ndarray | None  # (S, T) float64, nats, mean over layers and heads; None if not captured
    train_len: int | None
    model: str
    length: int
    meta: list[dict] = field(default_factory=list)  # each scan's meta, in `scales` order
    missing: list[float] = field(default_factory=list)  # requested scales not done (load_sweep partial=True)

    @classmethod
    def from_results(cls, results: list[ScanResult], *, sources: list[str] | None = None) -> Sweep:
        """Stack uniform-scale scans into a sweep, sorted by scale.

        Args:
            results: scans of one model on the same data and length, each with one uniform scale.
            sources: names for error messages (file paths); default "result 0", "result 1", ...

        Returns:
            Sweep: the scans' loss and mean entropy by scale (ascending) and position.

        Raises:
            EntropyLensError: no scans, scans of different models, data or lengths, a scan without one
                uniform scale, or a scale twice.
        """
        if not results:
            raise EntropyLensError(
                "no scans to make a sweep of; run `entropy-lens sweep` (or finish it with --resume)"
            )
        names = (
            [printable(n) for n in sources]
            if sources is not None
            else [f"result {i}" for i in range(len(results))]
        )
        first, first_name = results[0], names[0]
        scales = []
        for result, name in zip(results, names):
            result.validate(source=name)
            for key in _MATCH:
                if result.meta.get(key) != first.meta.get(key):
                    raise EntropyLensError(
                        f"{name}: {key} {printable(repr(result.meta.get(key)))} differs from "
                        f"{printable(repr(first.meta.get(key)))} in "
                        f"{first_name}; a sweep compares one scan setting, so rerun the sweep into a fresh "
                        "folder"
                    )
            s = uniform_scale(result.meta)
            if s is None:
                raise EntropyLensError(
                    f"{name} has per-head scales, not one uniform scale; leave it out of the sweep, or "
                    "rerun the sweep into a fresh folder"
                )
            if not np.all(np.isfinite(result.loss)):
                bad = np.flatnonzero(~np.isfinite(result.loss))
                raise EntropyLensError(
                    f"{name} (scale {s:g}) has {bad.size} NaN/inf losses (first at position {bad[0]}); "
                    "the scan diverged or is incomplete, rerun that scale"
                )
            scales.append(s)
        order = np.argsort(scales, kind="stable")
        sorted_scales = np.asarray(scales, dtype=np.float64)[order]
        dup = np.flatnonzero(np.diff(sorted_scales) == 0)
        if dup.size:
            i, j = order[dup[0]], order[dup[0] + 1]
            raise EntropyLensError(
                f"{names[i]} and {names[j]} both hold scale {sorted_scales[dup[0]]:g}; keep one of them, "
                "or rerun the sweep into a fresh folder"
            )
        ordered = [results[i] for i in order]
        has_entropy = all(_has_entropy(r) for r in ordered)
        entropy = np.stack([r.mean_entropy.astype(np.float64) for r in ordered]) if has_entropy else None
        return cls(
            scales=sorted_scales,
            loss=np.stack([r.loss.astype(np.float64) for r in ordered]),
            entropy=entropy,
            train_len=first.meta.get("train_len"),
            model=str(first.meta["model"]),
            length=int(first.meta["length"]),
            meta=[r.meta for r in ordered],
        )


def load_sweep(folder: str | Path, *, partial: bool = False) -> Sweep:
    """Read a sweep folder (its `sweep.json` and every results file it lists) into a `Sweep`.

    An unfinished sweep is an error unless `partial`; then the scales done are read and the others are
    listed in `Sweep.missing`.

    Args:
        folder: the sweep folder (str or Path), holding `sweep.json`.
        partial: read the finished scales of an unfinished sweep instead of refusing it.

    Returns:
        Sweep: loss and mean entropy by scale and position.

    Raises:
        EntropyLensError: a damaged or foreign index, a missing results file, or an unfinished sweep
            without partial (with the command that finishes it).
    """
    index = read_sweep_index(folder)
    missing = missing_scales(index)
    if missing and not partial:
        done = len(index["scales"])
        raise EntropyLensError(
            f"sweep {printable(folder)} is unfinished: {done} of {done + len(missing)} scales done, "
            f"{_scale_list(missing)} missing; finish it with `{resume_command(folder, index)}`, or pass "
            "--partial to use the scales done"
        )
    results = []
    for s, path in zip(index["scales"], index["files"]):
        try:
            result = ScanResult.load(path)
        except EntropyLensError as err:  # missing or unreadable: the sweep's own command makes it again
            raise EntropyLensError(
                f"{printable(path)} (scale {s:g} of sweep {printable(folder)}) {_damage(problem(err))}; "
                f"`{resume_command(folder, index)}` scans it again"
            ) from None
        if result.meta.get("length") != index.get("length", result.meta.get("length")):
            raise EntropyLensError(
                f"{printable(path)} has length {result.meta['length']} but the sweep index says {index['length']}; "
                "rerun the sweep into a fresh folder"
            )
        if uniform_scale(result.meta) not in (None, float(s)):
            raise EntropyLensError(
                f"{printable(path)} holds scale {uniform_scale(result.meta):g} but the sweep index says {s:g}; "
                "rerun the sweep into a fresh folder"
            )
        results.append(result)
    sweep = Sweep.from_results(results, sources=list(index["files"]))
    sweep.missing = missing
    return sweep


def missing_scales(index: dict) -> list[float]:
    """The requested scales of a sweep index that have no finished scan yet (empty when complete).

    Args:
        index: a sweep index (`sweep.json`, read by results.read_sweep_index).

    Returns:
        list: the missing scales (float), in the index's order.
    """
    if index.get("complete", True):
        return []
    done = {round(float(s), 6) for s in index["scales"]}
    requested = index.get("requested_scales") or []
    missing = [float(s) for s in requested if round(float(s), 6) not in done]
    return missing or [float("nan")]  # "complete": false with nothing listed: still unfinished


def resume_command(folder: str | Path, index: dict) -> str:
    """The `entropy-lens sweep` command that finishes the sweep in `folder`, built here from the index's
    own fields: its scan settings (`scan_config`, else the model, length, data, samples, seed and
    entropy it records), the requested scales, --out and --resume, every value shell-quoted. The index
    is untrusted, so the command it stores is never shown; a setting of a type no flag takes leaves a
    placeholder for the sweep's flags instead.

    Args:
        folder: the sweep folder (str or Path).
        index: its index, read by results.read_sweep_index.

    Returns:
        str: the command line.
    """
    scales = index.get("requested_scales") or index.get("scales") or []
    words = _flag_words(index.get("scan_config"))
    if words is None:
        top = {k: index[k] for k in ("model", "length", "data", "samples", "seed", "entropy") if k in index}
        words = _flag_words(top)
    if words is None:
        words = ["CKPT", "<the sweep's flags>"]
    tail = ["--scales", ",".join(f"{float(s):g}" for s in scales), "--out", shlex.quote(printable(folder))]
    return " ".join(["entropy-lens sweep", *words, *tail, "--resume"])


_NEGATED = ("nope",)  # ScanConfig's three-state flag: True --nope, False --no-nope, None neither
_NOT_FLAGS = ("model", "length", "scale", "head_scales")  # the positional, --len, and what a sweep sets


def _flag_words(settings) -> list[str] | None:
    """The CLI words of a scan's recorded settings ({field: value}): CKPT, --len N, then `--field value`
    for each other field (None and False left out, True as the flag alone, --no-nope), shell-quoted;
    None when a field is not a plain name or a value not a number, string, or list of them."""
    if not isinstance(settings, dict) or not isinstance(settings.get("model"), str):
        return None
    length = settings.get("length")
    if not isinstance(length, int) or isinstance(length, bool):
        return None
    words = [shlex.quote(printable(settings["model"])), "--len", str(length)]
    for name, value in sorted(settings.items()):
        if name in _NOT_FLAGS or value is None or (value is False and name not in _NEGATED):
            continue
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            return None
        flag = "--" + name.replace("_", "-")
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (str, int, float)) for v in values):
            return None
        if value is True or value is False:
            words.append(flag if value else "--no-" + flag[2:])
        else:
            words += [flag, *(shlex.quote(printable(v)) for v in values)]
    return words


def _damage(what: str) -> str:
    """What ScanResult.load found wrong with a file, without the file's name that starts it."""
    return what.split(" ", 1)[1] if " " in what else what


def _scale_list(scales: list[float], shown: int = 6) -> str:
    if any(math.isnan(s) for s in scales):
        return "some scales"
    text = ", ".join(f"{s:g}" for s in scales[:shown])
    return (
        "scale " + text if len(scales) == 1 else f"scales {text}" + (", ..." if len(scales) > shown else "")
    )


def uniform_scale(meta: dict) -> float | None:
    """The multiplier every head shares in meta `scales` ([layers][heads]), or None if they differ.

    Args:
        meta: a results file's meta.

    Returns:
        float | None: the shared multiplier of 1/√d.
    """
    table = np.asarray(meta.get("scales", []), dtype=np.float64)
    if table.size == 0 or not np.all(table == table.flat[0]):
        return None
    return float(table.flat[0])


def _has_entropy(result: ScanResult) -> bool:
    return result.n_heads > 0 and result.entropy_reduction != "none"
