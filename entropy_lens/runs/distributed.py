"""Multi-process scans: `torchrun --nproc-per-node N -m entropy_lens scan ...`.

torchrun sets WORLD_SIZE, RANK and LOCAL_RANK. A scan then gives sample k to rank k mod N (the
same global list of windows for any N), each rank sums its samples in float64, the sums and counts
are all-reduced, and rank 0 alone writes the results file and prints. With --context-parallel C the
ranks form N/C groups of C consecutive ranks (`RankGroups`): sample k goes to group k mod N/C, whose
ranks each scan one shard of it (runs/context_parallel.py). The backend is gloo on CPU
and nccl on CUDA (rank r uses cuda:LOCAL_RANK). A scan of N processes equals the 1-process scan up
to float64 rounding of the order of the sums.

What the ranks guard against:
    agree(record, w, difference=...)   at start-up every rank's settings that change a number (a scan's
                                       identity) must equal rank 0's: one all_gather of a digest; on a
                                       difference every rank stops in one line naming the first one
    collective(name)                   an exchange that fails (a rank killed: the connection closes; a
                                       rank stalled past --dist-timeout) is one line on every rank that
                                       sees it, naming the exchange, never a gloo traceback
    --dist-timeout                     how long a rank waits at one exchange (init_process_group's and
                                       every group's timeout: `group_timeout`, runs/launch.py); it changes
                                       no number, so no identity or cache key holds it
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.runs.launch import launch_settings

__all__ = [
    "RankGroups",
    "World",
    "agree",
    "all_reduce_sum",
    "broadcast_object",
    "collective",
    "command_group",
    "gathered",
    "group_timeout",
    "process_group",
    "rank_device",
    "world",
]


def group_timeout() -> timedelta:
    """--dist-timeout as init_process_group and new_group take it."""
    return timedelta(seconds=launch_settings().dist_timeout)


@contextmanager
def collective(name: str):
    """Run one exchange between ranks (`name` says which: "all_reduce of the sums"). Its failure, a rank
    that stopped (the connection closed) or stalled past --dist-timeout, becomes one line naming the
    exchange, on every rank that sees it (gloo and NCCL raise RuntimeError: DistBackendError, DistStoreError)."""
    try:
        yield
    except RuntimeError as err:
        said = first_line(err)
        seconds = launch_settings().dist_timeout
        if "timed out" in said.lower() or "timeout" in said.lower():
            why = f"another rank did not take part within --dist-timeout {seconds:g} s"
        else:
            why = "another rank stopped"
        raise EntropyLensError(
            f"the {name} between the ranks failed: {why} ({said.split('] ')[-1][:160]}); see that rank's own "
            "message, fix it and relaunch every rank (a rank that is only slow: a longer --dist-timeout)"
        ) from None


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def samples(self, start: int, stop: int) -> list[int]:
        """This rank's sample indices in [start, stop)."""
        return [k for k in range(start, stop) if k % self.size == self.rank]


@dataclass(frozen=True)
class RankGroups:
    """The world's W ranks as W/C groups of `size` = C consecutive ranks: group g holds ranks gC … gC + C − 1
    and scans the samples k with k mod W/C = g, each of its ranks one shard of every sample (shard =
    rank mod C). C = 1: every rank alone, the ranks splitting the samples; C = W: one group."""

    world: World
    size: int = 1

    @property
    def index(self) -> int:
        """This rank's group."""
        return self.world.rank // self.size

    @property
    def count(self) -> int:
        return self.world.size // self.size

    @property
    def shard(self) -> int:
        """This rank's place in its group."""
        return self.world.rank % self.size

    @property
    def first(self) -> bool:
        """Whether this rank is its group's first (it counts the group's samples)."""
        return self.shard == 0

    def ranks(self, group: int) -> list[int]:
        return list(range(group * self.size, (group + 1) * self.size))

    def samples(self, start: int, stop: int) -> list[int]:
        """This rank's group's sample indices in [start, stop)."""
        return World(self.index, self.count).samples(start, stop)


