"""The steps every Triton statistics kernel takes, written once: the row kernel (triton_entropy.py), the
decode step's split and combine kernels (triton_split.py, triton_combine.py) and the column pass of
attention received (triton_received.py) call them, so a score, an accumulator and a stored state mean
the same in each, and code that is compiled only on the occasional GPU exists once.

On the device (`@triton.jit`, inlined where called: the compiled kernel is the one the steps written out
would give)::

    load_tile(base, idx, s_idx, dims, s_d, N, D, CAST_F32) -> (len(idx), BLOCK_D) tile of q or k
    score_scales(SCALE, ALIBI, h, SOFTCAP, HAS_SOFTCAP, HAS_ALIBI) -> score (qk_scale, cap, slope)
    start_state(sink, HAS_SINKS, WITH_OUTPUT, EXTRAS, BLOCK_M, BLOCK_D) -> state
    key_bounds(first_row, S, WINDOW, CAUSAL, HAS_WINDOW, HAS_KEEP, BLOCK_M, BLOCK_N) -> bounds
    stream_keys(q, state, bounds, keys, geometry, score, VARIANT, EXTRAS, D, BLOCK_N) -> state
    key_block(q, state, keys, geometry, start, score, MASKED, VARIANT, EXTRAS, D, BLOCK_N) -> state
    finish_rows(OUT, SINK_MASS, at, live, OUT_SLOT, state, sink, STORE_STATE, HAS_SINKS, EXTRAS)

Tuples carry what travels together (Triton flattens them), and `bits` packs the compile-time flags:

    state     (m, l, u, acc, w, c, lk, dist, f, mk, rk): the centred online-softmax state in log2 units
              (m the running max, l = Σ e, u = Σ e·(s − m), e = 2^(s − m)), the output's Σ e·v (acc) and
              the extra accumulators of stats.EXTRA_STATE, a scalar 0 where switched off
    keys      (k_base, v_base, keep_base, sks, skd, svs, svd, skeep_s): one (batch, key head)'s keys
    geometry  (rows, dims, S, OFFSET, WINDOW, FIRST_KEYS, RECENT_KEYS): the rows' positions and the keys'
    score     (qk_scale, cap, slope): λ·log2 e (softcap: 2λ·log2 e / c), c·log2 e, the ALiBi slope·log2 e
    bounds    (k_start, full_start, full_end, k_end): key blocks masked, seen whole, masked
    VARIANT   bits(CAUSAL, HAS_WINDOW, HAS_KEEP, CAST_F32, IEEE, WITH_OUTPUT, HAS_SOFTCAP, HAS_ALIBI)
    EXTRAS    bits(HAS_W, HAS_C, HAS_LK, HAS_D, HAS_F, HAS_MK, HAS_RK): EXTRA_FLAGS' switches, in its order

A new accumulator is one more slot of `state` and bit of EXTRAS (and entry of EXTRA_FLAGS), its start here, its update
in `key_block`, its store in `finish_rows`, its slot in triton_split.PART_SLOTS and its merge in
triton_combine.py. On the host, `prepare` is every launcher's prologue: the mask as key padding and a
window, the accumulators kept, the result buffers, the output's, and the constexpr flags.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from entropy_lens.flags import Measure
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.stats import STATE, RowStats, accumulators, log_sum_exp, read_stats
from entropy_lens.statistics import DEFAULT_STATS, ENTROPY, SINK_MASS

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# the kernels' compile-time switch of each accumulator of stats.EXTRA_STATE (EXTRAS, in this order)
EXTRA_FLAGS = {
    "w": "HAS_W",
    "c": "HAS_C",
    "lk": "HAS_LK",
    "d": "HAS_D",
    "f": "HAS_F",
    "mk": "HAS_MK",
    "rk": "HAS_RK",
}


@triton.constexpr_function
def bits(*flags):
    """The compile-time flags as one constexpr: flag i at 2^i (VARIANT, EXTRAS), which a helper reads back
    as `(BITS & 2^i) != 0` (a tuple would pass them as values, not constants, to a called helper)."""
    return sum(int(bool(flag)) << i for i, flag in enumerate(flags))


@triton.jit
def load_tile(base, idx, s_idx, dims, s_d, N, D: tl.constexpr, CAST_F32: tl.constexpr):
    """The (len(idx), BLOCK_D) tile at `base` + idx·s_idx + dims·s_d, 0 past N rows and D dims (64-bit
    row offsets: B·T·Hq·D passes 2^31 at long T); fp32 with CAST_F32."""
    x = tl.load(
        base + idx[:, None].to(tl.int64) * s_idx + dims[None, :] * s_d,
        mask=(idx[:, None] < N) & (dims[None, :] < D),
        other=0.0,
    )
    if CAST_F32:
        x = x.to(tl.float32)
    return x


@triton.jit
def score_scales(SCALE, ALIBI, h, SOFTCAP, HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr):
    """(qk_scale, cap, slope) of head h, scores in log2 units (λ·log2 e folded into the scale, exp2
    below). Softcap: c·tanh(x), x = λ q·k / c, is cap·(1 − 2/(1 + 2^(q·k · qk_scale))) with cap = c·log2 e
    and qk_scale = λ·2·log2 e / c (2^(that) = e^(2x)); ALiBi: the slope·log2 e, the bias in log2 units."""
    if HAS_SOFTCAP:
        qk_scale = tl.load(SCALE + h) * (2.8853900817779268 / SOFTCAP)
        cap = SOFTCAP * 1.4426950408889634
    else:
        qk_scale = tl.load(SCALE + h) * 1.4426950408889634
        cap = 1.0
    if HAS_ALIBI:
        slope = tl.load(ALIBI + h) * 1.4426950408889634
    else:
        slope = 0.0
    return qk_scale, cap, slope


@triton.jit
def start_state(
    sink,
    HAS_SINKS: tl.constexpr,
    WITH_OUTPUT: tl.constexpr,
    EXTRAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """The state before any key: empty (m = −inf, l = 0), or with HAS_SINKS the sink as the first score of
    every row (m = σ·log2 e = `sink`, l = 1, u = 0, c = 1); each accumulator switched off a scalar 0."""
    HAS_W: tl.constexpr = (EXTRAS & 1) != 0
    HAS_C: tl.constexpr = (EXTRAS & 2) != 0
    HAS_LK: tl.constexpr = (EXTRAS & 4) != 0
    HAS_D: tl.constexpr = (EXTRAS & 8) != 0
    HAS_F: tl.constexpr = (EXTRAS & 16) != 0
    HAS_MK: tl.constexpr = (EXTRAS & 32) != 0
    HAS_RK: tl.constexpr = (EXTRAS & 64) != 0
    if HAS_SINKS:
        m = tl.zeros([BLOCK_M], tl.float32) + sink
        l = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
    u = tl.zeros([BLOCK_M], tl.float32)
    if WITH_OUTPUT:
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # Σ e^(s−m) v: the attention output
    else:
        acc = 0.0
    w = tl.zeros([BLOCK_M], tl.float32) if HAS_W else 0.0  # Σ e (s − m)², log2² units
    if HAS_C:  # Σ e²: the sink's e^0 = 1 first, as l
        c = tl.zeros([BLOCK_M], tl.float32) + (1.0 if HAS_SINKS else 0.0)
    else:
        c = 0.0
    lk = tl.zeros([BLOCK_M], tl.float32) if HAS_LK else 0.0  # Σ_keys e (l without the sink)
    dist = tl.zeros([BLOCK_M], tl.float32) if HAS_D else 0.0  # Σ_keys e (pos_i − j)
    f = tl.zeros([BLOCK_M], tl.float32) if HAS_F else 0.0  # Σ_{keys j < K} e
    if HAS_MK:  # max_keys s, log2 units: no key seen yet
        mk = tl.full([BLOCK_M], float("-inf"), tl.float32)
    else:
        mk = 0.0
    rk = tl.zeros([BLOCK_M], tl.float32) if HAS_RK else 0.0  # Σ_{keys 0 <= pos_i − j < W} e
    return m, l, u, acc, w, c, lk, dist, f, mk, rk


@triton.jit
def key_bounds(
    first_row,
    S,
    WINDOW,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_KEEP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """(k_start, full_start, full_end, k_end) of a block of BLOCK_M rows whose first lies at key position
    `first_row` (row + S − T): its rows see key blocks [k_start, k_end), up to the causal end and, with a
    window, from its far edge; blocks [full_start, full_end) every row sees whole run unmasked, those
    before (the window's far edge) and after (diagonal, sequence end) masked, as all are under key
    padding."""
    k_start = 0
    k_end = S
    full_start = 0
    full_end = S
    if CAUSAL:
        last_row = first_row + BLOCK_M - 1
        k_end = tl.minimum(S, last_row + 1)
        full_end = tl.maximum(tl.minimum(S, first_row + 1), 0)
        if HAS_WINDOW:
            k_start = (tl.maximum(first_row - WINDOW + 1, 0) // BLOCK_N) * BLOCK_N
            full_start = tl.cdiv(tl.maximum(last_row - WINDOW + 1, 0), BLOCK_N) * BLOCK_N
    full_end = (full_end // BLOCK_N) * BLOCK_N
    if HAS_WINDOW:  # a window narrower than the row block leaves no block every row sees whole
        full_start = tl.minimum(tl.maximum(full_start, k_start), tl.maximum(k_end, k_start))
        full_end = tl.maximum(tl.minimum(full_end, k_end), full_start)
    if HAS_KEEP:  # key padding masks every block (and marks first_mass's keys there)
        full_start = k_start
        full_end = k_start
    return k_start, full_start, full_end, k_end


@triton.jit
def stream_keys(
    q,
    state,
    bounds,
    keys,
    geometry,
    score,
    VARIANT: tl.constexpr,
    EXTRAS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """The state after the key blocks of `bounds`, in three ranges, in order: [k_start, full_start) the
    window's far edge (masked; only with a window), [full_start, full_end) seen whole by every row
    (unmasked), [full_end, k_end) the diagonal and the sequence end (masked). `static_range` unrolls the
    three at compile time: each range compiles with its own constexpr MASKED, the code three loops
    written out would give."""
    HAS_WINDOW: tl.constexpr = (VARIANT & 2) != 0
    for part in tl.static_range(3):
        if HAS_WINDOW or part != 0:
            lo = bounds[0] if part == 0 else bounds[1] if part == 1 else bounds[2]
            hi = bounds[1] if part == 0 else bounds[2] if part == 1 else bounds[3]
            for start in range(lo, hi, BLOCK_N):
                state = key_block(
                    q, state, keys, geometry, start, score, part != 1, VARIANT, EXTRAS, D, BLOCK_N
                )
    return state


@triton.jit
def key_block(
    q,
    state,
    keys,
    geometry,
    start,
    score,
    MASKED: tl.constexpr,
    VARIANT: tl.constexpr,
    EXTRAS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One key block's update of the centred state (m, l, u) (log2 units), of the extra accumulators
    switched on (stats.py's rules) and, fused, of the output."""
    m, l, u, acc, w, c, lk, dist, f, mk, rk = state
    k_base, v_base, keep_base, sks, skd, svs, svd, skeep_s = keys
    rows, dims, S, OFFSET, WINDOW, FIRST_KEYS, RECENT_KEYS = geometry
    qk_scale, cap, slope = score
    CAUSAL: tl.constexpr = (VARIANT & 1) != 0
    HAS_WINDOW: tl.constexpr = (VARIANT & 2) != 0
    HAS_KEEP: tl.constexpr = (VARIANT & 4) != 0
    CAST_F32: tl.constexpr = (VARIANT & 8) != 0
    IEEE: tl.constexpr = (VARIANT & 16) != 0
    WITH_OUTPUT: tl.constexpr = (VARIANT & 32) != 0
    HAS_SOFTCAP: tl.constexpr = (VARIANT & 64) != 0
    HAS_ALIBI: tl.constexpr = (VARIANT & 128) != 0
    HAS_W: tl.constexpr = (EXTRAS & 1) != 0
    HAS_C: tl.constexpr = (EXTRAS & 2) != 0
    HAS_LK: tl.constexpr = (EXTRAS & 4) != 0
    HAS_D: tl.constexpr = (EXTRAS & 8) != 0
    HAS_F: tl.constexpr = (EXTRAS & 16) != 0
    HAS_MK: tl.constexpr = (EXTRAS & 32) != 0
    HAS_RK: tl.constexpr = (EXTRAS & 64) != 0
    cols = start + tl.arange(0, BLOCK_N)
    kv_mask = dims[None, :] < D  # interior blocks lie below S
    if MASKED:
        kv_mask = kv_mask & (cols[:, None] < S)
    k = tl.load(k_base + cols[:, None] * sks + dims[None, :] * skd, mask=kv_mask, other=0.0)
    if CAST_F32:
        k = k.to(tl.float32)
    if IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    if HAS_SOFTCAP:
        s = cap - (2.0 * cap) / (1.0 + tl.exp2(s * qk_scale))  # cap·tanh: ±cap where e^(2x) is inf or 0
    else:
        s = s * qk_scale
    if HAS_ALIBI or (MASKED and CAUSAL):
        behind = rows[:, None] + OFFSET - cols[None, :]  # how far key col lies behind the row
    if HAS_ALIBI:  # −slope·|behind| after the cap, masked or not; causal rows see only keys behind them
        if CAUSAL:
            s = s - slope * behind.to(tl.float32)
        else:
            s = s - slope * tl.abs(behind).to(tl.float32)
    if MASKED:
        valid = (cols[None, :] < S) & (rows[:, None] >= 0)
        if CAUSAL:
            valid = valid & (behind >= 0)
            if HAS_WINDOW:
                valid = valid & (behind < WINDOW)
        if HAS_KEEP:
            keep = tl.load(keep_base + cols * skeep_s, mask=cols < S, other=0)
            valid = valid & (keep[None, :] != 0)
        s = tl.where(valid, s, float("-inf"))
    s_max = tl.max(s, 1)
    if HAS_MK:  # −inf where masked: the largest score over the keys, no rescaling
        mk = tl.maximum(mk, s_max)
    m_new = tl.maximum(m, s_max)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet
    alpha = tl.exp2(m - m_safe)  # 0 while m = -inf
    shift = tl.where(l > 0, (m - m_safe) * l, 0.0)
    d = s - m_safe[:, None]
    e = tl.exp2(d)  # 0 where masked
    if MASKED:
        d = tl.where(valid, d, 0.0)  # e·d would be 0·(−inf)
    if HAS_W:  # w ← α (w + 2δu + δ²l) + Σ e d², δ = m − m' (0 before any outcome); δl is the shift
        delta = tl.where(l > 0, m - m_safe, 0.0)
        w = alpha * (w + delta * (2.0 * u + shift)) + tl.sum(e * d * d, 1)
    if HAS_C:
        c = alpha * alpha * c + tl.sum(e * e, 1)
    if HAS_LK:
        lk = alpha * lk + tl.sum(e, 1)
    if HAS_D:  # e·(pos_i − j) from the row, not Σ e·j: exact in fp32 below 2^24 tokens
        pos = (rows + OFFSET).to(tl.float32)
        dist = alpha * dist + tl.sum(e * (pos[:, None] - cols.to(tl.float32)[None, :]), 1)
    if HAS_F:
        f = alpha * f
        if HAS_KEEP and MASKED:  # key padding marks each row's first K real keys 2 (under key padding
            # every block is masked: see full_start); e is 0 on the keys a row does not see
            f += tl.sum(tl.where(keep[None, :] == 2, e, 0.0), 1)
        elif start < FIRST_KEYS:  # only the blocks that hold one of the first K keys
            f += tl.sum(tl.where(cols[None, :] < FIRST_KEYS, e, 0.0), 1)
    if HAS_RK:  # keys pos_i − W < j <= pos_i; causal rows give keys past pos_i e = 0 already
        recent = cols[None, :] > (rows + (OFFSET - RECENT_KEYS))[:, None]
        if not CAUSAL:
            recent = recent & (cols[None, :] <= (rows + OFFSET)[:, None])
        rk = alpha * rk + tl.sum(tl.where(recent, e, 0.0), 1)
    l = alpha * l + tl.sum(e, 1)
    u = alpha * (u + shift) + tl.sum(e * d, 1)
    if WITH_OUTPUT:
        v = tl.load(v_base + cols[:, None] * svs + dims[None, :] * svd, mask=kv_mask, other=0.0)
        if CAST_F32:
            pv = tl.dot(e, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(e.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
    return m_new, l, u, acc, w, c, lk, dist, f, mk, rk


@triton.jit
def finish_rows(
    OUT,
    SINK_MASS,
    at,
    live,
    OUT_SLOT,
    state,
    sink,
    STORE_STATE: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    EXTRAS: tl.constexpr,
):
    """The rows' results at offset `at` (B·Hq·T units) of OUT, where `live`: the final state in nats, slot
    by slot (stats.py's units; m, u and w are in log2 units here: m, l, u, then the accumulators switched
    on, in EXTRA_FLAGS' order, OUT_SLOT apart), or entropy and sink mass read off it here (stats.py's reads
    of them, in log2 units: H = ln l − ln2·u/l, p_sink = 2^(σ − m)/l)."""
    m, l, u, _acc, w, c, lk, dist, f, mk, rk = state
    HAS_W: tl.constexpr = (EXTRAS & 1) != 0
    HAS_C: tl.constexpr = (EXTRAS & 2) != 0
    HAS_LK: tl.constexpr = (EXTRAS & 4) != 0
    HAS_D: tl.constexpr = (EXTRAS & 8) != 0
    HAS_F: tl.constexpr = (EXTRAS & 16) != 0
    HAS_MK: tl.constexpr = (EXTRAS & 32) != 0
    HAS_RK: tl.constexpr = (EXTRAS & 64) != 0
    if STORE_STATE:
        at = OUT + at
        tl.store(at, m * 0.6931471805599453, mask=live)
        tl.store(at + OUT_SLOT, l, mask=live)
        at += 2 * OUT_SLOT
        tl.store(at, u * 0.6931471805599453, mask=live)
        if HAS_W:
            at += OUT_SLOT
            tl.store(at, w * 0.4804530139182014, mask=live)  # (ln 2)²
        if HAS_C:
            at += OUT_SLOT
            tl.store(at, c, mask=live)
        if HAS_LK:
            at += OUT_SLOT
            tl.store(at, lk, mask=live)
        if HAS_D:
            at += OUT_SLOT
            tl.store(at, dist, mask=live)
        if HAS_F:
            at += OUT_SLOT
            tl.store(at, f, mask=live)
        if HAS_MK:
            at += OUT_SLOT
            tl.store(at, mk * 0.6931471805599453, mask=live)
        if HAS_RK:
            at += OUT_SLOT
            tl.store(at, rk, mask=live)
    else:
        ent = tl.where(l > 0, tl.log(l) - 0.6931471805599453 * u / l, 0.0)  # u is in log2 units: ln 2 · u
        ent = tl.maximum(ent, 0.0)
        tl.store(OUT + at, ent, mask=live)
        if HAS_SINKS:
            tl.store(SINK_MASS + at, tl.exp2(sink - m) / l, mask=live)


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


@dataclass
class Launch:
    """What a row launcher (triton_entropy._launch, triton_decode._launch_split) hands its kernels, built
    once by `prepare`.

    Args:
        k: (B, Hkv, S, D) keys in q's dtype.
        v: (B, Hkv, S, D) values in q's dtype, or None (no output).
        keep: (B|1, S) int8 key padding (2: first_mass's keys), or None.
        kept: the accumulators the kernels store (None: entropy and sink mass read in the kernel).
        results: (n, B, Hq, T) float32, the kernel's OUT: entropy, or the state m, l, u and `kept`.
        rows: {name: (B, Hq, T) view}: what the kernel fills (lk and mk alias l and m without a sink).
        out: the output, a (B, Hq, T, D) view of (B, T, Hq, D) memory (fp32 under the interpreter), or
            None without values.
        scale, sinks, alibi: (Hq,) float32 on q's device (sinks, alibi None where off).
        scalars: (FIRST_KEYS, RECENT_KEYS, SOFTCAP), the kernels' last runtime arguments.
        constexprs: the compile-time flags both row kernels take (GROUP ... HAS_ALIBI and EXTRAS').
        variant: the flags an autotuner is kept per (output, fp32, window, softcap, ALiBi, kept).
    """

    k: torch.Tensor
    v: torch.Tensor | None
    keep: torch.Tensor | None
    window: int | None
    kept: tuple[str, ...] | None
    results: torch.Tensor
    rows: dict
    out: torch.Tensor | None
    scale: torch.Tensor
    sinks: torch.Tensor | None
    alibi: torch.Tensor | None
    scalars: tuple
    constexprs: dict
    variant: tuple

    def pointer(self, tensor):
        """`tensor`, or the results (any pointer) where a feature is off."""
        return self.results if tensor is None else tensor

    @property
    def extras(self) -> dict[str, bool]:
        """{HAS_W: ..., HAS_RK: ...}: the accumulators' switches."""
        return {flag: self.constexprs[flag] for flag in EXTRA_FLAGS.values()}


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
    sinks, alibi = mods.sinks, mods.alibi_slopes
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
    on_device = {"device": q.device, "dtype": torch.float32}
    fp32 = q.dtype == torch.float32
    constexprs = {
        "GROUP": Hq // k.shape[1],
        "BLOCK_D": max(16, triton.next_power_of_2(D)),
        "D": D,
        "CAUSAL": bool(mods.causal),
        "HAS_WINDOW": window is not None,
        "HAS_KEEP": keep is not None,
        "CAST_F32": INTERPRET or fp32,
        "IEEE": fp32,
        "WITH_OUTPUT": v is not None,
        "HAS_SOFTCAP": mods.softcap is not None,
        "HAS_ALIBI": alibi is not None,
        **{flag: kept is not None and name in kept for name, flag in EXTRA_FLAGS.items()},
    }
    # K of first_mass (at most S: every key lies below S) and W of recent_mass (at most S + 1: pos_i − S < 0)
    scalars = (
        min(int(measure.first_keys), S),
        min(int(measure.recent_keys), S + 1),
        float(mods.softcap or 1.0),
    )
    return Launch(
        k=k,
        v=None if v is None else v.to(q.dtype),
        keep=keep,
        window=window,
        kept=kept,
        results=results,
        rows=rows,
        out=out,
        scale=softmax_scale.to(**on_device).contiguous(),
        sinks=None if sinks is None else sinks.to(**on_device).contiguous(),
        alibi=None if alibi is None else alibi.to(**on_device).contiguous(),
        scalars=scalars,
        constexprs=constexprs,
        variant=(v is not None, fp32, window is not None, mods.softcap is not None, alibi is not None, kept),
    )
