"""Attention inside a training step: the one-pass kernel's output and row statistics forward, PyTorch's
flash-attention backward from that output and the kernel's own log-sum-exp.

    attention_train(q, k, v, softmax_scale, mods, *, kernel="native", stats=DEFAULT_STATS, first_keys=1)
        -> RowStats: out (B, T, Hq, Dv) in q's dtype, differentiable w.r.t. q, k, v (and a softmax_scale
           tensor that requires grad), and each of `stats` (B, Hq, T) float32, detached
    train_refusal(q, k, v, mods) -> None where the route takes these inputs, else why not (a phrase)

    q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, D): GQA/MQA keys and values as they are (fewer heads)
    softmax_scale  float or (Hq,) tensor λ_h; mods: a validated ScoreMods (causal bottom-right, mask, window)
    kernel  "native" (C++, CPU) or "torch_chunked" (anywhere): the forward's one pass

Why it is exact: a flash backward needs, per row, only the output O and the log-sum-exp of the row's
scores, lse = log Σ_j e^(s_j) = m + ln l in the kernels' streaming state (m the running max, l = Σ
e^(s − m)); with them it recomputes P = e^(S − lse) tile by tile, D = rowsum(dO ∘ O), dS = P ∘ (dO Vᵀ −
D), and dQ = λ dS K, dK = λ dSᵀ Q, dV = Pᵀ dO, as PyTorch's context-parallel ring attention drives it
with an output and LSE it merged itself. So the statistics cost nothing beyond the forward the step
runs anyway, and the backward is PyTorch's own (`aten._scaled_dot_product_flash_attention_for_cpu_
backward`, the one sdpa's CPU flash path calls: (B, H, T, D) layouts, an LSE in the accumulation dtype,
float32 for float32/bfloat16/float16 inputs and float64 for float64).

What it takes: the scores λ_h q·k with causality (bottom-right, as the kernels: T == S goes to the op's
own `is_causal`, which then skips the blocks above the diagonal), a mask and a sliding window (an
additive float mask: key padding stays (B, 1, 1, S); causality with T != S or a window is materialised
T × S, as sdpa's own CPU path would); a row that sees no key (left padding) outputs 0 and gets lse = +∞,
so its P = e^(−∞) = 0 and it passes no gradient, as sdpa gives none. Per-head scales: the op takes one
scalar, so λ_h multiplies the query rows first (then λ = 1), in autograd, which chain-rules the
gradient to q and to a trainable scale. What it refuses (`train_refusal`): a score modifier (softcap,
sinks, ALiBi, a key bias: the op has none), values with another head size than the queries' (the op
needs one D), float64 (the kernels accumulate in float32, sdpa stays exact), tensors off the CPU (the
CUDA flash backward is not wired yet). The caller then runs the
model's attention with autograd and a separate no-grad statistics pass (capture/paths.py).
"""

from __future__ import annotations

import torch

from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.native import stream_native
from entropy_lens.kernels.stats import RowStats, accumulators, read_stats
from entropy_lens.kernels.torch_chunked import OUTPUT_BLOCKS, stream_torch
from entropy_lens.statistics import DEFAULT_STATS

TRAIN_KERNELS = ("native", "torch_chunked")


def train_refusal(q, k, v, mods: ScoreMods) -> str | None:
    """None where `attention_train` takes these inputs, else why not (see the module docstring)."""
    if not mods.sdpa_computes:
        return "softcap, sinks or a score bias, which flash's backward does not take"
    if v.shape[-1] != q.shape[-1]:
        return "values whose head size differs from the queries'"
    if q.device.type != "cpu":
        return f"{q.device.type} tensors (the CUDA flash backward is not wired yet)"
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"{q.dtype} tensors (the kernels accumulate in float32; sdpa keeps float64 exact)"
    return None