def world() -> World:
    """The process's place in a torchrun launch (World() when not launched by torchrun)."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise EntropyLensError("WORLD_SIZE/RANK/LOCAL_RANK are not integers; launch with torchrun") from None
    if size < 1 or not 0 <= rank < size:
        raise EntropyLensError(f"RANK {rank} is outside WORLD_SIZE {size}; launch with torchrun")
    return World(rank, size, local)


@contextmanager
def process_group(w: World, device: torch.device):
    """Initialise the default process group for `w` (if torchrun started several processes and none is
    initialised yet) and destroy it on exit if it was created here."""
    import torch.distributed as dist

    created = False
    if w.size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL's own buffers and barriers then use this rank's GPU
        with collective("start-up (init_process_group)"):
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo",
                rank=w.rank,
                world_size=w.size,
                timeout=group_timeout(),
            )
        created = True
    try:
        yield
    finally:
        if created:
            dist.destroy_process_group()


def rank_device(name: str, w: World) -> torch.device:
    """The device `--device name` means for rank `w`: a CUDA rank uses cuda:LOCAL_RANK."""
    from entropy_lens.models import resolve_device

    device = resolve_device(name)
    return torch.device("cuda", w.local_rank) if w.size > 1 and device.type == "cuda" else device


@contextmanager
def command_group(device_name: str, w: World):
    """One process group for all of a command's scans under torchrun (sweep, ppl: each scan finds it
    initialised and leaves it be); nothing in one process."""
    if w.size == 1:
        yield
        return
    with process_group(w, rank_device(device_name, w)):
        yield


def broadcast_object(obj):
    """Rank 0's `obj` on every rank of the initialised process group (`obj` itself without one)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return obj
    box = [obj]
    with collective("broadcast from rank 0"):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(arrays: dict[str, np.ndarray], w: World, *, op: str = "SUM") -> dict[str, np.ndarray]:
    """Element-wise sums over all ranks (float64 / int64 kept), as new arrays; identity when size is 1.
    Every rank must pass the same keys, shapes and dtypes, in any order (they are reduced sorted).
    `op`: the torch.distributed.ReduceOp by name (a maximum's: "MAX", statistics.Reduction.all_reduce)."""
    if w.size == 1:
        return arrays
    import torch.distributed as dist

    device = _device(w)
    out = {}
    with collective("all_reduce of the sums" if op == "SUM" else "all_reduce of the maxima"):
        for key in sorted(arrays):
            t = torch.from_numpy(np.ascontiguousarray(arrays[key])).to(device)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            out[key] = t.cpu().numpy()
    return out


def _device(w: World) -> torch.device:
    """Where this rank's collectives take their tensors: its GPU under NCCL, else the CPU."""
    import torch.distributed as dist

    return torch.device("cuda", w.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")


def gathered(obj, w: World, *, what: str) -> list:
    """Every rank's `obj` (picklable, small), in rank order, on every rank (`what` names the exchange);
    [obj] in one process or without an initialised process group."""
    import torch.distributed as dist

    if w.size == 1 or not (dist.is_available() and dist.is_initialized()):
        return [obj]

    found = [None] * w.size
    with collective(f"all_gather of {what}"):
        dist.all_gather_object(found, obj)
    return found


def agree(record: dict, w: World, *, difference: Callable[..., str | None], what: str = "settings") -> None:
    """Every rank's `record` (JSON: what changes the run's numbers, e.g. a scan's identity) equals rank
    0's, checked with one all_gather of a 32-byte digest; else every rank raises, in one line naming
    the first rank that differs and `difference(rank 0's, its, names=(...))`, the first differing
    setting. Ranks launched by hand with other flags would otherwise sum other numbers into one file.
    Nothing to do in one process or without an initialised process group."""
    import torch.distributed as dist

    if w.size == 1 or not (dist.is_available() and dist.is_initialized()):
        return

    text = json.dumps(record, sort_keys=True)
    digest = torch.frombuffer(bytearray(hashlib.sha256(text.encode()).digest()), dtype=torch.uint8)
    digest = digest.to(_device(w))
    digests = [torch.empty_like(digest) for _ in range(w.size)]
    with collective(f"comparison of the ranks' {what}"):
        dist.all_gather(digests, digest)
    if all(torch.equal(d.cpu(), digests[0].cpu()) for d in digests):
        return
    records = gathered(json.loads(text), w, what=f"the ranks' {what}")
    rank = next(r for r in range(w.size) if records[r] != records[0])
    differs = difference(records[0], records[rank], names=("on rank 0", f"on rank {rank}"))
    raise EntropyLensError(
        f"rank {rank} was started with other {what} than rank 0: {differs or 'they differ'}; relaunch every "
        "rank with the same flags (torchrun starts them so)"
    )
