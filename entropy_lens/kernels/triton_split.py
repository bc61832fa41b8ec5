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

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from entropy_lens.kernels.stats import EXTRA_STATE, STATE
from entropy_lens.kernels.triton_steps import (
    block_d,
    extra_count,
    extra_name,
    has,
    key_bounds,
    open_rows,
    start_state,
    stream_keys,
)

PART_SLOTS = (*STATE, *EXTRA_STATE)  # PART's slots, in this order: m, l, u, then every extra accumulator


class Parts(NamedTuple):
    """The splits' partial states, one kernel argument of the split and combine kernels (Triton flattens
    it): PART (len(PART_SLOTS), B·Hq, SPLITS, T) fp32, PART_SLOT = B·Hq·SPLITS·T apart, and with values
    PACC (B·Hq, SPLITS, T, BLOCK_D) fp32 (else any pointer)."""

    PART: torch.Tensor
    PACC: torch.Tensor
    PART_SLOT: int


@triton.jit
def split_kernel(
    I,  # triton_steps.Inputs (the row kernel's)
    P,  # Parts: where the splits' partial states go
    SPLITS,  # the splits per (batch, head)
    S_BUCKET,  # the power-of-two bucket of S the autotuner is keyed by
    # compile-time, as the row kernel's (the sinks join in the combine)
    GROUP: tl.constexpr,
    D: tl.constexpr,
    VARIANT: tl.constexpr,
    EXTRAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    split = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)  # every query row of the step: T <= BLOCK_M
    q, score, head = open_rows(I, pid_bh, rows, GROUP, D, VARIANT)
    # an empty state: the sink, if any, joins in the combine, once
    state = start_state(0.0, False, VARIANT, EXTRAS, BLOCK_M, D)
    # the key blocks the rows see: the row kernel's bounds for its one block of rows
    k_start, full_start, full_end, k_end = key_bounds(I.OFFSET, I.S, I.WINDOW, VARIANT, BLOCK_M, BLOCK_N)
    # this split's share, whole key blocks: [lo, hi), cut by the two bounds into masked, unmasked, masked
    chunk = tl.cdiv(tl.cdiv(k_end - k_start, SPLITS), BLOCK_N) * BLOCK_N
    lo = tl.minimum(k_start + split * chunk, k_end)
    hi = tl.minimum(lo + chunk, k_end)
    cut_a = tl.minimum(tl.maximum(full_start, lo), hi)
    cut_b = tl.minimum(tl.maximum(full_end, cut_a), hi)
    state = stream_keys(I, q, state, (lo, cut_a, cut_b, hi), head, rows, score, VARIANT, EXTRAS, D, BLOCK_N)
    # the split's partial state, log2 units, in PART's fixed slots; the output's unnormalised sum
    live = rows < I.T
    cell = (pid_bh * SPLITS + split).to(tl.int64) * I.T
    at = P.PART + cell + rows
    m, l, u, acc = state[0], state[1], state[2], state[3]  # then the extras, state[4 + i]
    tl.store(at, m, mask=live)
    tl.store(at + P.PART_SLOT, l, mask=live)
    tl.store(at + 2 * P.PART_SLOT, u, mask=live)
    for i in tl.static_range(extra_count()):  # unrolled: the accumulators kept, each in its slot 3 + i
        if has(EXTRAS, extra_name(i)):
            tl.store(at + (3 + i) * P.PART_SLOT, state[4 + i], mask=live)
    if has(VARIANT, "WITH_OUTPUT"):
        dims = tl.arange(0, block_d(D))
        tl.store(P.PACC + (cell + rows[:, None]) * block_d(D) + dims[None, :], acc, mask=live[:, None])
