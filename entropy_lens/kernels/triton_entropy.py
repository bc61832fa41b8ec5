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
statistics need (`stats.accumulators`), each a compile-time switch (its bit of the constexpr EXTRAS,
`triton_steps.pack`), so a pass computes nothing that was not asked for and the default compiles to the
kernel without them.
Each accumulator follows stats.py's update (torch_chunked._update_extra in torch) per key block, from
e = 2^(s − m') and the same α: w = Σ e (s − m)² (log2² units in the loop, (ln 2)² at the store), c = Σ e²
(1 at the start with a sink, as l), lk = Σ_keys e (accumulated only with a sink: without one it is l),
d = Σ_keys e·(pos_i − j) summed from the row (pos_i − j as fp32 per score, exact below 2^24 tokens),
never as pos_i·Σe − Σ e·j from absolute key positions, and f = Σ_{keys j < K} e (its tile sum only in the key
blocks that start below K), and mk = max_keys s (log2 units in the loop, ln 2 at the store; accumulated
only with a sink: without one it is m), and rk = Σ_{keys 0 <= pos_i − j < W} e (one comparison per score
with the row's window start: a causal row's later keys have e = 0 already; a branch skipping the blocks
behind every row's window cost the fp32 fused variant 55 registers and a stack). The sink is an outcome
of l, u, w and c, not of lk, d, f, mk, rk. The key-block step, the state's start and store and the
kernels' arguments (`Inputs`, `Outputs`, the constexprs VARIANT and EXTRAS) are triton_steps.py's, the
launch's prologue triton_launch.py's, shared with the decode step's and the column pass's kernels: a new
statistic needs its accumulator's start, update and unit in triton_steps.py (its docstring lists the
places), its merge in triton_combine.py and its read in stats.py.

Precision: bf16/fp16 tiles go to `tl.dot` natively with fp32 accumulation; fp32 tiles use IEEE
fp32 products (no TF32). Under the interpreter (TRITON_INTERPRET=1, CPU) every tile is cast to
fp32 first because the interpreter's `tl.dot` on bf16 is wrong.
Block sizes: `@triton.autotune` (keyed by the power-of-two buckets of T and S, so a growing KV cache
does not retune every step, and the head dim) over per-variant lists of configs that compile without
register spills when a CUDA driver is present (those with the extra accumulators are fewer: STATS_DROPS);
fixed (32, 32) otherwise (the interpreter). One autotuner per variant (VARIANT, EXTRAS).

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

import torch
import triton
import triton.language as tl

from entropy_lens.flags import DEFAULT_MEASURE, Measure
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.stats import STATE, RowStats
from entropy_lens.kernels.triton_launch import autotuned, prepare, row_stats_from
from entropy_lens.kernels.triton_steps import (
    finish_rows,
    has,
    key_bounds,
    open_rows,
    sink_score,
    start_state,
    stream_keys,
)

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
    I,  # Inputs: q, k, v, the key padding, the scales, sinks, ALiBi slopes, their strides, the sizes
    O,  # Outputs: the rows' results (entropy, or the state), the sink mass, the output
    # the power-of-two buckets of T and S the autotuner is keyed by
    T_BUCKET,
    S_BUCKET,
    # compile-time: the GQA group, the head dim, the variant's switches and the accumulators kept (`pack`),
    # block sizes
    GROUP: tl.constexpr,
    D: tl.constexpr,
    VARIANT: tl.constexpr,
    EXTRAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q, score, head = open_rows(I, pid_bh, rows, GROUP, D, VARIANT)
    b, h, _ = head
    sink = sink_score(I, h, VARIANT)  # the first score of every row: m = σ·log2(e), l = 1, u = 0
    state = start_state(sink, has(VARIANT, "HAS_SINKS"), VARIANT, EXTRAS, BLOCK_M, D)
    # the key blocks this program's rows see (triton_steps.key_bounds), streamed in three ranges
    bounds = key_bounds(pid_m * BLOCK_M + I.OFFSET, I.S, I.WINDOW, VARIANT, BLOCK_M, BLOCK_N)
    state = stream_keys(I, q, state, bounds, head, rows, score, VARIANT, EXTRAS, D, BLOCK_N)
    # the rows' results: the final state in nats, or entropy and sink mass read off it; the output
    finish_rows(O, pid_bh, b, h, pid_m * BLOCK_M, I.T, state, sink, D, VARIANT, EXTRAS)


ENTROPY_KERNEL = triton.jit(_entropy_kernel)
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


def _kernel(variant: int, extras: int):
    """(kernel, autotuned?): `triton_launch.autotuned` over the configs of the variant (VARIANT, EXTRAS),
    one autotuner for each: the accumulators kept change what is fastest."""
    flags = ("WITH_OUTPUT", "IEEE", "HAS_WINDOW", "HAS_SOFTCAP", "HAS_ALIBI")
    configs = autotune_configs(*(has(variant, flag) for flag in flags), stats=has(variant, "STORE_STATE"))
    return autotuned(
        ENTROPY_KERNEL,
        (variant, extras),
        ["T_BUCKET", "S_BUCKET", "D"],
        lambda: [({"BLOCK_M": bm, "BLOCK_N": bn}, w, st) for bm, bn, w, st in configs],
    )


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
    return row_stats_from(
        lambda extra: _launch(q, k, v, softmax_scale, mods, extra, measure), mods, measure, with_lse
    )


@torch.no_grad()
def stream_triton(q, k, v, softmax_scale, mods: ScoreMods, *, extra=(), measure: Measure = DEFAULT_MEASURE):
    """The final streaming state {"m", "l", "u", and the accumulators `extra` of stats.EXTRA_STATE}, each
    (B, Hq, T) float32 in nats, and the output (B, T, Hq, D) in q's dtype (v None: None), as
    `native.stream_native` returns them: the fused variant storing its state (STORE_STATE), whose
    log-sum-exp m + ln l a flash backward takes (kernels/train.py). Masks and refusals as
    `row_stats_triton`."""
    rows, out = _launch(q, k, v, softmax_scale, mods, tuple(extra), measure)
    state = {name: rows[name] for name in (*STATE, *extra)}
    return state, None if out is None else out.transpose(1, 2)


def _launch(q, k, v, softmax_scale, mods: ScoreMods, extra=None, measure: Measure = DEFAULT_MEASURE):
    """(rows, out): rows {"entropy", "sink_mass"} read in the kernel for `extra` None, else the final state
    {"m", "l", "u", and the accumulators `extra` of stats.EXTRA_STATE} in nats; each (B, Hq, T) fp32.
    out: the output, a (B, Hq, T, D) view of (B, T, Hq, D) memory, or None without values v."""
    launch = prepare(q, k, v, softmax_scale, mods, extra, measure)
    B, Hq, T, _ = q.shape
    S = launch.inputs.S
    if T == 0 or B * Hq == 0:
        return launch.rows, launch.out
    if _FORCED:  # one config, as `forced_config` asked
        kernel = ENTROPY_KERNEL
        blocks = dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), _FORCED[-1], strict=True))
    else:
        kernel, autotuned = _kernel(*launch.variant)
        blocks = {} if autotuned else FIXED_BLOCKS
    block_m = blocks.get("BLOCK_M")

    def grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"] if block_m is None else block_m), B * Hq)

    buckets = (triton.next_power_of_2(T), triton.next_power_of_2(S))
    kernel[grid](launch.inputs, launch.outputs, *buckets, **launch.constexprs, **blocks)
    out = launch.out
    return launch.rows, (out.to(q.dtype) if out is not None else None)
