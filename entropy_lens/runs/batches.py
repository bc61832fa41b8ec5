"""How a scan's batches run: one small protocol, two runners.

    batches = ShardedBatches(run) if config.context_parallel else LocalBatches(run)
    todo = batches.work(sums.samples)       # this rank's samples not yet in the sums
    with batches.opened():                  # what the batches share (a sharded run: the group's exchange)
        batches.forward(ids, sums)          # one batch: the model inside its capture, into the sums
    batches.reduce(sums)                    # torchrun: every rank's sums

`LocalBatches`: each rank scans whole sequences (torchrun: the ranks split the samples).
`ShardedBatches` (--context-parallel, runs/context_parallel.py): each sequence is split over its group's
ranks; every rank of a group runs each of the group's samples on its own positions (with their true
position ids), its sums hold only those positions, and the batch's samples are counted by the group's
first rank. Either way the sums are then all-reduced over the whole world, each position of each sample
counted once.

`run` is a scan's `Run` (runs/scan.py): its config, model, chunks, rank groups and `capture(context)`.
"""

from __future__ import annotations

import contextlib

import torch

from entropy_lens.capture import forward_hidden, next_token_nll
from entropy_lens.capture.shardable import takes_positions
from entropy_lens.capture.shards import ShardedSequence
from entropy_lens.runs.context_parallel import group_exchange
from entropy_lens.runs.memory import free_heap_returned_per_layer, release_free_heap
from entropy_lens.runs.sums import ScanSums

__all__ = ["LocalBatches", "ShardedBatches", "scan_batch"]


def scan_batch(
    model, ids: torch.Tensor, capture=None, *, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """One batch as a scan runs it: the decoder on ids (B, T)[:, :-1] inside `capture` (a ScaleSession or
    EntropyRecorder; None: no capture), on CPU the free heap returned after each layer's attention and
    again before the loss (runs/memory.py), then the per-position loss (B, T − 1). `positions` (T_local,)
    int64: a context-parallel shard's columns of ids[:, :-1], run with their true position ids; the loss
    is theirs, (B, T_local)."""
    inputs, targets, kwargs = ids[:, :-1], ids[:, 1:], {}
    if positions is not None:
        inputs, targets = inputs[:, positions], targets[:, positions]
        kwargs = {"position_ids": positions[None]} if takes_positions(model) else {}
    with contextlib.nullcontext() if capture is None else capture, free_heap_returned_per_layer(model):
        hidden = forward_hidden(model, inputs, **kwargs)
    if hidden.device.type == "cpu":
        release_free_heap()  # what the forward freed, before the loss's logits
    return next_token_nll(model, hidden, targets)


class LocalBatches:
    """Whole sequences on this rank."""

    def __init__(self, run):
        self.run = run

    def work(self, done: int) -> list[int]:
        """This rank's samples after the first `done` (the groups split the samples; without
        --context-parallel each rank is a group)."""
        return self.run.groups.samples(done, self.run.config.samples)

    def opened(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def forward(self, ids: torch.Tensor, sums: ScanSums) -> None:
        capture = self.run.capture()
        sums.add(capture, scan_batch(self.run.lm.model, ids, capture))

    def reduce(self, sums: ScanSums) -> None:
        sums.all_reduce(self.run.world)  # the whole world's: each group's ranks hold disjoint positions


class ShardedBatches(LocalBatches):
    """This rank's shard of each of its group's sequences (--context-parallel)."""

    exchange = None

    @contextlib.contextmanager
    def opened(self):
        with group_exchange(self.run.groups) as exchange:  # all_gather_shards over this rank's group
            self.exchange = exchange
            try:
                yield
            finally:
                self.exchange = None

    def forward(self, ids: torch.Tensor, sums: ScanSums) -> None:
        shards = self.run.shards
        capture = self.run.capture(ShardedSequence(shards, self.exchange))
        positions = shards.positions(ids.device)
        nll = scan_batch(self.run.lm.model, ids, capture, positions=positions)
        sums.add(capture, nll, positions=positions.cpu().numpy(), samples=self.run.groups.first)
