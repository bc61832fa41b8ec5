"""The decode step's Triton path: split keys (flash-decoding) for the few query rows of `generate()`.

A decode step asks T = 1 query row (a few with speculative decoding) against a cache of S keys. The row
kernel (triton_entropy.py) runs one program per (batch·head, block of query rows): B·Hq programs, each
streaming all S keys alone, so a 16K cache keeps a GPU of 132 SMs mostly idle. Here the keys the rows
see split into `splits` chunks of whole key blocks: one program per (split, batch·head)
(triton_split.py) streams its chunk into the row kernel's centred state from empty, with the row
kernel's own key-block step (causal bottom-right, window, key padding, softcap, ALiBi, the extra
accumulators of stats.EXTRA_STATE, and the unnormalised output Σ e·v with values), so a score means
the same in both; one program per batch·head (triton_combine.py) then merges the splits exactly, as
merge.py merges key shards, with the sink joining there once, and ends as the row kernel ends. ::

    row_stats_split(q, k, v, softmax_scale, mods, *, splits, measure, with_lse) -> RowStats
        q (B, Hq, T <= DECODE_ROWS, D), the rest as `triton_entropy.row_stats_triton`: the same RowStats
        up to fp32 rounding order (tests/triton_decode_interp_cases.py holds it to the float64 reference
        under the interpreter and to the row kernel at a 16K cache on a GPU)

Whether it runs is decided by `splits.decode_splits` (few rows on a long cache), which `plan.run` asks
for the "triton" kernel; every modifier the row kernel takes is taken here, so the shape alone routes
it. The splits' partial states (10, B·Hq, splits, T) fp32 and output sums (B·Hq, splits, T,
BLOCK_D) fp32 are the only memory beyond the row kernel's: under a MiB at 32 heads and 32 splits.
"""

from __future__ import annotations

import torch
import triton

from entropy_lens.flags import DEFAULT_MEASURE, Measure
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.splits import DECODE_ROWS
from entropy_lens.kernels.stats import RowStats
from entropy_lens.kernels.triton_combine import combine_kernel
from entropy_lens.kernels.triton_launch import autotuned, prepare, row_stats_from
from entropy_lens.kernels.triton_split import PART_SLOTS, Parts, split_kernel
from entropy_lens.kernels.triton_steps import block_d, has

# (BLOCK_N, num_warps, num_stages) the autotuner tries on a GPU: those that compile for sm_80 and sm_90 at
# head_dim 64 and 128 without spilling registers, every variant (tests/kernels/test_triton_compile.py holds
# them to it; times untested). BLOCK_N 128 on 4 warps puts 128 B on the stack (bf16 on sm_90, fp32). fp32
# tiles (IEEE FMA products, no tensor cores) spill at 64 keys with every statistic on sm_80 and put 16 B
# on the stack at 32 keys on sm_90: 16 there.
SPLIT_CONFIGS = ((64, 4, 2), (64, 4, 3), (128, 8, 3))
FP32_SPLIT_CONFIGS = ((16, 4, 2), (16, 4, 3))
FIXED_BLOCK_N = 32


def split_configs(fp32: bool) -> tuple[tuple[int, int, int], ...]:
    """The (BLOCK_N, num_warps, num_stages) the split kernel's autotuner tries for bf16/fp16 or fp32 tiles."""
    return FP32_SPLIT_CONFIGS if fp32 else SPLIT_CONFIGS


def _split_launcher(variant: int, extras: int):
    """(kernel, autotuned?): `triton_launch.autotuned` over `split_configs` per variant (VARIANT, EXTRAS),
    keyed by S's power-of-two bucket, the splits and the head dim."""
    configs = split_configs(fp32=has(variant, "IEEE"))
    key = ["S_BUCKET", "SPLITS", "D"]
    return autotuned(
        split_kernel, (variant, extras), key, lambda: [({"BLOCK_N": bn}, w, st) for bn, w, st in configs]
    )


@torch.no_grad()
def row_stats_split(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    splits: int,
    measure: Measure = DEFAULT_MEASURE,
    with_lse: bool = False,
) -> RowStats:
    """`triton_entropy.row_stats_triton`'s RowStats (each of `measure.stats` (B, Hq, T) float32 and, with
    v, the output (B, T, Hq, D) in q's dtype; the log-sum-exp with `with_lse`) from `splits` programs per
    (batch, head) over the keys and one combine (module docstring). The same inputs and refusals: a mask
    of key padding and a sliding window only, no key bias, values of q's head size.

    Args:
        q: (B, Hq, T, D) queries, T <= DECODE_ROWS (16).
        k: (B, Hkv, S, D) keys.
        v: (B, Hkv, S, D) values for the output too, or None.
        softmax_scale: (Hq,) float32, the validated scale.
        mods: the ScoreMods in the Triton kernel's form (`plan.statistics_kernel`).
        splits: the key chunks per (batch, head), >= 1 (`splits.decode_splits` picks it).
        measure: the statistics and their parameters (flags.Measure).
        with_lse: the rows' log-sum-exp too.

    Returns:
        RowStats: as the row kernel's.

    Raises:
        ValueError: more than DECODE_ROWS query rows, splits < 1, a key bias, a mask the kernel does not
            take, or values of another head size; each message names the route to take instead.
    """
    T = q.shape[2]
    if T > DECODE_ROWS or splits < 1:
        raise ValueError(
            f"the split-key kernel takes at most {DECODE_ROWS} query rows and splits >= 1, not T={T}, "
            f"splits={splits}; run triton_entropy.row_stats_triton, or let kernels.run pick (splits.decode_splits)"
        )
    return row_stats_from(
        lambda extra: _launch_split(q, k, v, softmax_scale, mods, splits, extra, measure),
        mods,
        measure,
        with_lse,
    )


def _launch_split(q, k, v, softmax_scale, mods: ScoreMods, splits: int, extra, measure: Measure):
    """(rows, out) as `triton_entropy._launch` returns them, from the split and combine kernels."""
    launch = prepare(q, k, v, softmax_scale, mods, extra, measure)
    B, Hq, T, D = q.shape
    if T == 0 or B * Hq == 0:
        return launch.rows, launch.out
    part = torch.empty(len(PART_SLOTS), B * Hq, splits, T, dtype=torch.float32, device=q.device)
    pacc = (
        torch.empty(B * Hq, splits, T, block_d(D), dtype=torch.float32, device=q.device)
        if v is not None
        else part
    )
    parts = Parts(part, pacc, part[0].numel())
    kernel, autotuned = _split_launcher(*launch.variant)
    kernel[(splits, B * Hq)](
        launch.inputs,
        parts,
        splits,
        triton.next_power_of_2(launch.inputs.S),
        **launch.constexprs,
        BLOCK_M=DECODE_ROWS,
        **({} if autotuned else {"BLOCK_N": FIXED_BLOCK_N}),
    )
    ending = {name: launch.constexprs[name] for name in ("D", "VARIANT", "EXTRAS")}
    combine_kernel[(B * Hq,)](launch.inputs, parts, launch.outputs, splits, **ending, BLOCK_M=DECODE_ROWS)
    out = launch.out
    return launch.rows, (out.to(q.dtype) if out is not None else None)
