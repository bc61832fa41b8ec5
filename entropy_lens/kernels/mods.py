"""`ScoreMods`: everything that modifies or masks a score, one frozen record, validated once.

    mods = ScoreMods.build(q, k, causal=True, mask=None, window=None, softcap=None, sinks=None,
                           alibi_slopes=None, key_bias=None)

`build` is the only function below the public entry points (`attention_entropy`,
`attention_with_entropy`, `shard_state`) that names the modifiers one by one: it checks them against
q (B, Hq, T, D) and k (B, Hkv, S, D) (contract.py, errors that name the argument to fix) and puts them
in the form every kernel takes. A kernel, the plan and the capture then pass the record whole; a
misspelt keyword is a TypeError from `build`, on every backend alike. The semantics of each field are
the kernels' contract (`entropy_lens.kernels`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from entropy_lens.kernels.contract import (
    validate_alibi,
    validate_extras,
    validate_key_bias,
    validate_mask,
    validate_window,
)


@dataclass(frozen=True)
class ScoreMods:
    causal: bool = True  # query i sees keys j <= i + S − T (bottom-right)
    mask: torch.Tensor | None = None  # bool (B|1, Hq|1, T|1, S), True = attend, on q's device
    window: int | None = None  # a sliding window W >= 1 (causal only)
    softcap: float | None = None  # c > 0: every score s becomes c·tanh(s/c) (Gemma2)
    sinks: torch.Tensor | None = None  # (Hq,) float32: one sink logit per query head (gpt-oss)
    alibi_slopes: torch.Tensor | None = None  # (Hq,) float32: −slope_h·|i + S − T − j| (BLOOM, MPT)
    key_bias: torch.Tensor | None = None  # (B|1, Hq, S) float32: a bias per key (Falcon's rounded ALiBi)

    @classmethod
    def build(
        cls,
        q,
        k,
        *,
        causal=True,
        mask=None,
        window=None,
        softcap=None,
        sinks=None,
        alibi_slopes=None,
        key_bias=None,
    ) -> ScoreMods:
        """The validated record for queries q and keys k (see the module docstring)."""
        causal = bool(causal)
        softcap, sinks = validate_extras(q, softcap, sinks)
        return cls(
            causal=causal,
            mask=validate_mask(q, k, mask),
            window=validate_window(window, causal),
            softcap=softcap,
            sinks=sinks,
            alibi_slopes=validate_alibi(q, alibi_slopes),
            key_bias=validate_key_bias(q, k, key_bias),
        )

    def replace(self, **changes) -> ScoreMods:
        """A copy with `changes` (already in the kernels' form: the plan's reduced mask and window)."""
        return dataclasses.replace(self, **changes)

    @property
    def sdpa_computes(self) -> bool:
        """Whether torch sdpa computes the output of these scores: no softcap, sinks or bias (a mask,
        causality and a window it takes)."""
        return self.softcap is None and self.sinks is None and not self.biased

    @property
    def biased(self) -> bool:
        """Whether a bias is added to the scores (ALiBi slopes or a key bias)."""
        return self.alibi_slopes is not None or self.key_bias is not None
