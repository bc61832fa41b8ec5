"""What each row-slice statistic is (statistics.ROW_SLICE_STATISTICS), twice: its float64 definition on
the materialised probabilities (`@defined`) and its streamed accumulator over score tiles (`@streamed`),
held together by tests/kernels/test_slices.py on every backend's log-sum-exp. A declared statistic without
both fails the import. The passes that run them are slices.py's. ::

    @defined("distance_mass")
    def _(rows: Rows, bins) -> {"distance_mass": (B, H, R, n) float64}

    @streamed("distance_mass")
    class _(Accumulator):        # one block of query rows: reach() -> add(tile) for each tile -> result()

Positions are real (`Sight`): key j of batch row b is at j − first_b, first_b its first real key
(`ScoreMods.first_key`: the first unpadded key; 0 without padding), query row i at key index i + S − T (a
decode step's rows at the end of its cache); a distance i − j is the same in either count. A row's
probability of key j is p = e^(s − lse), s the masked score (−inf: a key the row may not attend).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.statistics import (
    BUILT_IN_SPANS,
    DISTANCE_MASS,
    OFFSET_PROB,
    ROW_SLICE_STATISTICS,
    SPAN_MASS,
    TOP_KEY,
    TOP_KEY_PROB,
)
from entropy_lens.statistics.slices import Slices

__all__ = ["DEFINITIONS", "STREAMED", "Accumulator", "Rows", "Sight", "Tile"]

FAR = 2**62  # an open end of a span (the generated tokens'), in real positions

DEFINITIONS: dict[str, Callable] = {}  # name -> the float64 definition, (rows: Rows, value) -> {array: ...}
STREAMED: dict[str, type[Accumulator]] = {}  # name -> its accumulator over one block of rows


def defined(name: str):
    """Register `fn(rows: Rows, value) -> {array: (B, H, R, n) float64 (top_key int64)}` as the float64
    definition of row-slice statistic `name`, `value` its parameter's checked value."""
    return functools.partial(_register, DEFINITIONS, name)


def streamed(name: str):
    """Register an `Accumulator` class as the streamed pass of row-slice statistic `name`."""
    return functools.partial(_register, STREAMED, name)


def _register(table: dict, name: str, fn):
    table[name] = fn
    return fn


@dataclass(frozen=True)
class Sight:
    """Where rows and keys are, in real positions: `key_pos` (B|1, S) int64 each key's (negative: before
    a batch row's first real key), `query_pos` (B|1, R) int64 each row's, `first` (B|1,) int64 each batch
    row's first real key as a key index, `prompt_len` (B,) int64 a generation's real prompt tokens (the
    built-in spans; None outside a generation)."""

    key_pos: torch.Tensor
    query_pos: torch.Tensor
    first: torch.Tensor
    prompt_len: torch.Tensor | None = None

    @classmethod
    def of(cls, mods: ScoreMods, T: int, S: int, a: int, b: int, prompt_len=None, device=None) -> Sight:
        """The sight of query rows a..b of T at the end of S keys under `mods` (its `first_key`)."""
        first = mods.first_key
        first = torch.zeros(1, dtype=torch.int64, device=device) if first is None else first.to(device)
        keys = torch.arange(S, device=device)[None] - first[:, None]
        rows = torch.arange(a + S - T, b + S - T, device=device)[None] - first[:, None]
        return cls(keys, rows, first, None if prompt_len is None else prompt_len.to(device))

    def rows(self, r0: int, r1: int) -> Sight:
        """The sight of rows r0..r1 of these (a block's)."""
        return Sight(self.key_pos, self.query_pos[:, r0:r1], self.first, self.prompt_len)

    def span_bounds(self, labels: tuple[str, ...], own: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, stop) (B|1, spans) int64 real positions of the spans `labels` in order: a generation's
        prompt [0, prompt_len) and generated [prompt_len, ∞), the caller's `own` {name: (start, stop)}."""
        starts, stops = [], []
        for label in labels:
            if label in own:
                a, b = own[label]
                starts.append(torch.full_like(self.first, a))
                stops.append(torch.full_like(self.first, b))
            elif self.prompt_len is None:
                raise EntropyLensError(
                    f"the span {label!r} is a generation's; record it with GenerationRecorder"
                )
            else:
                prompt = label == BUILT_IN_SPANS[0]
                starts.append(torch.zeros_like(self.prompt_len) if prompt else self.prompt_len)
                stops.append(self.prompt_len if prompt else torch.full_like(self.prompt_len, FAR))
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
class Tile:
    """One tile of a block's rows q0..q1 over keys k0..k1: `s` (B, Hkv, G, bq, bk) float32 masked scores
    (−inf where a row may not attend), `p` their probabilities e^(s − lse), `behind` (bq, bk) int64 each
    pair's distance i − j, `key_pos` (B|1, bk) int64 the keys' real positions."""

    k0: int
    k1: int
    s: torch.Tensor
    p: torch.Tensor
    behind: torch.Tensor
    key_pos: torch.Tensor


