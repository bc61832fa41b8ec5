"""The host's side of the Triton statistics kernels, written once: what every launcher (triton_entropy.py's
row kernel, triton_decode.py's split and combine, triton_received.py's column pass) does before its launch.

    key_padding(q, k, mods) -> (k, keep, window): the mask in the form the kernels take
    arguments(q, k, v, keep, window, softmax_scale, mods, measure, kept, fill) -> (Inputs, constexprs):
        every kernel's shared arguments, triton_steps.Inputs and GROUP, D, VARIANT, EXTRAS (`pack`)
    prepare(q, k, v, softmax_scale, mods, extra, measure) -> Launch: a row launcher's prologue (the
        accumulators kept, the result buffers, the output's, triton_steps.Outputs, `arguments`)
    autotuned(kernel, variant, key, configs) -> (kernel, autotuned?): one autotuner per variant on a GPU
    row_stats_from(launch, mods, measure, with_lse) -> RowStats: a row launcher's statistics
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton

from entropy_lens.flags import Measure
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.stats import EXTRA_STATE, STATE, RowStats, accumulators, log_sum_exp, read_stats
from entropy_lens.kernels.triton_steps import VARIANT_FLAGS, Inputs, Outputs, pack
from entropy_lens.statistics import DEFAULT_STATS, ENTROPY, SINK_MASS

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

_TUNED: dict[tuple, object] = {}


def autotuned(kernel, variant: tuple, key: list[str], configs):
    """(kernel, autotuned?): on a GPU an autotuner over `configs()` ((meta, num_warps, num_stages), ...)
    per (kernel, variant of compile-time flags) — a config tuned for one variant is not kept for another —
    keyed by `key` (power-of-two buckets of T and S, so a growing KV cache does not retune every step);
    the plain kernel under the interpreter or without CUDA."""
    if INTERPRET or not torch.cuda.is_available():
        return kernel, False
    if (kernel, variant) not in _TUNED:
        tried = [triton.Config(meta, num_warps=warps, num_stages=stages) for meta, warps, stages in configs()]
        _TUNED[kernel, variant] = triton.autotune(tried, key=key)(kernel)
    return _TUNED[kernel, variant], True


def row_stats_from(launch, mods: ScoreMods, measure: Measure, with_lse: bool) -> RowStats:
    """RowStats of `measure.stats` from `launch(extra)` -> (rows, out), a row launcher: entropy and sink
    mass alone are read in the kernel (extra None); any other statistic, or the log-sum-exp, is read off
    the kernel's final state with the accumulators the statistics need (stats.read_stats)."""
    stats = measure.stats
    in_kernel = set(stats) <= set(DEFAULT_STATS) and not with_lse
    rows, out = launch(None if in_kernel else accumulators(stats))
    values = rows if in_kernel else read_stats(rows, mods, stats)
    lse = log_sum_exp(rows) if with_lse else None
    return RowStats({name: values[name] for name in stats}, None if out is None else out.transpose(1, 2), lse)


def mark_first_keys(keep, first_key, first_keys: int, B: int, S: int, device) -> torch.Tensor:
    """The key padding (B, S) int8 (all ones for None) with each batch row's first K real keys,
    first_key[b] <= j < first_key[b] + K, marked 2: where the kernel sums first_mass's keys."""
    keys = torch.arange(S, device=device)
    start = first_key.to(device).view(-1, 1)
    first = ((keys >= start) & (keys < start + first_keys)).expand(B, S)
    keep = torch.ones(B, S, dtype=torch.int8, device=device) if keep is None else keep.expand(B, S).clone()
    return torch.where(first & (keep != 0), torch.full_like(keep, 2), keep)


def key_padding(q, k, mods: ScoreMods):
    """(k in q's dtype, the key padding (B|1, S) int8 or None, the window) a Triton kernel takes for
    `mods` (`masks.as_key_padding`); ValueError for a mask per query or per head, or a key bias."""
    if mods.key_bias is not None:
        raise ValueError("the Triton kernels take no key bias; run it with backend='torch_chunked'")
    B, T, S = q.shape[0], q.shape[2], k.shape[2]
    form = as_key_padding(mods.mask, B, T, S, mods.causal, mods.window)
    if form is None:
        raise ValueError(
            "the Triton kernels take key padding and sliding-window masks only, not this "
            f"{tuple(mods.mask.shape)} mask (it differs per query or per head); run them with "
            "backend='torch_chunked', or let kernels.plan pick the backend"
        )
    keep, window = form
    keep = None if keep is None else keep[:, 0, 0, :].to(torch.int8)  # (B|1, S)
    return (k if k.dtype == q.dtype else k.to(q.dtype)), keep, window


