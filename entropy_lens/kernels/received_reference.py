"""The float64 definition of attention received: every key statistic (entropy_lens.statistics.KEY_STATISTICS)
written from the materialised probabilities of `reference.attention_probabilities`. Small T only
(tests); O(B·Hq·T·S) memory. The contract is kernels/received.py's.

Each key statistic's definition is registered with reference.py's `@definition` (one registry, both axes) under its declared name and
checked against KEY_STATISTICS at import (a declared key statistic without one fails the import): it
takes one `KeyContext` and returns (B, Hq, S) float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.reference import (
    DEFINED,
    attention_probabilities,
    attention_scores,
    definition,
    largest,
)
from entropy_lens.statistics import KEYS, check_registered


@dataclass(frozen=True)
class KeyContext:
    """What a key statistic's definition reads, built once per call (`received_reference`).

    p:       (B, Hq, T, S) float64 the keys' probabilities, the sink's share left out.
    visible: (B, Hq, T, S) bool the keys each row may attend.
    counted: (B|1, 1, T, 1) bool the rows that count.
    """

    p: torch.Tensor
    visible: torch.Tensor
    counted: torch.Tensor


def _received(c: KeyContext):
    return torch.where(c.counted, c.p, 0.0).sum(-2)


@definition("received")
def _received_sum(c: KeyContext):
    """Σ_i p_ij over the counted rows i."""
    return _received(c)


@definition("received_max")
def _received_max(c: KeyContext):
    """max_i p_ij over the counted rows; 0 for a key no counted row gives anything."""
    return largest(torch.where(c.counted, c.p, 0.0), -2, 0.0)


@definition("received_mean")
def _received_mean(c: KeyContext):
    """Σ_i p_ij / n_j, n_j the counted rows that may attend key j; 0 where none may."""
    n = (c.visible & c.counted).sum(-2).double()
    return torch.where(n > 0, _received(c) / n.clamp_min(1.0), 0.0)


# every declared key statistic's definition, in KEY_STATISTICS's order; the import fails where one lacks it
KEY_DEFINITIONS = check_registered(DEFINED, "kernels/received_reference.py definitions", KEYS)


def key_context(q, k, softmax_scale, mods: ScoreMods, rows) -> KeyContext:
    """The KeyContext of a call: its materialised float64 probabilities, the keys each row may attend,
    and `rows` (B|1, T) bool the rows that count (None: every row)."""
    p, _, _ = attention_probabilities(q, k, softmax_scale, mods)
    _, visible = attention_scores(q, k, softmax_scale, mods)
    T = q.shape[2]
    if rows is None:
        rows = torch.ones(1, T, dtype=torch.bool, device=q.device)
    return KeyContext(p, visible, rows.to(q.device).view(rows.shape[0], 1, T, 1))


@torch.no_grad()
def received_reference(q, k, softmax_scale, mods: ScoreMods, rows, *, stats) -> dict[str, torch.Tensor]:
    """q (B, Hq, T, D), k (B, Hkv, S, D), softmax_scale (Hq,), rows (B|1, T) bool (the rows that count)
    or None (every row) -> {name: (B, Hq, S) float32} for each of `stats`, computed in float64 from the
    materialised probabilities by the definitions above."""
    context = key_context(q, k, softmax_scale, mods, rows)
    return {name: KEY_DEFINITIONS[name](context).float() for name in stats}


@torch.no_grad()
def reference_state(q, k, softmax_scale, mods: ScoreMods, rows) -> dict[str, torch.Tensor]:
    """The column state {"sum", "max", "count": (B, Hq, S) float32} (kernels/received.py's KEY_STATE) from
    the materialised float64 probabilities: Σ_i p_ij, max_i p_ij over the counted rows, and the counted
    rows that may attend key j; what the streaming kernels' column pass keeps, for a caller that
    combines states over forwards (a decode step continuing its sequence)."""
    c = key_context(q, k, softmax_scale, mods, rows)
    return {
        "sum": _received(c).float(),
        "max": largest(torch.where(c.counted, c.p, 0.0), -2, 0.0).float(),
        "count": (c.visible & c.counted).sum(-2).float(),
    }
