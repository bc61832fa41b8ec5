"""Exact streaming attention entropy (and, fused, the attention output) in plain torch: the CPU path
and the fallback everywhere.

Math (per query row, scores s_j = λ_h q·k_j over the attendable keys j)::

    m = max_j s_j,  l = Σ_j e^(s_j − m),  u = Σ_j e^(s_j − m)(s_j − m)
    p_j = e^(s_j − m)/l  ⇒  H = −Σ p_j log p_j = log l − u/l   (nats)

The centred sum u avoids the cancellation of the textbook H = m + log l − Σ p_j s_j, whose two
large terms nearly cancel for peaked rows. Keys arrive block by block; when the running max
grows from m to m', with α = e^(m − m')::

    l ← α l + Σ_blk e^(s − m'),   u ← α (u + (m − m') l) + Σ_blk e^(s − m')(s − m')

(the old terms' centre moves by m − m'). Before any key is seen m = −inf, l = u = 0 and the
first block must not form −inf·0: that case is written out with `where`.
Softcap (Gemma2): each score tile becomes c·tanh(s/c) before masking. ALiBi (BLOOM, MPT, Falcon):
the bias −slope_h·`|i + offset − j|` is added to each tile after the cap and before the mask, i and j
the row's and key's indices (a key shard's offset makes them global, so its tiles carry the bias of
the whole). Sinks (gpt-oss): the sink logit σ_h is one more score of every row, with no value, no
bias and never masked; it is the state before any key, m = σ_h, l = 1, u = 0, so H and
p_sink = e^(σ_h − m)/l include it and a row that sees no key ends with p_sink = 1, H = 0.
Output (`row_stats_torch` with values v): the flash-attention accumulator o = Σ e^(s − m) v_j rides
along, o ← α o + e·V per tile, and out = o/l (0 for a row with no key and no sink, as sdpa).

Memory: one (B, Hq, block_q, block_k) fp32 score tile plus (B, Hq, block_q) state (and a
(B, Hq, block_q, Dv) accumulator); never T × S.
Defaults: (128, 512) for the output path, (64, 1024) for the entropy pass (block_q × block_k; how
each was chosen: docs/internals/kernels.md).
GQA: queries of the G = Hq/Hkv heads sharing a key head are stacked as rows of one matmul
against that key head, so keys are never repeated. Causal blocks wholly above the diagonal are
skipped (about half the work); only blocks the diagonal crosses build a mask. A sliding window
(`window`: query i sees the `window` keys ending at its own position) also skips the key blocks
wholly behind it, so the work is O(T · window).
"""

from __future__ import annotations

import torch

from entropy_lens.flags import DEFAULT_MEASURE, Measure
from entropy_lens.kernels.contract import SAFE_SCORE, range_checked_by_caller, refuse_overflow, score_bound
from entropy_lens.kernels.fold import fold_for
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.stats import STATE, RowStats, accumulators, log_sum_exp, range_masses, read_stats

NEG_INF = float("-inf")
BLOCK_Q, BLOCK_K = 64, 1024  # the entropy pass's default tile (query rows, keys), see above
OUTPUT_BLOCKS = (128, 512)  # the output path's default tile, see above


@torch.no_grad()
def row_stats_torch(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    measure: Measure = DEFAULT_MEASURE,
    block_q=None,
    block_k=None,
    with_lse=False,
    spans=None,
) -> RowStats:
    """q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) or None, softmax_scale (Hq,) fp32 and `mods`
    validated upstream -> RowStats: `measure.stats` (B, Hq, T) float32 and, with v, the output (B, T, Hq, Dv)
    in q's dtype, the layout transformers' attention functions return. A row that sees no key outputs
    0 (sdpa's choice; with a sink its output is 0 anyway: all its mass is on the sink, which has no
    value). block_q/block_k None: BLOCK_Q × BLOCK_K for the statistics alone, OUTPUT_BLOCKS with v.
    `measure`: the statistics and their parameters (flags.Measure); `with_lse`: the rows' log-sum-exp too;
    `spans` (B|1, n, 2) int64 key ranges or None: each row's mass on them too (`RowStats.spans`)."""
    default_q, default_k = (BLOCK_Q, BLOCK_K) if v is None else OUTPUT_BLOCKS
    state, out = stream_torch(
        q,
        k,
        v,
        softmax_scale,
        mods,
        extra=accumulators(measure.stats),
        measure=measure,
        block_q=default_q if block_q is None else block_q,
        block_k=default_k if block_k is None else block_k,
        spans=spans,
    )
    lse = log_sum_exp(state) if with_lse else None
    return RowStats(read_stats(state, mods, measure.stats), out, lse, spans=range_masses(state))


