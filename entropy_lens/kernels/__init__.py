"""Attention-entropy kernels: pure functions, no transformers import. ::

    attention_entropy(q, k, *, softmax_scale, causal=True, mask=None, window=None, softcap=None, sinks=None,
                      alibi_slopes=None, key_bias=None, return_sink_mass=False, backend="auto", block_q=64,
                      block_k=1024)
        -> (B, Hq, T) float32, nats; with return_sink_mass: (entropy, sink_mass), each (B, Hq, T) float32

    q      (B, Hq, T, D)  queries after RoPE (if any), any float dtype
    k      (B, Hkv, S, D) keys after RoPE; Hq % Hkv == 0 (MHA, GQA, MQA); head h uses key head h // (Hq/Hkv)
    softmax_scale  float or (Hq,) tensor: the softmax scale λ_h (scores are λ_h q·k)
    causal query i sees keys j <= i + S − T (bottom-right, so a query block at the end of a KV cache works)
    mask   None, or bool (True = attend) of shape (B, S) [key padding] or broadcastable 4-D
           (B|1, Hq|1, T|1, S)
    window None, or a sliding window W >= 1 (causal only): query i sees only the W keys ending at its own
           position, j > i + S − T − W (transformers' `sliding_window`); the kernels skip the key blocks
           behind it, so the work is O(T·W)
    softcap None, or c > 0 (Gemma2's attn_logit_softcapping): every score s = λ_h q·k becomes
           c·tanh(s/c) before masking and softmax, as transformers' eager Gemma2 attention
    sinks  None, or (Hq,) float (any dtype; gpt-oss's module.sinks, transformers' `s_aux`): one learned
           logit σ_h per query head in every row's softmax denominator, with no value, not scaled, not
           softcapped, never masked: p_j = e^(s_j) / (Σ_k e^(s_k) + e^(σ_h)), p_sink = e^(σ_h) / (same)
    alibi_slopes  None, or (Hq,) float (any dtype; flash-attn's name; BLOOM, MPT, Falcon): ALiBi, one
           slope per query head (GQA/MQA: per query head, not key head). The score of query i and key j
           becomes s_ij − slope_h·|i + S − T − j| (flash-attn's definition: query i is at position
           i + S − T among the keys), after the softcap and before masking; sinks get no bias. Causal:
           −slope_h·(i + S − T − j) over the keys a row sees, equal up to a per-row constant (so the
           same softmax) to the slope·j forms BLOOM, MPT and Falcon add. Non-causal: the same |distance|,
           so keys after the row are penalised too, as flash-attn's non-causal ALiBi. The distance uses
           key indices, pads included (left or right padding moves no real token relative to
           another, so their distances are the models' own). `merge.shard_state` uses global key
           indices, so merged shards equal the whole.
    key_bias  None, or (B|1, Hq, S) float: a bias per key and query head added where the ALiBi bias is
           (Falcon's ALiBi, which its builder rounds to bfloat16 per key, so not linear in the distance).
           Every kernel but the Triton one takes it; the plan runs torch_chunked for it on CUDA
           (`merge.shard_state` does not take it either).
    -> H_i = −Σ_j p_ij ln p_ij over attendable keys and, with sinks, − p_sink ln p_sink (the sink is one
       outcome of the distribution), in nats, accumulated in fp32. A row with no attendable key gets 0
       (with sinks: p_sink = 1, H = 0); callers exclude such rows from averages.
       sink_mass: p_sink per row (B, Hq, T) float32, a probability in [0, 1]; zeros when sinks is None.
    block_q, block_k  torch_chunked's tile, query rows × keys. The reference has no tiles and the
           Triton kernel autotunes its own, so there they change nothing (the entropy is exact at any
           tile size).

Every public entry point (`attention_entropy`, `attention_with_entropy`, `merge.shard_state`) takes
exactly the keywords it names and builds one `ScoreMods` record of them (mods.py), validated once; every
kernel below takes the record whole, so a misspelt keyword (`sofcap=`) is a TypeError on every backend,
never a silently different number. ::

    attention_with_entropy(q, k, v, *, softmax_scale, <the modifiers above>, stats=("entropy", "sink_mass"),
                           backend="auto", block_q=None, block_k=None) -> RowStats
        the attention output with its statistics, from the same score tiles (for models whose output
        sdpa cannot compute: softcap, sinks; ALiBi, which sdpa takes only as a materialised T × S bias):
        rows["entropy"], rows["sink_mass"] (B, Hq, T) float32 (those of `stats`), rows.out (B, T, Hq, Dv)
        in q's dtype, the layout transformers' attention functions return. A row that sees no key
        outputs 0.

    attention_received(q, k, *, softmax_scale, stats=("received",), <the modifiers above>, backend="auto",
                       **params) -> {name: (B, Hq, S) float32}
        the key statistics (attention received by every key: entropy_lens.statistics.KEY_STATISTICS)
        from two streaming passes, the rows' log-sum-exp and a column pass; the contract, and
        `received_from_lse` (the column pass alone, for a caller that has the rows' LSE), in received.py.

    attention_probs(q, k, *, softmax_scale, rows=(a, b), keys=(c, d), <the modifiers above>,
                    backend="auto") -> (B, Hq, b − a, d − c) float32
        an exact slice of the probabilities, each row normalised over every key it may see: the rows'
        log-sum-exp from the backend's row pass, then the slice's scores (probs.py)

    row_slice_stats(q, k, *, softmax_scale, stats, rows=(a, b), <the modifiers above>, backend="auto",
                    <the statistics' parameters: statistics.SLICE_PARAMETERS>)
        -> {name: (B, Hq, b − a, n)}
        the row-slice statistics (statistics.ROW_SLICE_STATISTICS) at every row, from the
        same log-sum-exp and score tiles (slices.py)

What a row returns is declared once, in stats.py (`ROW_STATS`, `RowStats`); which kernel runs is decided
once, in plan.py (`BACKENDS`: "reference", float64, tests only; "torch_chunked", exact streaming, the
fallback everywhere, its per-tile step compiled on request, fold.py; "native", the same loop in C++ on
CPU, kernels/native, built on first use, `native_status()` says whether it is and why not; "triton", the
GPU kernel, triton_entropy.py, on CPU only under TRITON_INTERPRET=1, for tests; for a decode step's few
query rows on a long cache its split-key launch, triton_decode.py with triton_split.py and
triton_combine.py, as many splits as `decode_splits` (splits.py) gives, their shared steps in
triton_steps.py and their launch's prologue in triton_launch.py). What each kernel offers (row pass, streaming state, column pass, the mask form it takes,
training) is one object per backend in backends.py, looked up once (`backend_of`). The argument checks live
in contract.py.
"""

