"""Float64 reference: materialises every score. Small T only (tests); O(B·Hq·T·S) memory.

Same contract as `entropy_lens.kernels.attention_entropy` (see there); inputs are already
validated and normalised by the dispatcher: `softmax_scale` is a (Hq,) float tensor and the score
modifiers a `ScoreMods`. Each statistic is written from its definition (`DEFINITIONS`, registered
with `@definition` under the name entropy_lens.statistics declares, each taking one `RowContext`), not
from the streaming state the other kernels keep.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entropy_lens.flags import DEFAULT_MEASURE, Measure
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.stats import RowStats
from entropy_lens.statistics import BY_NAME, MAX_LOGIT, ROWS, check_registered


def key_distance(T: int, S: int, device=None) -> torch.Tensor:
    """(T, S) int64: how far key j lies behind query i, i + S − T − j (bottom-right alignment: query i
    is at position i + S − T among the keys); negative for keys after the query."""
    i = torch.arange(T, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    return i + (S - T) - j


def causal_visible(T: int, S: int, device=None, window: int | None = None) -> torch.Tensor:
    """(T, S) bool: query i sees key j iff j <= i + S - T (bottom-right alignment) and, with a sliding
    `window`, j > i + S - T - window (the last `window` keys up to and including its own position)."""
    behind = key_distance(T, S, device)
    visible = behind >= 0
    return visible if window is None else visible & (behind < window)


@torch.no_grad()
def attention_scores(q, k, softmax_scale, mods: ScoreMods):
    """(s (B, Hq, T, S) float64, the scores entering the softmax, −inf on the keys a row does not see;
    visible (B, Hq, T, S) bool): `attention_probabilities`'s scores before the sink joins them."""
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = Hq // Hkv
    qd = q.double().view(B, Hkv, G, T, D) * softmax_scale.double().view(1, Hkv, G, 1, 1)
    s = torch.einsum("bkgtd,bksd->bkgts", qd, k.double()).reshape(B, Hq, T, S)
    if mods.softcap is not None:
        s = torch.tanh(s / mods.softcap) * mods.softcap
    if mods.alibi_slopes is not None:  # after the cap, before the mask; the sink below gets no bias
        s = s - mods.alibi_slopes.double().view(1, Hq, 1, 1) * key_distance(T, S, q.device).abs().double()
    if mods.key_bias is not None:  # the same place: a bias per key (B|1, Hq, S)
        s = s + mods.key_bias.double().unsqueeze(2)
    visible = torch.ones(1, 1, T, S, dtype=torch.bool, device=q.device)
    if mods.causal:
        visible = visible & causal_visible(T, S, q.device, mods.window)
    if mods.mask is not None:
        visible = visible & mods.mask
    visible = visible.expand(B, Hq, T, S)
    return s.masked_fill(~visible, float("-inf")), visible


@torch.no_grad()
def attention_probabilities(q, k, softmax_scale, mods: ScoreMods):
    """(p (B, Hq, T, S) float64, the keys' probabilities; p_sink (B, Hq, T) float64, zeros without sinks;
    any_visible (B, Hq, T) bool), written from the definitions, as transformers' eager attention
    computes them: scores λ_h q·k, capped to c·tanh(s/c) (Gemma2), then the ALiBi bias
    −slope_h·`|i + S − T − j|` (flash-attn's definition; BLOOM, MPT) or a bias per key (Falcon) added,
    masked keys −inf, the sink logit (not scaled, not capped) as one more outcome (gpt-oss), softmax
    over keys and sink together. A row that sees nothing has p = 0. T query rows sit at the last T of
    the S key positions (bottom-right), so the last rows of a sequence may be passed alone.

    Args:
        q: (B, Hq, T, D) queries, any float dtype (computed in float64).
        k: (B, Hkv, S, D) keys; Hq % Hkv == 0.
        softmax_scale: (Hq,) the validated scale λ_h (`contract.validate_scale`).
        mods: the validated ScoreMods.

    Returns:
        tuple: (p, p_sink, any_visible) as above. Memory O(B·Hq·T·S): small T only.
    """
    B, Hq, T, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    s, visible = attention_scores(q, k, softmax_scale, mods)
    if mods.sinks is not None:  # one more outcome per row: the sink, which every row sees
        sink = mods.sinks.double().view(1, Hq, 1, 1).expand(B, Hq, T, 1)
        s = torch.cat([s, sink], dim=-1)
        visible = torch.cat([visible, visible.new_ones(*visible.shape[:-1], 1)], dim=-1)  # S = 0 too
    any_visible = visible.any(-1)
    p = torch.softmax(s.masked_fill(~any_visible.unsqueeze(-1), 0.0), dim=-1)
    p = p.masked_fill(~visible, 0.0)
    p_sink = p[..., S] if mods.sinks is not None else p.new_zeros(p.shape[:-1])
    return p[..., :S], p_sink, any_visible


@dataclass(frozen=True)
class RowContext:
    """What a row statistic's definition reads, built once per call (`row_stats_reference`); every tensor
    float64 unless said, a row with no outcome 0 throughout in what the definition returns.

    p:           (B, Hq, T, S) the keys' probabilities (the sink's share left out).
    p_sink:      (B, Hq, T) the sink's share (0 without sinks).
    any_visible: (B, Hq, T) bool: the row sees a key or a sink.
    behind:      (T, S) pos_i − j, each key's distance behind the row.
    first:       (B|1, 1, 1, S) 1 on each batch row's first K real keys, first_b <= j < first_b + K,
                 first_b the first key the mask lets through (`first_window`).
    recent:      (T, S) 1 on each row's last W keys, 0 <= behind < W.
    scores:      (B, Hq, T, S) `attention_scores`, −inf on the keys a row does not see; None where only
                 the probabilities are known, which the definitions of probabilities do not read.
    """

    p: torch.Tensor
    p_sink: torch.Tensor
    any_visible: torch.Tensor
    behind: torch.Tensor
    first: torch.Tensor
    recent: torch.Tensor
    scores: torch.Tensor | None = None