class Accumulator:
    """A statistic's streamed pass over one block of rows q0..q1 (`Block` in slices.py: the rows' sight,
    the keys lo..hi they may reach, the score tiles' offset, the slices asked for): `reach` the keys it
    reads (the pass computes only tiles some accumulator reaches), `add` each such tile in key order,
    `result` {array: (B, Hkv, G, bq, n)}."""

    def __init__(self, block, value):
        self.block, self.value = block, value
        self.shape = block.lse.shape[:-1]  # (B, Hkv, G, bq)

    def reach(self) -> tuple[int, int]:
        return self.block.lo, self.block.hi

    def add(self, tile: Tile) -> None:
        raise NotImplementedError

    def result(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError


def _check_registered() -> None:
    """ValueError at import where a declared row-slice statistic lacks a definition or an accumulator."""
    for table, what in ((DEFINITIONS, "@defined"), (STREAMED, "@streamed")):
        if set(table) != set(ROW_SLICE_STATISTICS):
            raise ValueError(
                f"kernels/slice_stats.py: {what} registers {sorted(table)}, but statistics declares the "
                f"row-slice statistics {sorted(ROW_SLICE_STATISTICS)}; register exactly one of each"
            )


# --- span_mass: Σ p_j over the keys of each span, in real positions ---


@defined(SPAN_MASS.name)
def _span_mass(rows: Rows, spans):
    start, stop = rows.sight.span_bounds(rows.slices.labels(SPAN_MASS.name), dict(spans))  # (B|1, n)
    key = rows.sight.key_pos[:, None, :]  # (B|1, 1, S)
    inside = ((key >= start[..., None]) & (key < stop[..., None])).to(rows.p.dtype)  # (B|1, n, S)
    return {SPAN_MASS.name: rows.p @ inside.transpose(-1, -2)[:, None]}


@streamed(SPAN_MASS.name)
class _SpanMass(Accumulator):
    def __init__(self, block, spans):
        super().__init__(block, spans)
        self.start, self.stop = block.sight.span_bounds(block.slices.labels(SPAN_MASS.name), dict(spans))
        self.total = block.lse.new_zeros(*self.shape, self.start.shape[-1])

    def reach(self) -> tuple[int, int]:
        first = self.block.sight.first[:, None]
        k0 = int((self.start + first).min())
        k1 = int((self.stop.clamp(max=FAR) + first).max())
        return max(self.block.lo, k0), min(self.block.hi, k1)

    def add(self, tile: Tile) -> None:
        key = tile.key_pos[:, None, :]  # (B|1, 1, bk)
        inside = ((key >= self.start[..., None]) & (key < self.stop[..., None])).to(tile.p.dtype)
        self.total += tile.p @ inside.transpose(-1, -2)[:, None, None]  # (B|1, 1, 1, bk, n)

    def result(self):
        return {SPAN_MASS.name: self.total}


# --- offset_prob: p(i, i − d) per offset, 0 where that key is before the first real one or out of sight ---


@defined(OFFSET_PROB.name)
def _offset_prob(rows: Rows, offsets):
    target = rows.sight.query_pos[..., None] - torch.tensor(offsets, device=rows.p.device)  # (B|1, R, n)
    key = rows.sight.key_pos[:, None, None, :]  # (B|1, 1, 1, S)
    hit = ((key == target[..., None]) & (target[..., None] >= 0)).to(rows.p.dtype)  # (B|1, R, n, S)
    return {OFFSET_PROB.name: (hit[:, None] @ rows.p[..., None]).squeeze(-1)}


@streamed(OFFSET_PROB.name)
class _OffsetProb(Accumulator):
    def __init__(self, block, offsets):
        super().__init__(block, offsets)
        self.total = block.lse.new_zeros(*self.shape, len(offsets))
        rows = (
            torch.arange(block.q0, block.q1, device=block.lse.device) + block.offset
        )  # each row's key index
        self.keys = rows[:, None] - torch.tensor(offsets, device=rows.device)  # (bq, n): the key d behind
        real = (
            block.sight.query_pos[..., None] - torch.tensor(offsets, device=rows.device) >= 0
        )  # (B|1, bq, n)
        self.real = real[:, None, None]

    def reach(self) -> tuple[int, int]:  # the keys d behind the block's first row .. its last row's own
        block, offsets = self.block, self.value
        first, last = block.q0 + block.offset - max(offsets), block.q1 - 1 + block.offset - min(offsets)
        return max(block.lo, first), min(block.hi, last + 1)

    def add(self, tile: Tile) -> None:
        col = self.keys - tile.k0  # (bq, n): each row's key as a column of the tile
        inside = (col >= 0) & (col < tile.k1 - tile.k0)
        index = col.clamp(0, tile.k1 - tile.k0 - 1).expand(*tile.p.shape[:-1], -1)
        got = tile.p.gather(-1, index)  # (B, Hkv, G, bq, n)
        self.total += torch.where(inside & self.real, got, 0.0)

    def result(self):
        return {OFFSET_PROB.name: self.total}


# --- top_key: the k most probable keys' real positions, exact ties the earliest first ---


@defined(TOP_KEY.name)
def _top_key(rows: Rows, k):
    order = torch.sort(rows.p.masked_fill(~rows.visible, -1.0), dim=-1, descending=True, stable=True)
    prob, index = order.values[..., :k], order.indices[..., :k]  # min(k, S) ranks
    seen = prob >= 0
    B, H, R, _ = rows.p.shape
    position = rows.sight.key_pos[:, None, None, :].expand(B, H, R, -1).gather(-1, index)
    return {TOP_KEY.name: torch.where(seen, position, -1), TOP_KEY_PROB: torch.where(seen, prob, 0.0)}


@streamed(TOP_KEY.name)
class _TopKey(Accumulator):
    """Merged tile by tile: the best so far (earlier keys, in rank order) before the tile's keys, and a
    stable sort keeps equals in key order; −inf (index 0) past the keys a row may attend."""

    def __init__(self, block, k):
        super().__init__(block, k)
        self.k = min(k, block.keys)  # no more ranks than keys, as the definition
        self.best_s = torch.full((*self.shape, self.k), float("-inf"), device=block.lse.device)
        self.best_j = torch.zeros((*self.shape, self.k), dtype=torch.int64, device=block.lse.device)

    def add(self, tile: Tile) -> None:
        if (
            self.k == 1
        ):  # the first largest of the tile (max's index: the first), replacing only a smaller best
            top, at = tile.s.max(-1, keepdim=True)
            better = top > self.best_s
            self.best_s = torch.where(better, top, self.best_s)
            self.best_j = torch.where(better, at + tile.k0, self.best_j)
            return
        j = torch.arange(tile.k0, tile.k1, device=tile.s.device).expand_as(tile.s)
        cand_s, cand_j = torch.cat([self.best_s, tile.s], -1), torch.cat([self.best_j, j], -1)
        order = torch.sort(cand_s, dim=-1, descending=True, stable=True).indices[..., : self.k]
        self.best_s, self.best_j = cand_s.gather(-1, order), cand_j.gather(-1, order)

    def result(self):
        seen = torch.isfinite(self.best_s)
        position = self.best_j - self.block.sight.first.view(-1, 1, 1, 1, 1)
        prob = torch.exp(self.best_s - self.block.lse)
        return {TOP_KEY.name: torch.where(seen, position, -1), TOP_KEY_PROB: torch.where(seen, prob, 0.0)}


# --- distance_mass: Σ p_j over the keys at distance b_m <= i − j < b_(m+1), the last bin open ---


@defined(DISTANCE_MASS.name)
def _distance_mass(rows: Rows, bins):
    behind = rows.sight.query_pos[..., None] - rows.sight.key_pos[:, None, :]  # (B|1, R, S): i − j
    edges = (*bins, FAR)
    inside = torch.stack([(behind >= a) & (behind < b) for a, b in itertools.pairwise(edges)], -1)
    return {DISTANCE_MASS.name: (rows.p[..., None, :] @ inside.to(rows.p.dtype)[:, None]).squeeze(-2)}


@streamed(DISTANCE_MASS.name)
class _DistanceMass(Accumulator):
    def __init__(self, block, bins):
        super().__init__(block, bins)
        self.edges = torch.tensor(bins, device=block.lse.device)
        self.total = block.lse.new_zeros(*self.shape, len(bins))

    def add(self, tile: Tile) -> None:
        m = torch.bucketize(tile.behind, self.edges, right=True) - 1  # (bq, bk) each key's bin; −1: ahead
        one_hot = torch.nn.functional.one_hot(m.clamp_min(0), len(self.value)) * (m >= 0)[..., None]
        self.total += (tile.p[..., None, :] @ one_hot.to(tile.p.dtype)).squeeze(
            -2
        )  # per row: (1, bk) @ (bk, n)

    def result(self):
        return {DISTANCE_MASS.name: self.total}


_check_registered()
