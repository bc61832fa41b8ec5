"""Attention inside a training step: the one-pass kernel's output and row statistics forward, PyTorch's
flash-attention backward from that output and the kernel's own log-sum-exp.

    attention_train(q, k, v, softmax_scale, mods, *, kernel="native", measure=DEFAULT_MEASURE, backward=None)
        -> RowStats: out (B, T, Hq, Dv) in q's dtype, differentiable w.r.t. q, k, v (and a softmax_scale
           tensor that requires grad), each of `measure.stats` (B, Hq, T) float32, detached, and the
           rows' log-sum-exp `lse` (B, Hq, T)
    train_refusal(q, k, v, mods, *, device=None) -> None where the route takes these inputs on device
        ("cpu" or "cuda", q's own by default: the CUDA route is decided without a GPU too), else why not
    train_form(q, k, v, mods, *, device=None) -> (mods in the route's form, None) or (None, why not)

    q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, D): GQA/MQA keys and values as they are (fewer heads)
    softmax_scale  float or (Hq,) tensor λ_h; mods: a validated ScoreMods (causal bottom-right, mask, window)
    kernel  "native" (C++, CPU) or "torch_chunked" (anywhere): the forward's one pass, the CPU backward;
            "triton" (CUDA; CPU under TRITON_INTERPRET=1): the Triton kernel's pass, the CUDA backward
    backward  the op of `aten._flash_attention_backward`'s signature the "triton" route calls (a test seam)

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
needs one D), float64 (the kernels accumulate in float32, sdpa stays exact). The caller then runs the
model's attention with autograd and a separate no-grad statistics pass (capture/paths.py).

Under autocast (`torch.autocast`, `Trainer(bf16=True)`) the route does what sdpa does there: q, k and v
go to autocast's dtype (in autograd: a model's queries after RoPE are often float32 beside bfloat16
values, and their gradients come back in their own dtype) and the pass and its backward run in that
dtype with autocast off, so the kernels keep their float32 sums (`contract.autocast_dtype`).

On CUDA ("triton"): the Triton kernel's fused variant storing its state (`triton_entropy.stream_triton`)
gives the output, the statistics and lse = m + ln l, and the backward is the flash-attention kernel
PyTorch ships, `aten._flash_attention_backward` (what `_scaled_dot_product_flash_attention_backward`
calls after seeing (B, H, T, D) as (B, T, H, D); this op takes the windows the other does not expose).
Its contract (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp, `mha_bwd`): q, dO, O
(B, T, Hq, D) and k, v (B, S, Hkv, D) with a contiguous last dimension (the kernels' output is (B, T, Hq,
D) memory already, and q, k, v pass as transposed views: their last dimension stays contiguous); GQA/MQA keys and values as they
are (Hkv divides Hq; the op sums dK, dV over each group itself); lse (B, Hq, T) float32 in nats of the
scaled scores, +∞ for a row that sees no key (flash's own convention, so P = 0 there); is_causal
bottom-right (flash-attn ≥ 2.1's alignment, as the kernels'); a sliding window W as window_size_left
= W − 1, window_size_right = 0; float16 and bfloat16 only; a head size that is a multiple of 8 up to 256
(another is zero-padded to the next multiple here: zero query/key columns add nothing to a score, zero
value columns give zero output columns, and the padding's gradients are dropped); sm_8x or sm_90, and
head sizes 193-224 on sm_80 and sm_90 only (`capability_refusal`). No mask:
`train_form` sends key padding, a mask per query or per head, float32 and a head size above 256 to
the separate route, with the reason.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from entropy_lens.flags import BACKENDS, DEFAULT_MEASURE, Measure, triton_available
from entropy_lens.kernels.backends import TABLE, backend_of
from entropy_lens.kernels.contract import autocast_dtype, validate_scale
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.stats import RowStats, accumulators, log_sum_exp, read_stats

TRAIN_KERNELS = tuple(name for name, backend in TABLE.items() if backend.train_device is not None)
CUDA_DTYPES = (torch.float16, torch.bfloat16)  # what flash's CUDA backward takes
CUDA_MAX_HEAD = 256  # the largest head size of flash's CUDA backward


def train_refusal(q, k, v, mods: ScoreMods, *, device: str | None = None) -> str | None:
    """None where `attention_train` takes these inputs on `device` ("cpu" or "cuda"; q's own by
    default), else why not (see the module docstring). Asking for "cuda" with CPU tensors is the CUDA
    route's choice without a GPU."""
    return train_form(q, k, v, mods, device=device)[1]


