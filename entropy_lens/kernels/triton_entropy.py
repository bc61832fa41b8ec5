"""Attention entropy and every other row statistic as a Triton kernel: the GPU path of
`attention_entropy` / `attention_stats` / `attention_with_entropy` with backend="triton".

Contract (the same as `torch_chunked.row_stats_torch`):
    q      (B, Hq, T, D)  bf16 / fp16 / fp32, any strides
    k      (B, Hkv, S, D) same dtype; query head h reads key head h // (Hq / Hkv) (GQA/MQA by
           indexing, keys are never repeated)
    softmax_scale  (Hq,) fp32: λ_h, scores are λ_h q·k
    causal query i sees keys j <= i + S − T (bottom-right alignment)
    window None or a sliding window W: query i sees keys j > i + S − T − W as well (causal only)
    mask   None, or a validated bool 4-D mask, True = attend. Key padding, a sliding window or both
           ((B|1, 1, 1, S), or (B|1, 1, T, S) as transformers builds them, see `masks.decompose`) run
           in the kernel; other masks (per query or per head) raise ValueError: `kernels.plan`
           sends them to torch_chunked before any launch, so the backend recorded is the one that ran.
    softcap None or c > 0: scores become c·tanh(s/c) before masking (Gemma2)
    sinks  None or (Hq,) fp32 sink logits σ_h (gpt-oss): one more score per row with no value
    alibi_slopes None or (Hq,) fp32 ALiBi slopes (BLOOM, MPT, Falcon): scores become
           s − slope_h·|i + S − T − j| after the softcap and before masking (flash-attn's definition)
    stats  the row statistics asked for, of stats.ROW_STATS (declared in entropy_lens.statistics.STATISTICS);
           first_mass's K = first_keys: the keys r <= j < r + K, r each batch row's first real key,
           mods.first_key; recent_mass's W = recent_keys: the keys pos_i − W < j <= pos_i
    -> RowStats: each statistic (B, Hq, T) float32 (entropy in nats; sink_mass zeros without sinks;
       every one 0 for a row with no attendable key and no sink) and, with v, the output.

One program handles BLOCK_M query rows of one (batch, head) and streams over key blocks with the
centred online-softmax state of torch_chunked.py (m, l, u; H = log l − u/l), accumulated in fp32,
with scores in log2 units (λ·log2 e folded into the scale, exp2; H = ln l − ln2·u/l). Causal
programs stop at the last key block their rows can see (~T²/2 work) and, with a window, start at
the first one (~T·W work); key blocks that all rows see whole run without any masking, only the
diagonal, the window's far edge, the sequence end and key padding are masked. The first block of a
row may be fully masked (m = −inf): every −inf·0 is avoided with `where`.
Softcap (HAS_SOFTCAP): c·tanh(λ q·k / c) in log2 units is (c·log2 e)·tanh(x), x = q·k · λ/c; tanh is
written with exp2, tanh x = 1 − 2/(1 + e^(2x)) (absolute error ~1e-7, i.e. ~c·1e-7 in a score),
because the interpreter has no libdevice tanh, so the code tested on CPU is the code compiled, and
because it needs fewer registers than sign/abs forms (the fused sm_80 configs sit at 255).
Sinks (HAS_SINKS): the state starts from the sink, m = σ_h·log2 e, l = 1, u = 0 (torch_chunked.py);
p_sink = 2^(m_σ − m)/l is stored per row.
ALiBi (HAS_ALIBI): the bias in log2 units, (slope_h·log2 e)·|row + OFFSET − col| (the slope scaled once
per program, as λ is), is subtracted from every key block's scores after the cap, in the blocks that
run unmasked too: the bias is not a mask. Causal blocks need no |·| (every key a row sees lies behind it).

Statistics: entropy and sink mass alone (the default) are read in the kernel, H = ln l − ln2·u/l and
p_sink = 2^(m_σ − m)/l, stored per row. Any other statistic (STORE_STATE) makes the kernel store its
final state instead, in nats, and `stats.read_stats` reads every statistic asked for off it on the
host, as for torch_chunked: m, l, u, then only the extra accumulators of stats.EXTRA_STATE the
statistics need (`stats.accumulators`), each a compile-time switch (HAS_W, HAS_C, HAS_LK, HAS_D, HAS_F,
HAS_MK, HAS_RK),
so a pass computes nothing that was not asked for and the default compiles to the kernel without them.
Each accumulator follows stats.py's update (torch_chunked._update_extra in torch) per key block, from
e = 2^(s − m') and the same α: w = Σ e (s − m)² (log2² units in the loop, (ln 2)² at the store), c = Σ e²
(1 at the start with a sink, as l), lk = Σ_keys e (accumulated only with a sink: without one it is l),
d = Σ_keys e·(pos_i − j) summed from the row (pos_i − j as fp32 per score, exact below 2^24 tokens),
never as pos_i·Σe − Σ e·j from absolute key positions, and f = Σ_{keys j < K} e (its tile sum only in the key
blocks that start below K), and mk = max_keys s (log2 units in the loop, ln 2 at the store; accumulated
only with a sink: without one it is m), and rk = Σ_{keys 0 <= pos_i − j < W} e (one comparison per score
with the row's window start: a causal row's later keys have e = 0 already; a branch skipping the blocks
behind every row's window cost the fp32 fused variant 55 registers and a stack). The sink is an outcome
of l, u, w and c, not of lk, d, f, mk, rk. A new statistic needs its accumulator's switch and update
here, and its read in stats.py.

Precision: bf16/fp16 tiles go to `tl.dot` natively with fp32 accumulation; fp32 tiles use IEEE
fp32 products (no TF32). Under the interpreter (TRITON_INTERPRET=1, CPU) every tile is cast to
fp32 first because the interpreter's `tl.dot` on bf16 is wrong.
Block sizes: `@triton.autotune` (keyed by the power-of-two buckets of T and S, so a growing KV cache
does not retune every step) over per-variant lists of configs that compile without register spills
when a CUDA driver is present (those with the extra accumulators are fewer: STATS_DROPS); fixed
(32, 32) otherwise (the interpreter). One autotuner per set of accumulators.

Fused variant (`row_stats_triton` with v): the same kernel with WITH_OUTPUT also streams V
and returns the attention output, the flash-attention forward plus the statistics' accumulators
(the output is the same whichever statistics ride along). `stream_triton` returns that variant's final
state instead (m, l, u in nats): the log-sum-exp m + ln l of a training step's flash backward
(kernels/train.py). The
capture picks between it and "sdpa output + entropy-only pass" by timing both on the GPU
(capture/fused.py); benchmarks/scan_gpu.py (kernel mode) reports the same comparison.
"""

