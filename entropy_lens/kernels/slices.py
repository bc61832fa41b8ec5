"""Row-slice statistics at every row, exact at any length: the mass each row puts on named key spans, the
probability it gives the keys d positions behind it, its k most probable keys, its mass by distance
(statistics.ROW_SLICE_STATISTICS), without T × S. ::

    row_slice_stats(q, k, *, softmax_scale, stats, rows=None, <the score modifiers>, backend="auto",
                    spans=None, offsets=(), top_keys=1, distance_bins=None)
        -> {"span_mass": (B, Hq, R, spans), "offset_prob": (B, Hq, R, offsets) float32,
            "top_key": (B, Hq, R, k) int64, "top_key_prob": (B, Hq, R, k) float32,
            "distance_mass": (B, Hq, R, bins) float32}   (those asked for)

Two steps, as `attention_probs`: the rows' log-sum-exp from `backend`'s row pass (the pass the other
statistics take: torch_chunked, native or triton), then tiles of the scores with every modifier
(torch_chunked's `ScoreTiles`), each probability e^(s − lse). Each statistic is a definition and a
streamed accumulator registered under its name (`@defined`, `@streamed`; a declared statistic without
both fails the import): its float64 definition reads the materialised probabilities (`slices_reference`,
the reference backend and the tests), its accumulator the tiles of one block of rows (`Block`): a span's
keys summed tile by tile, an offset's key the diagonal of one (rows × rows) tile, the top keys merged
tile by tile, a distance bin's keys summed over every tile the rows reach. Memory O(block_q · block_k +
T) per head.

Positions are real (`Sight`): key j of batch row b is at j − first_b, first_b its first real key
(`ScoreMods.first_key`: the first unpadded key; 0 without padding), and query row i at key index
i + S − T (a decode step's rows at the end of its cache). Distances i − j are the same in either count.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Backend, Measure
from entropy_lens.kernels.entrance import enter
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.plan import statistics_kernel
from entropy_lens.kernels.probs import checked_span
from entropy_lens.kernels.received import row_log_sum_exp
from entropy_lens.kernels.reference import attention_probabilities, attention_scores
from entropy_lens.kernels.torch_chunked import ScoreTiles
from entropy_lens.statistics import (
    BUILT_IN_SPANS,
    DISTANCE_MASS,
    OFFSET_PROB,
    ROW_SLICE_STATISTICS,
    SPAN_MASS,
    TOP_KEY,
    TOP_KEY_PROB,
)
from entropy_lens.statistics.slices import SEP, Slices

__all__ = ["TOP_KEY_PROB", "row_slice_stats", "slice_values", "slices_reference"]

BLOCK_Q, BLOCK_K = 64, 1024  # the tiles: query rows, keys
FAR = 2**62  # an open end of a span (the generated tokens'), in real positions

DEFINITIONS: dict[str, Callable] = {}  # name -> the float64 definition, (rows: Rows, value) -> {array: ...}
STREAMED: dict[str, Callable] = {}  # name -> the accumulator of one block of rows, (Block, value) -> {...}


def defined(name: str):
    """Register `fn(rows: Rows, value) -> {array: (B, H, R, n) float64 or int64}` as the definition of
    row-slice statistic `name`, value its parameter's checked value."""
    return functools.partial(_register, DEFINITIONS, name)


def streamed(name: str):
    """Register `fn(block: Block, value) -> {array: (B, Hkv, G, bq, n)}` as the streamed accumulator of
    row-slice statistic `name` over one block of rows."""
    return functools.partial(_register, STREAMED, name)


def _register(table: dict, name: str, fn):
    table[name] = fn
    return fn