@torch.no_grad()
def stream_torch(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    offset=None,
    extra=(),
    measure: Measure = DEFAULT_MEASURE,
    key_start=0,
    block_q=BLOCK_Q,
    block_k=BLOCK_K,
    spans=None,
):
    """The streaming state {"m", "l", "u", and the accumulators `extra` of stats.EXTRA_STATE}, each
    (B, Hq, T) float32, of queries q over keys k, and the output (B, T, Hq, Dv) for values v (None: no
    output). Local key j is global key key_start + j (first_mass counts, in batch row b, the global keys
    first_b <= j < first_b + K, first_b = mods.first_key[b], 0 without it; recent_mass the keys
    0 <= i + offset − j < W, global as the offset is; K and W the parameters in `measure`). `spans`
    (B|1, n, 2) int64 global key ranges [lo, hi) per batch row, or None: the state's "spans" (B, Hq, T, n),
    each range's Σ e (stats.py's sp).

    offset: query i sees key j iff j <= i + offset (causal), and j > i + offset − window with a
    sliding window; default S − T, bottom-right alignment.
    A key shard passes its own offset (see `entropy_lens.kernels.merge`); rows that see no key of
    the shard get m = −inf, l = u = 0, the identity of `merge_states`. With sinks (Hq,) the
    state starts from the sink (m = σ_h, l = 1, u = 0) instead. With ALiBi slopes (Hq,) the
    distance in the bias is i + offset − j as well, so a shard's scores are those of the whole.
    """
    B, Hq, T, _ = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = Hq // Hkv
    offset = S - T if offset is None else int(offset)
    causal, window = mods.causal, mods.window
    tiles = ScoreTiles(q, k, softmax_scale, mods, offset)
    vf = None if v is None else v.float().contiguous()  # (B, Hkv, S, Dv), tiles viewed as 3-D below
    Dv = 0 if v is None else v.shape[-1]
    sink = None if mods.sinks is None else mods.sinks.to(q.device, torch.float32).view(1, Hkv, G, 1)
    # first_mass's window per batch row, [first_b, first_b + K) in global keys, as (B|1, 1, 1, 1, 1)
    first_start = (
        torch.zeros(1, dtype=torch.int64, device=q.device) if mods.first_key is None else mods.first_key
    )
    first_start = first_start.view(-1, 1, 1, 1, 1) - key_start  # in this call's local key indices
    # the key ranges as (B|1, 1, n) bounds in local key indices, each tile's keys tested against them
    ranges = None if spans is None else (spans.to(q.device, torch.int64) - key_start).unsqueeze(1)
    span_state = None if spans is None else torch.empty(B, Hq, T, spans.shape[1], device=q.device)
    names = (*STATE, *extra)
    state = torch.empty(len(names), B, Hq, T, dtype=torch.float32, device=q.device)
    out = None if v is None else torch.empty(B, T, Hq, Dv, dtype=q.dtype, device=q.device)
    for q0 in range(0, T, block_q):
        q1 = min(q0 + block_q, T)
        bq = q1 - q0
        qb = tiles.queries(q0, q1)
        if sink is None:
            m = torch.full((B, Hkv, G, bq), NEG_INF, device=q.device)
            l = torch.zeros_like(m)
        else:  # the sink is the first score every row sees
            m = sink.expand(B, Hkv, G, bq).clone()
            l = torch.ones_like(m)
        u = torch.zeros_like(m)
        ext = {name: torch.zeros_like(m) for name in extra}
        if "mk" in ext:  # a max over the keys: −inf before any (the sink is no key)
            ext["mk"].fill_(NEG_INF)
        if "c" in ext and sink is not None:  # the sink's e^(σ − m)² = 1 at the start
            ext["c"] += 1
        if ranges is not None:
            ext["spans"] = m.new_zeros(*m.shape, ranges.shape[-2])
        o = None if v is None else torch.zeros(B * Hkv, G * bq, Dv, device=q.device)
        k_end = min(S, q1 + offset) if causal else S
        k_start = max(0, q0 + offset - window + 1) if window is not None else 0
        for k0 in range(k_start, max(k_end, 0), block_k):
            k1 = min(k0 + block_k, k_end)
            s = tiles.scores(qb, q0, q1, k0, k1)
            if ext:  # before the fold, which consumes s
                tile = (q0, q1, k0, k1)
                ext = _update_extra(
                    ext,
                    s,
                    state=(m, l, u),
                    tile=tile,
                    offset=offset,
                    windows=(first_start, measure.first_keys, measure.recent_keys, ranges),
                )
            vb = None if v is None else vf[:, :, k0:k1].reshape(B * Hkv, k1 - k0, Dv)
            m, l, u = _update(m, l, u, s, o, vb)
        rows = torch.stack([m, l, u, *(ext[name] for name in extra)])
        state[:, :, :, q0:q1] = rows.view(len(names), B, Hq, bq)
        if span_state is not None:
            span_state[:, :, q0:q1] = ext["spans"].view(B, Hq, bq, -1)
        if o is not None:  # out = o / l, 0 where l = 0 (then o = 0 too)
            o.div_(torch.where(l > 0, l, torch.ones_like(l)).view(B * Hkv, G * bq, 1))
            out[:, q0:q1] = o.view(B, Hq, bq, Dv).transpose(1, 2)
    state = dict(zip(names, state, strict=True))
    return state if span_state is None else state | {"spans": span_state}, out


