"""`--context-parallel`: a scan whose every sequence is sharded over torchrun's processes.

    torchrun --nproc-per-node W -m entropy_lens scan CKPT --len T --context-parallel      # C = W
    torchrun --nproc-per-node W -m entropy_lens scan CKPT --len T --context-parallel C    # C divides W

The W ranks form W/C groups of C consecutive ranks (runs/distributed.py `RankGroups`; the flag alone:
one group of all W). Group g scans the samples k with k mod W/C = g (the same global list of windows
for any W), all its C ranks every one of them together: shard rank s = rank mod C runs the model on
its two chunks of the sequence (capture/context_parallel.py: the layout, and the attention layers that
all-gather K and V, here over the group's own process group), computes the loss of its own positions
(the next-token label of a chunk's last position is the token after it, which every rank holds: each
reads the whole sample), and its sums hold only the positions it owns; the sums are then all-reduced
over the whole world as for a data-parallel scan, so each position of each sample is counted once and
each sample once (by its group's first rank). The results equal the one-process scan's to float
rounding (tests/runs/test_context_parallel.py).

    groups = shard_groups(config, world)          # this rank's group of C (C = 1 without the flag)
    check_context_parallel(config, world)         # the one-line refusals, before the model loads
    with group_exchange(groups) as exchange:      # all_gather_shards over the group: any dtype, uneven T
        capture = EntropyRecorder(model, ..., context=ShardedSequence(shards_of(groups, T), exchange))
        nll = scan_batch(model, ids, capture, positions=shards.positions(ids.device))   # runs/batches.py
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from entropy_lens.capture.shardable import check_shardable
from entropy_lens.capture.shards import Exchange, SequenceShards
from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.distributed import RankGroups, World, collective, group_timeout

__all__ = [
    "all_gather_shards",
    "check_context_parallel",
    "check_shardable",
    "group_exchange",
    "shard_groups",
    "shards_of",
]


def shard_groups(config, w: World) -> RankGroups:
    """The ranks' groups: `config.context_parallel` True (the flag alone, and the files written before C
    existed) is one group of all W ranks, C groups of C, False groups of one (the ranks split the
    samples). `config` is a ScanConfig or a PerplexityConfig."""
    cp = getattr(config, "context_parallel", False)
    return RankGroups(w, w.size if cp is True else cp or 1)


def check_context_parallel(config, w: World) -> None:
    """The refusals that need no model: --context-parallel outside torchrun, a C that does not divide
    the processes into groups, a length shorter than two chunks per process of a group. (C < 2 is
    refused where the config is made: its setting's range.)"""
    cp = getattr(config, "context_parallel", False)
    if cp is False:
        return
    if w.size < 2:
        many = "P >= 2" if cp is True else f"P a multiple of {cp}"
        raise EntropyLensError(
            "--context-parallel shards each sequence over torchrun's processes; launch with "
            f"torchrun --nproc-per-node P -m entropy_lens ... ({many}), or drop --context-parallel"
        )
    groups = shard_groups(config, w)
    if w.size % groups.size:
        divisors = " or ".join(str(c) for c in range(2, w.size + 1) if w.size % c == 0)
        raise EntropyLensError(
            f"--context-parallel {cp} does not cut torchrun's {w.size} processes into groups of {cp}; "
            f"pass --context-parallel {divisors} (processes per sequence), or launch torchrun "
            f"--nproc-per-node {cp} or a multiple of it"
        )
    for length in getattr(config, "lengths", None) or (config.length,):
        shards_of(groups, length)  # refuses a length shorter than 2C


def shards_of(groups: RankGroups, length: int) -> SequenceShards:
    """This rank's shard of a `length`-position sequence, of its group's `groups.size` shards."""
    return SequenceShards(groups.shard, groups.size, length)


@contextmanager
def group_exchange(groups: RankGroups) -> Iterator[Exchange | None]:
    """`all_gather_shards` over this rank's group while the block runs: None where groups are of one rank
    (nothing sharded); over the default process group where one group holds every rank; else over one
    `new_group` per group (torch.distributed wants every rank to create every group, in the same order),
    this rank's own destroyed on exit (a sweep or ppl scans many times in one process group)."""
    if groups.size == 1 or groups.count == 1:
        yield None if groups.size == 1 else all_gather_shards
        return
    import torch.distributed as dist

    with collective("creation of the groups (new_group)"):
        made = [dist.new_group(groups.ranks(g), timeout=group_timeout()) for g in range(groups.count)]
    mine = made[groups.index]
    try:
        yield functools.partial(all_gather_shards, group=mine)
    finally:
        dist.destroy_process_group(mine)


def all_gather_shards(local: torch.Tensor, lengths: Sequence[int], *, group=None) -> list[torch.Tensor]:
    """Every rank's `local` (B, H, T_r, D), T_r = lengths[r], in the order of the ranks of `group`
    (None: the default group), by one all_gather of the bytes (gloo and NCCL alike, any dtype), padded
    to the longest T_r and cut back."""
    import torch.distributed as dist

    longest = max(lengths)
    pad = longest - local.shape[2]
    if pad:
        local = torch.cat([local, local.new_zeros(*local.shape[:2], pad, *local.shape[3:])], dim=2)
    raw = local.contiguous().view(torch.uint8)
    pieces = [torch.empty_like(raw) for _ in lengths]
    with collective("all_gather of the attention's keys and values (--context-parallel)"):
        dist.all_gather(pieces, raw, group=group)
    return [p.view(local.dtype)[:, :, :n] for p, n in zip(pieces, lengths, strict=True)]