@dataclass(frozen=True)
class Sight:
    """Where rows and keys are, in real positions: `key_pos` (B|1, S) int64 each key's (negative: before
    a batch row's first real key), `query_pos` (B|1, R) int64 each row's, `prompt_len` (B,) int64 a
    generation's real prompt tokens (span_mass's built-in spans; None outside a generation), `labels`
    span_mass's slots as the run asks them (a generation's built-in spans first)."""

    key_pos: torch.Tensor
    query_pos: torch.Tensor
    first: torch.Tensor  # (B|1,) int64: each batch row's first real key, as a key index
    prompt_len: torch.Tensor | None = None

    @classmethod
    def of(cls, mods: ScoreMods, T: int, S: int, a: int, b: int, prompt_len=None, device=None) -> Sight:
        """The sight of query rows a..b of T at the end of S keys under `mods` (its `first_key`)."""
        first = mods.first_key
        first = torch.zeros(1, dtype=torch.int64, device=device) if first is None else first.to(device)
        keys = torch.arange(S, device=device)[None] - first[:, None]
        rows = torch.arange(a + S - T, b + S - T, device=device)[None] - first[:, None]
        return cls(keys, rows, first, None if prompt_len is None else prompt_len.to(device))

    def span_bounds(self, slices: Slices) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, stop) (B|1, spans) int64 real positions of span_mass's spans in `slices`' order: a
        generation's prompt [0, prompt_len) and generated [prompt_len, ∞), then the caller's."""
        own = dict(slices.value(SPAN_MASS.name))
        starts, stops = [], []
        for label in slices.labels(SPAN_MASS.name):
            if label in own:
                a, b = own[label]
                starts.append(torch.full_like(self.first, a))
                stops.append(torch.full_like(self.first, b))
            elif self.prompt_len is None:
                raise EntropyLensError(
                    f"span_mass's {label!r} span is a generation's; record it with GenerationRecorder"
                )
            else:
                far = torch.full_like(self.prompt_len, FAR)
                prompt = label == BUILT_IN_SPANS[0]
                starts.append(torch.zeros_like(self.prompt_len) if prompt else self.prompt_len)
                stops.append(self.prompt_len if prompt else far)
        return torch.stack(starts, -1), torch.stack(stops, -1)


@dataclass(frozen=True)
class Rows:
    """What a definition reads: `p` (B, H, R, S) float64 the rows' probabilities over their keys (0 on
    a key a row may not attend), `visible` (B, H, R, S) bool the keys it may attend, `sight`, `slices`."""

    p: torch.Tensor
    visible: torch.Tensor
    sight: Sight
    slices: Slices


@dataclass(frozen=True)
class Block:
    """What an accumulator reads: the score tiles of rows q0..q1 (`tiles`, `qb` their scaled queries), their
    lse (B, Hkv, G, bq, 1), the keys lo..hi they may reach at most, `sight` (the block's rows' real
    positions: `query_pos` (B|1, bq)) and `slices`."""

    tiles: ScoreTiles
    qb: torch.Tensor
    q0: int
    q1: int
    lse: torch.Tensor
    lo: int
    hi: int
    sight: Sight
    slices: Slices

    def probs(self, k0: int, k1: int) -> torch.Tensor:
        """(B, Hkv, G, bq, bk) e^(s − lse) of the block's rows over keys k0..k1, 0 where masked."""
        return torch.exp(self.tiles.scores(self.qb, self.q0, self.q1, k0, k1) - self.lse)

    def zeros(self, n: int) -> torch.Tensor:
        return self.lse.new_zeros(*self.lse.shape[:-1], n)

    def key_range(self, start: torch.Tensor, stop: torch.Tensor) -> tuple[int, int]:
        """[k0, k1): the key indices of the real positions start..stop (B|1,) of every batch row, within
        the keys the block reaches."""
        first = self.sight.first
        k0 = int((start + first).min())
        k1 = int((stop.clamp(max=FAR) + first).max())
        return max(self.lo, k0), max(max(self.lo, k0), min(self.hi, k1))


# --- the definitions (float64, materialised) and the accumulators, one pair per statistic ---


