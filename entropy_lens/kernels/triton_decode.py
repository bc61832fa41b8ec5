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
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.splits import DECODE_ROWS
from entropy_lens.kernels.stats import STATE, RowStats, accumulators, log_sum_exp, read_stats
from entropy_lens.kernels.triton_combine import combine_kernel
from entropy_lens.kernels.triton_entropy import EXTRA_FLAGS, INTERPRET, mark_first_keys
from entropy_lens.kernels.triton_split import PART_SLOTS, split_kernel
from entropy_lens.statistics import DEFAULT_STATS, ENTROPY, SINK_MASS

# (BLOCK_N, num_warps, num_stages) the autotuner tries on a GPU: those that compile for sm_80 and sm_90 at
# head_dim 64 and 128 without spilling registers, every variant (tests/kernels/test_triton_compile.py holds
# them to it; times untested). BLOCK_N 128 on 4 warps puts 128 B on the stack (bf16 on sm_90, fp32). fp32
# tiles (IEEE FMA products, no tensor cores) spill at 64 keys with every statistic on sm_80 and put 16 B
# on the stack at 32 keys on sm_90: 16 there.
SPLIT_CONFIGS = ((64, 4, 2), (64, 4, 3), (128, 8, 3))
FP32_SPLIT_CONFIGS = ((16, 4, 2), (16, 4, 3))
FIXED_BLOCK_N = 32

_TUNED: dict[tuple, object] = {}


def split_configs(fp32: bool) -> tuple[tuple[int, int, int], ...]:
    """The (BLOCK_N, num_warps, num_stages) the split kernel's autotuner tries for bf16/fp16 or fp32 tiles."""
    return FP32_SPLIT_CONFIGS if fp32 else SPLIT_CONFIGS


def _split_launcher(variant: tuple):
    """(kernel, autotuned?): on a GPU an autotuner over `split_configs` per variant of compile-time flags
    (a config tuned for one is not kept for another), keyed by S's power-of-two bucket, so a growing cache
    does not retune every step; the plain kernel under the interpreter."""
    if INTERPRET or not torch.cuda.is_available():
        return split_kernel, False
    if variant not in _TUNED:
        configs = [
            triton.Config({"BLOCK_N": bn}, num_warps=warps, num_stages=stages)
            for bn, warps, stages in split_configs(fp32=variant[1])
        ]
        _TUNED[variant] = triton.autotune(configs, key=["S_BUCKET", "SPLITS", "BLOCK_D", "CAUSAL"])(
            split_kernel
        )
    return _TUNED[variant], True


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
    if mods.key_bias is not None:
        raise ValueError("the Triton kernels take no key bias; run it with backend='torch_chunked'")
    if v is not None and v.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"the Triton kernels' output needs values of the queries' head size {q.shape[-1]}, not "
            f"{v.shape[-1]}; run it with backend='torch_chunked'"
        )
    stats = measure.stats
    in_kernel = set(stats) <= set(DEFAULT_STATS) and not with_lse
    extra = None if in_kernel else accumulators(stats)
    rows, out = _launch_split(
        q, k, None if v is None else v.to(q.dtype), softmax_scale, mods, splits, extra, measure
    )
    values = rows if in_kernel else read_stats(rows, mods, stats)
    lse = log_sum_exp(rows) if with_lse else None
    return RowStats({name: values[name] for name in stats}, None if out is None else out.transpose(1, 2), lse)


