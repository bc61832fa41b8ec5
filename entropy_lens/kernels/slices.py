"""Row-slice statistics at every row, exact at any length: the mass each row puts on named key spans, the
probability it gives the keys d positions behind it, its k most probable keys (statistics'
ROW_SLICE_STATISTICS), without T × S. ::

    row_slice_stats(q, k, *, softmax_scale, stats, spans=None, offsets=(), top_keys=1, rows=None,
                    <the score modifiers>, backend="auto")
        -> {"span_mass": (B, Hq, R, spans), "offset_prob": (B, Hq, R, offsets) float32,
            "top_key": (B, Hq, R, k) int64, "top_key_prob": (B, Hq, R, k) float32}   (those asked for)

Two steps, as `attention_probs`: the rows' log-sum-exp from `backend`'s row pass (the pass the other
statistics take), then tiles of the scores with every modifier (torch_chunked's `ScoreTiles`), each
probability e^(s − lse): a span's keys are summed tile by tile, an offset's key is the diagonal of one
(rows × rows) tile, and the top keys are merged tile by tile over the keys a row may reach. Memory
O(block_q · block_k + T) per head. The reference backend reads the float64 materialised probabilities
(`reference.attention_probabilities`, small T: tests), as `row_slices_reference` defines them.

Positions are the keys' indices (0 .. S − 1); query row i sits at key position i + S − T (a decode
step's rows at the end of its cache). A left-padded batch counts its padding: pass real positions' spans
shifted by each row's padding, or record through `GenerationRecorder`, which counts real tokens.
"""

from __future__ import annotations

import functools

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.entrance import enter
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.plan import statistics_kernel
from entropy_lens.kernels.probs import checked_span
from entropy_lens.kernels.received import row_log_sum_exp
from entropy_lens.kernels.reference import attention_probabilities, attention_scores
from entropy_lens.kernels.torch_chunked import ScoreTiles
from entropy_lens.statistics import OFFSET_PROB, ROW_SLICE_STATISTICS, SPAN_MASS, TOP_KEY, TOP_KEY_PROB
from entropy_lens.statistics.slices import Slices

__all__ = ["TOP_KEY_PROB", "row_slice_stats", "row_slices_reference"]

BLOCK_Q, BLOCK_K = 64, 1024  # the tiles: query rows, keys


def row_slice_stats(
    q,
    k,
    *,
    softmax_scale,
    stats,
    spans=None,
    offsets=(),
    top_keys=1,
    rows=None,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
    backend="auto",
) -> dict[str, torch.Tensor]:
    """The row-slice statistics `stats` of query rows a..b, exact (module docstring).

    Args:
        q: (B, Hq, T, D) queries after RoPE, any float dtype.
        k: (B, Hkv, S, D) keys; Hq % Hkv == 0.
        softmax_scale: λ, a float or an (Hq,) tensor; scores are λ_h q·k.
        stats: names of ROW_SLICE_STATISTICS (span_mass, offset_prob, top_key), a sequence or comma-separated.
        spans: {name: (start, stop)} key spans, 0 <= start < stop <= S, for span_mass (in the order given).
        offsets: distinct d >= 0 for offset_prob: p(i, i − d) (0: the row's own key, 1: the previous one).
        top_keys: k >= 1, top_key's keys per row.
        rows: (a, b), 0 <= a < b <= T: the query rows (None: every row).
        causal, mask, window, softcap, sinks, alibi_slopes, key_bias: the score modifiers, as
            `attention_stats` takes them.
        backend: "auto" or one of kernels.BACKENDS: the kernel of the rows' log-sum-exp.

    Returns:
        dict: span_mass (B, Hq, R, spans) and offset_prob (B, Hq, R, offsets) float32; top_key
        (B, Hq, R, k) int64, the key positions most probable first, exact ties of the scores the earliest
        key first, −1 past the keys a row may see; top_key_prob (B, Hq, R, k) float32, 0 there (two keys
        may show one float32 probability and rank the later first). The sink is no key.

    Raises:
        ValueError: an unknown statistic, a parameter given without its statistic or out of range, or an
            input outside the contract (EntropyLensError), naming the fix.
    """
    measure = Measure.parse(backend=backend)
    call = enter(q, k, measure=measure, arguments=locals())
    T, S = q.shape[2], k.shape[2]
    asked = _checked(stats, spans, offsets, top_keys, S)
    a, b = checked_span("rows", rows, T)
    kernel, kernel_mods = statistics_kernel(measure.backend, q, k, call.mods, one_pass=True)
    if backend_of(kernel).materialises:
        p, _, _ = attention_probabilities(q, k, call.softmax_scale, call.mods)
        _, visible = attention_scores(q, k, call.softmax_scale, call.mods)
        out = row_slices_reference(p[:, :, a:b], visible[:, :, a:b], S - T + a, **asked)
        return {name: t.float() if t.is_floating_point() else t for name, t in out.items()}
    lse = row_log_sum_exp(kernel, q, k, call.softmax_scale, kernel_mods)  # (B, Hq, T); +inf: no outcome
    with torch.no_grad():
        tiles = ScoreTiles(q.detach(), k.detach(), call.softmax_scale, call.mods, S - T)
        return _streamed(tiles, lse.float(), a, b, **asked)