def attention_train(
    q, k, v, softmax_scale, mods: ScoreMods, *, kernel="native", stats=DEFAULT_STATS, first_keys=1
) -> RowStats:
    """See the module docstring."""
    why = train_refusal(q, k, v, mods)
    if why is not None:
        raise ValueError(f"attention_train does not take {why}; run sdpa with autograd and a statistics pass")
    if kernel not in TRAIN_KERNELS:
        raise ValueError(f"attention_train runs kernel {' or '.join(TRAIN_KERNELS)}; got {kernel!r}")
    scale = validate_scale(q, k, softmax_scale)
    uniform = float(scale[0])
    trainable = isinstance(softmax_scale, torch.Tensor) and softmax_scale.requires_grad
    if trainable or not bool((scale == uniform).all()):
        # the op takes one scalar: λ_h multiplies the query rows, in autograd (a trainable scale's gradient)
        per_head = softmax_scale.reshape(-1).expand(q.shape[1]).to(q.device, q.dtype)
        q, uniform = q * per_head.view(1, -1, 1, 1), 1.0
    out, *values = _FlashTrain.apply(q, k, v, uniform, mods, kernel, tuple(stats), int(first_keys))
    return RowStats(dict(zip(stats, values, strict=True)), out)


class _FlashTrain(torch.autograd.Function):
    """(out (B, T, Hq, Dv), *stats) from the kernel's one pass at the uniform scale λ; the gradients of
    q, k, v from the flash backward of that output and its log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, uniform: float, mods: ScoreMods, kernel: str, stats: tuple, first_keys: int):
        scale = torch.full((q.shape[1],), uniform, device=q.device)
        extra = accumulators(stats)
        if kernel == "native":
            state, out = stream_native(q, k, v, scale, mods, extra=extra, first_keys=first_keys)
        else:
            blocks = dict(zip(("block_q", "block_k"), OUTPUT_BLOCKS, strict=True))
            state, out = stream_torch(q, k, v, scale, mods, extra=extra, first_keys=first_keys, **blocks)
        values = tuple(read_stats(state, mods, stats).values())
        # lse = m + ln l; a row that saw no key (l = 0) gets +∞, so the backward's P = e^(s − lse) is 0 there
        lse = torch.where(state["l"] > 0, state["m"] + torch.log(state["l"]), torch.inf)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.softmax_scale, ctx.mods = uniform, mods
        ctx.mark_non_differentiable(*values)
        return (out, *values)

    @staticmethod
    def backward(ctx, grad_out, *_):
        q, k, v, out, lse = ctx.saved_tensors
        is_causal, mask = flash_mask(ctx.mods, q.shape[0], q.shape[2], k.shape[2], q.dtype)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out.transpose(1, 2),  # (B, Hq, T, Dv): the kernels' (B, T, Hq, Dv) seen as the op's layout
            q,
            k,
            v,
            out.transpose(1, 2),
            lse,
            0.0,
            is_causal,
            attn_mask=mask,
            scale=ctx.softmax_scale,
        )
        return dq, dk, dv, None, None, None, None, None


def flash_mask(mods: ScoreMods, B: int, T: int, S: int, dtype) -> tuple[bool, torch.Tensor | None]:
    """(is_causal, additive float mask or None) for the flash backward: the op's `is_causal` is
    top-left, so only T == S without a window uses it (key padding then stays (B|1, 1|Hq, 1, S));
    otherwise causality and the window join the mask, materialised (B|1, Hq|1, T, S)."""
    keep = mods.mask  # bool (B|1, Hq|1, T|1, S), True = attend
    own_causal = mods.causal and T == S and mods.window is None
    if mods.causal and not own_causal:
        device = keep.device if keep is not None else None
        rows = torch.arange(T, device=device).view(-1, 1) + (S - T)
        keys = torch.arange(S, device=device).view(1, -1)
        band = keys <= rows
        if mods.window is not None:
            band = band & (keys > rows - mods.window)
        keep = band.view(1, 1, T, S) if keep is None else keep & band
    if keep is None:
        return own_causal, None
    additive = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, -torch.inf)
    return own_causal, additive
