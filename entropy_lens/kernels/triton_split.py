"""The split-key kernel of the decode step (triton_decode.py): one program per (split, batch·head)
streams its chunk of the keys the rows see into a partial state from empty, with the row kernel's
key-block step (`triton_entropy.key_block`: every score modifier and accumulator means the same here).

A chunk is whole key blocks, [k_start + split·chunk, + chunk) of the rows' range [k_start, k_end) (the
row kernel's bounds for one block of rows; a window's far edge moves k_start), and is cut as the row
kernel cuts its range: blocks every row sees whole run unmasked, the diagonal, a window's edge, the
sequence end and key padding masked. A split past the range's end stores an empty state (m = −inf, l = 0),
the merge's identity. Stored: PART (10, B·Hq, SPLITS, T) fp32 in the fixed slots of `PART_SLOTS`, log2
units as the row kernel keeps them (only the accumulators switched on), and with values PACC (B·Hq,
SPLITS, T, BLOCK_D) fp32, the unnormalised Σ e·v; triton_combine.py merges them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from entropy_lens.kernels.triton_entropy import key_block

PART_SLOTS = ("m", "l", "u", "w", "c", "lk", "d", "f", "mk", "rk")  # PART's slots, in this order


@triton.jit
def split_kernel(
    # data: q, k, v, scales (Hq,) fp32, key padding (B, S) int8 (the row kernel's: 2 marks first_mass's
    # keys), the splits' partial states (10, B·Hq, SPLITS, T) fp32 and output sums (B·Hq, SPLITS, T,
    # BLOCK_D) fp32, ALiBi slopes (Hq,) fp32
    Q,
    K,
    V,
    SCALE,
    KEEP,
    PART,
    PACC,
    ALIBI,
    # strides of q, k, v, the key padding
    sqb,
    sqh,
    sqt,
    sqd,
    skb,
    skh,
    sks,
    skd,
    svb,
    svh,
    svs,
    svd,
    skeep_b,
    skeep_s,
    # sizes: OFFSET = S − T; PART_SLOT = B·Hq·SPLITS·T, the stride between two slots of PART; the bucket of
    # S keys the autotuner; FIRST_KEYS, RECENT_KEYS as the row kernel's; the softcap c
    H_Q,
    T,
    S,
    OFFSET,
    WINDOW,
    SPLITS,
    PART_SLOT,
    S_BUCKET,
    FIRST_KEYS,
    RECENT_KEYS,
    SOFTCAP,
    # compile-time: GQA group, head dim padded, variant flags (the row kernel's), block sizes
    GROUP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    D: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_KEEP: tl.constexpr,
    CAST_F32: tl.constexpr,
    IEEE: tl.constexpr,
    WITH_OUTPUT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_C: tl.constexpr,
    HAS_LK: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_F: tl.constexpr,
    HAS_MK: tl.constexpr,
    HAS_RK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    split = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H_Q).to(tl.int64)
    h = (pid_bh % H_Q).to(tl.int64)
    kv = h // GROUP
    rows = tl.arange(0, BLOCK_M)  # every query row of the step: T <= BLOCK_M
    dims = tl.arange(0, BLOCK_D)
    q = tl.load(
        Q + b * sqb + h * sqh + rows[:, None].to(tl.int64) * sqt + dims[None, :] * sqd,
        mask=(rows[:, None] < T) & (dims[None, :] < D),
        other=0.0,
    )
    if CAST_F32:
        q = q.to(tl.float32)
    if HAS_SOFTCAP:  # as the row kernel: cap·(1 − 2/(1 + 2^(q·k · qk_scale)))
        qk_scale = tl.load(SCALE + h) * (2.8853900817779268 / SOFTCAP)
        cap = SOFTCAP * 1.4426950408889634
    else:
        qk_scale = tl.load(SCALE + h) * 1.4426950408889634
        cap = 1.0
    if HAS_ALIBI:
        slope = tl.load(ALIBI + h) * 1.4426950408889634
    else:
        slope = 0.0
    # an empty state: the sink, if any, joins in the combine, once
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    u = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32) if WITH_OUTPUT else 0.0
    w = tl.zeros([BLOCK_M], tl.float32) if HAS_W else 0.0
    c = tl.zeros([BLOCK_M], tl.float32) if HAS_C else 0.0
    lk = tl.zeros([BLOCK_M], tl.float32) if HAS_LK else 0.0
    dist = tl.zeros([BLOCK_M], tl.float32) if HAS_D else 0.0
    f = tl.zeros([BLOCK_M], tl.float32) if HAS_F else 0.0
    mk = tl.full([BLOCK_M], float("-inf"), tl.float32) if HAS_MK else 0.0
    rk = tl.zeros([BLOCK_M], tl.float32) if HAS_RK else 0.0
    # the key blocks the rows see, [k_start, k_end), and those every row sees whole, [full_start,
    # full_end): the row kernel's bounds for its one block of rows
    k_start = 0
    k_end = S
    full_start = 0
    full_end = S
    if CAUSAL:
        last_row = OFFSET + BLOCK_M - 1
        k_end = tl.minimum(S, last_row + 1)
        full_end = tl.maximum(tl.minimum(S, OFFSET + 1), 0)
        if HAS_WINDOW:
            k_start = (tl.maximum(OFFSET - WINDOW + 1, 0) // BLOCK_N) * BLOCK_N
            full_start = tl.cdiv(tl.maximum(last_row - WINDOW + 1, 0), BLOCK_N) * BLOCK_N
    full_end = (full_end // BLOCK_N) * BLOCK_N
    if HAS_WINDOW:
        full_start = tl.minimum(tl.maximum(full_start, k_start), tl.maximum(k_end, k_start))
        full_end = tl.maximum(tl.minimum(full_end, k_end), full_start)
    if HAS_KEEP:  # key padding masks every block (and marks first_mass's keys there)
        full_start = k_start
        full_end = k_start
    # this split's share, whole key blocks: [lo, hi), cut by the two bounds into masked, unmasked, masked
    chunk = tl.cdiv(tl.cdiv(k_end - k_start, SPLITS), BLOCK_N) * BLOCK_N
    lo = tl.minimum(k_start + split * chunk, k_end)
    hi = tl.minimum(lo + chunk, k_end)
    cut_a = tl.minimum(tl.maximum(full_start, lo), hi)
    cut_b = tl.minimum(tl.maximum(full_end, cut_a), hi)
    k_base = K + b * skb + kv * skh
    v_base = V + b * svb + kv * svh
    keep_base = KEEP + b * skeep_b
    for part in tl.static_range(3):
        if HAS_WINDOW or part != 0:  # without a window [lo, cut_a) is empty
            start_at = lo if part == 0 else cut_a if part == 1 else cut_b
            stop_at = cut_a if part == 0 else cut_b if part == 1 else hi
            for start in range(start_at, stop_at, BLOCK_N):
                m, l, u, acc, w, c, lk, dist, f, mk, rk = key_block(
                    q,
                    m,
                    l,
                    u,
                    acc,
                    w,
                    c,
                    lk,
                    dist,
                    f,
                    mk,
                    rk,
                    k_base,
                    v_base,
                    keep_base,
                    sks,
                    skd,
                    svs,
                    svd,
                    skeep_s,
                    rows,
                    dims,
                    start,
                    S,
                    OFFSET,
                    WINDOW,
                    qk_scale,
                    cap,
                    slope,
                    FIRST_KEYS,
                    RECENT_KEYS,
                    part != 1,
                    CAUSAL,
                    HAS_WINDOW,
                    HAS_KEEP,
                    CAST_F32,
                    IEEE,
                    WITH_OUTPUT,
                    HAS_SOFTCAP,
                    HAS_ALIBI,
                    HAS_W,
                    HAS_C,
                    HAS_LK,
                    HAS_D,
                    HAS_F,
                    HAS_MK,
                    HAS_RK,
                    D,
                    BLOCK_N,
                )
    # the split's partial state, log2 units, in PART's fixed slots; the output's unnormalised sum
    live = rows < T
    cell = (pid_bh * SPLITS + split).to(tl.int64) * T
    at = PART + cell + rows
    tl.store(at, m, mask=live)
    tl.store(at + PART_SLOT, l, mask=live)
    tl.store(at + 2 * PART_SLOT, u, mask=live)
    if HAS_W:
        tl.store(at + 3 * PART_SLOT, w, mask=live)
    if HAS_C:
        tl.store(at + 4 * PART_SLOT, c, mask=live)
    if HAS_LK:
        tl.store(at + 5 * PART_SLOT, lk, mask=live)
    if HAS_D:
        tl.store(at + 6 * PART_SLOT, dist, mask=live)
    if HAS_F:
        tl.store(at + 7 * PART_SLOT, f, mask=live)
    if HAS_MK:
        tl.store(at + 8 * PART_SLOT, mk, mask=live)
    if HAS_RK:
        tl.store(at + 9 * PART_SLOT, rk, mask=live)
    if WITH_OUTPUT:
        tl.store(PACC + (cell + rows[:, None]) * BLOCK_D + dims[None, :], acc, mask=live[:, None])