@defined(SPAN_MASS.name)
def _span_mass_defined(rows: Rows, spans):
    start, stop = rows.sight.span_bounds(rows.slices)  # (B|1, n)
    key = rows.sight.key_pos[:, None, :]  # (B|1, 1, S)
    inside = (key >= start[..., None]) & (key < stop[..., None])  # (B|1, n, S)
    return {
        SPAN_MASS.name: torch.einsum(
            "bhrs,bns->bhrn", rows.p, inside.to(rows.p.dtype).expand(rows.p.shape[0], -1, -1)
        )
    }


@streamed(SPAN_MASS.name)
def _span_mass_streamed(block: Block, spans):
    start, stop = block.sight.span_bounds(block.slices)  # (B|1, n)
    masses = []
    for m in range(start.shape[-1]):
        total = block.zeros(1)[..., 0]
        k0, k1 = block.key_range(start[:, m], stop[:, m])
        for c in range(k0, k1, BLOCK_K):
            d = min(k1, c + BLOCK_K)
            key = block.sight.key_pos[:, c:d]  # (B|1, bk)
            inside = (key >= start[:, m, None]) & (key < stop[:, m, None])
            total += (block.probs(c, d) * inside.view(-1, 1, 1, 1, d - c)).sum(-1)
        masses.append(total)
    return {SPAN_MASS.name: torch.stack(masses, -1)}


@defined(OFFSET_PROB.name)
def _offset_prob_defined(rows: Rows, offsets):
    target = rows.sight.query_pos[..., None] - torch.tensor(offsets, device=rows.p.device)  # (B|1, R, n)
    key = rows.sight.key_pos[:, None, None, :]  # (B|1, 1, 1, S)
    hit = (key == target[..., None]) & (target[..., None] >= 0)  # (B|1, R, n, S)
    return {
        OFFSET_PROB.name: torch.einsum(
            "bhrs,brns->bhrn", rows.p, hit.to(rows.p.dtype).expand(rows.p.shape[0], -1, -1, -1)
        )
    }


@streamed(OFFSET_PROB.name)
def _offset_prob_streamed(block: Block, offsets):
    return {OFFSET_PROB.name: torch.stack([_offset(block, d) for d in offsets], -1)}


def _offset(block: Block, d: int) -> torch.Tensor:
    """(B, Hkv, G, bq): p(i, i − d) of the block's rows, 0 where that key is before the first real one or
    outside [0, S): the diagonal of the tile of keys [q0 + off − d, q1 + off − d) clipped to the keys."""
    off, S = block.tiles.offset, block.tiles.kf.shape[2]
    k0, k1 = max(0, block.q0 + off - d), min(S, block.q1 + off - d)
    if k0 >= k1:
        return block.zeros(1)[..., 0]
    tile = block.probs(k0, k1)  # (B, Hkv, G, bq, k1 − k0)
    col = torch.arange(block.q0, block.q1, device=tile.device) + off - d - k0  # each row's key in the tile
    inside = (col >= 0) & (col < k1 - k0)
    got = tile.gather(-1, col.clamp(0, k1 - k0 - 1).view(1, 1, 1, -1, 1).expand(*tile.shape[:-1], 1))
    real = (block.sight.query_pos - d >= 0).view(-1, 1, 1, block.q1 - block.q0)  # (B|1, 1, 1, bq)
    return torch.where(inside & real, got.squeeze(-1), 0.0)


@defined(TOP_KEY.name)
def _top_key_defined(rows: Rows, k):
    order = torch.sort(rows.p.masked_fill(~rows.visible, -1.0), dim=-1, descending=True, stable=True)
    prob, index = order.values[..., :k], order.indices[..., :k]  # min(k, S) ranks
    seen = prob >= 0
    B, H, R, _ = rows.p.shape
    position = rows.sight.key_pos[:, None, None, :].expand(B, H, R, -1).gather(-1, index)
    return {TOP_KEY.name: torch.where(seen, position, -1), TOP_KEY_PROB: torch.where(seen, prob, 0.0)}


