"""HeadSearchConfig: the settings of the per-head scale search (runs/head_search.py), in a module of its own
so that `entropy-lens search-heads --help` can show their defaults without importing torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from entropy_lens.data import check_length
from entropy_lens.errors import EntropyLensError

__all__ = ["HeadSearchConfig"]


@dataclass(frozen=True)
class HeadSearchConfig:
    model: str
    length: int  # L', tokens per window
    init: float = 1.0  # initial multiplier for every head (the best uniform scale for L')
    steps: int = 200
    lr: float = 0.1
    batch: int = 8
    micro_batch: int = 1
    lower_bound: float = 1.0
    data: str = "austen"
    seed: int = 0
    dtype: str = "auto"  # float32 on CPU, bfloat16 on CUDA (the multipliers stay float32)
    device: str = "auto"
    checkpointing: bool = False
    chunk: int = 1024

    def check(self) -> None:
        check_length(self.length)
        for name in ("steps", "batch", "micro_batch", "chunk"):
            if getattr(self, name) < 1:
                raise EntropyLensError(
                    f"--{name.replace('_', '-')} must be at least 1 (got {getattr(self, name)})"
                )
        if self.batch % self.micro_batch:
            raise EntropyLensError(
                f"--batch {self.batch} must be a multiple of --micro-batch {self.micro_batch}"
            )
        if not (math.isfinite(self.init) and self.init > 0 and self.init >= self.lower_bound):
            raise EntropyLensError(
                f"--init {self.init} must be positive and at least --lower-bound {self.lower_bound}"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise EntropyLensError(f"--lr must be positive (got {self.lr})")
        if not (math.isfinite(self.lower_bound) and self.lower_bound >= 0):
            raise EntropyLensError(
                f"--lower-bound must be >= 0 (got {self.lower_bound}); 1 is the focus constraint"
            )
