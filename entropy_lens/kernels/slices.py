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
(torch_chunked's `ScoreTiles`), each probability e^(s − lse), in one pass per block of rows over the
tiles some statistic reads, each tile computed once and handed to every statistic's accumulator. What
each statistic is, its float64 definition and its accumulator, is slice_stats.py's (`@defined`,
`@streamed`); `slices_reference` runs the definitions on the materialised probabilities (the reference
backend and the tests). Memory O(block_q · block_k + T) per head; a block of fewer rows (a decode step's
one) takes proportionally more keys a tile. Positions are real (slice_stats.Sight).

span_mass is a sum of e over key ranges, as first_mass's: where the backend's row pass sums given key ranges
(`spans_in_rows`: torch_chunked, native) it comes from that pass (`span_ranges` gives the ranges, `run`'s
`spans` takes them, `slice_values`'s `spans` the result) and the second step streams only the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure, Stats
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.entrance import enter
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.plan import run, statistics_kernel
from entropy_lens.kernels.probs import checked_span
from entropy_lens.kernels.received import row_log_sum_exp
from entropy_lens.kernels.reference import attention_probabilities, attention_scores
from entropy_lens.kernels.slice_stats import DEFINITIONS, FAR, STREAMED, Rows, Sight, Tile
from entropy_lens.kernels.torch_chunked import ScoreTiles
from entropy_lens.statistics import ROW_SLICE_STATISTICS, SPAN_MASS, SPANS, TOP_KEY, TOP_KEY_PROB
from entropy_lens.statistics.slices import SEP, Slices

__all__ = [
    "TOP_KEY_PROB",
    "Sight",
    "as_arrays",
    "row_slice_stats",
    "slice_values",
    "slices_reference",
    "span_ranges",
]

BLOCK_Q, BLOCK_K = 64, 1024  # the tiles: query rows, keys (a block of fewer rows takes more keys a tile)


@dataclass(frozen=True)
class Block:
    """One block of query rows q0..q1 as the accumulators see it (slice_stats.Accumulator): `lse` (B, Hkv,
    G, bq, 1), the keys lo..hi the rows may reach at most, `offset` (query row i is key i + offset), `keys`
    (S), the rows' `sight` and the `slices` asked for."""

    q0: int
    q1: int
    lse: torch.Tensor
    lo: int
    hi: int
    offset: int
    keys: int
    sight: Sight
    slices: Slices


def slices_reference(p, visible, sight: Sight, slices: Slices) -> dict[str, torch.Tensor]:
    """The definitions, in float64: each row-slice statistic of `slices` of rows whose probabilities over
    the S keys are `p` (B, H, R, S) float64 (0 on a key the row may not attend), `visible` (B, H, R, S)
    bool the keys it may attend, at `sight`. Returns as `row_slice_stats` (float64; top_key int64)."""
    rows = Rows(p, visible, sight, slices)
    out = {}
    for name, value in slices.values:
        out |= DEFINITIONS[name](rows, value)
    return out


def span_ranges(mods: ScoreMods, slices: Slices, S: int, prompt_len=None, device=None) -> torch.Tensor | None:
    """(B|1, n, 2) int64: span_mass's spans (`slices`' labels, a generation's built-in ones first) as the
    key indices [lo, hi) each batch row's row pass sums them over (`run`'s `spans`): the real positions
    [start, stop) moved by the batch row's first real key (`mods.first_key`; a generation's "generated"
    open to the last key), clamped to the S keys; the same for every query row of the batch row (a key
    it may not see has e = 0). None where `slices` asks for no span_mass."""
    if SPAN_MASS.name not in slices.stats:
        return None
    sight = Sight.of(mods, 0, S, 0, 0, prompt_len, device)
    start, stop = sight.span_bounds(slices.labels(SPAN_MASS.name), dict(slices.value(SPAN_MASS.name)))
    first = sight.first[:, None]
    return torch.stack((start + first, stop.clamp(max=FAR) + first), -1).clamp(0, S)


def slice_values(
    q,
    k,
    lse,
    softmax_scale,
    mods: ScoreMods,
    slices: Slices,
    rows: tuple[int, int],
    prompt_len=None,
    spans=None,
) -> dict[str, torch.Tensor]:
    """The row-slice statistics of `slices` at query rows a..b: {name: (B, Hq, R, n) float32 (top_key
    int64)}, from the rows' `lse` (B, Hq, T) of the row pass (None: the reference, which materialises),
    at the validated `softmax_scale` and `mods` the row pass ran at; `prompt_len` (B,) a generation's
    prompts (the built-in spans); `spans` (B, Hq, T, n) the row pass's masses on `span_ranges`
    (`RowStats.spans`) or None: span_mass taken from them, the others streamed."""
    T, S = q.shape[2], k.shape[2]
    a, b = rows
    out = {}
    if spans is not None:
        out[SPAN_MASS.name] = spans[:, :, a:b].float()
        slices = slices.without(SPAN_MASS.name)
        if not slices:
            return out
    sight = Sight.of(mods, T, S, a, b, prompt_len, q.device)
    with torch.no_grad():
        if lse is None:
            p, _, _ = attention_probabilities(q, k, softmax_scale, mods)
            _, visible = attention_scores(q, k, softmax_scale, mods)
            out |= slices_reference(p[:, :, a:b], visible[:, :, a:b], sight, slices)
        else:
            tiles = ScoreTiles(q.detach(), k.detach(), softmax_scale, mods, S - T)
            out |= _streamed(tiles, lse.float(), a, b, sight, slices)
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
    """Each statistic of `slices` over rows a..b: per block of rows, one pass over the key tiles that some
    statistic reaches, each tile's scores and probabilities computed once and handed to every
    accumulator that reads it. Returns {array: (B, Hq, R, n)}."""
    B, Hq = tiles.q.shape[0], tiles.q.shape[1]
    Hkv, G, off, S = tiles.Hkv, tiles.G, tiles.offset, tiles.kf.shape[2]
    parts: dict[str, list[torch.Tensor]] = {}
    for q0 in range(a, b, BLOCK_Q):
        q1 = min(b, q0 + BLOCK_Q)
        lse_b = lse[:, :, q0:q1].reshape(B, Hkv, G, q1 - q0, 1)
        lo, hi = _reach(tiles.mods, q0, q1, off, S)
        block = Block(q0, q1, lse_b, lo, hi, off, S, sight.rows(q0 - a, q1 - a), slices)
        accumulators = [STREAMED[name](block, value) for name, value in slices.values]
        reach = [acc.reach() for acc in accumulators]
        k_lo, k_hi = max(lo, min(r[0] for r in reach)), min(hi, max(r[1] for r in reach))
        block_k = max(BLOCK_K, BLOCK_Q * BLOCK_K // (q1 - q0))  # a decode step's one row: its keys at once
        qb = tiles.queries(q0, q1)
        rows = torch.arange(q0, q1, device=lse.device) + off
        for k0 in range(k_lo, k_hi, block_k):
            k1 = min(k_hi, k0 + block_k)
            readers = [acc for acc, (r0, r1) in zip(accumulators, reach, strict=True) if r0 < k1 and k0 < r1]
            if not readers:  # a gap between the keys the statistics read
                continue
            s = tiles.scores(qb, q0, q1, k0, k1)
            behind = rows[:, None] - torch.arange(k0, k1, device=rows.device)[None]
            tile = Tile(k0, k1, s, torch.exp(s - lse_b), behind, sight.key_pos[:, k0:k1])
            for acc in readers:
                acc.add(tile)
        for acc in accumulators:
            for array, part in acc.result().items():
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
    for name, value in slices.values:  # a span past the S keys: refused here (a capture's keys grow)
        for label, span in value if ROW_SLICE_STATISTICS[name].sliced is SPANS else ():
            checked_span(f"span {label!r}", span, S)
    a, b = checked_span("rows", rows, T)
    kernel, kernel_mods = statistics_kernel(measure.backend, q, k, call.mods, one_pass=True)
    lse = spans = None
    ranges = span_ranges(call.mods, slices, S, device=q.device)
    if ranges is not None and backend_of(kernel).spans_in_rows:  # span_mass in the row pass, as a scan's
        row = run(
            kernel,
            q,
            k,
            None,
            call.softmax_scale,
            kernel_mods,
            measure=measure.replace(stats=Stats()),
            with_lse=True,
            spans=ranges,
        )
        lse, spans = row.lse, row.spans
    elif not backend_of(kernel).materialises:
        lse = row_log_sum_exp(kernel, q, k, call.softmax_scale, kernel_mods)  # (B, Hq, T); +inf: no outcome
    out = slice_values(q, k, lse, call.softmax_scale, call.mods, slices, (a, b), spans=spans)
    if TOP_KEY.name in out:  # k ranks, those past the S keys no key
        pad = slices.value(TOP_KEY.name) - out[TOP_KEY.name].shape[-1]
        out[TOP_KEY.name] = torch.nn.functional.pad(out[TOP_KEY.name], (0, pad), value=-1)
        out[TOP_KEY_PROB] = torch.nn.functional.pad(out[TOP_KEY_PROB], (0, pad))
    return out