def train_form(q, k, v, mods: ScoreMods, *, device: str | None = None) -> tuple[ScoreMods | None, str | None]:
    """(mods in the route's form, None) where `attention_train` takes these inputs on `device`, else
    (None, why not). The CPU route takes `mods` as they are; the CUDA route's form has no mask: a mask is
    read (`masks.as_key_padding`, once) as causal & window & key padding, and only one that pads no key
    goes through, its window merged. A caller that passes the form on does not read the mask again."""
    if not mods.sdpa_computes:
        return None, "softcap, sinks or a score bias, which flash's backward does not take"
    if v.shape[-1] != q.shape[-1]:
        return None, "values whose head size differs from the queries'"
    device = q.device.type if device is None else device
    dtype = autocast_dtype(q.device.type) or q.dtype  # what `attention_train` runs in (autocast's dtype)
    if device == "cuda":
        return _cuda_form(q, k, mods, dtype)
    if device != "cpu":
        return None, f"{device} tensors (the flash backward is wired on CPU and CUDA)"
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None, f"{dtype} tensors (the kernels accumulate in float32; sdpa keeps float64 exact)"
    return mods, None


def _cuda_form(q, k, mods: ScoreMods, dtype) -> tuple[ScoreMods | None, str | None]:
    """`train_form` on CUDA: flash's CUDA backward takes no mask, float16 and bfloat16, heads up to 256."""
    if dtype not in CUDA_DTYPES:
        return None, f"{dtype} tensors on CUDA (flash's CUDA backward takes float16 and bfloat16)"
    if q.shape[-1] > CUDA_MAX_HEAD:
        return None, f"a head size above {CUDA_MAX_HEAD} (flash's CUDA backward takes up to {CUDA_MAX_HEAD})"
    if q.is_cuda:
        why = capability_refusal(torch.cuda.get_device_capability(q.device), q.shape[-1])
        if why is not None:
            return None, why
    if q.is_cuda and not triton_available():
        return None, "CUDA tensors without triton installed (the route's forward is the Triton kernel)"
    if mods.mask is None:
        return mods, None
    B, T, S = q.shape[0], q.shape[2], k.shape[2]
    form = as_key_padding(mods.mask, B, T, S, mods.causal, mods.window)
    if form is None:
        return None, "a mask per query or per head (flash's CUDA backward takes none)"
    keep, window = form
    if keep is not None:
        why = "key padding (flash's CUDA backward takes no mask; an unpadded or packed batch runs fused)"
        return None, why
    return mods.replace(mask=None, window=window), None


def capability_refusal(capability: tuple[int, int], head: int) -> str | None:
    """None where flash's CUDA backward runs head size `head` on a GPU of compute `capability`, else why
    not: its checks in flash_api.cpp (`mha_bwd`): sm_8x or sm_90, and head sizes 193-224 (padded to a
    multiple of 8) on sm_80 and sm_90 only."""
    major, minor = capability
    arch = f"sm_{major}{minor}"
    if major != 8 and (major, minor) != (9, 0):
        return f"a GPU of {arch} (flash's CUDA backward runs on sm_8x and sm_90)"
    if 192 < head + (-head % 8) <= 224 and (major, minor) not in ((8, 0), (9, 0)):
        return f"head size {head} on {arch} (flash's CUDA backward runs 193-224 on sm_80 and sm_90 only)"
    return None


