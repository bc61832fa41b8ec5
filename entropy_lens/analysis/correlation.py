"""Why a correlation is undefined, in words: a README prints the reason, never `nan`."""

from __future__ import annotations

import numpy as np


def undefined_because(x, y, *, items: str, x_name: str, y_name: str) -> str | None:
    """None when Pearson/Spearman of (x, y) are defined; else the reason, e.g. "every loss inflection
    is at position 128 (no variance)". `items` names what the points are ("scans", "heads")."""
    if len(x) < 2:
        return f"fewer than 2 {items} ({len(x)})"
    for values, name in ((x, x_name), (y, y_name)):
        if np.ptp(values) == 0:
            return f"every {name} is {values[0]:g} (no variance over {len(values)} {items})"
    return None


def describe(r: float, p: float, why: str | None, *, name: str = "Pearson r") -> str:
    """'Pearson r = 0.87 (p = 0.003)', or 'Pearson r undefined: <why>'."""
    if why is not None:
        return f"{name} undefined: {why}"
    return f"{name} = {r:.2f} (p = {p:.2g})"
