"""The column pass of attention received as a Triton kernel: the GPU path of `attention_received` /
`received_from_lse` with backend="triton" (the contract is kernels/received.py's; the row pass before it,
the rows' log-sum-exp, is triton_entropy.py's `stream_triton`).

    received_triton(q, k, lse, softmax_scale, mods) -> {"sum", "max", "count"}, each (B, Hq, S) fp32
    q      (B, Hq, T, D)  bf16 / fp16 / fp32, any strides
    k      (B, Hkv, S, D) same dtype; query head h reads key head h // (Hq / Hkv)
    lse    (B, Hq, T) fp32: each row's log-sum-exp in nats, +∞ for a row that counts for nothing
    mods   causal, a sliding window, key padding ((B|1, 1, 1, S), or what `masks.as_key_padding` reduces
           to it), softcap, ALiBi slopes (the sinks are in lse); another mask or a key bias raises
           ValueError (`plan.statistics_kernel` sends them to torch_chunked before any launch)

One program owns BLOCK_N keys of one (batch, query head): it loads their key tile once and streams the
query blocks whose rows may see them (causal: from the rows at the block's first key; with a window, up
to the rows whose window reaches its last key), recomputing each score tile as the row kernel does (log2
units: λ·log2 e folded into the scale, the softcap's exp2 tanh, the ALiBi bias after it) and
p = 2^(s − lse·log2 e) = e^(s − lse), as flash attention's backward does. Per key it keeps the sum of p,
its largest value and the number of counted rows that may attend it, and stores the three as
(3, B, Hq, S). No two programs write one key: no atomics, and the result is deterministic.
Precision: bf16/fp16 tiles go to `tl.dot` natively with fp32 accumulation; fp32 tiles use IEEE fp32
products; under the interpreter (TRITON_INTERPRET=1, CPU) every tile is cast to fp32 first.
Block sizes: `@triton.autotune` over RECEIVED_CONFIGS (RECEIVED_FP32_CONFIGS for fp32) on a GPU, one per
variant (VARIANT), keyed by the power-of-two buckets of T and S and the head dim; fixed (32, 32) under the
interpreter. The kernel's arguments and its score are the row kernel's (triton_steps.Inputs, `score_tile`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from entropy_lens.flags import DEFAULT_MEASURE
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.received_torch import KEY_STATE
from entropy_lens.kernels.triton_entropy import FIXED_BLOCKS
from entropy_lens.kernels.triton_launch import arguments, autotuned, key_padding
from entropy_lens.kernels.triton_steps import (
    Outputs,
    block_d,
    has,
    heads,
    load_tile,
    score_scales,
    score_tile,
)

# (BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner tries on a GPU, bf16/fp16 and fp32: those that
# compile for sm_80 and sm_90 (head sizes 64 and 128) with no spill and no stack (tests/kernels/
# test_triton_compile.py holds them to it). The 128-wide tiles need 8 warps: with 4 they sit at 255
# registers with 8-200 B of stack; fp32's IEEE products fit one stage of (32, 32) on 4 warps (two stages put
# 256-2,700 B on the stack) or two on 8
RECEIVED_CONFIGS = ((64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 8, 2), (128, 64, 8, 2))
RECEIVED_FP32_CONFIGS = ((32, 32, 4, 1), (32, 32, 8, 2))


def received_configs(fp32: bool) -> tuple[tuple[int, int, int, int], ...]:
    """The configs the autotuner tries for q of dtype fp32 (`fp32`) or a 16-bit one."""
    return RECEIVED_FP32_CONFIGS if fp32 else RECEIVED_CONFIGS


def _received_kernel(
    I,  # triton_steps.Inputs: q, k, the key padding, the scales, ALiBi slopes, their strides, the sizes
    LSE,  # the rows' lse (B, Hq, T) fp32 in nats
    O,  # triton_steps.Outputs: OUT the result (3, B, Hq, S) fp32 (sum, max, count), OUT_SLOT = B·Hq·S
    # the power-of-two buckets of T and S the autotuner is keyed by
    T_BUCKET,
    S_BUCKET,
    # compile-time: the GQA group, the head dim, the variant's switches (`pack`), block sizes
    GROUP: tl.constexpr,
    D: tl.constexpr,
    VARIANT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    CAUSAL: tl.constexpr = has(VARIANT, "CAUSAL")
    T = I.T
    S = I.S
    OFFSET = I.OFFSET
    WINDOW = I.WINDOW
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b, h, kv = heads(I, pid_bh, GROUP)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, block_d(D))
    k = load_tile(I.K + b * I.skb + kv * I.skh, cols, I.sks, dims, I.skd, S, D, VARIANT)
    # λ·log2 e, the softcap's c·tanh in log2 units and the ALiBi slope, as the row kernel's
    score = score_scales(I, h, VARIANT)
    # the rows that may see a key of this block: causal, from the row at its first key; with a window, up
    # to the last row whose window reaches its last key. Of those, the row blocks [full_start, full_end) see
    # every key of the block (causal: from the row at its last key; with a window, up to the rows whose
    # window still holds its first key) and run without a mask: a row that counts for nothing has lse = +∞
    # (its p is 0, and `count` adds the rows of finite lse), and key padding zeroes its keys at the end
    c0 = pid_n * BLOCK_N
    q_start = 0
    q_end = T
    full_start = 0
    full_end = T
    if CAUSAL:
        q_start = tl.maximum(c0 - OFFSET, 0)
        full_start = tl.cdiv(tl.maximum(c0 + BLOCK_N - 1 - OFFSET, 0), BLOCK_M) * BLOCK_M
        if has(VARIANT, "HAS_WINDOW"):
            q_end = tl.minimum(T, WINDOW + tl.minimum(S, c0 + BLOCK_N) - 1 - OFFSET)
            full_end = (tl.maximum(WINDOW + c0 - OFFSET, 0) // BLOCK_M) * BLOCK_M
    q_start = (q_start // BLOCK_M) * BLOCK_M
    full_start = tl.minimum(tl.maximum(full_start, q_start), tl.maximum(q_end, q_start))
    full_end = tl.maximum(tl.minimum(full_end, q_end), full_start)
    total = tl.zeros([BLOCK_N], tl.float32)
    largest = tl.zeros([BLOCK_N], tl.float32)
    count = tl.zeros([BLOCK_N], tl.float32)
    q_base = I.Q + b * I.sqb + h * I.sqh
    lse_base = LSE + pid_bh.to(tl.int64) * T
    # one loop: a row block inside [full_start, full_end) takes the unmasked branch (a runtime branch: three
    # loops, one per range, hold more registers than the tiles leave: stack on sm_80 and at head size 128)
    for start in range(q_start, q_end, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        q = load_tile(q_base, rows, I.sqt, dims, I.sqd, T, D, VARIANT)
        lse = tl.load(lse_base + rows, mask=rows < T, other=float("inf"))  # +∞: the row counts for nothing
        # the row kernel's scores (log2 units, softcap, ALiBi) and how far each key lies behind each row
        s, behind = score_tile(q, k, score, rows, cols, OFFSET, VARIANT)
        p = tl.exp2(s - (lse * 1.4426950408889634)[:, None])  # 0 in a row of lse = +∞
        counted = lse < float("inf")
        if CAUSAL and (start < full_start or start >= full_end):  # rows that see only some of the keys
            valid = counted[:, None] & (behind >= 0)
            if has(VARIANT, "HAS_WINDOW"):
                valid = valid & (behind < WINDOW)
            p = tl.where(valid, p, 0.0)
            count += tl.sum(valid.to(tl.float32), 0)
        else:  # every counted row sees every key
            count += tl.sum(counted.to(tl.float32), 0)
        total += tl.sum(p, 0)
        largest = tl.maximum(largest, tl.max(p, 0))
    key_ok = cols < S
    if has(VARIANT, "HAS_KEEP"):  # a padded key: no row attends it
        keep = tl.load(I.KEEP + b * I.skeep_b + cols * I.skeep_s, mask=cols < S, other=0)
        key_ok = key_ok & (keep != 0)
    at = O.OUT + pid_bh.to(tl.int64) * S + cols
    tl.store(at, tl.where(key_ok, total, 0.0), mask=cols < S)
    tl.store(at + O.OUT_SLOT, tl.where(key_ok, largest, 0.0), mask=cols < S)
    tl.store(at + 2 * O.OUT_SLOT, tl.where(key_ok, count, 0.0), mask=cols < S)


RECEIVED_KERNEL = triton.jit(_received_kernel)


def _kernel(variant: int):
    """(kernel, autotuned?): `triton_launch.autotuned` over the configs of q's dtype, per VARIANT."""
    configs = received_configs(has(variant, "IEEE"))
    key = ["T_BUCKET", "S_BUCKET", "D"]
    return autotuned(
        RECEIVED_KERNEL,
        variant,
        key,
        lambda: [({"BLOCK_M": m, "BLOCK_N": n}, w, s) for m, n, w, s in configs],
    )


