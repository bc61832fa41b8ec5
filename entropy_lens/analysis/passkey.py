"""Passkey records (`entropy-lens passkey --out`) as tables: accuracy by depth and length, and the
paper's title average (Figure 6: the mean over the cells whose length is within the context length)."""

from __future__ import annotations

import pandas as pd

from entropy_lens.errors import EntropyLensError

__all__ = ["passkey_average", "passkey_table"]


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
