"""The column pass of attention received in plain torch, tiled and exact: the CPU path and the fallback
everywhere (the contract is kernels/received.py's).

Given each row's log-sum-exp lse_i (the row pass's m + ln l, the sink among its outcomes), the
probability row i gives key j is p_ij = e^(s_ij − lse_i), recomputed from the score tile as flash
attention's backward does. The loop runs over key blocks (outer) and, for each, the query blocks whose
rows can see it (causal: rows at or after the block's first key; a sliding window: rows whose window
reaches its last key), and keeps per key

    sum_j = Σ_i p_ij,   max_j = max_i p_ij,   count_j = #{i : row i may attend key j}

over the rows that count: a row whose lse is +∞ gives nothing and is not counted (the dispatcher puts
+∞ on the rows that do not count, and a row with no outcome has it already). A masked score is −inf,
so its p is e^(−inf) = 0 and it is not counted; a score that is merely far below lse gives p = 0 but
is counted (the row may attend the key).

Memory: one (B, Hq, block_q, block_k) fp32 score tile and the (3, B, Hq, S) result; never T × S. The
score tiles are `torch_chunked.ScoreTiles`', so both passes see the same scores.
"""

from __future__ import annotations

import torch

from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.torch_chunked import NEG_INF, ScoreTiles

KEY_STATE = ("sum", "max", "count")  # the per-key accumulators every column pass keeps, in this order
BLOCK_Q, BLOCK_K = 256, 256  # the column pass's default tile (query rows, keys)


def row_span(T: int, k0: int, k1: int, mods: ScoreMods, offset: int) -> tuple[int, int]:
    """(q_start, q_end): the query rows that may see some key of k0..k1 (row i sits at key position
    i + offset): causal, i + offset >= k0; with a sliding window W, i + offset − (k1 − 1) < W."""
    q_start = max(0, k0 - offset) if mods.causal else 0
    q_end = T if mods.window is None else min(T, mods.window + k1 - 1 - offset)
    return q_start, max(q_start, q_end)


@torch.no_grad()
def received_torch(
    q, k, lse, softmax_scale, mods: ScoreMods, *, block_q=BLOCK_Q, block_k=BLOCK_K
) -> dict[str, torch.Tensor]:
    """q (B, Hq, T, D), k (B, Hkv, S, D), lse (B, Hq, T) (+∞: a row that counts for nothing),
    softmax_scale (Hq,) fp32 and `mods` validated upstream -> {"sum", "max", "count"}, each (B, Hq, S)
    float32 (module docstring)."""
    B, Hq, T, _ = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = Hq // Hkv
    offset = S - T
    tiles = ScoreTiles(q, k, softmax_scale, mods, offset)
    lse = lse.to(device=q.device, dtype=torch.float32).view(B, Hkv, G, T, 1)
    counted = torch.isfinite(lse)
    state = torch.zeros(len(KEY_STATE), B, Hq, S, dtype=torch.float32, device=q.device)
    for k0 in range(0, S, block_k):
        k1 = min(k0 + block_k, S)
        total = torch.zeros(B, Hkv, G, k1 - k0, device=q.device)
        largest, count = torch.zeros_like(total), torch.zeros_like(total)
        q_start, q_end = row_span(T, k0, k1, mods, offset)
        for q0 in range(q_start, q_end, block_q):
            q1 = min(q0 + block_q, q_end)
            s = tiles.scores(tiles.queries(q0, q1), q0, q1, k0, k1)  # (B, Hkv, G, bq, bk), −inf masked
            rows = lse[..., q0:q1, :]
            count += ((s != NEG_INF) & counted[..., q0:q1, :]).sum(-2)
            p = s.sub_(rows).exp_()  # e^(s − lse): 0 where masked (−inf) or the row does not count (+∞)
            total += p.sum(-2)
            largest = torch.maximum(largest, p.amax(-2))
        state[:, :, :, k0:k1] = torch.stack([total, largest, count]).view(len(KEY_STATE), B, Hq, k1 - k0)
    return dict(zip(KEY_STATE, state, strict=True))