def arguments(q, k, v, keep, window, softmax_scale, mods: ScoreMods, measure: Measure, kept, fill):
    """(Inputs, constexprs): every kernel's shared arguments, for q, k and v (None: no output) in q's dtype,
    the key padding `keep` (B|1, S) int8 or None and the `window` (as `key_padding` gives them) and `kept`
    the accumulators the kernel stores (None: entropy and sink mass read in the kernel); `fill` stands for
    every pointer of a feature that is off. constexprs: GROUP, D, VARIANT and EXTRAS (`pack`), the
    kernels' compile-time arguments but their block sizes."""
    _, Hq, T, D = q.shape
    S = k.shape[2]
    on_device = {"device": q.device, "dtype": torch.float32}
    sinks, alibi = (
        None if x is None else x.to(**on_device).contiguous() for x in (mods.sinks, mods.alibi_slopes)
    )
    fp32 = q.dtype == torch.float32
    variant = {
        "CAUSAL": bool(mods.causal),
        "HAS_WINDOW": window is not None,
        "HAS_KEEP": keep is not None,
        "CAST_F32": INTERPRET or fp32,
        "IEEE": fp32,
        "WITH_OUTPUT": v is not None,
        "HAS_SOFTCAP": mods.softcap is not None,
        "HAS_ALIBI": alibi is not None,
        "HAS_SINKS": sinks is not None,
        "STORE_STATE": kept is not None,
    }
    constexprs = {
        "GROUP": Hq // k.shape[1],
        "D": D,
        "VARIANT": pack(VARIANT_FLAGS, variant),
        "EXTRAS": pack(EXTRA_STATE, kept or ()),
    }
    inputs = Inputs(
        q,
        k,
        fill if v is None else v,
        fill if keep is None else keep,
        softmax_scale.to(**on_device).contiguous(),
        fill if sinks is None else sinks,
        fill if alibi is None else alibi,
        *q.stride(),
        *k.stride(),
        *((0, 0, 0, 0) if v is None else v.stride()),
        *((0, 0) if keep is None else keep.stride()),
        Hq,
        T,
        S,
        S - T,
        window or 0,
        # K of first_mass (at most S: every key lies below S), W of recent_mass (at most S + 1: pos_i − S < 0)
        min(int(measure.first_keys), S),
        min(int(measure.recent_keys), S + 1),
        float(mods.softcap or 1.0),
    )
    return inputs, constexprs


@dataclass
class Launch:
    """What a row launcher (triton_entropy._launch, triton_decode._launch_split) hands its kernels, built
    once by `prepare`.

    Args:
        inputs: the kernels' Inputs (k and v in q's dtype; the key padding marks first_mass's keys 2).
        outputs: the kernels' Outputs: OUT (n, B, Hq, T) float32 (entropy, or the state m, l, u and the
            accumulators kept), the sink mass and the output.
        constexprs: GROUP, D, VARIANT, EXTRAS (`arguments`).
        rows: {name: (B, Hq, T) view}: what the kernel fills (lk and mk alias l and m without a sink).
        out: the output, a (B, Hq, T, D) view of (B, T, Hq, D) memory (fp32 under the interpreter), or
            None without values.
    """

    inputs: Inputs
    outputs: Outputs
    constexprs: dict
    rows: dict
    out: torch.Tensor | None

    @property
    def variant(self) -> tuple[int, int]:
        """(VARIANT, EXTRAS): what an autotuner is kept per."""
        return self.constexprs["VARIANT"], self.constexprs["EXTRAS"]


def prepare(q, k, v, softmax_scale, mods: ScoreMods, extra, measure: Measure) -> Launch:
    """Every row launcher's prologue (the Launch's fields): `extra` None reads entropy and sink mass in the
    kernel; else the kernel stores its final state with these accumulators of stats.EXTRA_STATE (without
    a sink every outcome is a key: lk is l itself and mk is m, not accumulated twice)."""
    if v is not None and v.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"the Triton kernels' output needs values of the queries' head size {q.shape[-1]}, not "
            f"{v.shape[-1]}; run them with backend='torch_chunked'"
        )
    B, Hq, T, D = q.shape
    k, keep, window = key_padding(q, k, mods)
    S = k.shape[2]
    sinks = mods.sinks
    if extra is None:
        kept, names = None, (ENTROPY.name,)
    else:
        kept = tuple(name for name in extra if name not in ("lk", "mk") or sinks is not None)
        names = (*STATE, *kept)
    if kept is not None and "f" in kept and mods.first_key is not None:
        keep = mark_first_keys(keep, mods.first_key, measure.first_keys, B, S, q.device)
    results = torch.empty(len(names), B, Hq, T, dtype=torch.float32, device=q.device)
    rows = dict(zip(names, results, strict=True))
    if extra is None:
        rows[SINK_MASS.name] = (torch.empty_like if sinks is not None else torch.zeros_like)(results[0])
    for name, alias in (("lk", "l"), ("mk", "m")):  # without a sink, l is the keys' sum and m their max
        if extra is not None and name in extra and name not in rows:
            rows[name] = rows[alias]
    # the interpreter's fp32 -> bf16 store truncates; there the output is stored in fp32 and rounded by torch.
    # (B, T, Hq, D) memory, the layout a model's o_proj reads: the capture's transpose back is free
    out_dtype = torch.float32 if INTERPRET else q.dtype
    out = None if v is None else torch.empty(B, T, Hq, D, dtype=out_dtype, device=q.device).transpose(1, 2)
    v = None if v is None else v.to(q.dtype)
    inputs, constexprs = arguments(q, k, v, keep, window, softmax_scale, mods, measure, kept, results)
    outputs = Outputs(
        results,
        rows.get(SINK_MASS.name, results),
        results if out is None else out,
        *((0, 0, 0, 0) if out is None else out.stride()),
        B * Hq * T,
    )
    return Launch(inputs=inputs, outputs=outputs, constexprs=constexprs, rows=rows, out=out)
