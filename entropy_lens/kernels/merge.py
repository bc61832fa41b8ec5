"""The streaming entropy state is mergeable across key shards: the basis of multi-device scans.

For one query row and a set of keys with scores s_j, the state is
    m = max_j s_j,   l = Σ_j e^(s_j − m),   u = Σ_j e^(s_j − m)(s_j − m)      (H = log l − u/l)
Two disjoint key sets A, B merge exactly: with m = max(m_A, m_B), α_X = e^(m_X − m),
    l = α_A l_A + α_B l_B,   u = α_A (u_A + (m_A − m) l_A) + α_B (u_B + (m_B − m) l_B)
(each side's centred terms move from its own max to the common one). The merge is associative and
commutative, and an empty shard (m = −inf, l = u = 0) is its identity, so key shards can be folded
in any order or tree, e.g. as K/V blocks travel round a ring of devices (docs/scaling.md).

    state = shard_state(q, k[:, :, a:b], softmax_scale, key_offset=a, total_keys=S)   # {"m", "l", "u"}
    H = entropy_from_state(merge_states(state_1, state_2))                   # == attention_entropy

Softcap is per score, so every shard takes `softcap` as `attention_entropy` does; so is the ALiBi bias,
whose distance uses global key indices (key_offset + the shard's own), so every shard takes
`alibi_slopes` too and the merged state is the unsharded one. Attention sinks
(gpt-oss) are one more score per row that belongs to no key shard: shard_state takes none, and the
sink enters exactly once as a state of its own, `sink_state(sinks, B, T)` = (σ_h, 1, 0), merged in
anywhere in the fold (it is the state torch_chunked starts from); `sink_mass_from_state(state, sinks)` then
reads p_sink off the merged state.
"""

from __future__ import annotations

import torch

from entropy_lens.flags import Measure, parse_stats
from entropy_lens.kernels.entrance import enter
from entropy_lens.kernels.stats import (
    accumulators,
    entropy_from_state,
    sink_mass_from_state,
)
from entropy_lens.kernels.torch_chunked import BLOCK_K, BLOCK_Q, stream_torch
from entropy_lens.statistics import ENTROPY, FIRST_MASS

__all__ = ["entropy_from_state", "merge_states", "shard_state", "sink_mass_from_state", "sink_state"]


def shard_state(
    q,
    k,
    softmax_scale,
    *,
    key_offset: int,
    total_keys: int,
    causal: bool = True,
    mask=None,
    window: int | None = None,
    softcap: float | None = None,
    alibi_slopes=None,
    stats=(ENTROPY.name,),
    first_key=None,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    **params,
) -> dict[str, torch.Tensor]:
    """State {"m", "l", "u"}, each (B, Hq, T) float32, of queries q (B, Hq, T, D) over one key shard k
    (B, Hkv, S_shard, D) holding global keys [key_offset, key_offset + S_shard) of `total_keys`.

    Causal alignment is global and bottom-right: query i sees global key j iff j <= i + total_keys − T
    (and j > i + total_keys − T − window with a sliding window).
    `mask` (bool, True = attend) is the shard's slice: (B, S_shard) or broadcastable 4-D; `softmax_scale` a
    float or (Hq,) tensor, `softcap` None or c > 0, `alibi_slopes` None or (Hq,) (the bias
    −slope_h·`|i + total_keys − T − j|` with j the global key index) and the tile `block_q` × `block_k` as
    in `attention_entropy`. `stats` (kernels.stats.ROW_STATS): the statistics the merged state will be
    read for, so the state holds the accumulators they need (`params`: their parameters, first_mass's K,
    recent_mass's W). first_mass counts the global keys r <= j < r + K of each batch row, r = `first_key` (an int or (B,): the global
    index of the row's first real key, the first the whole sequence's mask lets through; None: 0, refused
    with a `mask`, of which a shard sees only a slice). recent_mass counts the keys
    i + total_keys − T − W < j <= i + total_keys − T, j global: a shard needs nothing more. Sinks: see `sink_state`.

    Args:
        q: (B, Hq, T, D) queries after RoPE, any float dtype.
        k: (B, Hkv, S_shard, D) the shard's keys; Hq % Hkv == 0.
        softmax_scale: a float or an (Hq,) tensor λ_h; scores are λ_h q·k.
        key_offset: the global index of the shard's first key.
        total_keys: the number of keys over all shards (the causal alignment is global).
        causal: query i sees global keys j <= i + total_keys − T.
        mask: None, or the shard's slice of a bool mask (True = attend): (B, S_shard) or broadcastable
            4-D.
        window: None, or a sliding window W >= 1 (causal only), in global keys.
        softcap: None, or c > 0: every score s becomes c·tanh(s/c).
        alibi_slopes: None, or (Hq,) float: the bias −slope_h·`|i + total_keys − T − j|`, j global.
        stats: the statistics the merged state will be read for (entropy_lens.statistics.STATISTICS).
        first_key: None (0), an int or (B,) integers: the global index of each batch row's first real
            key; needed for first_mass with a mask.
        block_q: torch_chunked's tile, query rows.
        block_k: torch_chunked's tile, keys.
        **params: the statistics' parameters by name (entropy_lens.statistics.PARAMETERS).

    Returns:
        dict: {"m", "l", "u", and the accumulators of `stats`}, each (B, Hq, T) float32, for
        `merge_states`.

    Raises:
        ValueError: an input outside the contract, or first_mass with a mask and no first_key.
    """
    measure = Measure.parse(stats=stats, **params)  # a public entrance: parsed here
    if FIRST_MASS.name in measure.stats and mask is not None and first_key is None:
        raise ValueError(
            "shard_state with a mask and first_mass needs first_key: each batch row's first real key "
            "(global), which the shard's slice of the mask cannot tell; pass first_key=<(B,) indices>"
        )
    first_key = 0 if first_key is None else first_key
    call = enter(q, k, measure=measure, arguments=locals())
    offset = total_keys - q.shape[2] - key_offset  # local key j is global key_offset + j
    state, _ = stream_torch(
        q,
        k,
        None,
        call.softmax_scale,
        call.mods,
        offset=offset,
        extra=accumulators(measure.stats),
        measure=measure,
        key_start=key_offset,
        block_q=call.block_q,
        block_k=call.block_k,
    )
    return state


