"""Multi-process scans: `torchrun --nproc-per-node N -m entropy_lens scan ...`.

torchrun sets WORLD_SIZE, RANK and LOCAL_RANK. A scan then gives sample k to rank k mod N (the
same global list of windows for any N), each rank sums its samples in float64, the sums and counts
are all-reduced, and rank 0 alone writes the results file and prints. With --context-parallel C the
ranks form N/C groups of C consecutive ranks (`RankGroups`): sample k goes to group k mod N/C, whose
ranks each scan one shard of it (runs/context_parallel.py). The backend is gloo on CPU
and nccl on CUDA (rank r uses cuda:LOCAL_RANK). A scan of N processes equals the 1-process scan up
to float64 rounding of the order of the sums.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from entropy_lens.errors import EntropyLensError

__all__ = [
    "RankGroups",
    "World",
    "all_reduce_sum",
    "broadcast_object",
    "command_group",
    "process_group",
    "rank_device",
    "world",
]


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
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=w.rank, world_size=w.size)
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
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(arrays: dict[str, np.ndarray], w: World) -> dict[str, np.ndarray]:
    """Element-wise sums over all ranks (float64 / int64 kept), as new arrays; identity when size is 1."""
    if w.size == 1:
        return arrays
    import torch.distributed as dist

    device = torch.device("cuda", w.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    out = {}
    for key, value in arrays.items():
        t = torch.from_numpy(np.ascontiguousarray(value)).to(device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        out[key] = t.cpu().numpy()
    return out