def _launch_split(q, k, v, softmax_scale, mods: ScoreMods, splits: int, extra, measure: Measure):
    """(rows, out) as `triton_entropy._launch` returns them, from the split and combine kernels."""
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    if k.dtype != q.dtype:
        k = k.to(q.dtype)
    form = as_key_padding(mods.mask, B, T, S, mods.causal, mods.window)
    if form is None:
        raise ValueError(
            f"the Triton kernels take key padding and sliding-window masks only, not this "
            f"{tuple(mods.mask.shape)} mask (it differs per query or per head); run it with "
            "backend='torch_chunked', or let kernels.plan pick the backend"
        )
    keep, window = form
    keep = None if keep is None else keep[:, 0, 0, :].to(torch.int8)  # (B, S)
    sinks, alibi = mods.sinks, mods.alibi_slopes
    if extra is None:
        kept, names = None, (ENTROPY.name,)
    else:  # without a sink lk is l and mk is m, as the row kernel keeps them
        kept = tuple(name for name in extra if name not in ("lk", "mk") or sinks is not None)
        names = (*STATE, *kept)
    if kept is not None and "f" in kept and mods.first_key is not None:
        keep = mark_first_keys(keep, mods.first_key, measure.first_keys, B, S, q.device)
    results = torch.empty(len(names), B, Hq, T, dtype=torch.float32, device=q.device)
    rows = dict(zip(names, results, strict=True))
    if extra is None:
        rows[SINK_MASS.name] = (torch.empty_like if sinks is not None else torch.zeros_like)(results[0])
    for name, alias in (("lk", "l"), ("mk", "m")):
        if extra is not None and name in extra and name not in rows:
            rows[name] = rows[alias]
    out_dtype = torch.float32 if INTERPRET else q.dtype  # the interpreter's bf16 store truncates
    out = None if v is None else torch.empty(B, T, Hq, D, dtype=out_dtype, device=q.device).transpose(1, 2)
    if T == 0 or B * Hq == 0:
        return rows, out
    block_d = max(16, triton.next_power_of_2(D))
    part = torch.empty(len(PART_SLOTS), B * Hq, splits, T, dtype=torch.float32, device=q.device)
    pacc = (
        torch.empty(B * Hq, splits, T, block_d, dtype=torch.float32, device=q.device)
        if v is not None
        else part
    )
    scale = softmax_scale.to(device=q.device, dtype=torch.float32).contiguous()
    if sinks is not None:
        sinks = sinks.to(device=q.device, dtype=torch.float32).contiguous()
    if alibi is not None:
        alibi = alibi.to(device=q.device, dtype=torch.float32).contiguous()
    v_ptr, keep_ptr, alibi_ptr, sinks_ptr, out_ptr = (
        part if t is None else t for t in (v, keep, alibi, sinks, out)
    )
    flags = {flag: kept is not None and name in kept for name, flag in EXTRA_FLAGS.items()}
    variant = (
        v is not None,
        q.dtype == torch.float32,
        window is not None,
        mods.softcap is not None,
        alibi is not None,
        kept,
    )
    kernel, autotuned = _split_launcher(variant)
    kernel[(splits, B * Hq)](
        q,
        k,
        v_ptr,
        scale,
        keep_ptr,
        part,
        pacc,
        alibi_ptr,
        *q.stride(),
        *k.stride(),
        *((0, 0, 0, 0) if v is None else v.stride()),
        *((0, 0) if keep is None else keep.stride()),
        Hq,
        T,
        S,
        S - T,
        window or 0,
        splits,
        part[0].numel(),
        triton.next_power_of_2(S),
        min(int(measure.first_keys), S),
        min(int(measure.recent_keys), S + 1),
        float(mods.softcap or 1.0),
        GROUP=Hq // Hkv,
        BLOCK_D=block_d,
        D=D,
        CAUSAL=bool(mods.causal),
        HAS_WINDOW=window is not None,
        HAS_KEEP=keep is not None,
        CAST_F32=INTERPRET or q.dtype == torch.float32,
        IEEE=q.dtype == torch.float32,
        WITH_OUTPUT=v is not None,
        HAS_SOFTCAP=mods.softcap is not None,
        HAS_ALIBI=alibi is not None,
        **flags,
        BLOCK_M=DECODE_ROWS,
        **({} if autotuned else {"BLOCK_N": FIXED_BLOCK_N}),
    )
    combine_kernel[(B * Hq,)](
        part,
        pacc,
        sinks_ptr,
        results,
        out_ptr,
        rows.get(SINK_MASS.name, part),
        *((0, 0, 0, 0) if out is None else out.stride()),
        Hq,
        T,
        splits,
        part[0].numel(),
        B * Hq * T,
        BLOCK_D=block_d,
        D=D,
        WITH_OUTPUT=v is not None,
        HAS_SINKS=sinks is not None,
        STORE_STATE=kept is not None,
        **flags,
        BLOCK_M=DECODE_ROWS,
    )
    return rows, (out.to(q.dtype) if out is not None else None)
