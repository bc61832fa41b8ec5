"""The steps every Triton statistics kernel takes, written once: the row kernel (triton_entropy.py), the
decode step's split and combine kernels (triton_split.py, triton_combine.py) and the column pass of
attention received (triton_received.py) call them, so a score, an accumulator and a stored state mean
the same in each, and code that is compiled only on the occasional GPU exists once.

On the device (`@triton.jit`, inlined where called: the compiled kernel is the one the steps written out
would give)::

    heads(I, pid_bh, GROUP) -> (b, h, kv): the batch, query head and key head of program axis pid_bh
    open_rows(I, pid_bh, rows, GROUP, D, VARIANT) -> (q, score, head): a row block's start
    load_tile(base, idx, s_idx, dims, s_d, N, D, VARIANT) -> (len(idx), BLOCK_D) tile of q or k
    score_scales(I, h, VARIANT) -> score (qk_scale, cap, slope)
    sink_score(I, h, VARIANT) -> σ_h·log2 e (0 without HAS_SINKS)
    start_state(sink, HAS_SINKS, VARIANT, EXTRAS, BLOCK_M, D) -> state
    key_bounds(first_row, S, WINDOW, VARIANT, BLOCK_M, BLOCK_N) -> bounds
    stream_keys(I, q, state, bounds, head, rows, score, VARIANT, EXTRAS, D, BLOCK_N) -> state
    key_block(q, state, keys, geometry, start, score, MASKED, VARIANT, EXTRAS, D, BLOCK_N) -> state
    score_tile(q, k, score, rows, cols, OFFSET, VARIANT) -> (s, behind)
    finish_rows(O, pid_bh, b, h, first, T, state, sink, D, VARIANT, EXTRAS)

Tuples carry what travels together (Triton flattens them, kernel arguments too), and `pack` packs the
compile-time flags into one constexpr int that `has` reads back, bit by bit, at compile time:

    I         Inputs: what every kernel reads (q, k, v, the key padding, the scales, the sinks, ALiBi's
              slopes, their strides and the sizes), one kernel argument (triton_launch.arguments)
    O         Outputs: where the rows' results go (the results, the sink mass, the output and its strides)
    state     (m, l, u, acc, w, c, lk, dist, f, mk, rk): the centred online-softmax state in log2 units
              (m the running max, l = Σ e, u = Σ e·(s − m), e = 2^(s − m)), the output's Σ e·v (acc) and
              the extra accumulators of stats.EXTRA_STATE, a scalar 0 where switched off
    head      (b, h, kv): the batch, the query head, its key head (`heads`)
    keys      (k_base, v_base, keep_base, sks, skd, svs, svd, skeep_s): one (batch, key head)'s keys
    geometry  (rows, dims, S, OFFSET, WINDOW, FIRST_KEYS, RECENT_KEYS): the rows' positions and the keys'
    score     (qk_scale, cap, slope): λ·log2 e (softcap: 2λ·log2 e / c), c·log2 e, the ALiBi slope·log2 e
    bounds    (k_start, full_start, full_end, k_end): key blocks masked, seen whole, masked
    VARIANT   pack(VARIANT_FLAGS, ...): the variant's switches (causal, a window, key padding, ...)
    EXTRAS    pack(stats.EXTRA_STATE, kept): the extra accumulators kept, in EXTRA_STATE's order

A new accumulator is one more slot of `state` (and entry of stats.EXTRA_STATE, its bit of EXTRAS), its
start here, its update in `key_block`, its unit in `NATS`, its merge in triton_combine.py. The host's side,
the launchers' prologue that builds these arguments, is triton_launch.py.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from entropy_lens.kernels.stats import EXTRA_STATE, STATE

# a variant's compile-time switches: bit i of the constexpr VARIANT is the i-th
VARIANT_FLAGS = (
    "CAUSAL",  # query i sees keys j <= i + S − T
    "HAS_WINDOW",  # and keys j > i + S − T − WINDOW
    "HAS_KEEP",  # key padding (KEEP)
    "CAST_F32",  # tiles cast to fp32 (fp32 inputs, or the interpreter)
    "IEEE",  # fp32 products in tl.dot (fp32 inputs: no TF32)
    "WITH_OUTPUT",  # values: the attention output too
    "HAS_SOFTCAP",
    "HAS_ALIBI",
    "HAS_SINKS",
    "STORE_STATE",  # the final state stored (every statistic read off it on the host), not entropy
)
# the bit of each flag: VARIANT_FLAGS' in VARIANT, stats.EXTRA_STATE's (the accumulators kept) in EXTRAS
FLAG_BITS = {name: bit for names in (VARIANT_FLAGS, EXTRA_STATE) for bit, name in enumerate(names)}
assert len(FLAG_BITS) == len(VARIANT_FLAGS) + len(EXTRA_STATE), "a flag named in both"
# what the kernels multiply each slot of the state (stats.STATE, then stats.EXTRA_STATE) by to store it in
# nats, stats.py's units: m, u and mk are kept in log2 units (ln 2), w in log2² units ((ln 2)²)
LN2 = 0.6931471805599453
NATS = {"m": LN2, "l": 1.0, "u": LN2, "w": 0.4804530139182014, "c": 1.0, "lk": 1.0, "d": 1.0, "f": 1.0}
NATS |= {"mk": LN2, "rk": 1.0}
assert list(NATS) == [*STATE, *EXTRA_STATE], "each slot of the state has its unit, in order"


def pack(names: tuple[str, ...], on) -> int:
    """The flags of `names` that are on, as one int (names[i] at 2^i): VARIANT of VARIANT_FLAGS and EXTRAS
    of stats.EXTRA_STATE, the constexprs `has` reads back. `on`: {name: bool} or the names that are on."""
    on = {name for name, value in on.items() if value} if isinstance(on, dict) else set(on)
    if on - set(names):
        raise ValueError(f"unknown flags {sorted(on - set(names))}; choose from {', '.join(names)}")
    return sum(1 << bit for bit, name in enumerate(names) if name in on)


@triton.constexpr_function
def has(BITS, name) -> bool:
    """Whether flag `name` (of VARIANT_FLAGS or stats.EXTRA_STATE) is on in BITS, a `pack`ed VARIANT or
    EXTRAS: a constexpr, so a branch on it is taken at compile time (a tuple of flags would pass them as
    values, not constants, to a called helper)."""
    return (BITS >> FLAG_BITS[name]) & 1 == 1


@triton.constexpr_function
def block_d(D) -> int:
    """The head dim D padded to a power of two, at least 16 (`tl.dot`'s least): a tile's width."""
    return max(16, triton.next_power_of_2(D))


class Inputs(NamedTuple):
    """What every Triton statistics kernel reads, one kernel argument (Triton flattens it), built by
    triton_launch.arguments: the pointers (a feature that is off: any pointer), the strides of q, k, v (0 without
    values) and the key padding (0 without), and the sizes: Hq, T, S, OFFSET = S − T, the window (0 without),
    K of first_mass (keys j < K), W of recent_mass (keys pos_i − W < j <= pos_i), the softcap c (1.0
    without)."""

    Q: torch.Tensor  # (B, Hq, T, D)
    K: torch.Tensor  # (B, Hkv, S, D)
    V: torch.Tensor  # (B, Hkv, S, D)
    KEEP: torch.Tensor  # (B, S) int8: 0 masked, 1 kept, 2 kept and one of first_mass's first K real keys
    SCALE: torch.Tensor  # (Hq,) fp32: λ_h
    SINKS: torch.Tensor  # (Hq,) fp32: the sink logits σ_h
    ALIBI: torch.Tensor  # (Hq,) fp32: the ALiBi slopes
    sqb: int
    sqh: int
    sqt: int
    sqd: int
    skb: int
    skh: int
    sks: int
    skd: int
    svb: int
    svh: int
    svs: int
    svd: int
    skeep_b: int
    skeep_s: int
    H_Q: int
    T: int
    S: int
    OFFSET: int
    WINDOW: int
    FIRST_KEYS: int
    RECENT_KEYS: int
    SOFTCAP: float


class Outputs(NamedTuple):
    """Where a kernel stores its rows' results, one kernel argument (Triton flattens it): OUT (n, ...)
    fp32, n results OUT_SLOT apart (the row kernels: entropy, or the final state m, l, u and the
    accumulators kept; the column pass: sum, max, count), the sink mass (B, Hq, T) fp32 and the output
    (B, Hq, T, D) view of (B, T, Hq, D) memory with its strides (a feature that is off: any pointer,
    strides 0)."""

    OUT: torch.Tensor
    SINK_MASS: torch.Tensor
    O: torch.Tensor
    sob: int
    soh: int
    sot: int
    sod: int
    OUT_SLOT: int


@triton.jit
def heads(I, pid_bh, GROUP: tl.constexpr):
    """(b, h, kv) of program axis `pid_bh` = b·Hq + h: the batch, the query head, its key head (GQA: h //
    GROUP), in 64 bits (B·T·Hq·D passes 2^31 at long T)."""
    b = (pid_bh // I.H_Q).to(tl.int64)
    h = (pid_bh % I.H_Q).to(tl.int64)
    return b, h, h // GROUP


@triton.jit
def open_rows(I, pid_bh, rows, GROUP: tl.constexpr, D: tl.constexpr, VARIANT: tl.constexpr):
    """(q, score, head): what a program of query `rows` of (batch, head) `pid_bh` streams the keys with:
    their q tile, the head's score scales, and head = `heads`' (b, h, kv)."""
    b, h, kv = heads(I, pid_bh, GROUP)
    dims = tl.arange(0, block_d(D))
    q = load_tile(I.Q + b * I.sqb + h * I.sqh, rows, I.sqt, dims, I.sqd, I.T, D, VARIANT)
    return q, score_scales(I, h, VARIANT), (b, h, kv)


@triton.jit
def load_tile(base, idx, s_idx, dims, s_d, N, D: tl.constexpr, VARIANT: tl.constexpr):
    """The (len(idx), BLOCK_D) tile at `base` + idx·s_idx + dims·s_d, 0 past N rows and D dims (64-bit
    row offsets: B·T·Hq·D passes 2^31 at long T); fp32 with CAST_F32."""
    x = tl.load(
        base + idx[:, None].to(tl.int64) * s_idx + dims[None, :] * s_d,
        mask=(idx[:, None] < N) & (dims[None, :] < D),
        other=0.0,
    )
    if has(VARIANT, "CAST_F32"):
        x = x.to(tl.float32)
    return x


@triton.jit
def score_scales(I, h, VARIANT: tl.constexpr):
    """(qk_scale, cap, slope) of head h, scores in log2 units (λ·log2 e folded into the scale, exp2
    below). Softcap: c·tanh(x), x = λ q·k / c, is cap·(1 − 2/(1 + 2^(q·k · qk_scale))) with cap = c·log2 e
    and qk_scale = λ·2·log2 e / c (2^(that) = e^(2x)); ALiBi: the slope·log2 e, the bias in log2 units."""
    if has(VARIANT, "HAS_SOFTCAP"):
        qk_scale = tl.load(I.SCALE + h) * (2.8853900817779268 / I.SOFTCAP)
        cap = I.SOFTCAP * 1.4426950408889634
    else:
        qk_scale = tl.load(I.SCALE + h) * 1.4426950408889634
        cap = 1.0
    if has(VARIANT, "HAS_ALIBI"):
        slope = tl.load(I.ALIBI + h) * 1.4426950408889634
    else:
        slope = 0.0
    return qk_scale, cap, slope


@triton.jit
def sink_score(I, h, VARIANT: tl.constexpr):
    """Head h's sink logit in log2 units, σ_h·log2 e (0.0 without HAS_SINKS): the first score of every
    row, as the row kernel starts its state and the combine merges it."""
    if has(VARIANT, "HAS_SINKS"):
        sink = tl.load(I.SINKS + h) * 1.4426950408889634
    else:
        sink = 0.0
    return sink


@triton.jit
def start_state(
    sink,
    HAS_SINKS: tl.constexpr,
    VARIANT: tl.constexpr,
    EXTRAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    D: tl.constexpr,
):
    """The state before any key: empty (m = −inf, l = 0), or with HAS_SINKS the sink as the first score of
    every row (m = σ·log2 e = `sink`, l = 1, u = 0, c = 1); each accumulator switched off a scalar 0."""
    if HAS_SINKS:
        m = tl.zeros([BLOCK_M], tl.float32) + sink
        l = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
    u = tl.zeros([BLOCK_M], tl.float32)
    if has(VARIANT, "WITH_OUTPUT"):
        acc = tl.zeros([BLOCK_M, block_d(D)], tl.float32)  # Σ e^(s−m) v: the attention output
    else:
        acc = 0.0
    w = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "w") else 0.0  # Σ e (s − m)², log2² units
    if has(EXTRAS, "c"):  # Σ e²: the sink's e^0 = 1 first, as l
        c = tl.zeros([BLOCK_M], tl.float32) + (1.0 if HAS_SINKS else 0.0)
    else:
        c = 0.0
    lk = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "lk") else 0.0  # Σ_keys e (l without the sink)
    dist = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "d") else 0.0  # Σ_keys e (pos_i − j)
    f = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "f") else 0.0  # Σ_{keys j < K} e
    if has(EXTRAS, "mk"):  # max_keys s, log2 units: no key seen yet
        mk = tl.full([BLOCK_M], float("-inf"), tl.float32)
    else:
        mk = 0.0
    rk = tl.zeros([BLOCK_M], tl.float32) if has(EXTRAS, "rk") else 0.0  # Σ_{keys 0 <= pos_i − j < W} e
    return m, l, u, acc, w, c, lk, dist, f, mk, rk


@triton.jit
def key_bounds(first_row, S, WINDOW, VARIANT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(k_start, full_start, full_end, k_end) of a block of BLOCK_M rows whose first lies at key position
    `first_row` (row + S − T): its rows see key blocks [k_start, k_end), up to the causal end and, with a
    window, from its far edge; blocks [full_start, full_end) every row sees whole run unmasked, those
    before (the window's far edge) and after (diagonal, sequence end) masked, as all are under key
    padding."""
    k_start = 0
    k_end = S
    full_start = 0
    full_end = S
    HAS_WINDOW: tl.constexpr = has(VARIANT, "HAS_WINDOW")
    if has(VARIANT, "CAUSAL"):
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
    if has(VARIANT, "HAS_KEEP"):  # key padding masks every block (and marks first_mass's keys there)
        full_start = k_start
        full_end = k_start
    return k_start, full_start, full_end, k_end


@triton.jit
def stream_keys(
    I,
    q,
    state,
    bounds,
    head,
    rows,
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
    written out would give. The key head's pointers (`keys`) and the rows' `geometry` are built here,
    after the caller's bounds: built before them, the split kernel at head dim 128 on sm_90 (255
    registers) put 16 B on the stack."""
    b, _, kv = head
    keys = (
        I.K + b * I.skb + kv * I.skh,
        I.V + b * I.svb + kv * I.svh,
        I.KEEP + b * I.skeep_b,
        I.sks,
        I.skd,
        I.svs,
        I.svd,
        I.skeep_s,
    )
    geometry = (rows, tl.arange(0, block_d(D)), I.S, I.OFFSET, I.WINDOW, I.FIRST_KEYS, I.RECENT_KEYS)
    for part in tl.static_range(3):
        if has(VARIANT, "HAS_WINDOW") or part != 0:
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
    CAUSAL: tl.constexpr = has(VARIANT, "CAUSAL")
    HAS_KEEP: tl.constexpr = has(VARIANT, "HAS_KEEP")
    CAST_F32: tl.constexpr = has(VARIANT, "CAST_F32")
    cols = start + tl.arange(0, BLOCK_N)
    kv_mask = dims[None, :] < D  # interior blocks lie below S
    if MASKED:
        kv_mask = kv_mask & (cols[:, None] < S)
    k = tl.load(k_base + cols[:, None] * sks + dims[None, :] * skd, mask=kv_mask, other=0.0)
    if CAST_F32:
        k = k.to(tl.float32)
    s, behind = score_tile(q, k, score, rows, cols, OFFSET, VARIANT)
    if MASKED:
        valid = (cols[None, :] < S) & (rows[:, None] >= 0)
        if CAUSAL:
            valid = valid & (behind >= 0)
            if has(VARIANT, "HAS_WINDOW"):
                valid = valid & (behind < WINDOW)
        if HAS_KEEP:
            keep = tl.load(keep_base + cols * skeep_s, mask=cols < S, other=0)
            valid = valid & (keep[None, :] != 0)
        s = tl.where(valid, s, float("-inf"))
    s_max = tl.max(s, 1)
    if has(EXTRAS, "mk"):  # −inf where masked: the largest score over the keys, no rescaling
        mk = tl.maximum(mk, s_max)
    m_new = tl.maximum(m, s_max)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet
    alpha = tl.exp2(m - m_safe)  # 0 while m = -inf
    shift = tl.where(l > 0, (m - m_safe) * l, 0.0)
    d = s - m_safe[:, None]
    e = tl.exp2(d)  # 0 where masked
    if MASKED:
        d = tl.where(valid, d, 0.0)  # e·d would be 0·(−inf)
    if has(EXTRAS, "w"):  # w ← α (w + 2δu + δ²l) + Σ e d², δ = m − m' (0 before any outcome); δl is the shift
        delta = tl.where(l > 0, m - m_safe, 0.0)
        w = alpha * (w + delta * (2.0 * u + shift)) + tl.sum(e * d * d, 1)
    if has(EXTRAS, "c"):
        c = alpha * alpha * c + tl.sum(e * e, 1)
    if has(EXTRAS, "lk"):
        lk = alpha * lk + tl.sum(e, 1)
    if has(EXTRAS, "d"):  # e·(pos_i − j) from the row, not Σ e·j: exact in fp32 below 2^24 tokens
        pos = (rows + OFFSET).to(tl.float32)
        dist = alpha * dist + tl.sum(e * (pos[:, None] - cols.to(tl.float32)[None, :]), 1)
    if has(EXTRAS, "f"):
        f = alpha * f
        if HAS_KEEP and MASKED:  # key padding marks each row's first K real keys 2 (under key padding
            # every block is masked: see full_start); e is 0 on the keys a row does not see
            f += tl.sum(tl.where(keep[None, :] == 2, e, 0.0), 1)
        elif start < FIRST_KEYS:  # only the blocks that hold one of the first K keys
            f += tl.sum(tl.where(cols[None, :] < FIRST_KEYS, e, 0.0), 1)
    if has(EXTRAS, "rk"):  # keys pos_i − W < j <= pos_i; causal rows give keys past pos_i e = 0 already
        recent = cols[None, :] > (rows + (OFFSET - RECENT_KEYS))[:, None]
        if not CAUSAL:
            recent = recent & (cols[None, :] <= (rows + OFFSET)[:, None])
        rk = alpha * rk + tl.sum(tl.where(recent, e, 0.0), 1)
    l = alpha * l + tl.sum(e, 1)
    u = alpha * (u + shift) + tl.sum(e * d, 1)
    if has(VARIANT, "WITH_OUTPUT"):
        v = tl.load(v_base + cols[:, None] * svs + dims[None, :] * svd, mask=kv_mask, other=0.0)
        if CAST_F32:
            pv = tl.dot(e, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(e.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
    return m_new, l, u, acc, w, c, lk, dist, f, mk, rk


@triton.jit
def score_tile(q, k, score, rows, cols, OFFSET, VARIANT: tl.constexpr):
    """(s, behind): the scores of q's rows on k's keys in log2 units, softcapped and with ALiBi's bias
    (after the cap, masked or not: the bias is not a mask), and how far each key col lies behind each row
    (rows + OFFSET − cols: a causal row sees only keys at behind >= 0, so causal ALiBi needs no |·|)."""
    qk_scale, cap, slope = score
    if has(VARIANT, "IEEE"):
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    if has(VARIANT, "HAS_SOFTCAP"):
        s = cap - (2.0 * cap) / (1.0 + tl.exp2(s * qk_scale))  # cap·tanh: ±cap where e^(2x) is inf or 0
    else:
        s = s * qk_scale
    behind = rows[:, None] + OFFSET - cols[None, :]
    if has(VARIANT, "HAS_ALIBI"):
        if has(VARIANT, "CAUSAL"):
            s = s - slope * behind.to(tl.float32)
        else:
            s = s - slope * tl.abs(behind).to(tl.float32)
    return s, behind


@triton.jit
def finish_rows(
    O,
    pid_bh,
    b,
    h,
    first,
    T,
    state,
    sink,
    D: tl.constexpr,
    VARIANT: tl.constexpr,
    EXTRAS: tl.constexpr,
):
    """The results of the BLOCK_M rows `first` + i of (batch, head) `pid_bh` = b·Hq + h, those below T, in
    O: with STORE_STATE the final state in nats, slot by slot (m, l, u, then the accumulators kept, in
    stats.EXTRA_STATE's order, OUT_SLOT apart; `NATS` the units), else entropy and sink mass read off it
    here (stats.py's reads of them, in log2 units: H = ln l − ln2·u/l, p_sink = 2^(σ − m)/l); and with
    WITH_OUTPUT the output acc/l (0 for a row with no outcome)."""
    m, l, u, acc = state[0], state[1], state[2], state[3]  # then the extras, state[4 + i]
    BLOCK_M: tl.constexpr = l.shape[0]
    rows = first + tl.arange(0, BLOCK_M)
    live = rows < T
    at = pid_bh.to(tl.int64) * T + rows
    if has(VARIANT, "STORE_STATE"):
        at = O.OUT + at
        tl.store(at, in_nats(m, "m"), mask=live)
        tl.store(at + O.OUT_SLOT, l, mask=live)
        at += 2 * O.OUT_SLOT
        tl.store(at, in_nats(u, "u"), mask=live)
        for i in tl.static_range(extra_count()):  # unrolled: each accumulator kept, in the next slot
            if has(EXTRAS, extra_name(i)):
                at += O.OUT_SLOT
                tl.store(at, in_nats(state[4 + i], extra_name(i)), mask=live)
    else:
        ent = tl.where(l > 0, tl.log(l) - 0.6931471805599453 * u / l, 0.0)  # u is in log2 units: ln 2 · u
        ent = tl.maximum(ent, 0.0)
        tl.store(O.OUT + at, ent, mask=live)
        if has(VARIANT, "HAS_SINKS"):
            tl.store(O.SINK_MASS + at, tl.exp2(sink - m) / l, mask=live)
    if has(VARIANT, "WITH_OUTPUT"):
        o = tl.where(l[:, None] > 0, acc / l[:, None], 0.0)
        dims = tl.arange(0, block_d(D))
        if has(VARIANT, "STORE_STATE"):  # the block's first row in 64 bits, its rows' offsets in 32: no
            # 64-bit row index lives across the row kernel's loop (its state variants spill it otherwise)
            o_rows = tl.cast(first, tl.int64) * O.sot + tl.arange(0, BLOCK_M)[:, None] * O.sot
        else:
            o_rows = rows[:, None].to(tl.int64) * O.sot
        tl.store(
            O.O + b * O.sob + h * O.soh + o_rows + dims[None, :] * O.sod,
            o.to(O.O.dtype.element_ty),
            mask=live[:, None] & (dims[None, :] < D),
        )


@triton.jit
def in_nats(x, name: tl.constexpr):
    """Slot `name` of the state in stats.py's units (`NATS`: log2 units times ln 2, log2² times (ln 2)²)."""
    if nats(name) != 1.0:
        x = x * nats(name)
    return x


@triton.constexpr_function
def nats(name) -> float:
    """What slot `name` of the state is multiplied by to be in nats: NATS[name]."""
    return NATS[name]


@triton.constexpr_function
def extra_count() -> int:
    """len(stats.EXTRA_STATE): the extra accumulators a kernel may keep."""
    return len(EXTRA_STATE)


@triton.constexpr_function
def extra_name(i) -> str:
    """stats.EXTRA_STATE[i]: the name of the i-th extra accumulator (state slot 4 + i, EXTRAS' bit i)."""
    return EXTRA_STATE[i]
