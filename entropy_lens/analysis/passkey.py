"""Passkey records (`entropy-lens passkey --out`) as tables: accuracy by depth and length, the paper's
title average (Figure 6: the mean over the cells whose length is within the context length), and
accuracy by length beside the retrieval head's mass on the key (`passkey_by_length`).

Every reader checks the record first (`check_passkey_record`): a record read from a file may be damaged
or hand-edited, and each reader then answers in one line (EntropyLensError) instead of a KeyError."""

from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd

from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import ENTROPY

__all__ = [
    "RETRIEVAL_SCORE",
    "check_passkey_record",
    "passkey_average",
    "passkey_by_length",
    "passkey_table",
    "retrieval_heads",
    "wilson_interval",
]

_TABLE = {"length": "a whole number", "depth": "a number", "accuracy": "a number"}
RETRIEVAL_SCORE = "retrieval_score"  # a trial's Wu et al. score per layer and head (runs/passkey.py)
_TRIALS = {"length": "a whole number", "per_trial": "a list"}
_TRIAL = {
    "correct": "true or false",
    ENTROPY.name: "a [layers][heads] table",
    "needle_mass": "a [layers][heads] table",
}


def check_passkey_record(
    record,
    *,
    source: str = "the passkey record",
    fix: str = "run `entropy-lens passkey` again",
    table: bool = True,
    trials: bool = True,
) -> dict:
    """`record` when it has the shape `entropy-lens passkey` writes (runs/passkey.py): a mapping whose
    "results" is a list of cells, each with a whole positive "length" and (`table`) one cell per
    (length, depth) with a "depth" and an "accuracy" in [0, 1], and (`trials`) "per_trial" trials, each
    with a bool "correct" and finite "entropy" and "needle_mass" tables of one [layers][heads] shape;
    otherwise EntropyLensError in one line: '{source} is damaged: {the first fault}; {fix}'. A reader
    asks for the parts it reads."""

    def fault(where: str, what: str):
        return EntropyLensError(f"{source} is damaged: {where} {what}; {fix}")

    if not isinstance(record, dict):
        raise fault("it", f"is {type(record).__name__}, not a mapping")
    cells = record.get("results")
    if not isinstance(cells, list):
        raise fault('"results"', "is missing" if cells is None else f"is {type(cells).__name__}, not a list")
    shape, seen = None, set()
    for i, cell in enumerate(cells):
        where = f"results[{i}]"
        if not isinstance(cell, dict):
            raise fault(where, f"is {type(cell).__name__}, not a mapping")
        for key, kind in {**_TRIALS, **_TABLE}.items():
            if (key in _TABLE and not table) or (key == "per_trial" and not trials):
                continue
            if key not in cell:
                raise fault(where, f'has no "{key}"')
            if not _is(cell[key], kind):
                raise fault(f'{where}["{key}"]', f"is {cell[key]!r:.40}, not {kind}")
        if cell["length"] < 1:
            raise fault(where, f"has length {cell['length']}, below 1")
        if table:
            if not (0 <= cell["depth"] <= 1 and 0 <= cell["accuracy"] <= 1):
                raise fault(where, "has a depth or an accuracy outside [0, 1]")
            if (cell["length"], cell["depth"]) in seen:
                raise fault(where, f"repeats length {cell['length']} at depth {cell['depth']}")
            seen.add((cell["length"], cell["depth"]))
        if not trials:
            continue
        if not cell["per_trial"]:
            raise fault(where, "has no trials")
        for j, trial in enumerate(cell["per_trial"]):
            at = f"{where}.per_trial[{j}]"
            if not isinstance(trial, dict):
                raise fault(at, f"is {type(trial).__name__}, not a mapping")
            for key, kind in _TRIAL.items():
                if key not in trial:
                    raise fault(at, f'has no "{key}"')
                if not _is(trial[key], kind):
                    raise fault(f'{at}["{key}"]', f"is not {kind}")
            shapes = {np.shape(trial[ENTROPY.name]), np.shape(trial["needle_mass"])}
            if len(shapes | ({shape} if shape else set())) != 1:
                raise fault(at, "has entropy or needle_mass tables of another [layers][heads] shape")
            shape = shapes.pop()
    return record


def _is(value, kind: str) -> bool:
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind == "a whole number":
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind == "a number":
        return number and math.isfinite(value)
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "a list":
        return isinstance(value, list)
    try:  # a [layers][heads] table of finite numbers
        table = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return table.ndim == 2 and table.size > 0 and bool(np.isfinite(table).all())


def passkey_table(record: dict) -> pd.DataFrame:
    """Accuracy (0..1) with depth (0 first) as rows and length (ascending) as columns.

    Args:
        record: a passkey record (`passkey`'s, or its JSON file read), checked.

    Returns:
        DataFrame: accuracy by depth (rows) and length (columns).

    Raises:
        EntropyLensError: a damaged record, or one without results.
    """
    rows = [
        (c["depth"], c["length"], c["accuracy"])
        for c in check_passkey_record(record, trials=False)["results"]
    ]
    if not rows:
        raise EntropyLensError("the passkey record holds no results; run `entropy-lens passkey` first")
    frame = pd.DataFrame(rows, columns=["depth", "length", "accuracy"])
    return frame.pivot(index="depth", columns="length", values="accuracy").sort_index().sort_index(axis=1)


