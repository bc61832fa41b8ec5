"""How values of a statistic combine (rows, samples, micro-batches, ranks): `Reduction`, declared once
(MEAN, MAX) and taken by every statistic's declaration (entropy_lens.statistics). Torch-free; each method
takes numpy arrays or torch tensors and returns the same kind."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Reduction:
    """How many values of a statistic (rows, samples, micro-batches, ranks) combine into one, declared once
    and called by every place that sums: the host sums, a scan's sums, the monitor's step summaries, the
    head statistics and the results summary. `name` is what metadata records ("mean", "max"); `op` the
    elementwise combine, one name in numpy and torch ("add", "maximum"); `identity` the value before any
    row (0 for a sum, −inf for a maximum); `over` its reduction over an axis, one name in numpy, torch
    and torch's `scatter_reduce` ("sum", "amax"); `summary` the function of the finished value over an
    axis, one name in numpy and torch ("mean", "amax"; a mean's finished value is the total over the
    rows' count, a maximum's the total itself); `all_reduce`: torch.distributed.ReduceOp's name ("SUM",
    "MAX"). Each method takes numpy arrays or torch tensors and returns the same kind."""

    name: str
    op: str
    over: str
    summary: str
    identity: float
    all_reduce: str

    def combine(self, a, b):
        """a and b combined elementwise (a sum, or the larger)."""
        return getattr(_library(a), self.op)(a, b)

    def reduce(self, values, axis, keep=None):
        """`values` reduced over `axis` (an int or a tuple), the entries where `keep` is False left out
        (as the identity)."""
        lib = _library(values)
        if keep is not None:
            values = lib.where(keep, values, self.identity)
        return getattr(lib, self.over)(values, axis)

    def summarize(self, values, axis):
        """Finished values summarised over `axis` (an int or a tuple): their mean, or their maximum (a
        span of positions, a layer's heads)."""
        return getattr(_library(values), self.summary)(values, axis)

    def finish(self, total, count):
        """The value of `total` over `count` rows (broadcast): the mean or the maximum, NaN where no row."""
        lib = _library(total)
        seen = count > 0
        if self.summary != "mean":  # a maximum: the total itself
            return lib.where(seen, total, math.nan)
        return lib.where(seen, total / lib.where(seen, count, 1), math.nan)


MEAN = Reduction("mean", "add", "sum", "mean", 0.0, all_reduce="SUM")
MAX = Reduction("max", "maximum", "amax", "amax", -math.inf, all_reduce="MAX")
REDUCTIONS = {r.name: r for r in (MEAN, MAX)}


def _library(x):
    """torch for a tensor, numpy for anything else (torch imported only where a caller has it)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else np