@streamed(TOP_KEY.name)
def _top_key_streamed(block: Block, k):
    best_s, best_j = _top(block, k)
    seen = torch.isfinite(best_s)
    position = best_j - block.sight.first.view(-1, 1, 1, 1, 1)
    return {
        TOP_KEY.name: torch.where(seen, position, -1),
        TOP_KEY_PROB: torch.where(seen, torch.exp(best_s - block.lse), 0.0),
    }


def _top(block: Block, k: int):
    """(scores, key indices) (B, Hkv, G, bq, k) of each row's k largest scores over keys lo..hi, ties the
    earliest key first; −inf (index 0) past the keys a row may attend. Merged tile by tile: the best so
    far (earlier keys, in rank order) before the tile's keys, and a stable sort keeps equals in key order."""
    tiles, qb, q0, q1 = block.tiles, block.qb, block.q0, block.q1
    k = min(k, tiles.kf.shape[2])  # no more ranks than keys, as the definition
    shape, device = (*block.lse.shape[:-1], k), qb.device
    best_s = torch.full(shape, float("-inf"), device=device)
    best_j = torch.zeros(shape, dtype=torch.int64, device=device)
    for k0 in range(block.lo, block.hi, BLOCK_K):
        k1 = min(block.hi, k0 + BLOCK_K)
        s = tiles.scores(qb, q0, q1, k0, k1)
        if k == 1:  # the first largest of the tile (max's index: the first), replacing only a smaller best
            top, at = s.max(-1, keepdim=True)
            better = top > best_s
            best_s, best_j = torch.where(better, top, best_s), torch.where(better, at + k0, best_j)
            continue
        j = torch.arange(k0, k1, device=device).expand_as(s)
        cand_s, cand_j = torch.cat([best_s, s], -1), torch.cat([best_j, j], -1)
        order = torch.sort(cand_s, dim=-1, descending=True, stable=True).indices[..., :k]
        best_s, best_j = cand_s.gather(-1, order), cand_j.gather(-1, order)
    return best_s, best_j


@defined(DISTANCE_MASS.name)
def _distance_mass_defined(rows: Rows, bins):
    behind = rows.sight.query_pos[..., None] - rows.sight.key_pos[:, None, :]  # (B|1, R, S): i − j
    edges = (*bins, FAR)
    inside = torch.stack([(behind >= a) & (behind < b) for a, b in itertools.pairwise(edges)], -1)
    inside = inside.to(rows.p.dtype).expand(rows.p.shape[0], -1, -1, -1)  # (B, R, S, n)
    return {DISTANCE_MASS.name: torch.einsum("bhrs,brsn->bhrn", rows.p, inside)}


@streamed(DISTANCE_MASS.name)
def _distance_mass_streamed(block: Block, bins):
    edges = torch.tensor(bins, device=block.qb.device)
    rows = torch.arange(block.q0, block.q1, device=block.qb.device) + block.tiles.offset
    total = block.zeros(len(bins))
    for k0 in range(block.lo, block.hi, BLOCK_K):
        k1 = min(block.hi, k0 + BLOCK_K)
        behind = rows[:, None] - torch.arange(k0, k1, device=rows.device)[None]  # (bq, bk): i − j
        m = torch.bucketize(behind, edges, right=True) - 1  # each key's bin; −1: ahead of the row
        one_hot = torch.nn.functional.one_hot(m.clamp_min(0), len(bins)) * (m >= 0)[..., None]
        total += torch.einsum("bhgqk,qkn->bhgqn", block.probs(k0, k1), one_hot.float())
    return {DISTANCE_MASS.name: total}


def _check_registered() -> None:
    """ValueError at import where a declared row-slice statistic lacks a definition or an accumulator."""
    for table, what in ((DEFINITIONS, "@defined"), (STREAMED, "@streamed")):
        if set(table) != set(ROW_SLICE_STATISTICS):
            raise ValueError(
                f"kernels/slices.py: {what} registers {sorted(table)}, but statistics declares the row-slice "
                f"statistics {sorted(ROW_SLICE_STATISTICS)}; register exactly one of each"
            )


