"""The numbers behind Figure 17 (the row statistics beyond entropy past L), as pure functions of the
binned curves (`StatCurves`): the two spans it compares, how fast the max probability fades, the share
of sink heads, and the fall of Scalable-Softmax's own example vector over the same spans. The figure's
builder (`entropy_lens.figures.beyond`) only words and draws them.

    inside, far = edge_spans(L, T)      # [L/2, L) and the last half-span [T − L/2, T)
    fading_exponent(curves, L)          # α of mean max probability ∝ (i + 1)^α past L (uniform row: −1)
    sink_share(curves, a, b)            # share of heads whose mean first-token mass over [a, b) exceeds ε
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from entropy_lens.statistics import FIRST_MASS, MAX_PROB

if TYPE_CHECKING:
    from entropy_lens.analysis.stat_curves import StatCurves

__all__ = [
    "SINK_EPSILON",
    "edge_spans",
    "fading_exponent",
    "mean_position",
    "sink_share",
    "ssmax_vector_fall",
]

# Gu et al. (2024)'s sink metric (sail-sg/Attention-Sink, eval_sink_open_source.py): a head is a sink
# where its mean attention on the first token exceeds ε = 0.3
SINK_EPSILON = 0.3


def edge_spans(L: int, T: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """[L/2, L), inside the training length, and the last half-span [T − L/2, T) of length-T rows."""
    return (L // 2, L), (T - L // 2, T)


def mean_position(span: tuple[int, int]) -> float:
    """The mean position i of the rows [a, b): the mean distance back a uniform row would have, ×2."""
    return (span[0] + span[1] - 1) / 2


def fading_exponent(c: StatCurves, L: int) -> float:
    """α of mean max probability ∝ (i + 1)^α, least squares on the bins past L (a uniform row: −1)."""
    keep = c.starts >= L
    x, y = np.log(c.positions[keep] + 1), np.log(c.mean(MAX_PROB.name)[keep])
    return float(np.polyfit(x, y, 1)[0])


def sink_share(c: StatCurves, a: int, b: int, *, epsilon: float = SINK_EPSILON) -> float:
    """The share of heads whose mean first-token mass over the rows [a, b) exceeds `epsilon`."""
    return (c.span(FIRST_MASS.name, a, b) > epsilon).mean()


def ssmax_vector_fall(L: int, T: int) -> float:
    """How Scalable-Softmax's Figure 1 vector (+3 at one element, −2 at the others) fades over the spans
    here: its largest output over the i + 1 keys of row i is e⁵/(e⁵ + i); the mean over the last
    half-span [T − L/2, T) over the mean over [L/2, L)."""
    inside, far = (np.mean(math.e**5 / (math.e**5 + np.arange(a, b))) for a, b in edge_spans(L, T))
    return float(far / inside)