class ScoreTiles:
    """The masked score tiles of queries q (B, Hq, T, D) and keys k (B, Hkv, S, D) under `mods`, query
    row i at key position i + `offset`: `scores(queries(q0, q1), q0, q1, k0, k1)` -> (B, Hkv, G, bq, bk)
    float32, λ_h q·k capped (softcap), biased (ALiBi, key bias), −inf where the row may not attend
    (causal, window, mask). The row pass (`stream_torch`) and the column pass (kernels/received_torch.py)
    form their tiles here, so both see the same scores."""

    def __init__(self, q, k, softmax_scale, mods: ScoreMods, offset: int):
        self.q, self.mods, self.offset = q, mods, int(offset)
        Hq = q.shape[1]
        self.Hkv, S = k.shape[1], k.shape[2]
        self.G = Hq // self.Hkv
        self.kf = k.float()  # (B, Hkv, S, D): O(S) copy at most, reused by every query block
        self.scale = softmax_scale.to(device=q.device, dtype=torch.float32).view(1, Hq, 1, 1)
        # −slope per query head, laid out as the score tiles' heads: the bias is −slope·|i + offset − j|
        self.neg_slope = None
        if mods.alibi_slopes is not None:
            slopes = mods.alibi_slopes.to(device=q.device, dtype=torch.float32)
            self.neg_slope = -slopes.view(1, self.Hkv, self.G, 1, 1)
        kb = mods.key_bias
        self.kb = None if kb is None else kb.float().view(kb.shape[0], self.Hkv, self.G, 1, S)
        # inputs whose scores may leave float32's range: each tile checked before the cap and the mask,
        # where an infinite score would become c (softcap) or read as masked (−inf)
        # (not inside `contract.score_range_checked`: the caller checked the bound on the device)
        self.bound = 0.0 if range_checked_by_caller() else score_bound(q, k, softmax_scale, mods)
        self.guard = self.bound > SAFE_SCORE

    def queries(self, q0: int, q1: int) -> torch.Tensor:
        """(B, Hkv, G·bq, D): rows q0..q1 scaled by λ_h, each key head's G query heads stacked as rows of
        one matmul."""
        B, _, _, D = self.q.shape
        return (self.q[:, :, q0:q1].float() * self.scale).reshape(B, self.Hkv, self.G * (q1 - q0), D)

    def scores(self, qb, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
        """The tile of rows q0..q1 (`qb`, from `queries`) and keys k0..k1, (B, Hkv, G, bq, bk) float32."""
        mods, offset, device = self.mods, self.offset, self.q.device
        s = torch.matmul(qb, self.kf[:, :, k0:k1].transpose(-1, -2))
        s = s.view(qb.shape[0], self.Hkv, self.G, q1 - q0, k1 - k0)
        if self.guard and not bool(torch.isfinite(s).all()):
            refuse_overflow(self.bound, "torch_chunked")
        if mods.softcap is not None:
            s.div_(mods.softcap).tanh_().mul_(mods.softcap)  # before the mask, as Gemma2's eager attention
        if self.neg_slope is not None:  # after the cap, before the mask; the sink (the start state) has none
            s.addcmul_(self.neg_slope, _behind(q0, q1, k0, k1, offset, device).abs_().float())
        if self.kb is not None:  # the same place: a bias per key
            s.add_(self.kb[..., k0:k1])
        if self.guard and not bool(torch.isfinite(s).all()):
            refuse_overflow(self.bound, "torch_chunked")
        valid = _block_mask(
            mods.mask, mods.causal, mods.window, q0, q1, k0, k1, offset, self.Hkv, self.G, device
        )
        if valid is not None:
            s.masked_fill_(~valid, NEG_INF)
        return s


def _block_mask(mask, causal, window, q0, q1, k0, k1, offset, Hkv, G, device):
    """Bool (.., bq, bk) broadcastable to (B, Hkv, G, bq, bk), or None when all visible."""
    valid = None
    diagonal = causal and k1 - 1 > q0 + offset  # the diagonal crosses this block
    window_edge = window is not None and k0 <= q1 - 1 + offset - window  # so does the window's far edge
    if diagonal or window_edge:
        behind = _behind(q0, q1, k0, k1, offset, device)
        valid = behind >= 0
        if window is not None:
            valid &= behind < window
    if mask is not None:
        rows = slice(q0, q1) if mask.shape[2] > 1 else slice(None)
        mb = mask[:, :, rows, k0:k1]
        mb = mb.view(mb.shape[0], Hkv, G, *mb.shape[2:]) if mb.shape[1] > 1 else mb.unsqueeze(2)
        valid = mb if valid is None else mb & valid
    return valid


def _behind(q0, q1, k0, k1, offset, device):
    """(q1 − q0, k1 − k0) int64: how far key j lies behind row i, i + offset − j, for the tile's rows and keys."""
    return torch.arange(q0, q1, device=device).unsqueeze(1) + offset - torch.arange(k0, k1, device=device)


def _update_extra(ext, s, *, state, tile, offset, windows):
    """The accumulators of stats.EXTRA_STATE in `ext` with the masked score tile s (B, Hkv, G, bq, bk)
    folded in (s is read, not consumed), from the state (m, l, u) before the tile; stats.py has the rules.
    tile (q0, q1, k0, k1): the tile's rows and keys, at key offset `offset`; windows (first_start,
    first_keys, recent_keys, ranges): first_start (B|1, 1, 1, 1, 1) each batch row's first real key in local
    indices (first_mass's keys: first_start <= j < first_start + first_keys), recent_keys recent_mass's W
    (its keys: 0 <= i + offset − j < W), ranges (B|1, 1, n, 2) the key ranges [lo, hi) of "spans" (local
    indices; None: none asked for)."""
    m, l, u = state
    q0, q1, k0, k1 = tile
    first_start, first_keys, recent_keys, ranges = windows
    m_new = torch.maximum(m, s.amax(-1))
    m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(m - m_safe)  # 0 while no score has been seen
    delta = torch.where(l > 0, m - m_safe, torch.zeros_like(m))
    d = s - m_safe.unsqueeze(-1)  # −inf where masked
    e = torch.exp(d)
    new = {}
    if "w" in ext:
        ed2 = torch.where(e > 0, e * d * d, torch.zeros_like(e))
        new["w"] = alpha * (ext["w"] + 2 * delta * u + delta * delta * l) + ed2.sum(-1)
    if "c" in ext:
        new["c"] = alpha * alpha * ext["c"] + (e * e).sum(-1)
    if "lk" in ext:
        new["lk"] = alpha * ext["lk"] + e.sum(-1)
    if "d" in ext:  # from the row, not the key's position: a local head keeps its precision far out
        new["d"] = alpha * ext["d"] + (e * _behind(q0, q1, k0, k1, offset, s.device).float()).sum(-1)
    if "f" in ext:
        j = torch.arange(k0, k1, device=s.device)
        first = ((j >= first_start) & (j < first_start + first_keys)).float()  # (B|1, 1, 1, 1, bk)
        new["f"] = alpha * ext["f"] + (e * first).sum(-1)
    if "rk" in ext:  # keys 0 <= b < W behind the row (e is 0 on the keys it may not attend)
        behind = _behind(q0, q1, k0, k1, offset, s.device)
        recent = ((behind >= 0) & (behind < recent_keys)).float()  # (bq, bk)
        new["rk"] = alpha * ext["rk"] + (e * recent).sum(-1)
    if "spans" in ext:  # per batch row the same ranges for every row: one (bk, n) matrix of 0/1 per batch row
        j = torch.arange(k0, k1, device=s.device).view(1, -1, 1)
        inside = ((j >= ranges[..., 0]) & (j < ranges[..., 1])).float()  # (B|1, bk, n)
        new["spans"] = alpha.unsqueeze(-1) * ext["spans"] + e @ inside[:, None, None]
    if "mk" in ext:  # the scores themselves, −inf where masked: no rescaling
        new["mk"] = torch.maximum(ext["mk"], s.amax(-1))
    return new


def _update(m, l, u, s, o=None, vb=None):
    """Fold one masked score tile s (B, Hkv, G, bq, bk) into the running (m, l, u); s is consumed. With
    the output, o (B·Hkv, G·bq, Dv) ← α o + e·vb in place, vb the value tile (B·Hkv, bk, Dv)."""
    B, Hkv, G, bq, bk = s.shape
    tile = s.view(-1, bk)  # one graph for the compiled fold whatever the head layout
    m, l, u, e, alpha = fold_for(tile)(tile, m.reshape(-1), l.reshape(-1), u.reshape(-1))
    if o is not None:
        o.mul_(alpha.view(B * Hkv, G * bq, 1)).baddbmm_(e.view(B * Hkv, G * bq, bk), vb)
    return m.view(B, Hkv, G, bq), l.view(B, Hkv, G, bq), u.view(B, Hkv, G, bq)