_check_registered()


# --- the passes ---


def slices_reference(p, visible, sight: Sight, slices: Slices) -> dict[str, torch.Tensor]:
    """The definitions, in float64: each row-slice statistic of `slices` of rows whose probabilities over
    the S keys are `p` (B, H, R, S) float64 (0 on a key the row may not attend), `visible` (B, H, R, S)
    bool the keys it may attend, at `sight`. Returns as `row_slice_stats` (float64; top_key int64)."""
    rows = Rows(p, visible, sight, slices)
    out = {}
    for name, value in slices.values:
        out |= DEFINITIONS[name](rows, value)
    return out


def slice_values(
    q, k, lse, softmax_scale, mods: ScoreMods, slices: Slices, rows: tuple[int, int], prompt_len=None
) -> dict[str, torch.Tensor]:
    """The row-slice statistics of `slices` at query rows a..b: {name: (B, Hq, R, n) float32 (top_key
    int64)}, from the rows' `lse` (B, Hq, T) of the row pass (None: the reference, which materialises),
    at the validated `softmax_scale` and `mods` the row pass ran at; `prompt_len` (B,) a generation's
    prompts (span_mass's built-in spans)."""
    T, S = q.shape[2], k.shape[2]
    a, b = rows
    sight = Sight.of(mods, T, S, a, b, prompt_len, q.device)
    with torch.no_grad():
        if lse is None:
            p, _, _ = attention_probabilities(q, k, softmax_scale, mods)
            _, visible = attention_scores(q, k, softmax_scale, mods)
            out = slices_reference(p[:, :, a:b], visible[:, :, a:b], sight, slices)
        else:
            tiles = ScoreTiles(q.detach(), k.detach(), softmax_scale, mods, S - T)
            out = _streamed(tiles, lse.float(), a, b, sight, slices)
    return {name: t if name == TOP_KEY.name else t.float() for name, t in out.items()}


