"""The layout of a sequence sharded over P processes (--context-parallel), and what a session holds
while its model runs on one shard: pure layout and gathering, read by the sharded attention
(capture/context_parallel.py, whose docstring tells the whole design) and by the runs that launch it
(runs/context_parallel.py).

    shards = SequenceShards(rank, P, N)     # chunks r and 2P − 1 − r of 2P: [⌊cN/2P⌋, ⌊(c+1)N/2P⌋)
    shards.positions()                      # (N_r,) this rank's true positions, in local order
    sequence = ShardedSequence(shards, exchange, attention_mask=None)
    sequence.gather(local)                  # (B, H, N_r, D) on each rank -> (B, H, N, D), position order
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from entropy_lens.errors import EntropyLensError

__all__ = ["Exchange", "SequenceShards", "ShardedSequence"]


@dataclass(frozen=True)
class SequenceShards:
    """Rank `rank` of `size` shards of a sequence of `length` positions (the module docstring's layout)."""

    rank: int
    size: int
    length: int

    def __post_init__(self):
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is outside {self.size} shards")
        if self.length < 2 * self.size:
            raise EntropyLensError(
                f"--len {self.length} is shorter than the {2 * self.size} chunks that --context-parallel "
                f"cuts a sequence into over {self.size} processes (two per process); pass --len "
                f"{2 * self.size} or more, or fewer processes per sequence"
            )

    def bounds(self, chunk: int) -> tuple[int, int]:
        """[a, b): the positions of chunk `chunk` of 2P."""
        n = 2 * self.size
        return chunk * self.length // n, (chunk + 1) * self.length // n

    def chunks_of(self, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The two chunks rank `rank` holds, ([a0, b0), [a1, b1)), in its local order."""
        return self.bounds(rank), self.bounds(2 * self.size - 1 - rank)

    @property
    def chunks(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return self.chunks_of(self.rank)

    def local_length(self, rank: int | None = None) -> int:
        return sum(b - a for a, b in self.chunks_of(self.rank if rank is None else rank))

    @property
    def lengths(self) -> list[int]:
        """Every rank's local length, in rank order (what the exchange returns)."""
        return [self.local_length(r) for r in range(self.size)]

    def positions(self, device=None) -> torch.Tensor:
        """(local_length,) int64: this rank's true positions, in local order."""
        return torch.cat([torch.arange(a, b, device=device) for a, b in self.chunks])


# exchange(local (B, H, T_r, D), lengths) -> [every rank's local tensor], in rank order
Exchange = Callable[[torch.Tensor, Sequence[int]], list[torch.Tensor]]


@dataclass
class ShardedSequence:
    """What a session holds while its model runs on one shard of a sequence.

    shards:          the layout (this rank's positions)
    exchange:        the all-gather over the ranks (runs/context_parallel.py: torch.distributed)
    attention_mask:  None, or the whole sequence's 2-D padding mask (B, N), True/1 = real token
    """

    shards: SequenceShards
    exchange: Exchange
    attention_mask: torch.Tensor | None = None

    @property
    def reports_per_layer(self) -> int:
        """How many times each layer reports its statistics in a forward: once per local chunk."""
        return len(self.shards.chunks)

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        """local (B, H, T_local, D) -> (B, H, N, D): every rank's tensor, in position order."""
        shards = self.shards
        pieces = self.exchange(local.contiguous(), shards.lengths)
        by_chunk = {}
        for rank, piece in enumerate(pieces):
            (a0, b0), (a1, _) = shards.chunks_of(rank)
            by_chunk[a0] = piece[:, :, : b0 - a0]
            by_chunk[a1] = piece[:, :, b0 - a0 :]
        return torch.cat([by_chunk[a] for a in sorted(by_chunk)], dim=2)

    def key_padding(self, keys: int, device) -> torch.Tensor | None:
        """(B, 1, 1, keys) bool of the first `keys` positions (True = attend), None where none is padded."""
        if self.attention_mask is None:
            return None
        keep = self.attention_mask[:, :keys].to(device=device, dtype=torch.bool)
        return None if bool(keep.all()) else keep[:, None, None, :]
