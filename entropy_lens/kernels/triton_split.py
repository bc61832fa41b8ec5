"""The split-key kernel of the decode step (triton_decode.py): one program per (split, batch·head)
streams its chunk of the keys the rows see into a partial state from empty, with the row kernel's
key-block step (`triton_steps.key_block`: every score modifier and accumulator means the same here).

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

from entropy_lens.kernels.triton_steps import (
    bits,
    key_bounds,
    load_tile,
    score_scales,
    start_state,
    stream_keys,
)

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
    q = load_tile(Q + b * sqb + h * sqh, rows, sqt, dims, sqd, T, D, CAST_F32)
    score = score_scales(SCALE, ALIBI, h, SOFTCAP, HAS_SOFTCAP, HAS_ALIBI)
    EXTRAS: tl.constexpr = bits(HAS_W, HAS_C, HAS_LK, HAS_D, HAS_F, HAS_MK, HAS_RK)
    VARIANT: tl.constexpr = bits(
        CAUSAL, HAS_WINDOW, HAS_KEEP, CAST_F32, IEEE, WITH_OUTPUT, HAS_SOFTCAP, HAS_ALIBI
    )
    # an empty state: the sink, if any, joins in the combine, once
    state = start_state(0.0, False, WITH_OUTPUT, EXTRAS, BLOCK_M, BLOCK_D)
    # the key blocks the rows see: the row kernel's bounds for its one block of rows
    k_start, full_start, full_end, k_end = key_bounds(
        OFFSET, S, WINDOW, CAUSAL, HAS_WINDOW, HAS_KEEP, BLOCK_M, BLOCK_N
    )
    # this split's share, whole key blocks: [lo, hi), cut by the two bounds into masked, unmasked, masked
    chunk = tl.cdiv(tl.cdiv(k_end - k_start, SPLITS), BLOCK_N) * BLOCK_N
    lo = tl.minimum(k_start + split * chunk, k_end)
    hi = tl.minimum(lo + chunk, k_end)
    cut_a = tl.minimum(tl.maximum(full_start, lo), hi)
    cut_b = tl.minimum(tl.maximum(full_end, cut_a), hi)
    keys = (K + b * skb + kv * skh, V + b * svb + kv * svh, KEEP + b * skeep_b, sks, skd, svs, svd, skeep_s)
    geometry = (rows, dims, S, OFFSET, WINDOW, FIRST_KEYS, RECENT_KEYS)
    state = stream_keys(q, state, (lo, cut_a, cut_b, hi), keys, geometry, score, VARIANT, EXTRAS, D, BLOCK_N)
    m, l, u, acc, w, c, lk, dist, f, mk, rk = state
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