from __future__ import annotations

import contextlib
import os

import torch
import triton
import triton.language as tl

from entropy_lens.flags import DEFAULT_MEASURE, Measure
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.stats import STATE, RowStats, accumulators, log_sum_exp, read_stats
from entropy_lens.statistics import DEFAULT_STATS, ENTROPY, SINK_MASS

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# the kernel's compile-time switch of each accumulator of stats.EXTRA_STATE
EXTRA_FLAGS = {
    "w": "HAS_W",
    "c": "HAS_C",
    "lk": "HAS_LK",
    "d": "HAS_D",
    "f": "HAS_F",
    "mk": "HAS_MK",
    "rk": "HAS_RK",
}
FIXED_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32}
# (BLOCK_M, BLOCK_N, num_warps, num_stages) that @triton.autotune tries on a GPU, per kernel variant:
# those that compile for sm_80 and sm_90 at head_dim 64 without spilling registers (kernel_static.py reads
# the cubins without a GPU; tests/kernels/test_triton_compile.py holds the lists to it). fp32 tiles use IEEE
# FMA products, no tensor cores, and only small tiles stay in registers. At head_dim 128 (sm_90) the
# (128, 64, 8, *) fused configs spill 136 B; the autotuner times them against the others.
ENTROPY_CONFIGS = ((64, 64, 4, 2), (128, 64, 4, 2), (128, 64, 8, 3), (128, 128, 8, 2), (64, 128, 4, 3))
FUSED_CONFIGS = ((64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 2), (128, 64, 8, 3), (64, 32, 4, 3))
FP32_CONFIGS = ((32, 32, 4, 2),)
# fp32 fused with a window and the extra accumulators (rk the seventh): (32, 32, 4, 2) puts 16 B on the stack
# at 255 registers on sm_80 (the same variant without rk: 200); (32, 16, 4, 2) takes none on sm_80 or sm_90
FP32_WINDOW_STATS_CONFIGS = ((32, 16, 4, 2),)
# the sliding-window variants hold two more loop bounds: these configs put 16 B on the stack there (sm_90)
WINDOW_DROPS = {False: ((64, 128, 4, 3),), True: ((64, 64, 4, 2), (64, 64, 4, 3))}
# so does the softcap's tanh in the fused variant (sm_80, which sits at 255 registers there without it)
SOFTCAP_DROPS = {False: (), True: ((64, 64, 4, 2), (64, 64, 4, 3))}
# ALiBi's bias spills on no config above without a window (BLOOM, MPT, Falcon have none). With a window
# and sinks the entropy variant puts 8 B on the stack at (64, 64, 4, 2) (sm_80); with a window, softcap
# and sinks the other configs here put 16-32 B there (sm_90). No model combines them; dropped all the same.
ALIBI_WINDOW_DROPS = {
    False: ((64, 64, 4, 2), (128, 64, 4, 2), (128, 128, 8, 2)),
    True: ((128, 64, 8, 2), (128, 64, 8, 3)),
}
# the final state and the extra accumulators (any statistic beyond entropy and sink mass; their variants
# compiled with all of them on): the configs of 64 scores per thread put 8-368 B on the stack in the
# statistics-only variant (sm_80 and sm_90), the fused (64, 64, 4, *) 8-72 B (sm_80 and sm_90) and
# (128, 64, 8, *) 8-72 B (sm_90). Left: (64, 64, 4, 2) and (128, 64, 8, 3) without the output (and only the
# latter with ALiBi and a window), (64, 32, 4, 3) fused, and fp32's (32, 32, 4, 2)
STATS_DROPS = {
    False: ((128, 64, 4, 2), (128, 128, 8, 2), (64, 128, 4, 3)),
    True: ((64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 2), (128, 64, 8, 3)),
}