# Each row statistic from its definition, registered under its name (`@definition`): a RowContext ->
# (B, Hq, T) float64
DEFINED: dict = {}  # both axes: a key statistic's in kernels/received_reference.py


def definition(name: str):
    """Registers the decorated function as the float64 definition of the declared statistic `name`."""

    def register(f):
        if name in DEFINED or name not in BY_NAME or BY_NAME[name].of is not None:
            raise ValueError(
                f"definition({name!r}): registered twice or not declared in entropy_lens.statistics"
            )
        DEFINED[name] = f
        return f

    return register


@definition("entropy")
def _entropy(c: RowContext):
    """H = −Σ p ln p over the keys and the sink, the sink one outcome among them."""
    h = -torch.special.xlogy(c.p, c.p).sum(-1) - torch.special.xlogy(c.p_sink, c.p_sink)
    return torch.where(c.any_visible, h, torch.zeros_like(h))


@definition("sink_mass")
def _sink_mass(c: RowContext):
    return c.p_sink


@definition("max_prob")
def _max_prob(c: RowContext):
    return torch.maximum(largest(c.p, -1, 0.0), c.p_sink)


@definition("collision_entropy")
def _collision_entropy(c: RowContext):
    total = (c.p * c.p).sum(-1) + c.p_sink * c.p_sink
    seen = c.any_visible
    return torch.where(seen, -torch.log(torch.where(seen, total, 1.0)), torch.zeros_like(total))


@definition("varentropy")
def _varentropy(c: RowContext):
    p, p_sink = c.p, c.p_sink
    h = _entropy(c).unsqueeze(-1)
    surprisal = torch.where(p > 0, -torch.log(torch.where(p > 0, p, 1.0)), 0.0)
    var = (p * (surprisal - h) ** 2).sum(-1)
    sink = torch.where(p_sink > 0, -torch.log(torch.where(p_sink > 0, p_sink, 1.0)), 0.0)
    return var + p_sink * (sink - h.squeeze(-1)) ** 2


@definition("distance")
def _distance(c: RowContext):
    keys = c.p.sum(-1)  # the keys' mass: the sink has no position
    return torch.where(keys > 0, (c.p * c.behind).sum(-1) / torch.where(keys > 0, keys, 1.0), 0.0)


@definition("first_mass")
def _first_mass(c: RowContext):
    return (c.p * c.first).sum(-1)  # the mass on the row's first K real keys


@definition("recent_mass")
def _recent_mass(c: RowContext):
    return (c.p * c.recent).sum(-1)  # the mass on the row's last W keys, pos_i − W < j <= pos_i


@definition("max_logit")
def _max_logit(c: RowContext):
    """max_j s_j over the keys the row sees (the sink is no key); 0 for a row that sees none."""
    top = largest(c.scores, -1, float("-inf"))
    return torch.where(top == float("-inf"), torch.zeros_like(top), top)


def largest(x: torch.Tensor, dim: int, empty: float) -> torch.Tensor:
    """x.amax(dim), and `empty` where that dimension has no element (T = 0 rows or S = 0 keys)."""
    if x.shape[dim]:
        return x.amax(dim)
    shape = list(x.shape)
    del shape[dim]
    return x.new_full(shape, empty)


# every declared statistic's definition, in STATISTICS's order; the import fails where one lacks it
DEFINITIONS = check_registered(DEFINED, "kernels/reference.py definitions", ROWS)


@torch.no_grad()
def row_stats_reference(
    q, k, softmax_scale, mods: ScoreMods, *, measure: Measure = DEFAULT_MEASURE
) -> RowStats:
    """q (B, Hq, T, D), k (B, Hkv, S, D), softmax_scale (Hq,) -> RowStats of `measure.stats`, each (B, Hq,
    T) float32, computed in float64 from `attention_probabilities` by the definitions above, at the
    parameters in `measure` (first_mass's K, recent_mass's W)."""
    stats = measure.stats
    probabilities = attention_probabilities(q, k, softmax_scale, mods)
    S = k.shape[2]
    behind = key_distance(q.shape[2], S, q.device).double()
    first = first_window(S, measure.first_keys, mods.first_key, q.device)
    recent = ((behind >= 0) & (behind < measure.recent_keys)).double()  # (T, S): the last W keys of each row
    scores = attention_scores(q, k, softmax_scale, mods)[0] if MAX_LOGIT.name in stats else None
    context = RowContext(*probabilities, behind, first, recent, scores)
    return RowStats({name: DEFINITIONS[name](context).float() for name in stats})


def first_window(S: int, first_keys: int, first_key=None, device=None) -> torch.Tensor:
    """(B|1, 1, 1, S) float64: 1 on each batch row's first K = `first_keys` real keys, r_b <= j < r_b + K
    with r = `first_key` ((B|1,) int64, ScoreMods.first_key: the first key the mask lets through; None: 0),
    else 0: the keys whose mass first_mass sums."""
    start = torch.zeros(1, dtype=torch.int64, device=device) if first_key is None else first_key.to(device)
    keys = torch.arange(S, device=device)
    inside = (keys >= start.view(-1, 1)) & (keys < start.view(-1, 1) + first_keys)
    return inside.double()[:, None, None, :]