@torch.no_grad()
def received_triton(q, k, lse, softmax_scale, mods: ScoreMods) -> dict[str, torch.Tensor]:
    """See the module docstring: {"sum", "max", "count"} (B, Hq, S) fp32, the column pass's state."""
    B, Hq, T, _ = q.shape
    S = k.shape[2]
    k, keep, window = key_padding(q, k, mods)
    out = torch.zeros(len(KEY_STATE), B, Hq, S, dtype=torch.float32, device=q.device)
    if T == 0 or S == 0 or B * Hq == 0:
        return dict(zip(KEY_STATE, out, strict=True))
    mods = mods.replace(sinks=None)  # the sinks are in lse
    inputs, constexprs = arguments(q, k, None, keep, window, softmax_scale, mods, DEFAULT_MEASURE, None, out)
    outputs = Outputs(out, out, out, 0, 0, 0, 0, B * Hq * S)
    lse = lse.to(device=q.device, dtype=torch.float32).contiguous()
    kernel, autotuned = _kernel(constexprs["VARIANT"])
    blocks = {} if autotuned else FIXED_BLOCKS
    block_n = blocks.get("BLOCK_N")

    def grid(meta):
        return (triton.cdiv(S, meta["BLOCK_N"] if block_n is None else block_n), B * Hq)

    buckets = (triton.next_power_of_2(T), triton.next_power_of_2(S))
    constexprs.pop("EXTRAS")  # no accumulator: the column pass keeps sum, max and count
    kernel[grid](inputs, lse, outputs, *buckets, **constexprs, **blocks)
    return dict(zip(KEY_STATE, out, strict=True))