from __future__ import annotations

from entropy_lens.flags import Backend, Fused, Measure, Stats
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.contract import check_finite
from entropy_lens.kernels.entrance import enter
from entropy_lens.kernels.fold import compile_requested, fold_status
from entropy_lens.kernels.merge import merge_states, shard_state, sink_state
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.native import native_available, native_status
from entropy_lens.kernels.plan import (
    BACKENDS,
    FUSED_MODES,
    Plan,
    Route,
    plan,
    resolve_backend,
    run,
    statistics_kernel,
    train_plan,
)
from entropy_lens.kernels.probs import attention_probs
from entropy_lens.kernels.received import attention_received, received_from_lse
from entropy_lens.kernels.reference import attention_probabilities
from entropy_lens.kernels.slices import row_slice_stats
from entropy_lens.kernels.splits import decode_splits
from entropy_lens.kernels.stats import (
    ROW_STATS,
    RowStats,
    entropy_from_state,
    sink_mass_from_state,
)
from entropy_lens.kernels.torch_chunked import BLOCK_K, BLOCK_Q
from entropy_lens.statistics import DEFAULT_STATS, ENTROPY, SINK_MASS

__all__ = [
    "BACKENDS",
    "FUSED_MODES",
    "ROW_STATS",
    "Backend",
    "Fused",
    "Plan",
    "Route",
    "RowStats",
    "ScoreMods",
    "Stats",
    "attention_entropy",
    "attention_probabilities",
    "attention_probs",
    "attention_received",
    "attention_stats",
    "attention_with_entropy",
    "check_finite",
    "compile_requested",
    "decode_splits",
    "entropy_from_state",
    "fold_status",
    "merge_states",
    "native_available",
    "native_status",
    "plan",
    "received_from_lse",
    "resolve_backend",
    "row_slice_stats",
    "run",
    "shard_state",
    "sink_mass_from_state",
    "sink_state",
    "statistics_kernel",
    "train_plan",
]