def slices_from_lse(q, k, lse, softmax_scale, mods: ScoreMods, slices: Slices) -> dict[str, torch.Tensor]:
    """The row-slice statistics of `slices` at every row as a run that sums over rows records them:
    {array (Slices.arrays: span_mass@<span>, offset_prob@<d>, top_key): (B, Hq, T) float32}, from the
    rows' `lse` (B, Hq, T) of the row pass (None: the reference, which materialises), at the validated
    `softmax_scale` and `mods` the row pass ran at. top_key is a key index as a float (−1: no key)."""
    T, S = q.shape[2], k.shape[2]
    spans = {name: (min(a, S), min(b, S)) for name, (a, b) in slices.spans}  # no key past S: no mass
    asked = {"stats": slices.stats, "spans": spans, "offsets": slices.offsets, "top_keys": 1}
    with torch.no_grad():
        if lse is None:
            p, _, _ = attention_probabilities(q, k, softmax_scale, mods)
            _, visible = attention_scores(q, k, softmax_scale, mods)
            out = row_slices_reference(p, visible, S - T, **asked)
        else:
            out = _streamed(
                ScoreTiles(q.detach(), k.detach(), softmax_scale, mods, S - T), lse.float(), 0, T, **asked
            )
    arrays = iter(slices.arrays)
    values = {}
    for name in slices.stats:  # the trailing axis as arrays, in Slices.arrays' order
        stacked = out[name]
        for i in range(stacked.shape[-1]):
            values[next(arrays)] = stacked[..., i].float()
    return values


def row_slices_reference(p, visible, first_row: int, *, stats, spans, offsets, top_keys):
    """The definitions, in float64: each row-slice statistic of rows whose probabilities over the S keys
    are `p` (B, H, R, S) float64 (0 on a key the row may not attend), `visible` (B, H, R, S) bool the keys
    it may attend, row r at key position first_row + r. Returns as `row_slice_stats` (float64)."""
    B, H, R, S = p.shape
    out = {}
    if SPAN_MASS.name in stats:
        out[SPAN_MASS.name] = torch.stack([p[..., c:d].sum(-1) for c, d in spans.values()], -1)
    if OFFSET_PROB.name in stats:
        row_pos = first_row + torch.arange(R, device=p.device)
        cols = []
        for d in offsets:
            key = row_pos - d
            inside = (key >= 0) & (key < S)
            got = p.gather(-1, key.clamp(0, S - 1).view(1, 1, R, 1).expand(B, H, R, 1)).squeeze(-1)
            cols.append(torch.where(inside, got, 0.0))
        out[OFFSET_PROB.name] = torch.stack(cols, -1)
    if TOP_KEY.name in stats:
        order = torch.sort(p.masked_fill(~visible, -1.0), dim=-1, descending=True, stable=True)
        prob, index = order.values[..., :top_keys], order.indices[..., :top_keys]
        seen = prob >= 0
        if prob.shape[-1] < top_keys:  # fewer keys than k: the ranks past them are no key
            pad = top_keys - prob.shape[-1]
            prob = torch.nn.functional.pad(prob, (0, pad), value=-1.0)
            index = torch.nn.functional.pad(index, (0, pad))
            seen = prob >= 0
        out[TOP_KEY.name] = torch.where(seen, index, -1)
        out[TOP_KEY_PROB] = torch.where(seen, prob, 0.0)
    return out


def _streamed(tiles: ScoreTiles, lse, a: int, b: int, *, stats, spans, offsets, top_keys):
    """Each statistic asked for over rows a..b from the score tiles and the rows' lse (B, Hq, T)."""
    B, Hq, S = tiles.q.shape[0], tiles.q.shape[1], tiles.kf.shape[2]
    Hkv, G, off = tiles.Hkv, tiles.G, tiles.offset
    parts: dict[str, list[torch.Tensor]] = {}
    for q0 in range(a, b, BLOCK_Q):
        q1 = min(b, q0 + BLOCK_Q)
        qb = tiles.queries(q0, q1)
        lse_b = lse[:, :, q0:q1].reshape(B, Hkv, G, q1 - q0, 1)
        lo, hi = _reach(tiles.mods, q0, q1, off, S)

        probs = functools.partial(_tile_probs, tiles, qb, q0, q1, lse_b)  # probs(k0, k1)

        if SPAN_MASS.name in stats:
            masses = []
            for c, d in spans.values():
                c, d = max(c, lo), min(d, hi)
                total = lse_b.new_zeros(B, Hkv, G, q1 - q0)
                for k0 in range(c, d, BLOCK_K):
                    total += probs(k0, min(d, k0 + BLOCK_K)).sum(-1)
                masses.append(total)
            parts.setdefault(SPAN_MASS.name, []).append(torch.stack(masses, -1))
        if OFFSET_PROB.name in stats:
            zeros = lse_b.new_zeros(lse_b.shape[:-1])  # a row whose key d behind lies before key 0
            parts.setdefault(OFFSET_PROB.name, []).append(
                torch.stack([_offset(probs, zeros, q0, q1, off, d, S) for d in offsets], -1)
            )
        if TOP_KEY.name in stats:
            best_s, best_j = _top(tiles, qb, q0, q1, lo, hi, top_keys)
            seen = torch.isfinite(best_s)
            parts.setdefault(TOP_KEY.name, []).append(torch.where(seen, best_j, -1))
            parts.setdefault(TOP_KEY_PROB, []).append(torch.where(seen, torch.exp(best_s - lse_b), 0.0))
    # (B, Hkv, G, rows, n) blocks -> (B, Hq, R, n)
    return {name: torch.cat(blocks, 3).reshape(B, Hq, b - a, -1) for name, blocks in parts.items()}


