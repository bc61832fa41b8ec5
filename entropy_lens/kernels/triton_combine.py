"""The combine of the decode step (triton_decode.py): one program per batch·head merges the splits'
partial states (triton_split.py) exactly, as merge.py merges key shards, in two passes over the splits:

    m = max(σ_h, max_s m_s)         (σ_h the sink's logit, −inf without sinks: the sink enters here once)
    α_s = 2^(m_s − m), δ_s = m_s − m (0 for a split that saw no key: its α is 0 too)
    l = Σ α_s l_s,  u = Σ α_s (u_s + δ_s l_s),  w = Σ α_s (w_s + 2δ_s u_s + δ_s² l_s),  c = Σ α_s² c_s,
    lk, d, f, rk = Σ α_s ·_s,  mk = max_s mk_s,  out = Σ α_s acc_s / l

in log2 units, as the row kernel keeps them; the sink, the state (σ, 1, 0) (c = 1), adds α_σ = 2^(σ − m)
to l and α_σ² to c, α_σ δ_σ to u and α_σ δ_σ² to w, as `merge.sink_state` merged in does. It ends as
the row kernel ends: entropy and sink mass read here (H = ln l − ln2·u/l, p_sink = 2^(σ − m)/l), or with
STORE_STATE the final state stored in nats slot by slot for `stats.read_stats`; and the output acc/l
(0 for a row with no outcome) in the (B, T, Hq, D) layout.
"""

from __future__ import annotations

import triton
import triton.language as tl

from entropy_lens.kernels.triton_steps import block_d, finish_rows, has, heads, sink_score


@triton.jit
def combine_kernel(
    I,  # triton_steps.Inputs (the row kernel's: its sizes and sink logits)
    P,  # triton_split.Parts: the splits' partial states and output sums
    O,  # triton_steps.Outputs (the row kernel's)
    SPLITS,  # the splits per (batch, head)
    # compile-time, as the row kernel's
    D: tl.constexpr,
    VARIANT: tl.constexpr,
    EXTRAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    b, h, _ = heads(I, pid_bh, 1)
    T = I.T
    PART_SLOT = P.PART_SLOT
    rows = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, block_d(D))
    live = rows < T
    base = P.PART + pid_bh.to(tl.int64) * SPLITS * T + rows
    # pass 1: the common max m over the splits and the sink
    sink = sink_score(I, h, VARIANT)
    if has(VARIANT, "HAS_SINKS"):
        m = tl.zeros([BLOCK_M], tl.float32) + sink
    else:
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    mk = tl.full([BLOCK_M], float("-inf"), tl.float32) if has(EXTRAS, "mk") else 0.0
    for s in range(SPLITS):
        m = tl.maximum(m, tl.load(base + s * T, mask=live, other=float("-inf")))
        if has(EXTRAS, "mk"):  # a max over keys, no sum
            mk = tl.maximum(mk, tl.load(base + s * T + 8 * PART_SLOT, mask=live, other=float("-inf")))
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # no outcome in the row
    # pass 2: each side's sums moved to m (module docstring); the sink first, a state (σ, 1, 0)
    if has(VARIANT, "HAS_SINKS"):
        a_sink = tl.exp2(sink - m_safe)
        d_sink = sink - m_safe
        l = a_sink
        u = a_sink * d_sink
        w = a_sink * d_sink * d_sink if has(EXTRAS, "w") else 0.0
        c = a_sink * a_sink if has(EXTRAS, "c") else 0.0
    else:
        l = tl.zeros([BLOCK_M], tl.float32)
        u = tl.zeros([BLOCK_M], tl.float32)
        w = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "w") else 0.0
        c = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "c") else 0.0
    lk = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "lk") else 0.0
    dist = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "d") else 0.0
    f = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "f") else 0.0
    rk = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "rk") else 0.0
    acc = tl.zeros([BLOCK_M, block_d(D)], tl.float32) if has(VARIANT, "WITH_OUTPUT") else 0.0
    for s in range(SPLITS):
        at = base + s * T
        m_s = tl.load(at, mask=live, other=float("-inf"))
        l_s = tl.load(at + PART_SLOT, mask=live, other=0.0)
        u_s = tl.load(at + 2 * PART_SLOT, mask=live, other=0.0)
        alpha = tl.exp2(m_s - m_safe)  # 0 for a split that saw no key (m_s = −inf)
        delta = tl.where(l_s > 0, m_s - m_safe, 0.0)
        if has(EXTRAS, "w"):
            w_s = tl.load(at + 3 * PART_SLOT, mask=live, other=0.0)
            w += alpha * (w_s + delta * (2.0 * u_s + delta * l_s))
        if has(EXTRAS, "c"):
            c += alpha * alpha * tl.load(at + 4 * PART_SLOT, mask=live, other=0.0)
        if has(EXTRAS, "lk"):
            lk += alpha * tl.load(at + 5 * PART_SLOT, mask=live, other=0.0)
        if has(EXTRAS, "d"):
            dist += alpha * tl.load(at + 6 * PART_SLOT, mask=live, other=0.0)
        if has(EXTRAS, "f"):
            f += alpha * tl.load(at + 7 * PART_SLOT, mask=live, other=0.0)
        if has(EXTRAS, "rk"):
            rk += alpha * tl.load(at + 9 * PART_SLOT, mask=live, other=0.0)
        l += alpha * l_s
        u += alpha * (u_s + delta * l_s)
        if has(VARIANT, "WITH_OUTPUT"):
            cell = (pid_bh * SPLITS + s).to(tl.int64) * T
            part = tl.load(
                P.PACC + (cell + rows[:, None]) * block_d(D) + dims[None, :], mask=live[:, None], other=0.0
            )
            acc += alpha[:, None] * part
    # the row kernel's ending: the state in nats slot by slot, or entropy and sink mass read here; the output
    state = (m, l, u, acc, w, c, lk, dist, f, mk, rk)
    finish_rows(O, pid_bh, b, h, 0, T, state, sink, D, VARIANT, EXTRAS)