def sink_state(sinks, batch: int, queries: int, *, stats=(ENTROPY.name,)) -> dict[str, torch.Tensor]:
    """The state, each (batch, Hq, queries) float32, of the sink logits σ (Hq,) alone: m = σ_h, l = 1,
    u = 0 (and c = 1, mk = −inf, the other accumulators of `stats` 0: the sink is no key). Merge it exactly once
    with the key shards' states to get the statistics with sinks (any position in the fold); sinks are
    not scaled or softcapped.

    Args:
        sinks: (Hq,) float, any dtype: the sink logits σ_h.
        batch: B, the batch size of the states it merges with.
        queries: T, the query rows of the states it merges with.
        stats: the statistics the merged state will be read for (entropy_lens.statistics.STATISTICS).

    Returns:
        dict: the state {"m", "l", "u", ...}, each (batch, Hq, queries) float32.

    Raises:
        ValueError: sinks not a 1-D float tensor.
    """
    sinks = torch.as_tensor(sinks)
    if sinks.ndim != 1 or not sinks.is_floating_point():
        raise ValueError(f"sinks must be a (Hq,) float tensor; got {sinks!r}")
    m = sinks.detach().float().view(1, -1, 1).expand(batch, -1, queries).contiguous()
    state = {"m": m, "l": torch.ones_like(m), "u": torch.zeros_like(m)}
    for name in accumulators(parse_stats(stats)):
        start = {"c": 1.0, "mk": float("-inf")}.get(name, 0.0)  # the sink's e^0 = 1 in c; no key for mk
        state[name] = torch.full_like(m, start)
    return state


def merge_states(a, b) -> dict[str, torch.Tensor]:
    """Merge two states over disjoint key sets ({"m", "l", "u"} and the accumulators both hold); see the
    module docstring and kernels/stats.py for the rules. NaN-free when either side (or both) saw no
    key (m = −inf).

    Args:
        a: a state (`shard_state`, `sink_state` or a merge), {name: (B, Hq, T) float32}.
        b: a state over a disjoint key set, holding the same accumulators.

    Returns:
        dict: the merged state, the same keys and shapes.

    Raises:
        ValueError: the two states hold different accumulators.
    """
    if a.keys() != b.keys():
        raise ValueError(f"states of different statistics cannot merge: {sorted(a)} and {sorted(b)}")
    m = torch.maximum(a["m"], b["m"])
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    sums = [name for name in a if name not in ("m", "mk")]
    merged = {"m": m, **dict.fromkeys(sums, 0)}
    if "mk" in a:  # a max over keys, not a sum: the larger side's
        merged["mk"] = torch.maximum(a["mk"], b["mk"])
    for side in (a, b):
        alpha = torch.exp(side["m"] - m_safe)  # 0 for an empty side
        seen = side["l"] > 0
        delta = torch.where(seen, side["m"] - m_safe, torch.zeros_like(side["l"]))  # its centre moves
        moved = {
            "l": side["l"],
            "u": side["u"] + delta * side["l"],
            "w": side.get("w", 0) + 2 * delta * side["u"] + delta * delta * side["l"],
            "c": alpha * side.get("c", 0),  # rescaled by α²
        }
        for name in sums:
            merged[name] = merged[name] + alpha * moved.get(name, side[name])
    return merged