def autotune_configs(
    with_output: bool,
    fp32: bool,
    window: bool = False,
    softcap: bool = False,
    alibi: bool = False,
    stats: bool = False,
) -> tuple[tuple[int, int, int, int], ...]:
    """The (BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner tries for a variant; `stats`: with
    extra accumulators (statistics beyond entropy and sink_mass)."""
    configs = FP32_CONFIGS if fp32 else FUSED_CONFIGS if with_output else ENTROPY_CONFIGS
    if fp32 and with_output and window and stats:
        configs = FP32_WINDOW_STATS_CONFIGS
    drops = (
        (WINDOW_DROPS[with_output] if window else ())
        + (SOFTCAP_DROPS[with_output] if softcap else ())
        + (ALIBI_WINDOW_DROPS[with_output] if alibi and window else ())
        + (STATS_DROPS[with_output] if stats else ())
    )
    return tuple(c for c in configs if c not in drops)


def _entropy_kernel(
    # data: q, k, v, scales (Hq,), key padding (B, S) int8 (0 masked, 1 kept, 2 kept and one of first_mass's
    # first K real keys of the row, with HAS_F under padding), the rows' results (n, B, Hq, T) fp32 (entropy;
    # with STORE_STATE the final state instead: m, l, u, then the extras switched on, in stats.EXTRA_STATE's
    # order), attention output, sink logits (Hq,) fp32, sink mass out (B, Hq, T) (not with STORE_STATE),
    # ALiBi slopes (Hq,) fp32
    Q,
    K,
    V,
    SCALE,
    KEEP,
    OUT,
    O,
    SINKS,
    SINK_MASS,
    ALIBI,
    # strides of q, k, v, the output, the key padding
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
    sob,
    soh,
    sot,
    sod,
    skeep_b,
    skeep_s,
    # sizes; OFFSET = S − T; the buckets of T and S key the autotuner; OUT_SLOT = B·Hq·T, the stride
    # between two results in OUT; FIRST_KEYS = K of first_mass (keys j < K); RECENT_KEYS = W of recent_mass
    # (keys pos_i − W < j <= pos_i)
    H_Q,
    T,
    S,
    OFFSET,
    WINDOW,
    T_BUCKET,
    S_BUCKET,
    OUT_SLOT,
    FIRST_KEYS,
    RECENT_KEYS,
    # the softcap c (fp32; unused without HAS_SOFTCAP)
    SOFTCAP,
    # compile-time: GQA group, head dim padded to a power of two, variant flags, block sizes
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
    HAS_SINKS: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    STORE_STATE: tl.constexpr,
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
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H_Q).to(tl.int64)  # 64-bit batch/head/row offsets: B·T·Hq·D passes 2^31 at long T
    h = (pid_bh % H_Q).to(tl.int64)
    kv = h // GROUP
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = tl.load(
        Q + b * sqb + h * sqh + rows[:, None].to(tl.int64) * sqt + dims[None, :] * sqd,
        mask=(rows[:, None] < T) & (dims[None, :] < D),
        other=0.0,
    )
    if CAST_F32:
        q = q.to(tl.float32)
    if HAS_SOFTCAP:  # c·tanh(x), x = λ q·k / c, in log2 units: cap·(1 − 2/(1 + 2^(q·k · qk_scale)))
        qk_scale = tl.load(SCALE + h) * (2.8853900817779268 / SOFTCAP)  # 2^(that) = e^(2x)
        cap = SOFTCAP * 1.4426950408889634
    else:
        qk_scale = tl.load(SCALE + h) * 1.4426950408889634  # λ·log2(e): scores in log2 units, exp2 below
        cap = 1.0
    if HAS_ALIBI:  # slope·log2(e): the bias in the scores' log2 units
        slope = tl.load(ALIBI + h) * 1.4426950408889634
    else:
        slope = 0.0
    if HAS_SINKS:  # the sink is the first score of every row: m = σ·log2(e), l = 1, u = 0
        sink = tl.load(SINKS + h) * 1.4426950408889634
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
    # the extra accumulators of stats.EXTRA_STATE asked for (a scalar 0 where off: nothing computed)
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
    # this program's rows see key blocks [k_start, k_end): up to the causal end and, with a window,
    # from its far edge. Blocks [full_start, full_end) every row sees whole run unmasked; those
    # before (the window's far edge) and after (diagonal, sequence end) are masked, as all are
    # under key padding.
    k_start = 0
    k_end = S
    full_start = 0
    full_end = S
    if CAUSAL:
        first_row = pid_m * BLOCK_M + OFFSET  # the first and last rows' positions among the keys
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
    if HAS_KEEP:
        full_start = k_start
        full_end = k_start
    k_base = K + b * skb + kv * skh
    v_base = V + b * svb + kv * svh
    keep_base = KEEP + b * skeep_b
    # The key blocks in three ranges, in order: [k_start, full_start) the window's far edge (masked; only
    # with a window), [full_start, full_end) seen whole by every row (unmasked), [full_end, k_end) the
    # diagonal and the sequence end (masked). `static_range` unrolls the three at compile time: each
    # range compiles with its own constexpr MASKED, the code three loops written out would give.
    for part in tl.static_range(3):
        if HAS_WINDOW or part != 0:
            lo = k_start if part == 0 else full_start if part == 1 else full_end
            hi = full_start if part == 0 else full_end if part == 1 else k_end
            for start in range(lo, hi, BLOCK_N):
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
    # the rows' results: the final state in nats, slot by slot (stats.py's units; m, u and w are in log2
    # units here), or entropy and sink mass read off it here (stats.py's reads of them, in log2 units)
    if STORE_STATE:
        live = rows < T
        at = OUT + pid_bh.to(tl.int64) * T + rows
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
        tl.store(OUT + pid_bh.to(tl.int64) * T + rows, ent, mask=rows < T)
        if HAS_SINKS:
            tl.store(SINK_MASS + pid_bh.to(tl.int64) * T + rows, tl.exp2(sink - m) / l, mask=rows < T)
    if WITH_OUTPUT:
        o = tl.where(l[:, None] > 0, acc / l[:, None], 0.0)
        if STORE_STATE:  # the block's first row in 64 bits, its rows' offsets in 32: no 64-bit row index
            # shared with q's load lives across the loop (the state variants spill it otherwise)
            o_rows = (pid_m * BLOCK_M).to(tl.int64) * sot + tl.arange(0, BLOCK_M)[:, None] * sot
        else:
            o_rows = rows[:, None].to(tl.int64) * sot
        tl.store(
            O + b * sob + h * soh + o_rows + dims[None, :] * sod,
            o.to(O.dtype.element_ty),
            mask=(rows[:, None] < T) & (dims[None, :] < D),
        )