def attention_entropy(
    q,
    k,
    *,
    softmax_scale,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
    return_sink_mass=False,
    backend="auto",
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
):
    """See the module docstring for the contract: `attention_stats` of entropy (and sink mass).

    Args:
        q: (B, Hq, T, D) queries after RoPE (if any), any float dtype.
        k: (B, Hkv, S, D) keys after RoPE; Hq % Hkv == 0 (MHA, GQA, MQA).
        softmax_scale: the softmax scale λ, a float or an (Hq,) tensor λ_h; scores are λ_h q·k.
        causal: query i sees keys j <= i + S − T (bottom-right); False: every key.
        mask: None, or bool (True = attend) (B, S) [key padding] or broadcastable 4-D (B|1, Hq|1, T|1, S).
        window: None, or a sliding window W >= 1 (causal only): each query sees the W keys ending at
            its own position.
        softcap: None, or c > 0 (Gemma2): every score s becomes c·tanh(s/c) before masking.
        sinks: None, or (Hq,) float, any dtype: one learned logit per query head in every row's softmax
            denominator (gpt-oss, transformers' `s_aux`).
        alibi_slopes: None, or (Hq,) float, any dtype: ALiBi, −slope_h·`|i + S − T − j|` added to the
            score of query i and key j.
        key_bias: None, or (B|1, Hq, S) float: a bias per key and query head (Falcon's rounded ALiBi);
            the plan runs torch_chunked for it on CUDA.
        return_sink_mass: also return the sink's probability per row.
        backend: "auto" or one of `BACKENDS` (flags.Backend); "auto" picks per device (plan.py), and
            ENTROPY_LENS_BACKEND overrides it.
        block_q: torch_chunked's tile, query rows (the other kernels ignore it; exact at any tile).
        block_k: torch_chunked's tile, keys.

    Returns:
        (B, Hq, T) float32 entropy in nats (0 for a row with no attendable key); with
        return_sink_mass, the pair (entropy, sink_mass), each (B, Hq, T) float32.

    Raises:
        ValueError: an input outside the contract (shapes, mask, window, softcap, sinks, scale), or an
            unknown backend (EntropyLensError), the message naming the fix.
    """
    rows = attention_stats(
        q,
        k,
        softmax_scale=softmax_scale,
        stats=DEFAULT_STATS if return_sink_mass else (ENTROPY.name,),
        causal=causal,
        mask=mask,
        window=window,
        softcap=softcap,
        sinks=sinks,
        alibi_slopes=alibi_slopes,
        key_bias=key_bias,
        backend=backend,
        block_q=block_q,
        block_k=block_k,
    )
    return (rows[ENTROPY.name], rows[SINK_MASS.name]) if return_sink_mass else rows[ENTROPY.name]


def attention_stats(
    q,
    k,
    *,
    softmax_scale,
    stats=(ENTROPY.name,),
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
    backend="auto",
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    **params,
) -> dict:
    """{name: (B, Hq, T) float32} for each of `stats` (the row statistics of kernels.stats.ROW_STATS,
    declared in entropy_lens.statistics.STATISTICS), from one streaming pass over the keys; the score
    modifiers and `backend` as `attention_entropy`'s ("auto" picks a kernel that computes all of `stats`).

    Args:
        q: (B, Hq, T, D) queries after RoPE (if any), any float dtype.
        k: (B, Hkv, S, D) keys after RoPE; Hq % Hkv == 0 (MHA, GQA, MQA).
        softmax_scale: the softmax scale λ, a float or an (Hq,) tensor λ_h; scores are λ_h q·k.
        stats: names of entropy_lens.statistics.STATISTICS (a name, comma-separated names, a sequence,
            or "all"), in the order wanted.
        causal: query i sees keys j <= i + S − T (bottom-right); False: every key.
        mask: None, or bool (True = attend) (B, S) [key padding] or broadcastable 4-D (B|1, Hq|1, T|1, S).
        window: None, or a sliding window W >= 1 (causal only): each query sees the W keys ending at
            its own position.
        softcap: None, or c > 0 (Gemma2): every score s becomes c·tanh(s/c) before masking.
        sinks: None, or (Hq,) float, any dtype: one learned logit per query head in every row's softmax
            denominator (gpt-oss, transformers' `s_aux`).
        alibi_slopes: None, or (Hq,) float, any dtype: ALiBi, −slope_h·`|i + S − T − j|` added to the
            score of query i and key j.
        key_bias: None, or (B|1, Hq, S) float: a bias per key and query head (Falcon's rounded ALiBi);
            the plan runs torch_chunked for it on CUDA.
        backend: "auto" or one of `BACKENDS` (flags.Backend), as `attention_entropy`'s.
        block_q: torch_chunked's tile, query rows (the other kernels ignore it; exact at any tile).
        block_k: torch_chunked's tile, keys.
        **params: the statistics' parameters by name (entropy_lens.statistics.PARAMETERS, each with its
            default and range: first_mass's K, recent_mass's W).

    Returns:
        dict: {name: (B, Hq, T) float32} for each of `stats`, in each statistic's unit
        (entropy_lens.statistics.STATISTICS); a row with no attendable key gets 0.

    Raises:
        ValueError: an unknown statistic or backend, or an input outside the contract (EntropyLensError
            or ValueError, the message naming the fix).
    """
    measure = Measure.parse(stats=stats, backend=backend, **params)
    call = enter(q, k, measure=measure, arguments=locals())
    kernel, kernel_mods = statistics_kernel(measure.backend, q, k, call.mods)
    blocks = {"block_q": call.block_q, "block_k": call.block_k}
    return dict(run(kernel, q, k, None, call.softmax_scale, kernel_mods, measure=measure, **blocks))


