"""What a generated token's row keeps whole besides its statistics: its probabilities over a span's keys
(`GenerationRecorder(keep_probs=("generated", keys))`: lm-polygraph's attention_all is the generated ×
generated block), read off the row's exact float64 probabilities over its keys (the capture's
last rows, handed to its consumer: capture/reports.py; O(heads · keys) per layer and step, never T × T),
only where asked for. The row-slice statistics (statistics.ROW_SLICE_STATISTICS) come from the capture's
slice pass instead (capture/slices.py). ::

    kept = KeptProbs.parse(("generated", "doc"), spans={"doc": (3, 40)})
    kept.read(p, key_pos, query_pos, prompt_len)   # (B, H, K) float64

Positions are real: each sequence's first real (unpadded) prompt token is 0, its prompt ends at its
prompt_len, and its generated tokens follow. The spans: "prompt" = [0, prompt_len), "generated" =
[prompt_len, ∞), and the caller's {name: (start, stop)}.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import BUILT_IN_SPANS
from entropy_lens.statistics.slices import check_spans

__all__ = ["KeptProbs"]


@dataclass(frozen=True)
class KeptProbs:
    """The span whose keys' probabilities each generated token's row keeps whole (`keep`: "prompt",
    "generated" or one of the caller's `spans` {name: (start, stop)})."""

    keep: str
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, keep_probs, spans=None) -> KeptProbs | None:
        """keep_probs=("generated", keys) with the caller's spans; None where keep_probs is None;
        EntropyLensError in one line otherwise."""
        keep = _checked_keep(keep_probs, spans)
        return None if keep is None else cls(keep, dict(check_spans(spans, reserved=BUILT_IN_SPANS)))

    def recorded(self) -> dict:
        """What a result's meta keeps of it (JSON)."""
        return {
            "keep_probs": [BUILT_IN_SPANS[1], self.keep],
            "spans": {name: list(span) for name, span in self.spans.items()},
        }

    def bounds(self, prompt_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, stop) (B,) int64 real positions of the kept span in each sequence ("generated": open)."""
        if self.keep == BUILT_IN_SPANS[0]:
            return torch.zeros_like(prompt_len), prompt_len
        if self.keep == BUILT_IN_SPANS[1]:
            return prompt_len, torch.full_like(prompt_len, torch.iinfo(torch.int64).max)
        a, b = self.spans[self.keep]
        return torch.full_like(prompt_len, a), torch.full_like(prompt_len, b)

    def read(
        self, p: torch.Tensor, key_pos: torch.Tensor, query_pos: torch.Tensor, prompt_len: torch.Tensor
    ) -> torch.Tensor:
        """The kept span's keys up to the row's own, (B, H, K) float64, K the longest such run (0 past it).

        Args:
            p: (B, H, S) float64, each row's probabilities over its S keys (0 on a key it does not see).
            key_pos: (B, S) int64, each key's real position (negative: padding).
            query_pos: (B,) int64, each row's real position.
            prompt_len: (B,) int64, each sequence's real prompt tokens.
        """
        start, stop = self.bounds(prompt_len)
        stop = torch.minimum(stop, query_pos + 1)
        K = int((stop - start).clamp_min(0).max())
        positions = start[:, None] + torch.arange(K, device=p.device)  # (B, K)
        index = positions - key_pos[:, :1]  # the keys are consecutive positions
        inside = (positions < stop[:, None]) & (index >= 0) & (index < p.shape[-1])
        kept = p.gather(-1, index.clamp(0, p.shape[-1] - 1)[:, None, :].expand(-1, p.shape[1], -1))
        return torch.where(inside[:, None, :], kept, 0.0)


def _checked_keep(keep_probs, spans) -> str | None:
    """keep_probs=("generated", keys) -> keys (a built-in span or one of `spans`); one line otherwise."""
    if keep_probs is None:
        return None
    rows = BUILT_IN_SPANS[1]
    known = (*BUILT_IN_SPANS, *(spans or {}))
    if not isinstance(keep_probs, (tuple, list)) or len(keep_probs) != 2 or keep_probs[0] != rows:
        raise EntropyLensError(
            f"keep_probs must be ({rows!r}, keys): the generated tokens' rows over the keys of a span; got "
            f"{keep_probs!r} (a prompt's rows: entropy_lens.attention_probs)"
        )
    if keep_probs[1] not in known:
        raise EntropyLensError(
            f"keep_probs' keys {keep_probs[1]!r} name no span; choose {', '.join(map(repr, known))} (yours: spans=)"
        )
    return keep_probs[1]