@triton.jit
def key_block(
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
    MASKED: tl.constexpr,
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
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One key block's update of the centred state (m, l, u) (log2 units), of the extra accumulators
    switched on (stats.py's rules) and, fused, of the output."""
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


ENTROPY_KERNEL = triton.jit(_entropy_kernel)
_TUNED: dict[tuple, object] = {}
_FORCED: list[tuple[int, int, int, int]] = []  # the configs `forced_config` holds, innermost last


@contextlib.contextmanager
def forced_config(block_m: int, block_n: int, num_warps: int, num_stages: int):
    """Every launch inside runs this (BLOCK_M, BLOCK_N, num_warps, num_stages) instead of the autotuner's
    pick (benchmarks/fused_sweep_gpu.py times configs one by one; `num_*` apply on a GPU only)."""
    _FORCED.append((block_m, block_n, num_warps, num_stages))
    try:
        yield
    finally:
        _FORCED.pop()


def _kernel(with_output: bool, fp32: bool, window: bool, softcap: bool, alibi: bool, extras):
    """(kernel, autotuned?): an autotuner over the variant's configs on a GPU, the plain kernel otherwise;
    one autotuner per `extras` (None: entropy and sink mass read in the kernel; else the state with these
    accumulators), which changes what is fastest."""
    if INTERPRET or not torch.cuda.is_available():
        return ENTROPY_KERNEL, False
    variant = (with_output, fp32, window, softcap, alibi, extras)
    if variant not in _TUNED:
        configs = [
            triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
            for bm, bn, w, st in autotune_configs(*variant[:5], stats=extras is not None)
        ]
        _TUNED[variant] = triton.autotune(configs, key=["T_BUCKET", "S_BUCKET", "BLOCK_D", "CAUSAL"])(
            ENTROPY_KERNEL
        )
    return _TUNED[variant], True


@torch.no_grad()
def row_stats_triton(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    measure: Measure = DEFAULT_MEASURE,
    with_lse=False,
) -> RowStats:
    """See the module docstring: RowStats of `measure.stats` (B, Hq, T) fp32 and, with v (B, Hkv, S, D), the
    attention output (B, T, Hq, D) in q's dtype (stored in that layout by the kernel), from the same pass
    over K/V (the flash-attention forward with the statistics' accumulators beside it). Entropy and sink
    mass alone are read in the kernel; any other statistic is read off the kernel's final state by
    stats.read_stats. Rows with no attendable key get output 0 and every statistic 0 (with a sink:
    sink_mass = max_prob = 1). `measure`: the statistics and their parameters (flags.Measure).
    `mods.mask` must be None or
    key padding with a sliding window (ValueError otherwise: the plan sends other masks to
    torch_chunked); no key bias. `with_lse`: the rows' log-sum-exp too (the kernel then stores its state,
    and every statistic is read off it)."""
    if mods.key_bias is not None:
        raise ValueError("the Triton kernel takes no key bias; run it with backend='torch_chunked'")
    if v is not None and v.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"the Triton kernel's output needs values of the queries' head size {q.shape[-1]}, not "
            f"{v.shape[-1]}; run it with backend='torch_chunked'"
        )
    stats = measure.stats
    in_kernel = set(stats) <= set(DEFAULT_STATS) and not with_lse
    extra = None if in_kernel else accumulators(stats)
    values_in = None if v is None else v.to(q.dtype)
    rows, out = _launch(q, k, values_in, softmax_scale, mods, extra, measure)
    values = rows if in_kernel else read_stats(rows, mods, stats)
    lse = log_sum_exp(rows) if with_lse else None
    return RowStats({name: values[name] for name in stats}, None if out is None else out.transpose(1, 2), lse)


@torch.no_grad()
def stream_triton(q, k, v, softmax_scale, mods: ScoreMods, *, extra=(), measure: Measure = DEFAULT_MEASURE):
    """The final streaming state {"m", "l", "u", and the accumulators `extra` of stats.EXTRA_STATE}, each
    (B, Hq, T) float32 in nats, and the output (B, T, Hq, D) in q's dtype (v None: None), as
    `native.stream_native` returns them: the fused variant storing its state (STORE_STATE), whose
    log-sum-exp m + ln l a flash backward takes (kernels/train.py). Masks and refusals as
    `row_stats_triton`."""
    if v is not None and v.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"the Triton kernel's output needs values of the queries' head size {q.shape[-1]}, not "
            f"{v.shape[-1]}; run it with backend='torch_chunked'"
        )
    if mods.key_bias is not None:
        raise ValueError("the Triton kernel takes no key bias; run it with backend='torch_chunked'")
    rows, out = _launch(
        q, k, None if v is None else v.to(q.dtype), softmax_scale, mods, tuple(extra), measure
    )
    state = {name: rows[name] for name in (*STATE, *extra)}
    return state, None if out is None else out.transpose(1, 2)


