"""Query-position-dependent attention scales (the paper's §2.4 negative claim, issue 15).

    --scale-schedule piecewise:s   m(i) = 1 for i < L, s beyond: original inside the training
                                   length, concentrated outside it
    --scale-schedule log:a         m(i) = 1 + a·ln(max(i, L)/L): Figure 7's fitted curve applied per
                                   query position (the form of log-length attention scaling)

i is the query's 0-based position in its sequence (`position_ids` where the model passes them, so a
left-padded or cached row counts from its own first token), L the model's training length. The
multiplier scales query row i, so score i·j becomes m(i)·λ_h q_i·k_j in the layer output AND the
entropy, on top of any uniform or per-head scale. `parse_schedule` checks the text (torch-free);
`multiplier` gives m for a tensor of positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from entropy_lens.errors import EntropyLensError

KINDS = ("piecewise", "log")


@dataclass(frozen=True)
class Schedule:
    kind: str  # "piecewise" | "log"
    value: float  # s (piecewise) or a (log)
    train_len: int  # L

    def multiplier(self, positions):
        """m(i) for a tensor of 0-based positions, float32, same shape."""
        import torch

        i = positions.to(torch.float32)
        if self.kind == "piecewise":
            return torch.where(i < self.train_len, torch.ones_like(i), torch.full_like(i, self.value))
        return 1.0 + self.value * torch.log(i.clamp_min(self.train_len) / self.train_len)


def parse_schedule(text: str | None, train_len: int | None = None) -> Schedule | None:
    """`piecewise:S` or `log:A` (None: no schedule); EntropyLensError naming the fix otherwise.
    `train_len` L is needed to apply it (checked when given as None: only the text is checked)."""
    if text is None:
        return None
    kind, _, value = text.partition(":")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if kind not in KINDS or not math.isfinite(number):
        raise EntropyLensError(
            f"--scale-schedule {text!r} is not known; use piecewise:S (multiplier S beyond the training "
            "length) or log:A (1 + A·ln(i/L) beyond it), e.g. log:0.4"
        )
    if kind == "piecewise" and number <= 0:
        raise EntropyLensError(f"--scale-schedule piecewise:S needs S > 0 (got {number})")
    if kind == "log" and number < 0:
        raise EntropyLensError(f"--scale-schedule log:A needs A >= 0 (got {number}): m(i) must stay positive")
    return Schedule(kind, number, int(train_len) if train_len is not None else 0)