def attention_with_entropy(
    q,
    k,
    v,
    *,
    softmax_scale,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
    stats=DEFAULT_STATS,
    backend="auto",
    block_q: int | None = None,
    block_k: int | None = None,
    **params,
) -> RowStats:
    """See the module docstring: the one pass of `backend`'s kernel ("auto": triton on CUDA, native on
    CPU where it builds, else torch_chunked; triton falls back to torch_chunked as for the entropy, and
    for values whose head size is not the queries').

    Args:
        q: (B, Hq, T, D) queries after RoPE (if any), any float dtype.
        k: (B, Hkv, S, D) keys after RoPE; Hq % Hkv == 0 (MHA, GQA, MQA).
        v: (B, Hkv, S, Dv) values, k's batch, heads and length.
        softmax_scale: the softmax scale λ, a float or an (Hq,) tensor λ_h; scores are λ_h q·k.
        causal: query i sees keys j <= i + S − T (bottom-right); False: every key.
        mask: None, or bool (True = attend) (B, S) [key padding] or broadcastable 4-D (B|1, Hq|1, T|1, S).
        window: None, or a sliding window W >= 1 (causal only): each query sees the W keys ending at
            its own position.
        softcap: None, or c > 0 (Gemma2): every score s becomes c·tanh(s/c) before masking.
        sinks: None, or (Hq,) float, any dtype: one learned logit per query head in every row's softmax
            denominator (gpt-oss, transformers' `s_aux`).
        alibi_slopes: None, or (Hq,) float, any dtype: ALiBi, −slope_h·`|i + S − T − j|` added to the
            score of query i and key j.
        key_bias: None, or (B|1, Hq, S) float: a bias per key and query head (Falcon's rounded ALiBi);
            the plan runs torch_chunked for it on CUDA.
        stats: the row statistics to return with the output, names of entropy_lens.statistics.STATISTICS
            (default: entropy and sink_mass, statistics.DEFAULT_STATS).
        backend: "auto" or one of `BACKENDS` (flags.Backend).
        block_q: the kernel's tile, query rows; None: its default.
        block_k: the kernel's tile, keys; None: its default.
        **params: the statistics' parameters by name (entropy_lens.statistics.PARAMETERS).

    Returns:
        RowStats: rows[name] (B, Hq, T) float32 for each of `stats`, and rows.out (B, T, Hq, Dv) in q's
        dtype (0 for a row that sees no key).

    Raises:
        ValueError: v not (B, Hkv, S, Dv) like k, an input outside the contract, or an unknown
            statistic or backend, the message naming the fix.
    """
    measure = Measure.parse(stats=stats, backend=backend, **params)
    call = enter(q, k, v, measure=measure, arguments=locals())
    kernel, kernel_mods = statistics_kernel(measure.backend, q, k, call.mods, one_pass=True)
    if not backend_of(kernel).takes_values(q, v):  # the Triton kernel's output: q's head size only
        kernel, kernel_mods = Backend.TORCH_CHUNKED, call.mods
    blocks = {"block_q": call.block_q, "block_k": call.block_k}
    return run(kernel, q, k, v, call.softmax_scale, kernel_mods, measure=measure, **blocks)