def attention_train(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    kernel="native",
    measure: Measure = DEFAULT_MEASURE,
    backward=None,
) -> RowStats:
    """See the module docstring."""
    device = backend_of(kernel).train_device if kernel in BACKENDS else None
    if device is None:
        raise ValueError(f"attention_train runs kernel {' or '.join(TRAIN_KERNELS)}; got {kernel!r}")
    mods, why = train_form(q, k, v, mods, device=device)
    if why is not None:
        raise ValueError(f"attention_train does not take {why}; run sdpa with autograd and a statistics pass")
    if device != "cuda" and backward is not None:
        raise ValueError("attention_train takes a backward op on the 'triton' (CUDA) route only")
    scale = validate_scale(q, k, softmax_scale)
    uniform = float(scale[0])
    trainable = isinstance(softmax_scale, torch.Tensor) and softmax_scale.requires_grad
    if trainable or not bool((scale == uniform).all()):
        # the op takes one scalar: λ_h multiplies the query rows, in autograd (a trainable scale's gradient)
        per_head = softmax_scale.reshape(-1).expand(q.shape[1]).to(q.device, q.dtype)
        q, uniform = q * per_head.view(1, -1, 1, 1), 1.0
    route = (kernel, backward)
    stats = measure.stats
    dtype = autocast_dtype(q.device.type)
    if dtype is None:
        out, lse, *values = _FlashTrain.apply(q, k, v, uniform, mods, route, measure)
    else:  # as sdpa under autocast: q, k, v in its dtype (cast in autograd), the pass with autocast off
        q, k, v = (x.to(dtype) for x in (q, k, v))
        with torch.autocast(q.device.type, enabled=False):
            out, lse, *values = _FlashTrain.apply(q, k, v, uniform, mods, route, measure)
    return RowStats(dict(zip(stats, values, strict=True)), out, lse)


class _FlashTrain(torch.autograd.Function):
    """(out (B, T, Hq, Dv), lse (B, Hq, T), *stats) from the kernel's one pass at the uniform scale λ;
    the gradients of q, k, v from the flash backward of that output and its log-sum-exp, which the
    column pass of attention received takes too (no second row pass)."""

    @staticmethod
    def forward(ctx, q, k, v, uniform: float, mods: ScoreMods, route: tuple, measure: Measure):
        kernel, _ = route
        scale = torch.full((q.shape[1],), uniform, device=q.device)
        stats = measure.stats
        kw = {"extra": accumulators(stats), "measure": measure}
        state, out = backend_of(kernel).stream(q, k, v, scale, mods, **kw)
        values = tuple(read_stats(state, mods, stats).values())
        lse = log_sum_exp(state)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.softmax_scale, ctx.mods, ctx.route = uniform, mods, route
        ctx.mark_non_differentiable(lse, *values)
        return (out, lse, *values)

    @staticmethod
    def backward(ctx, grad_out, *_):
        q, k, v, out, lse = ctx.saved_tensors
        kernel, op = ctx.route
        if backend_of(kernel).train_device == "cuda":
            dq, dk, dv = cuda_flash_backward(grad_out, q, k, v, out, lse, ctx.softmax_scale, ctx.mods, op=op)
            return dq, dk, dv, None, None, None, None
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
        return dq, dk, dv, None, None, None, None


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


def cuda_flash_backward(grad_out, q, k, v, out, lse, scale: float, mods: ScoreMods, *, op=None):
    """(dq (B, Hq, T, D), dk, dv (B, Hkv, S, D)) from flash's CUDA backward (`op`: one with
    `aten._flash_attention_backward`'s signature, that op by default) of grad_out and out (B, T, Hq, D),
    q (B, Hq, T, D), k, v (B, Hkv, S, D) and lse (B, Hq, T) float32 nats, for `mods` in the CUDA route's
    form (no mask; causal bottom-right and a window): the op's (B, T, H, D) layouts are views of the
    kernels' (module docstring), the head size zero-padded to a multiple of 8."""
    op = torch.ops.aten._flash_attention_backward if op is None else op
    D, T, S = q.shape[-1], q.shape[2], k.shape[2]
    pad = -D % 8

    def flash_layout(x, heads_second=True):  # (B, T|S, H, D), the head size padded, last dim contiguous
        x = x.transpose(1, 2) if heads_second else x
        x = F.pad(x, (0, pad)) if pad else x
        return x if x.stride(-1) == 1 else x.contiguous()

    window = mods.window
    dq, dk, dv = op(
        flash_layout(grad_out, False),
        flash_layout(q),
        flash_layout(k),
        flash_layout(v),
        flash_layout(out, False),
        lse.contiguous(),
        None,  # no cumulative sequence lengths: the dense (padded-batch) kernel
        None,
        T,
        S,
        0.0,
        mods.causal,
        torch.empty(0, dtype=torch.int64, device=q.device),  # the dropout's rng state: no dropout
        torch.empty(0, dtype=torch.int64, device=q.device),
        scale=scale,
        window_size_left=None if window is None else window - 1,
        window_size_right=None if window is None else 0,
    )
    return tuple(g[..., :D].transpose(1, 2) for g in (dq, dk, dv))
