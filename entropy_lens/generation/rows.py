"""What a generated token's row is asked besides the kernels' statistics: its mass on named key spans,
its probability at given offsets behind it, its most probable keys (entropy_lens.statistics'
ROW_SLICE_STATISTICS), read off the row's exact float64 probabilities over its keys (the capture's
`Session.on_rows`: O(heads · keys) per layer and step, never T × T). ::

    slices = RowSlices.parse(("span_mass", "top_key"), spans={"doc": (3, 40)}, offsets=(), top_keys=2)
    slices.read(p, key_pos, query_pos, prompt_len)   # {"span_mass": (B, H, 3), "top_key": (B, H, 2),
                                                     #  "top_key_prob": (B, H, 2)}

Positions are real: each sequence's first real (unpadded) prompt token is 0, its prompt ends at its
prompt_len, and its generated tokens follow. The spans: "prompt" = [0, prompt_len), "generated" =
[prompt_len, ∞), then the caller's {name: (start, stop)} in the order given (a span may reach into the
generated tokens). The sink is no key: a row's span masses sum to 1 − sink_mass over spans that cover
every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.generation import PROBS, TOP_KEY_PROB
from entropy_lens.statistics import BUILT_IN_SPANS, OFFSET_PROB, ROW_SLICE_STATISTICS, SPAN_MASS, TOP_KEY
from entropy_lens.statistics.slices import Slices, check_spans

__all__ = ["RowSlices"]


@dataclass(frozen=True)
class RowSlices:
    """The row-slice statistics asked for (`stats`, in ROW_SLICE_STATISTICS) and their parameters:
    `spans` {name: (start, stop)} (the caller's; "prompt" and "generated" come first), `offsets` (d >= 0,
    distinct) and `top_keys` (k >= 1); and `keep`, the span whose keys' probabilities each generated
    token's row keeps whole (`keep_probs=("generated", keep)`; None: none)."""

    stats: tuple[str, ...] = ()
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    offsets: tuple[int, ...] = ()
    top_keys: int = 1
    keep: str | None = None

    @classmethod
    def parse(
        cls, stats, *, spans=None, offsets=(), top_keys=1, keep_probs=None
    ) -> tuple[RowSlices, tuple | str | None]:
        """(the RowSlices of `stats`, the rest of `stats` for the kernels: None where that is nothing, so
        the kernels record their default). EntropyLensError in one line for a
        parameter out of range, or given without its statistic."""
        names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else stats
        names = () if names is None else tuple(names)
        sliced = tuple(name for name in names if name in ROW_SLICE_STATISTICS)
        rest = tuple(name for name in names if name not in ROW_SLICE_STATISTICS)
        keep = _checked_keep(keep_probs, spans)
        massed = keep is None or SPAN_MASS.name in sliced  # else spans= names keep_probs' keys alone
        asked = Slices.parse(
            sliced,
            spans=spans if massed else None,
            offsets=offsets,
            top_keys=top_keys,
            reserved=BUILT_IN_SPANS,
        )
        slices = cls(sliced, check_spans(spans, reserved=BUILT_IN_SPANS), asked.offsets, asked.top_keys, keep)
        return slices, (rest or None)

    @property
    def span_names(self) -> tuple[str, ...]:
        return (*BUILT_IN_SPANS, *self.spans) if SPAN_MASS.name in self.stats else ()

    def recorded(self) -> dict:
        """The parameters of the statistics asked for, as a result's meta keeps them (JSON)."""
        meta = {}
        if SPAN_MASS.name in self.stats:
            meta["spans"] = {name: list(span) for name, span in self.spans.items()}
            meta["span_names"] = list(self.span_names)
        if OFFSET_PROB.name in self.stats:
            meta["offsets"] = list(self.offsets)
        if TOP_KEY.name in self.stats:
            meta["top_keys"] = self.top_keys
        if self.keep is not None:
            meta["keep_probs"] = [BUILT_IN_SPANS[1], self.keep]
            meta["spans"] = {name: list(span) for name, span in self.spans.items()}
        return meta

    def bounds(self, name: str, prompt_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, stop) (B,) int64 real positions of span `name` in each sequence ("generated": open)."""
        if name == BUILT_IN_SPANS[0]:
            return torch.zeros_like(prompt_len), prompt_len
        if name == BUILT_IN_SPANS[1]:
            return prompt_len, torch.full_like(prompt_len, torch.iinfo(torch.int64).max)
        a, b = self.spans[name]
        return torch.full_like(prompt_len, a), torch.full_like(prompt_len, b)

    def read(
        self, p: torch.Tensor, key_pos: torch.Tensor, query_pos: torch.Tensor, prompt_len: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Each statistic of one layer's rows.

        Args:
            p: (B, H, S) float64, each row's probabilities over its S keys (0 on a key it does not see).
            key_pos: (B, S) int64, each key's real position (negative: padding).
            query_pos: (B,) int64, each row's real position.
            prompt_len: (B,) int64, each sequence's real prompt tokens.

        Returns:
            {span_mass: (B, H, spans), offset_prob: (B, H, offsets) float64; top_key: (B, H, min(k, S))
            int64, −1 past the keys a row sees; top_key_prob: (B, H, min(k, S)) float64, 0 there}, those
            asked for.
        """
        out = {}
        if SPAN_MASS.name in self.stats:
            bounds = [self.bounds(name, prompt_len) for name in self.span_names]
            inside = torch.stack(
                [(key_pos >= a[:, None]) & (key_pos < b[:, None]) for a, b in bounds], -1
            )  # (B, S, spans)
            out[SPAN_MASS.name] = torch.einsum("bhs,bsn->bhn", p, inside.to(p.dtype))
        if OFFSET_PROB.name in self.stats:
            target = query_pos[:, None] - torch.tensor(self.offsets, device=p.device)  # (B, offsets)
            hit = (key_pos[:, None, :] == target[:, :, None]) & (target[:, :, None] >= 0)  # (B, offsets, S)
            out[OFFSET_PROB.name] = torch.einsum("bhs,bds->bhd", p, hit.to(p.dtype))
        if TOP_KEY.name in self.stats:
            k = self.top_keys
            prob, index = torch.sort(p, dim=-1, descending=True, stable=True)  # ties: the earliest key first
            prob, index = prob[..., :k], index[..., :k]
            position = torch.gather(key_pos[:, None, :].expand_as(p), -1, index)
            seen = prob > 0  # fewer keys than k: min(k, S) ranks (the result pads every step to its widest)
            out[TOP_KEY.name] = torch.where(seen, position, -1)
            out[TOP_KEY_PROB] = torch.where(seen, prob, 0.0)
        if self.keep is not None:  # the kept span's keys up to the row's own: K = the longest such run
            start, stop = self.bounds(self.keep, prompt_len)
            stop = torch.minimum(stop, query_pos + 1)
            K = int((stop - start).clamp_min(0).max())
            positions = start[:, None] + torch.arange(K, device=p.device)  # (B, K)
            index = positions - key_pos[:, :1]  # the keys are consecutive positions
            inside = (positions < stop[:, None]) & (index >= 0) & (index < p.shape[-1])
            kept = p.gather(-1, index.clamp(0, p.shape[-1] - 1)[:, None, :].expand(-1, p.shape[1], -1))
            out[PROBS] = torch.where(inside[:, None, :], kept, 0.0)
        return out


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
