"""The one opening of the kernels' public functions (`attention_stats`, `attention_with_entropy`,
`attention_received`, `shard_state`): what the caller asks for parsed into one record (flags.Measure),
the tile checked, the inputs and the scale validated and the score modifiers built, in that order, so
every entrance refuses the same argument with the same line. ::

    def attention_stats(q, k, *, softmax_scale, stats, causal=True, window=None, block_q=None, ...):
        call = enter(q, k, measure=Measure.parse(stats=stats), arguments=locals())
    call.softmax_scale (Hq,) float32, call.mods ScoreMods, call.measure, call.block_q, call.block_k

Everything below takes these parsed values and never checks them again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entropy_lens.errors import EntropyLensError
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


def enter(q, k, v=None, *, measure: Measure, arguments: dict) -> Entered:
    """The checked arguments of a public call on queries q, keys k (and values v, checked as k's
    companions): `measure` parsed by the caller (`Measure.parse`, which names what its function takes);
    from `arguments` (the function's own, `locals()`): `softmax_scale`, the tile `block_q`/`block_k`
    (absent or None: the kernel's default; else a positive integer), the score modifiers it takes (of
    MODIFIERS) and a key shard's `first_key`. ValueError (EntropyLensError) in one line naming the fix
    otherwise."""
    require(measure=measure)
    if measure.slices:
        raise EntropyLensError(
            f"{', '.join(measure.slices.stats)}: a row-slice statistic; compute it with "
            "entropy_lens.row_slice_stats(q, k, stats=..., spans=..., offsets=...)"
        )
    block_q = validate_block(arguments.get("block_q"), "block_q")
    block_k = validate_block(arguments.get("block_k"), "block_k")
    validate_inputs(q, k, v)
    softmax_scale = validate_scale(q, k, arguments["softmax_scale"])
    if v is not None and (not hasattr(v, "ndim") or v.ndim != 4 or v.shape[:3] != k.shape[:3]):
        got = tuple(getattr(v, "shape", ()))
        raise ValueError(f"v must be (B, Hkv, S, Dv) like k {tuple(k.shape)}; got {got}")
    modifiers = {name: arguments[name] for name in MODIFIERS if name in arguments}
    mods = ScoreMods.build(q, k, **modifiers, first_key=arguments.get("first_key"))
    return Entered(softmax_scale, mods, measure, block_q, block_k)
