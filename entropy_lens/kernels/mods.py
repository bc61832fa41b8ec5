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
    validate_first_key,
    validate_key_bias,
    validate_mask,
    validate_window,
)


@dataclass(frozen=True)
class ScoreMods:
    """The score modifiers of one attention call, in the kernels' form: build it with `build`, which
    validates them; the constructor takes them as they are.

    Args:
        causal: query i sees keys j <= i + S − T (bottom-right).
        mask: None, or bool (B|1, Hq|1, T|1, S), True = attend, on q's device.
        window: None, or a sliding window W >= 1 (causal only).
        softcap: None, or c > 0: every score s becomes c·tanh(s/c) (Gemma2).
        sinks: None, or (Hq,) float32: one sink logit per query head (gpt-oss).
        alibi_slopes: None, or (Hq,) float32: the bias −slope_h·`|i + S − T − j|` (BLOOM, MPT).
        key_bias: None, or (B|1, Hq, S) float32: a bias per key (Falcon's rounded ALiBi).
        first_key: None (key 0 for every row), or (B|1,) int64: the global index of each batch row's
            first real key, where first_mass's K keys begin.
    """

    causal: bool = True  # query i sees keys j <= i + S − T (bottom-right)
    mask: torch.Tensor | None = None  # bool (B|1, Hq|1, T|1, S), True = attend, on q's device
    window: int | None = None  # a sliding window W >= 1 (causal only)
    softcap: float | None = None  # c > 0: every score s becomes c·tanh(s/c) (Gemma2)
    sinks: torch.Tensor | None = None  # (Hq,) float32: one sink logit per query head (gpt-oss)
    alibi_slopes: torch.Tensor | None = None  # (Hq,) float32: −slope_h·|i + S − T − j| (BLOOM, MPT)
    key_bias: torch.Tensor | None = None  # (B|1, Hq, S) float32: a bias per key (Falcon's rounded ALiBi)
    # (B|1,) int64: the global index of each batch row's first real key (contract.first_real_key: the
    # first key the mask lets through), where first_mass's K keys begin; None: key 0 for every row
    first_key: torch.Tensor | None = None

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
        first_key=None,
    ) -> ScoreMods:
        """The validated record for queries q and keys k (see the module docstring); `first_key` None:
        each batch row's first real key read off the mask (a key shard, whose mask is a slice, passes
        the whole sequence's).

        Args:
            q: (B, Hq, T, D) queries, any float dtype.
            k: (B, Hkv, S, D) keys.
            causal: query i sees keys j <= i + S − T.
            mask: None, or bool (True = attend) (B, S) or broadcastable to (B, Hq, T, S).
            window: None, or W >= 1 (causal only).
            softcap: None, or c > 0.
            sinks: None, or (Hq,) float, any dtype.
            alibi_slopes: None, or (Hq,) float, any dtype.
            key_bias: None, or (B|1, Hq, S) float.
            first_key: None (read off the mask), an int or (B,) integers.

        Returns:
            ScoreMods: the validated record.

        Raises:
            ValueError: a modifier outside the contract, named with its fix.
            TypeError: a keyword no modifier takes.
        """
        causal = bool(causal)
        softcap, sinks = validate_extras(q, softcap, sinks)
        mask = validate_mask(q, k, mask)
        return cls(
            causal=causal,
            mask=mask,
            window=validate_window(window, causal),
            softcap=softcap,
            sinks=sinks,
            alibi_slopes=validate_alibi(q, alibi_slopes),
            key_bias=validate_key_bias(q, k, key_bias),
            first_key=validate_first_key(q, mask, first_key),
        )

    def replace(self, **changes) -> ScoreMods:
        """A copy with `changes` (already in the kernels' form: the plan's reduced mask and window).

        Args:
            **changes: fields of the record and their new values, not validated again.

        Returns:
            ScoreMods: the copy.
        """
        return dataclasses.replace(self, **changes)

    @property
    def sdpa_computes(self) -> bool:
        """Whether torch sdpa computes the output of these scores (no softcap, sinks or bias; a mask,
        causality and a window it takes)."""
        return self.softcap is None and self.sinks is None and not self.biased

    @property
    def biased(self) -> bool:
        """Whether a bias is added to the scores (ALiBi slopes or a key bias)."""
        return self.alibi_slopes is not None or self.key_bias is not None
