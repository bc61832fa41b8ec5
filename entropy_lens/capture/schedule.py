"""Query-position-dependent attention scales: the paper's §2.4 forms and the published schedules.

    --scale-schedule piecewise:S   m(i) = 1 for i < L, S beyond: original inside the training
                                   length, concentrated outside it
    --scale-schedule log:A         m(i) = 1 + A·ln(max(i, L)/L): Figure 7's fitted curve applied per
                                   query position (the form of log-length attention scaling)
    --scale-schedule llama4:A,F    m(i) = 1 + A·ln(1 + ⌊(i + 1)/F⌋): Llama 4's attention temperature
                                   tuning of its NoPE layers (transformers' Llama4TextAttention:
                                   attn_scale A = 0.1, floor_scale F = 8192; `llama4` alone)
    --scale-schedule qwen-logn     m(i) = max(1, ln(i + 1)/ln L): Qwen's logn attention (its
                                   modeling_qwen.py: log base L of the position, 1 inside L)
    --scale-schedule yarn:C        m(i) = (1 + C·ln max(1, (i + 1)/L))²: YaRN's attention factor
                                   0.1·ln s + 1 on q and on k (so squared on the logits), with the
                                   extension s taken per position (C = 0.1 published; `yarn` alone)

i is the query's 0-based position in its sequence (`position_ids` where the model passes them, so a
left-padded or cached row counts from its own first token), L the model's training length (llama4's
schedule does not use it). The multiplier scales query row i, so score i·j becomes m(i)·λ_h q_i·k_j in
the layer output AND the entropy, on top of any uniform or per-head scale. `parse_schedule` checks
the text (torch-free); `multiplier` gives m for a tensor of positions (computed in float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from entropy_lens.errors import EntropyLensError

KINDS = ("piecewise", "log", "llama4", "qwen-logn", "yarn")
PUBLISHED = {"llama4": (0.1, 8192.0), "yarn": (0.1,), "qwen-logn": ()}  # constants when none are given
_ARITY = {"piecewise": 1, "log": 1, "llama4": 2, "qwen-logn": 0, "yarn": 1}
_FORMS = "piecewise:S, log:A, llama4[:A,F], qwen-logn or yarn[:C]"


@dataclass(frozen=True)
class Schedule:
    kind: str  # one of KINDS
    value: float  # S (piecewise), A (log, llama4), C (yarn); 0 for qwen-logn
    train_len: int  # L
    floor: float = 0.0  # F (llama4)

    @property
    def needs_train_len(self) -> bool:
        return self.kind != "llama4"

    def multiplier(self, positions):
        """m(i) for a tensor of 0-based positions, float32, same shape."""
        import torch

        i, L, v = positions.to(torch.float64), float(self.train_len), self.value
        if self.kind == "piecewise":
            m = torch.where(i < L, torch.ones_like(i), torch.full_like(i, v))
        elif self.kind == "log":
            m = 1.0 + v * torch.log(i.clamp_min(L) / L)
        elif self.kind == "llama4":
            m = 1.0 + v * torch.log1p(torch.floor((i + 1.0) / self.floor))
        elif self.kind == "qwen-logn":
            m = (torch.log(i + 1.0) / math.log(L)).clamp_min(1.0)
        else:  # yarn
            m = (1.0 + v * torch.log(((i + 1.0) / L).clamp_min(1.0))) ** 2
        return m.to(torch.float32)


def parse_schedule(text: str | None, train_len: int | None = None) -> Schedule | None:
    """One of the module docstring's forms (None: no schedule); EntropyLensError naming the fix otherwise.
    `train_len` L is needed to apply it (checked when given as None: only the text is checked)."""
    if text is None:
        return None
    kind, colon, value = text.partition(":")
    if kind not in KINDS:
        raise EntropyLensError(f"--scale-schedule {text!r} is not known; use {_FORMS}, e.g. log:0.4")
    try:
        numbers = tuple(float(x) for x in value.split(",")) if colon else PUBLISHED[kind]
    except (ValueError, KeyError):
        numbers = ()
    if len(numbers) != _ARITY[kind] or not all(math.isfinite(x) for x in numbers):
        raise EntropyLensError(
            f"--scale-schedule {text!r}: {kind} takes {_ARITY[kind] or 'no'} number(s); use {_FORMS}"
        )
    if kind == "piecewise" and numbers[0] <= 0:
        raise EntropyLensError(f"--scale-schedule piecewise:S needs S > 0 (got {numbers[0]})")
    if kind in ("log", "llama4", "yarn") and numbers[0] < 0:
        raise EntropyLensError(
            f"--scale-schedule {kind} needs its A or C >= 0 (got {numbers[0]}): m(i) must stay positive"
        )
    if kind == "llama4" and numbers[1] < 1:
        raise EntropyLensError(f"--scale-schedule llama4:A,F needs F >= 1 (got {numbers[1]})")
    if kind == "qwen-logn" and train_len is not None and train_len < 2:
        raise EntropyLensError(f"--scale-schedule qwen-logn needs a training length L >= 2 (got {train_len})")
    value = numbers[0] if numbers else 0.0
    floor = numbers[1] if kind == "llama4" else 0.0
    return Schedule(kind, value, int(train_len) if train_len is not None else 0, floor)