def _tile_probs(tiles: ScoreTiles, qb, q0: int, q1: int, lse_b, k0: int, k1: int) -> torch.Tensor:
    """(B, Hkv, G, bq, bk) e^(s − lse) of rows q0..q1 over keys k0..k1, 0 where masked."""
    return torch.exp(tiles.scores(qb, q0, q1, k0, k1) - lse_b)


def _reach(mods: ScoreMods, q0: int, q1: int, off: int, S: int) -> tuple[int, int]:
    """[lo, hi): the keys rows q0..q1 may attend at most (causal: none after the last row's own; a
    window: none at or before the first row's far edge); a mask may hide more, the tiles mask those."""
    hi = min(S, q1 + off) if mods.causal else S
    lo = max(0, q0 + off - mods.window + 1) if mods.window is not None else 0
    return lo, max(lo, hi)


def _offset(probs, zeros, q0: int, q1: int, off: int, d: int, S: int) -> torch.Tensor:
    """(B, Hkv, G, bq): p(i, i + off − d) of rows q0..q1, 0 where that key is outside [0, S): the diagonal
    of the tile of keys [q0 + off − d, q1 + off − d) clipped to the keys."""
    k0, k1 = max(0, q0 + off - d), min(S, q1 + off - d)
    if k0 >= k1:
        return zeros
    tile = probs(k0, k1)  # (B, Hkv, G, bq, k1 − k0)
    col = torch.arange(q0, q1, device=tile.device) + off - d - k0  # row r's key, as a column of the tile
    inside = (col >= 0) & (col < k1 - k0)
    got = tile.gather(-1, col.clamp(0, k1 - k0 - 1).view(1, 1, 1, -1, 1).expand(*tile.shape[:-1], 1))
    return torch.where(inside, got.squeeze(-1), 0.0)


def _top(tiles: ScoreTiles, qb, q0: int, q1: int, lo: int, hi: int, k: int):
    """(scores, key indices) (B, Hkv, G, bq, k) of each row's k largest scores over keys lo..hi, ties the
    earliest key first; −inf (index 0) past the keys a row may attend. Merged tile by tile: the best so
    far (earlier keys, in rank order) before the tile's keys, and a stable sort keeps equals in key order."""
    B, Hkv, G = qb.shape[0], tiles.Hkv, tiles.G
    device = qb.device
    best_s = torch.full((B, Hkv, G, q1 - q0, k), float("-inf"), device=device)
    best_j = torch.zeros((B, Hkv, G, q1 - q0, k), dtype=torch.int64, device=device)
    for k0 in range(lo, hi, BLOCK_K):
        k1 = min(hi, k0 + BLOCK_K)
        s = tiles.scores(qb, q0, q1, k0, k1)
        j = torch.arange(k0, k1, device=device).expand_as(s)
        if k == 1:  # the first largest of the tile (max's index: the first), replacing only a smaller best
            top, at = s.max(-1, keepdim=True)
            better = top > best_s
            best_s, best_j = torch.where(better, top, best_s), torch.where(better, at + k0, best_j)
            continue
        cand_s, cand_j = torch.cat([best_s, s], -1), torch.cat([best_j, j], -1)
        order = torch.sort(cand_s, dim=-1, descending=True, stable=True).indices[..., :k]
        best_s, best_j = cand_s.gather(-1, order), cand_j.gather(-1, order)
    return best_s, best_j


def _checked(stats, spans, offsets, top_keys, S: int) -> dict:
    """The statistics and their parameters, checked (EntropyLensError in one line naming the fix)."""
    names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats)
    if not names:
        raise EntropyLensError(f"stats={stats!r}: choose from {', '.join(ROW_SLICE_STATISTICS)}")
    asked = Slices.parse(names, spans=spans, offsets=offsets, top_keys=top_keys)
    return {
        "stats": asked.stats,
        "spans": {name: checked_span(f"span {name!r}", span, S) for name, span in asked.spans},
        "offsets": asked.offsets,
        "top_keys": asked.top_keys,
    }
