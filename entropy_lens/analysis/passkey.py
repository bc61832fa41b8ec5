"""Passkey records (`entropy-lens passkey --out`) as tables: accuracy by depth and length, the paper's
title average (Figure 6: the mean over the cells whose length is within the context length), and
accuracy by length beside the retrieval head's mass on the key (`passkey_by_length`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from entropy_lens.errors import EntropyLensError

__all__ = ["passkey_average", "passkey_by_length", "passkey_table", "wilson_interval"]


def passkey_table(record: dict) -> pd.DataFrame:
    """Accuracy (0..1) with depth (0 first) as rows and length (ascending) as columns."""
    rows = [(c["depth"], c["length"], c["accuracy"]) for c in record.get("results", [])]
    if not rows:
        raise EntropyLensError("the passkey record holds no results; run `entropy-lens passkey` first")
    frame = pd.DataFrame(rows, columns=["depth", "length", "accuracy"])
    return frame.pivot(index="depth", columns="length", values="accuracy").sort_index().sort_index(axis=1)


def passkey_average(table: pd.DataFrame, context_length: int) -> float:
    """The mean accuracy over the cells whose length is at most `context_length` (Figure 6's titles)."""
    inside = table.loc[:, [w for w in table.columns if w <= context_length]]
    if inside.empty:
        raise EntropyLensError(
            f"no passkey length is within the context length {context_length}; the average is undefined"
        )
    return float(inside.to_numpy().mean())


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default); (nan, nan) for no trials."""
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
    no longer finds it."""
    trials = [(c["length"], t) for c in record.get("results", []) for t in c["per_trial"]]
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
                "entropy": float(np.mean([np.mean(t["entropy"]) for t in at])),
                "trials": len(at),
            }
        )
    return pd.DataFrame(rows).set_index("length")