def mark_first_keys(keep, first_key, first_keys: int, B: int, S: int, device) -> torch.Tensor:
    """The key padding (B, S) int8 (all ones for None) with each batch row's first K real keys,
    first_key[b] <= j < first_key[b] + K, marked 2: where the kernel sums first_mass's keys."""
    keys = torch.arange(S, device=device)
    start = first_key.to(device).view(-1, 1)
    first = ((keys >= start) & (keys < start + first_keys)).expand(B, S)
    keep = torch.ones(B, S, dtype=torch.int8, device=device) if keep is None else keep.expand(B, S).clone()
    return torch.where(first & (keep != 0), torch.full_like(keep, 2), keep)


def _launch(q, k, v, softmax_scale, mods: ScoreMods, extra=None, measure: Measure = DEFAULT_MEASURE):
    """(rows, out): rows {"entropy", "sink_mass"} read in the kernel for `extra` None, else the final state
    {"m", "l", "u", and the accumulators `extra` of stats.EXTRA_STATE} in nats; each (B, Hq, T) fp32.
    out: the output, a (B, Hq, T, D) view of (B, T, Hq, D) memory, or None without values v."""
    causal, mask, window, softcap = mods.causal, mods.mask, mods.window, mods.softcap
    sinks, alibi_slopes = mods.sinks, mods.alibi_slopes
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    if k.dtype != q.dtype:
        k = k.to(q.dtype)
    form = as_key_padding(mask, B, T, S, causal, window)
    if form is None:
        raise ValueError(
            "the Triton kernel takes key padding and sliding-window masks only, not this "
            f"{tuple(mask.shape)} mask (it differs per query or per head); run it with "
            "attention_entropy(backend='torch_chunked'), or let kernels.plan pick the backend"
        )
    keep, window = form
    keep = None if keep is None else keep[:, 0, 0, :].to(torch.int8)  # (B, S)
    if extra is None:
        kept, names = None, (ENTROPY.name,)
    else:  # without a sink every outcome is a key: lk is l itself and mk is m, not accumulated twice
        kept = tuple(name for name in extra if name not in ("lk", "mk") or sinks is not None)
        names = (*STATE, *kept)
    if kept is not None and "f" in kept and mods.first_key is not None:
        keep = mark_first_keys(keep, mods.first_key, measure.first_keys, B, S, q.device)
    results = torch.empty(len(names), B, Hq, T, dtype=torch.float32, device=q.device)
    rows = dict(zip(names, results, strict=True))
    if extra is None:
        rows[SINK_MASS.name] = (torch.empty_like if sinks is not None else torch.zeros_like)(results[0])
    if extra is not None and "lk" in extra and "lk" not in rows:
        rows["lk"] = rows["l"]
    if extra is not None and "mk" in extra and "mk" not in rows:  # without a sink, m is the keys' max
        rows["mk"] = rows["m"]
    # the interpreter's fp32 -> bf16 store truncates; there the output is stored in fp32 and rounded by torch
    out_dtype = torch.float32 if INTERPRET else q.dtype
    # (B, T, Hq, D) memory, the layout a model's o_proj reads: the capture's transpose back is free
    out = (
        torch.empty(B, T, Hq, D, dtype=out_dtype, device=q.device).transpose(1, 2) if v is not None else None
    )
    if T == 0 or B * Hq == 0:
        return rows, out
    softmax_scale = softmax_scale.to(device=q.device, dtype=torch.float32).contiguous()
    unused = results  # pointer arguments of a disabled feature
    if _FORCED:  # one config, as `forced_config` asked
        kernel = ENTROPY_KERNEL
        blocks = dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), _FORCED[-1], strict=True))
    else:
        kernel, autotuned = _kernel(
            v is not None,
            q.dtype == torch.float32,
            window is not None,
            softcap is not None,
            alibi_slopes is not None,
            kept,
        )
        blocks = {} if autotuned else FIXED_BLOCKS
    block_m = blocks.get("BLOCK_M")

    def grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"] if block_m is None else block_m), B * Hq)

    no_strides = (0, 0, 0, 0)
    if sinks is not None:
        sinks = sinks.to(device=q.device, dtype=torch.float32).contiguous()
    if alibi_slopes is not None:
        alibi_slopes = alibi_slopes.to(device=q.device, dtype=torch.float32).contiguous()
    v_ptr, keep_ptr, out_ptr, sinks_ptr, alibi_ptr = (
        unused if t is None else t for t in (v, keep, out, sinks, alibi_slopes)
    )
    sink_mass = rows.get(SINK_MASS.name, unused)
    pointers = (q, k, v_ptr, softmax_scale, keep_ptr, results, out_ptr, sinks_ptr, sink_mass, alibi_ptr)
    strides = (
        *q.stride(),
        *k.stride(),
        *(no_strides if v is None else v.stride()),
        *(no_strides if out is None else out.stride()),
        *((0, 0) if keep is None else keep.stride()),
    )
    # then the power-of-two buckets of T and S the autotuner is keyed by, the results' slot stride, K of
    # first_mass (at most S: every key lies below S) and W of recent_mass (at most S + 1: pos_i − S < 0)
    sizes = (Hq, T, S, S - T, window or 0, triton.next_power_of_2(T), triton.next_power_of_2(S))
    kernel[grid](
        *pointers,
        *strides,
        *sizes,
        B * Hq * T,
        min(int(measure.first_keys), S),
        min(int(measure.recent_keys), S + 1),
        float(softcap or 1.0),
        GROUP=Hq // Hkv,
        BLOCK_D=max(16, triton.next_power_of_2(D)),
        D=D,
        CAUSAL=bool(causal),
        HAS_WINDOW=window is not None,
        HAS_KEEP=keep is not None,
        CAST_F32=INTERPRET or q.dtype == torch.float32,
        IEEE=q.dtype == torch.float32,
        WITH_OUTPUT=v is not None,
        HAS_SOFTCAP=softcap is not None,
        HAS_SINKS=sinks is not None,
        HAS_ALIBI=alibi_slopes is not None,
        STORE_STATE=kept is not None,
        **{flag: kept is not None and name in kept for name, flag in EXTRA_FLAGS.items()},
        **blocks,
    )
    return rows, (out.to(q.dtype) if out is not None else None)
