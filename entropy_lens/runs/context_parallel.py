"""`--context-parallel`: a scan whose every sequence is sharded over torchrun's processes.

    torchrun --nproc-per-node P -m entropy_lens scan CKPT --len T --context-parallel

All P ranks scan every sample together: rank r runs the model on its two chunks of the sequence
(capture/context.py: the layout, and the attention layers that all-gather K and V), computes the
loss of its own positions (the next-token label of a chunk's last position is the token after it,
which every rank holds: each reads the whole sample), and its sums hold only the positions it owns;
the sums are then all-reduced as for a data-parallel scan, so each position is counted once and the
sample count once (by rank 0). The results equal the one-process scan's to float rounding
(tests/test_context_parallel.py).

    exchange = all_gather_shards                 # torch.distributed's all_gather, any dtype, uneven T
    check_context_parallel(config, world)        # the one-line refusals, before the model loads
    capture = EntropyRecorder(model, ..., context=ShardedSequence(shards_of(world, T), exchange))
    nll, positions = sharded_batch(model, ids, capture)   # this rank's loss and its positions
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from entropy_lens.capture import forward_hidden, next_token_nll
from entropy_lens.capture.recorder import check_shardable, takes_positions
from entropy_lens.capture.shards import SequenceShards
from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.distributed import World
from entropy_lens.runs.memory import free_heap_returned_per_layer, release_free_heap

__all__ = [
    "all_gather_shards",
    "check_context_parallel",
    "check_shardable",
    "sharded_batch",
    "shards_of",
]


def check_context_parallel(config, w: World) -> None:
    """The refusals that need no model: --context-parallel outside torchrun, a length shorter than two
    chunks per process."""
    if not getattr(config, "context_parallel", False):
        return
    if w.size < 2:
        raise EntropyLensError(
            "--context-parallel shards each sequence over torchrun's processes; launch with "
            "torchrun --nproc-per-node P -m entropy_lens ... (P >= 2), or drop --context-parallel"
        )
    for length in getattr(config, "lengths", None) or (config.length,):
        SequenceShards(w.rank, w.size, length)  # refuses a length shorter than 2P


def shards_of(w: World, length: int) -> SequenceShards:
    """This rank's shard of a `length`-position sequence: all ranks shard every sequence."""
    return SequenceShards(w.rank, w.size, length)


def all_gather_shards(local: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """Every rank's `local` (B, H, T_r, D), T_r = lengths[r], in rank order, by one all_gather of the
    bytes (gloo and NCCL alike, any dtype), padded to the longest T_r and cut back."""
    import torch.distributed as dist

    longest = max(lengths)
    pad = longest - local.shape[2]
    if pad:
        local = torch.cat([local, local.new_zeros(*local.shape[:2], pad, *local.shape[3:])], dim=2)
    raw = local.contiguous().view(torch.uint8)
    pieces = [torch.empty_like(raw) for _ in lengths]
    dist.all_gather(pieces, raw)
    return [p.view(local.dtype)[:, :, :n] for p, n in zip(pieces, lengths, strict=True)]


def sharded_batch(model, ids: torch.Tensor, capture) -> tuple[torch.Tensor, np.ndarray]:
    """One batch of a context-parallel scan: the decoder on this rank's positions of ids (B, T)[:, :-1]
    (with their true position ids) inside `capture` (a ScaleSession or EntropyRecorder whose session
    holds this rank's `ShardedSequence`) -> (the loss (B, T_local) of those positions, the positions
    (T_local,) int64). Every rank calls it for the same batch: each attention layer all-gathers K and V."""
    positions = capture.session.context.shards.positions(ids.device)
    local, targets = ids[:, :-1][:, positions], ids[:, 1:][:, positions]
    kwargs = {"position_ids": positions[None]} if takes_positions(model) else {}
    with capture, free_heap_returned_per_layer(model):
        hidden = forward_hidden(model, local, **kwargs)
    if hidden.device.type == "cpu":
        release_free_heap()
    return next_token_nll(model, hidden, targets), positions.cpu().numpy()
