"""Attention entropy as a Triton kernel: the GPU path of `attention_entropy(impl="triton")`.

Contract (the same as `entropy_torch_chunked`):
    q      (B, Hq, T, D)  bf16 / fp16 / fp32, any strides
    k      (B, Hkv, S, D) same dtype; query head h reads key head h // (Hq / Hkv) (GQA/MQA by
           indexing, keys are never repeated)
    scale  (Hq,) fp32: λ_h, scores are λ_h q·k
    causal query i sees keys j <= i + S − T (bottom-right alignment)
    mask   None, or a validated bool 4-D mask, True = attend. Key padding ((B|1, 1, 1, S), or causal
           AND key padding as transformers builds it, see `key_padding`) runs in the kernel; other
           masks (per query or per head) are served by the exact torch path instead.
    -> (B, Hq, T) float32 entropy in nats; 0 for a row with no attendable key.

One program handles BLOCK_M query rows of one (batch, head) and streams over key blocks with the
centred online-softmax state of torch_chunked.py (m, l, u; H = log l − u/l), accumulated in fp32.
Causal programs stop at the last key block their rows can see (~T²/2 work). The first block of a
row may be fully masked (m = −inf): every −inf·0 is avoided with `where`, as in the torch path.

Precision: bf16/fp16 tiles go to `tl.dot` natively with fp32 accumulation; fp32 tiles use IEEE
fp32 products (no TF32). Under the interpreter (TRITON_INTERPRET=1, CPU) every tile is cast to
fp32 first because the interpreter's `tl.dot` on bf16 is wrong.
Block sizes: `@triton.autotune` over a small grid when a CUDA driver is present, fixed (32, 32)
otherwise (the interpreter).

Fused variant (`attention_with_entropy_triton`): the same kernel with WITH_OUTPUT also streams V
and returns the attention output, the flash-attention forward plus the entropy accumulators. The
capture picks between it and "sdpa output + entropy-only pass" by timing both on the GPU
(capture/fused.py); benchmarks/scan_gpu.py (kernel mode) reports the same comparison.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
FIXED_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32}


def _entropy_kernel(
    Q, K, V, SCALE, KEEP, OUT, O,
    sqb, sqh, sqt, sqd,
    skb, skh, sks, skd,
    svb, svh, svs, svd,
    sob, soh, sot, sod,
    skeep_b, skeep_s,
    H_Q, T, S, OFFSET,
    GROUP: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr, CAST_F32: tl.constexpr, IEEE: tl.constexpr,
    WITH_OUTPUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    kv = h // GROUP
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqt + dims[None, :] * sqd,
                mask=(rows[:, None] < T) & (dims[None, :] < D), other=0.0)  # fmt: skip
    if CAST_F32:
        q = q.to(tl.float32)
    lam = tl.load(SCALE + h)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    u = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # Σ e^(s−m) v: the attention output (fused mode)
    k_end = S
    if CAUSAL:
        k_end = tl.minimum(S, (pid_m + 1) * BLOCK_M + OFFSET)
    for start in range(0, k_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * skb + kv * skh + cols[:, None] * sks + dims[None, :] * skd,
                    mask=(cols[:, None] < S) & (dims[None, :] < D), other=0.0)  # fmt: skip
        if CAST_F32:
            k = k.to(tl.float32)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * lam
        valid = (cols[None, :] < S) & (rows[:, None] >= 0)
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None] + OFFSET)
        if HAS_KEEP:
            keep = tl.load(KEEP + b * skeep_b + cols * skeep_s, mask=cols < S, other=0)
            valid = valid & (keep[None, :] != 0)
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet
        alpha = tl.exp(m - m_safe)  # 0 while m = -inf
        shift = tl.where(l > 0, (m - m_safe) * l, 0.0)
        d = s - m_safe[:, None]
        e = tl.exp(d)  # 0 where masked
        l = alpha * l + tl.sum(e, 1)
        u = alpha * (u + shift) + tl.sum(e * tl.where(valid, d, 0.0), 1)
        m = m_new
        if WITH_OUTPUT:
            v = tl.load(V + b * svb + kv * svh + cols[:, None] * svs + dims[None, :] * svd,
                        mask=(cols[:, None] < S) & (dims[None, :] < D), other=0.0)  # fmt: skip
            if CAST_F32:
                pv = tl.dot(e, v.to(tl.float32), input_precision="ieee")
            else:
                pv = tl.dot(e.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
    ent = tl.where(l > 0, tl.log(l) - u / l, 0.0)
    ent = tl.maximum(ent, 0.0)
    tl.store(OUT + pid_bh * T + rows, ent, mask=rows < T)
    if WITH_OUTPUT:
        o = tl.where(l[:, None] > 0, acc / l[:, None], 0.0)
        tl.store(O + b * sob + h * soh + rows[:, None] * sot + dims[None, :] * sod, o.to(O.dtype.element_ty),
                 mask=(rows[:, None] < T) & (dims[None, :] < D))  # fmt: skip


def _compile():
    kernel = triton.jit(_entropy_kernel)
    if INTERPRET or not torch.cuda.is_available():
        return kernel, False
    configs = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
        for bm, bn, w, st in ((64, 64, 4, 2), (128, 64, 4, 2), (128, 64, 8, 3), (128, 128, 8, 2), (64, 128, 4, 3))
    ]  # fmt: skip
    return triton.autotune(configs=configs, key=["T", "S", "BLOCK_D", "CAUSAL", "WITH_OUTPUT"])(kernel), True


_KERNEL, _AUTOTUNED = _compile()


def key_padding(mask, B: int, T: int, S: int, causal: bool):
    """The (B, S) keep-mask of a validated bool 4-D mask when it is key padding only, else None.

    Besides (B|1, 1, 1, S) this recognises a (B|1, 1, T, S) mask that is exactly causal AND key
    padding, the mask transformers builds for a padded batch: its last row (which sees every key
    under bottom-right causality) is the keep-mask. The check costs one pass over the T x S mask."""
    if mask is None or mask.shape[1] != 1 or mask.shape[2] not in (1, T):
        return None
    if mask.shape[2] == 1:
        return mask[:, 0, 0, :].expand(B, S)
    keep = mask[:, 0, -1 if causal else 0, :]
    expected = keep[:, None, :].expand(-1, T, S)
    if causal:
        rows = torch.arange(T, device=mask.device)[:, None] + (S - T)
        expected = expected & (torch.arange(S, device=mask.device)[None, :] <= rows)
    return keep.expand(B, S) if torch.equal(mask[:, 0], expected) else None


@torch.no_grad()
def entropy_triton(q, k, scale, causal=True, mask=None):
    """See the module docstring. `mask` is a validated bool 4-D mask or None."""
    return _launch(q, k, None, scale, causal, mask)[0]


@torch.no_grad()
def attention_with_entropy_triton(q, k, v, scale, causal=True, mask=None):
    """The fused variant: (attention output (B, Hq, T, D) in q's dtype, entropy (B, Hq, T) fp32) in one
    pass over K/V, i.e. the flash-attention forward with the entropy accumulators beside it. `v` is
    (B, Hkv, S, D). Rows with no attendable key get output 0 and entropy 0. Only key-padding masks."""
    from entropy_lens.errors import EntropyLensError

    if mask is not None and key_padding(mask, q.shape[0], q.shape[2], k.shape[2], causal) is None:
        raise EntropyLensError("the fused Triton kernel takes key-padding masks only; use entropy_triton + sdpa")
    entropy, out = _launch(q, k, v.to(q.dtype), scale, causal, mask)
    return out, entropy


def _launch(q, k, v, scale, causal, mask):
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    if k.dtype != q.dtype:
        k = k.to(q.dtype)
    keep = None
    if mask is not None:
        keep = key_padding(mask, B, T, S, causal)
        if keep is None:  # per-query / per-head masks: the exact streaming path
            from entropy_lens.kernels.torch_chunked import entropy_torch_chunked

            return entropy_torch_chunked(q, k, scale, causal, mask), None
        keep = keep.to(torch.int8)
    ent = torch.empty(B, Hq, T, dtype=torch.float32, device=q.device)
    # the interpreter's fp32 -> bf16 store truncates; there the output is stored in fp32 and rounded by torch
    out_dtype = torch.float32 if INTERPRET else q.dtype
    out = torch.empty(B, Hq, T, D, dtype=out_dtype, device=q.device) if v is not None else None
    if T == 0 or B * Hq == 0:
        return ent, out
    lam = scale.to(device=q.device, dtype=torch.float32).contiguous()
    unused = ent  # pointer arguments of a disabled feature
    blocks = {} if _AUTOTUNED else FIXED_BLOCKS
    block_m = blocks.get("BLOCK_M")

    def grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"] if block_m is None else block_m), B * Hq)

    _KERNEL[grid](
        q, k, v if v is not None else unused, lam, keep if keep is not None else unused, ent,
        out if out is not None else unused,
        *q.stride(), *k.stride(), *(v.stride() if v is not None else (0,) * 4),
        *(out.stride() if out is not None else (0,) * 4),
        *((keep.stride(0), keep.stride(1)) if keep is not None else (0, 0)),
        Hq, T, S, S - T,
        GROUP=Hq // Hkv, BLOCK_D=max(16, triton.next_power_of_2(D)), D=D,
        CAUSAL=bool(causal), HAS_KEEP=keep is not None,
        CAST_F32=INTERPRET or q.dtype == torch.float32, IEEE=q.dtype == torch.float32,
        WITH_OUTPUT=v is not None, **blocks,
    )  # fmt: skip
    return ent, (out.to(q.dtype) if out is not None else None)
