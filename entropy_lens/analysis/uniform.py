"""The one uniform scale s* for sequences of a given length: the initial value of a head-scale search
(§3.2) and Figure 4's uniform model.

The rule: s* is the scale of a sweep whose loss, averaged over the last half-span of the target
length, is lowest: positions [len − L/2, len), e.g. [3.5L, 4L) for 4L sequences. The far end is what
a scale for that length must fix; the loss averaged over all of [0, len) is dominated by the
positions within L, where the trained scale 1 is best, so its argmin stays near 1 and the uniform
model is the NoPE model barely changed. The paper states values (about 1.2 at 2L, 1.5 at 4L, 1.8 at
8L; 1.6 initialises the 8K search) that are the best scales at those lengths' far ends (Figure 7).

Ties go to the smallest scale (the first minimum, scales ascending). A choice at the grid's
smallest or largest scale is flagged (`at_edge`): the grid did not bracket the minimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from entropy_lens.analysis.sweep import Sweep
from entropy_lens.errors import EntropyLensError

__all__ = ["UniformChoice", "best_uniform_scale"]


@dataclass(frozen=True)
class UniformChoice:
    """The best uniform scale for a length (`best_uniform_scale`).

    Args:
        scale: s*, the multiplier of 1/√d.
        span: [start, stop): the positions whose mean loss was compared.
        loss: s*'s mean loss over the span, nats.
        at_edge: s* is the grid's smallest or largest scale.
        table: scale, mean_loss (nats over the span): one row per scale of the sweep.
    """

    scale: float  # s*, the multiplier of 1/√d
    span: tuple[int, int]  # [start, stop): the positions whose mean loss was compared
    loss: float  # s*'s mean loss over the span, nats
    at_edge: bool  # s* is the grid's smallest or largest scale
    table: pd.DataFrame  # scale, mean_loss (nats over the span): one row per scale of the sweep


def best_uniform_scale(
    sweep: Sweep, *, length: int | None = None, train_len: int | None = None, span=None
) -> UniformChoice:
    """The scale with the lowest loss over the last half-span [length − L/2, length) of `length`-token
    sequences (see the module docstring).

    Args:
        sweep: loss by scale and position, (S, T) with scales ascending; its windows may be longer than
            `length` (a causal model's loss at position t does not depend on what follows t).
        length: the target sequence length; default the sweep's.
        train_len: L; default the sweep's recorded training length.
        span: (start, stop) to compare instead of the last half-span (e.g. (0, length): the whole length).

    Returns:
        UniformChoice: s*, the span, its mean loss, whether it lies on the grid's edge, and the table of
        every scale's mean loss.

    Raises:
        EntropyLensError: a length outside the sweep, no training length for the default span, or a span
            outside the positions.
    """
    length = sweep.length if length is None else int(length)
    if not 1 <= length <= sweep.length:
        raise EntropyLensError(
            f"length {length} is outside the sweep's 1..{sweep.length} positions; sweep at --len {length} "
            "or more"
        )
    if span is None:
        L = sweep.train_len if train_len is None else train_len
        if not L:
            raise EntropyLensError(
                "the sweep records no training length, and the last half-span [len − L/2, len) needs L; "
                "pass train_len=L (or rerun the sweep with --train-len L)"
            )
        span = (length - max(1, int(L) // 2), length)
    start, stop = int(span[0]), int(span[1])
    if not 0 <= start < stop <= length:
        raise EntropyLensError(
            f"span [{start}, {stop}) is not inside [0, {length}); pass a longer length or a smaller L"
        )
    mean = sweep.loss[:, start:stop].mean(axis=1)
    best = int(np.argmin(mean))  # the first (smallest) scale on ties
    return UniformChoice(
        scale=float(sweep.scales[best]),
        span=(start, stop),
        loss=float(mean[best]),
        at_edge=best in (0, len(sweep.scales) - 1),
        table=pd.DataFrame({"scale": sweep.scales, "mean_loss": mean}),
    )