def passkey_average(table: pd.DataFrame, context_length: int) -> float:
    """The mean accuracy over the cells whose length is at most `context_length` (Figure 6's titles).

    Args:
        table: `passkey_table`'s DataFrame.
        context_length: the longest length counted, tokens.

    Returns:
        float: mean accuracy in [0, 1].

    Raises:
        EntropyLensError: no length within context_length.
    """
    inside = table.loc[:, [w for w in table.columns if w <= context_length]]
    if inside.empty:
        raise EntropyLensError(
            f"no passkey length is within the context length {context_length}; the average is undefined"
        )
    return float(inside.to_numpy().mean())


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default); (nan, nan) for no trials.

    Args:
        successes: trials that succeeded.
        trials: trials in all (>= 0).
        z: the normal quantile of the level (1.96: 95%).

    Returns:
        tuple: (low, high) in [0, 1].
    """
    if trials == 0:
        return math.nan, math.nan
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return centre - half, centre + half


def passkey_by_length(record: dict, context_length: int) -> pd.DataFrame:
    """Per length: accuracy with its Wilson 95% interval, and beside it what the answer rows did at the
    needle: the retrieval head (the layer and head with the most mass on the key, averaged over the trials
    within `context_length`) and its mean mass on the key with a 95% interval (± 1.96 standard errors
    over trials), and the answer rows' entropy averaged over every head (nats). Where accuracy falls but
    that head's mass holds, the model still finds the key and loses it later; where the mass falls, it
    no longer finds it.

    Args:
        record: a passkey record with its per-trial tables, checked.
        context_length: the longest length whose trials choose the retrieval head, tokens.

    Returns:
        DataFrame: one row per length.

    Raises:
        EntropyLensError: a damaged record, or no trial within context_length.
    """
    trials = [
        (c["length"], t) for c in check_passkey_record(record, table=False)["results"] for t in c["per_trial"]
    ]
    inside = [np.asarray(t["needle_mass"]) for w, t in trials if w <= context_length]
    if not inside:
        raise EntropyLensError(
            f"no passkey trial is within the context length {context_length}; the retrieval head is undefined"
        )
    layer, head = np.unravel_index(int(np.argmax(np.mean(inside, axis=0))), inside[0].shape)
    rows = []
    for length in sorted({w for w, _ in trials}):
        at = [t for w, t in trials if w == length]
        correct = sum(t["correct"] for t in at)
        mass = np.array([t["needle_mass"][layer][head] for t in at])
        spread = 1.96 * mass.std(ddof=1) / math.sqrt(len(mass)) if len(mass) > 1 else math.nan
        low, high = wilson_interval(correct, len(at))
        rows.append(
            {
                "length": length,
                "accuracy": correct / len(at),
                "accuracy_low": low,
                "accuracy_high": high,
                "head": f"{layer}.{head}",
                "needle_mass": float(mass.mean()),
                "needle_mass_low": float(mass.mean() - spread),
                "needle_mass_high": float(mass.mean() + spread),
                ENTROPY.name: float(np.mean([np.mean(t[ENTROPY.name]) for t in at])),
                "trials": len(at),
            }
        )
    return pd.DataFrame(rows).set_index("length")


def retrieval_heads(record: dict, length: int | None = None) -> np.ndarray:
    """Each head's retrieval score (Wu et al., 2024) averaged over a passkey run's trials: how often, per
    answer, the head's most probable key lay in the needle and held the very token written, over the
    needle's length (runs/passkey.py).

    Args:
        record: a passkey record with its per-trial tables.
        length: only the trials of this window length; None: every trial.

    Returns:
        np.ndarray: (layers, heads) float64, the mean over the trials.

    Raises:
        EntropyLensError: a damaged record, no trial of `length`, or trials recorded before the score.
    """
    cells = check_passkey_record(record, table=False)["results"]
    trials = [t for c in cells if length is None or c["length"] == length for t in c["per_trial"]]
    if not trials:
        raise EntropyLensError(f"the passkey record has no trial of length {length}; choose a length it ran")
    if any(RETRIEVAL_SCORE not in t for t in trials):
        raise EntropyLensError(
            "the passkey record's trials hold no retrieval_score (written before it was recorded); run "
            "`entropy-lens passkey` again with --force"
        )
    scores = [np.asarray(t[RETRIEVAL_SCORE], dtype=np.float64) for t in trials]
    if len({s.shape for s in scores}) != 1 or not all(np.isfinite(s).all() for s in scores):
        raise EntropyLensError(
            "the passkey record is damaged: its retrieval_score tables differ or hold no number"
        )
    return np.mean(scores, axis=0)
