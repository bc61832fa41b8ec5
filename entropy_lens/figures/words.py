"""The phrases several figures' captions, numbers and differences share: spans of positions, the rule
that chose s*, how the λ(h) were made, the loss smoothing.

Every number comes from the record or the settings; nothing here is typed by hand but the paper's own
values, quoted as the paper states them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from entropy_lens.results import span_label

if TYPE_CHECKING:
    from entropy_lens.analysis import UniformChoice
    from entropy_lens.figures.config import FiguresConfig
    from entropy_lens.figures.record import FigureData, HeadScales

__all__ = ["search_differences", "search_words", "smoothing_words", "span_mean", "span_words", "uniform_rule"]


def span_mean(curve, a: int, b: int) -> float:
    """The mean of `curve` over positions [a, b)."""
    return float(np.mean(curve[a:b]))


def span_words(span, L: int) -> str:
    """'[3.5L, 4L) = [448, 512)'."""
    return f"{span_label(span, L)} = [{span[0]}, {span[1]})"


def uniform_rule(choice: UniformChoice, L: int) -> str:
    """How s* was chosen, with its value."""
    return (
        f"s* = {choice.scale:g}, the best single scale of the Figure 7 sweep for the last half-span "
        f"{span_words(choice.span, L)} (the lowest mean loss there)"
    )


def search_words(hs: HeadScales, c: FiguresConfig) -> str:
    """How the λ(h) were made, for a caption: given, or the search's start and settings."""
    if hs.given:
        return f"given: {hs.given}"
    s = hs.uniform.scale
    start = "from s*" if hs.init == s else f"from {hs.init:g}, the focus bound, as s* = {s:g} lies below it"
    return (
        f"{start}; {c.search_steps} steps of {c.search_batch} windows of {c.search_data}, "
        f"LR {c.search_lr:g}, λ(h) ≥ 1/√d"
    )


def search_differences(data: FigureData, c: FiguresConfig, hs: HeadScales, paper: str) -> str:
    """How the λ(h) were made, against the paper's (`paper`), for a list of differences."""
    if hs.given:
        return f"λ(h) at {hs.length // data.L}L given ({hs.given}); {paper}"
    return (
        f"λ(h) at {hs.length // data.L}L searched here ({c.search_steps} steps of {c.search_batch} windows of "
        f"{c.search_data}, LR {c.search_lr:g}, from {hs.init:g}); {paper}"
    )


def smoothing_words(data: FigureData, c: FiguresConfig) -> str:
    """The loss smoothing against the paper's."""
    return (
        f"loss smoothed ±{c.smooth} positions (the paper: ±50 at L = 2048; ±{c.smooth} is "
        f"{c.smooth / data.L:.2g} L)"
    )