def as_arrays(slices: Slices, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`values` (slice_values') as a run that sums over rows records them: {array (Slices.arrays):
    (B, Hq, T) float32}, top_key a real position as a float (−1: no key)."""
    out = {}
    for name in slices.stats:
        labels = slices.labels(name)
        stacked = values[name].float()
        if labels is None:
            out[name] = stacked[..., 0]
        else:
            out |= {f"{name}{SEP}{label}": stacked[..., i] for i, label in enumerate(labels)}
    return out


def _streamed(tiles: ScoreTiles, lse, a: int, b: int, sight: Sight, slices: Slices):
    """Each statistic of `slices` over rows a..b from the score tiles and the rows' lse (B, Hq, T)."""
    B, Hq = tiles.q.shape[0], tiles.q.shape[1]
    Hkv, G, off, S = tiles.Hkv, tiles.G, tiles.offset, tiles.kf.shape[2]
    parts: dict[str, list[torch.Tensor]] = {}
    for q0 in range(a, b, BLOCK_Q):
        q1 = min(b, q0 + BLOCK_Q)
        lo, hi = _reach(tiles.mods, q0, q1, off, S)
        block_sight = Sight(sight.key_pos, sight.query_pos[:, q0 - a : q1 - a], sight.first, sight.prompt_len)
        block = Block(
            tiles,
            tiles.queries(q0, q1),
            q0,
            q1,
            lse[:, :, q0:q1].reshape(B, Hkv, G, q1 - q0, 1),
            lo,
            hi,
            block_sight,
            slices,
        )
        for name, value in slices.values:
            for array, part in STREAMED[name](block, value).items():
                parts.setdefault(array, []).append(part)
    # (B, Hkv, G, rows, n) blocks -> (B, Hq, R, n)
    return {name: torch.cat(blocks, 3).reshape(B, Hq, b - a, -1) for name, blocks in parts.items()}


def _reach(mods: ScoreMods, q0: int, q1: int, off: int, S: int) -> tuple[int, int]:
    """[lo, hi): the keys rows q0..q1 may attend at most (causal: none after the last row's own; a
    window: none at or before the first row's far edge); a mask may hide more, the tiles mask those."""
    hi = min(S, q1 + off) if mods.causal else S
    lo = max(0, q0 + off - mods.window + 1) if mods.window is not None else 0
    return lo, max(lo, hi)


def row_slice_stats(
    q,
    k,
    *,
    softmax_scale,
    stats,
    rows=None,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
    backend="auto",
    **parameters,
) -> dict[str, torch.Tensor]:
    """The row-slice statistics `stats` of query rows a..b, exact (module docstring).

    Args:
        q: (B, Hq, T, D) queries after RoPE, any float dtype.
        k: (B, Hkv, S, D) keys; Hq % Hkv == 0.
        softmax_scale: λ, a float or an (Hq,) tensor; scores are λ_h q·k.
        stats: names of ROW_SLICE_STATISTICS, a sequence or comma-separated.
        rows: (a, b), 0 <= a < b <= T: the query rows (None: every row).
        causal, mask, window, softcap, sinks, alibi_slopes, key_bias: the score modifiers, as
            `attention_stats` takes them.
        backend: "auto" or one of kernels.BACKENDS: the kernel of the rows' log-sum-exp.
        **parameters: the statistics' parameters (statistics.SLICE_PARAMETERS): `spans` {name: (start,
            stop)} key spans in real positions, stop <= S, for span_mass (in the order given); `offsets`
            distinct d >= 0 for offset_prob: p(i, i − d) (0: the row's own key, 1: the previous one);
            `top_keys` k >= 1, top_key's keys per row; `distance_bins` (0, b1, ...) for distance_mass.

    Returns:
        dict: span_mass (B, Hq, R, spans), offset_prob (B, Hq, R, offsets) and distance_mass (B, Hq, R,
        bins) float32; top_key (B, Hq, R, k) int64, the keys' real positions most probable first, exact
        ties of the scores the earliest key first, −1 past the keys a row may see; top_key_prob
        (B, Hq, R, k) float32, 0 there (two keys may show one float32 probability and rank the later
        first). The sink is no key.

    Raises:
        TypeError: an unknown keyword.
        ValueError: an unknown statistic, a parameter given without its statistic or out of range, or an
            input outside the contract (EntropyLensError), naming the fix.
    """
    measure = Measure.parse(backend=backend)
    call = enter(q, k, measure=measure, arguments=locals())
    T, S = q.shape[2], k.shape[2]
    names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats)
    if not names:
        raise EntropyLensError(f"stats={stats!r}: choose from {', '.join(ROW_SLICE_STATISTICS)}")
    slices = Slices.parse(names, **parameters)
    for name, span in slices.value(SPAN_MASS.name) if SPAN_MASS.name in names else ():
        checked_span(f"span {name!r}", span, S)
    a, b = checked_span("rows", rows, T)
    kernel, kernel_mods = statistics_kernel(measure.backend, q, k, call.mods, one_pass=True)
    lse = None
    if kernel != Backend.REFERENCE:
        lse = row_log_sum_exp(kernel, q, k, call.softmax_scale, kernel_mods)  # (B, Hq, T); +inf: no outcome
    out = slice_values(q, k, lse, call.softmax_scale, call.mods, slices, (a, b))
    if TOP_KEY.name in out:  # k ranks, those past the S keys no key
        pad = slices.value(TOP_KEY.name) - out[TOP_KEY.name].shape[-1]
        out[TOP_KEY.name] = torch.nn.functional.pad(out[TOP_KEY.name], (0, pad), value=-1)
        out[TOP_KEY_PROB] = torch.nn.functional.pad(out[TOP_KEY_PROB], (0, pad))
    return out
