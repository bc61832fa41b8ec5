"""The one opening of the kernels' public functions (`attention_stats`, `attention_with_entropy`,
`attention_received`, `shard_state`): what the caller asks for parsed into one record (flags.Measure),
the tile checked, the inputs and the scale validated and the score modifiers built, in that order, so
every entrance refuses the same argument with the same line. ::

    call = enter(q, k, softmax_scale=0.3, measure=Measure.parse(stats="entropy,first_mass"),
                 modifiers={"causal": True, "window": 128}, block_q=None, block_k=None)
    call.softmax_scale (Hq,) float32, call.mods ScoreMods, call.measure, call.block_q, call.block_k

Everything below takes these parsed values and never checks them again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entropy_lens.flags import Measure, require
from entropy_lens.kernels.contract import validate_block, validate_inputs, validate_scale
from entropy_lens.kernels.mods import ScoreMods

# the score modifiers every public function takes, as ScoreMods.build names them
MODIFIERS = ("causal", "mask", "window", "softcap", "sinks", "alibi_slopes", "key_bias")


@dataclass(frozen=True)
class Entered:
    """A public call's checked arguments: the scale (Hq,) float32, the modifiers, the record, the tile."""

    softmax_scale: torch.Tensor
    mods: ScoreMods
    measure: Measure
    block_q: int | None
    block_k: int | None


def enter(
    q,
    k,
    v=None,
    *,
    softmax_scale,
    measure: Measure,
    modifiers: dict,
    block_q=None,
    block_k=None,
    first_key=None,
) -> Entered:
    """The checked arguments of a public call on queries q, keys k (and values v, checked as k's
    companions): `measure` parsed by the caller (`Measure.parse`, which names what its function takes),
    the tile (None: the kernel's default; else a positive integer), q and k (and v), the scale and the
    `modifiers` ({name: value} of MODIFIERS; `first_key` a key shard's). ValueError (EntropyLensError)
    in one line naming the fix otherwise."""
    require(measure=measure)
    block_q, block_k = validate_block(block_q, "block_q"), validate_block(block_k, "block_k")
    validate_inputs(q, k, v)
    softmax_scale = validate_scale(q, k, softmax_scale)
    if v is not None and (not hasattr(v, "ndim") or v.ndim != 4 or v.shape[:3] != k.shape[:3]):
        got = tuple(getattr(v, "shape", ()))
        raise ValueError(f"v must be (B, Hkv, S, Dv) like k {tuple(k.shape)}; got {got}")
    mods = ScoreMods.build(q, k, **modifiers, first_key=first_key)
    return Entered(softmax_scale, mods, measure, block_q, block_k)
