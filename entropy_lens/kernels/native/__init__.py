"""The native CPU kernel: attention output and every row statistic of kernels/stats.py from the same
score tiles in one C++ loop (attention_entropy.cpp beside this file), built as a PyTorch extension on
first use. ::

    row_stats_native(q, k, v, softmax_scale, mods, *, measure=DEFAULT_MEASURE, block_q=None, block_k=BLOCK_K,
                     with_lse=False, key_state=False, counted=None)
        -> RowStats: out (B, T, Hq, Dv) in q's dtype (v None: none, the loop without the value GEMM) and
           each of `measure.stats` (B, Hq, T) float32; block_q None: block_rows(T), or with key_state
           key_state_rows(T, S); with key_state, `key_state`: the column state of attention received
           {"sum", "max", "count"} (B, Hq, S) over the `counted` rows ((B|1, T) bool, None: all), from
           the same pass (received_native's numbers without its second pass over the keys)
    stream_native(q, k, v, softmax_scale, mods, *, extra=(), measure=DEFAULT_MEASURE, block_q=None,
                  block_k=BLOCK_K)
        -> (the final state {m, l, u, extra}, out): the streaming state itself (its m + ln l is the rows'
           log-sum-exp, which kernels/train.py hands to a flash backward)
    received_native(q, k, lse, softmax_scale, mods, *, block_q=256, block_k=128)
        -> {"sum", "max", "count"} (B, Hq, S) float32: the column pass of attention received
           (kernels/received.py), the C++ `received` beside `forward`
    (`kernels.attention_with_entropy(..., backend="native")` and `attention_entropy` are the public
    entry points: they check the arguments.)

Semantics are `torch_chunked.row_stats_torch`'s; the kernel is that path's loop written in C++ as PyTorch's CPU flash
attention is: per (batch, query head, query block) a BLAS GEMM for the scores, one vectorised pass
for the masks, max, exp and the sums l and u (and the accumulators of stats.EXTRA_STATE the
statistics asked for need, nothing more), a GEMM for e·V, `at::parallel_for` over the blocks
(torch's intra-op pool, so `torch.set_num_threads` / `--threads` sets its threads). Everything is
accumulated in fp32; bf16/fp16 inputs are converted to fp32 first (keys and values once, as
torch_chunked does). The loop returns each row's final state; `stats.read_stats` reads the statistics
off it, as for torch_chunked.

Build (build.py): `torch.utils.cpp_extension.load` compiles the source once (ninja, -O3, AVX2+FMA where
the CPU has them) into ~/.cache/entropy_lens/native/<hash of the source, flags, torch and Python>
(ENTROPY_LENS_NATIVE_CACHE moves the root), printing one line when it builds and why; later processes
check the cached library's size and hash, then load it. A killed build, a damaged library, another
checkout or a read-only cache never blocks or crashes a run (build.py says how).
ENTROPY_LENS_NATIVE=0 disables it. Where it cannot be built or loaded (no compiler,
no ninja, a link error), `native_status()` says why and the callers run the torch path; a scan's
results meta records that status (`native`), as `fold` records the compiled fold's.
The state (the loaded module and its status) lives in a `NativeState`: one per process
(`PROCESS_NATIVE`) unless a caller passes its own, as tests do (with an injected `build` that fails).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields

import torch

from entropy_lens.flags import DEFAULT_MEASURE, Measure
from entropy_lens.kernels.contract import check_score_range, validate_scale
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.native.build import build_extension, failure_reason
from entropy_lens.kernels.stats import (
    EXTRA_STATE,
    STATE,
    RowStats,
    accumulators,
    log_sum_exp,
    range_masses,
    read_stats,
)

ENV_VAR = "ENTROPY_LENS_NATIVE"  # "0": never build or use the native kernel
BLOCK_K = 512  # keys per tile; query rows per tile: `block_rows(T)` (benchmarks/fold_cpu.py's native rows)
KEY_STATE_TILES = 1 << 20  # key_state: the floats of e a thread keeps per query block (`key_state_rows`)
RECEIVED_BLOCKS = (256, 128)  # the column pass of attention received: query rows, keys per tile


class NativeState:
    """The loaded extension (None until built) and `status`: "not built", "built", or
    "unavailable (why)". `build() -> module` compiles and loads it: `build_extension` unless given."""

    def __init__(self, *, build=None):
        self.build = build or build_extension
        self.module = None
        self.status = "not built"


def native_module(state: NativeState | None = None):
    """The loaded extension, built on first use, or None where it is disabled or cannot be built
    (`native_status` says why)."""
    state = state or PROCESS_NATIVE
    if os.environ.get(ENV_VAR, "1") == "0":  # read on every call, so a test or a user can turn it off
        state.status = f"unavailable ({ENV_VAR}=0)"
        return None
    if state.module is not None:
        state.status = "built"
        return state.module
    if state.status.startswith("unavailable (") and not state.status.startswith(f"unavailable ({ENV_VAR}"):
        return None  # a build failed: not tried again in this process
    try:
        state.module = state.build()
    except Exception as err:  # noqa: BLE001 - any build or load failure: the torch path runs, with the reason
        state.status = f"unavailable ({failure_reason(err)})"
        print(f"entropy_lens: the native CPU kernel is {state.status}; the torch path runs", file=sys.stderr)
        return None
    state.status = "built"
    return state.module


def native_available(state: NativeState | None = None) -> bool:
    """Whether the native kernel can run here (builds it on first call).

    Args:
        state: where the extension and its status live; None: the process's.

    Returns:
        bool: True where the extension is built and loaded.
    """
    return native_module(state) is not None


def native_status(state: NativeState | None = None) -> str:
    """ "built", "not built" (not asked for yet) or "unavailable (why)".

    Args:
        state: where the extension and its status live; None: the process's.

    Returns:
        str: the status, as above; builds nothing.
    """
    return (state or PROCESS_NATIVE).status


@torch.no_grad()
def row_stats_native(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    measure: Measure = DEFAULT_MEASURE,
    block_q=None,
    block_k=BLOCK_K,
    with_lse=False,
    key_state=False,
    counted=None,
    spans=None,
) -> RowStats:
    """See the module docstring; as `torch_chunked.row_stats_torch`, on CPU tensors (v None: the same
    loop without the value GEMM). block_q None: `block_rows(T)` (`key_state_rows` with key_state);
    `with_lse`: the rows' log-sum-exp too; `key_state`: the column state over the `counted` rows too;
    `spans` (B|1, n, 2) int64 key ranges or None: each row's mass on them too (`RowStats.spans`)."""
    extra = accumulators(measure.stats)
    if key_state and block_q is None:
        block_q = key_state_rows(q.shape[2], k.shape[2])
    out, state, _, keys = _run(
        q,
        k,
        v,
        softmax_scale,
        mods,
        block_q,
        block_k,
        extra=extra,
        measure=measure,
        counted=counted,
        key_state=key_state,
        spans=spans,
    )
    named = len(STATE) + len(extra)  # the key ranges' planes after them, (n, B, Hq, T)
    planes, state = state[named:], dict(zip((*STATE, *extra), state[:named], strict=True))
    if spans is not None:
        state["spans"] = planes.permute(1, 2, 3, 0)  # (B, Hq, T, n)
    out = None if v is None else out.to(q.dtype)
    keys = dict(zip(("sum", "max", "count"), keys, strict=True)) if key_state else None
    lse = log_sum_exp(state) if with_lse else None
    return RowStats(read_stats(state, mods, measure.stats), out, lse, keys, range_masses(state))


@torch.no_grad()
def stream_native(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    *,
    extra=(),
    measure: Measure = DEFAULT_MEASURE,
    block_q=None,
    block_k=BLOCK_K,
):
    """The final streaming state {"m", "l", "u", and the accumulators `extra` of stats.EXTRA_STATE},
    each (B, Hq, T) float32, and the output (B, T, Hq, Dv) in q's dtype (v None: None), as
    `torch_chunked.stream_torch` returns them: the log-sum-exp a flash backward needs is m + ln l
    (kernels/train.py)."""
    out, state, *_ = _run(q, k, v, softmax_scale, mods, block_q, block_k, extra=extra, measure=measure)
    return dict(zip((*STATE, *extra), state, strict=True)), None if v is None else out.to(q.dtype)


@torch.no_grad()
def received_native(
    q, k, lse, softmax_scale, mods: ScoreMods, *, block_q=RECEIVED_BLOCKS[0], block_k=RECEIVED_BLOCKS[1]
):
    """The column pass of attention received (kernels/received.py, `received_torch`'s contract) in C++:
    {"sum", "max", "count"}, each (B, Hq, S) float32, for q (B, Hq, T, D), k (B, Hkv, S, D) on the CPU,
    lse (B, Hq, T) (+∞: a row that counts for nothing) and validated `mods` (the sinks are in lse)."""
    module = _module_for(q, block_q, block_k)
    _check_range(q, k, softmax_scale, mods)
    empty = torch.empty(0)
    state = module.received(
        _rows(q),
        _rows(k),
        softmax_scale.contiguous(),
        lse.detach().float().contiguous(),
        mods.causal,
        empty if mods.mask is None else mods.mask,
        0 if mods.window is None else mods.window,
        0.0 if mods.softcap is None else mods.softcap,
        empty if mods.alibi_slopes is None else mods.alibi_slopes,
        empty if mods.key_bias is None else mods.key_bias,
        k.shape[2] - q.shape[2],
        int(block_q),
        int(block_k),
    )
    return dict(zip(("sum", "max", "count"), state, strict=True))


def _module_for(q, block_q, block_k):
    """The loaded extension for CPU tensors and tiles >= 1; ValueError or RuntimeError naming the fix."""
    if q.device.type != "cpu":
        raise ValueError(
            f"the native kernel runs on CPU tensors, not {q.device.type}; use the torch or triton path"
        )
    if int(block_q) < 1 or int(block_k) < 1:
        raise ValueError(f"block_q and block_k must be >= 1; got {block_q}, {block_k}")
    module = native_module()
    if module is None:
        raise RuntimeError(
            f"the native CPU kernel is {native_status()}; run the torch path (--fused off, or fix the build)"
        )
    return module


@torch.no_grad()
def profile_native(q, k, v, softmax_scale, *, block_q=None, block_k=BLOCK_K) -> dict[str, float]:
    """Where one causal call's time goes: thread-seconds in the score GEMMs (QKᵀ), the row passes
    (masks, max, exp, the sums l and u) and the e·V GEMMs, each summed over threads (the benchmarks'
    profile of the native kernel; the timers cost a few clock reads per tile)."""
    softmax_scale = validate_scale(q, k, softmax_scale)
    _, _, times, _ = _run(q, k, v, softmax_scale, ScoreMods(), block_q, block_k, profile=True)
    return dict(zip(("scores_gemm", "row_pass", "values_gemm"), times.tolist(), strict=True))


def key_state_rows(T: int, S: int) -> int:
    """Query rows per tile where the pass keeps the column state: the block's e over its S keys stays in
    a buffer of rows × S floats, so rows shrink as S grows (at most KEY_STATE_TILES floats, 4 MiB, which
    two threads hold in a 32 MiB L3), never below 16 (a GEMM's useful height) nor above `block_rows(T)`."""
    return max(16, min(block_rows(T), KEY_STATE_TILES // max(S, 1) // 16 * 16))


def block_rows(T: int) -> int:
    """Query rows per tile for T queries: PyTorch's CPU flash attention's rule (256 from 768 rows, 64
    from 192, else 32): long tiles feed the GEMMs, short ones still split small inputs across threads."""
    return 256 if T >= 768 else 64 if T >= 192 else 32


def _run(
    q,
    k,
    v,
    softmax_scale,
    mods: ScoreMods,
    block_q,
    block_k,
    *,
    extra=(),
    measure: Measure = DEFAULT_MEASURE,
    profile=False,
    key_state=False,
    counted=None,
    spans=None,
):
    """The C++ forward on validated inputs: (out fp32 or empty, the final state (3 + len(extra) + n, B, Hq,
    T): m, l, u, the accumulators `extra` in EXTRA_STATE's order and the Σ e of each of the n key ranges
    `spans` (B|1, n, 2), times or empty, the column state (3, B, Hq, S) over the `counted` rows or empty)."""
    block_q = block_rows(q.shape[2]) if block_q is None else block_q
    module = _module_for(q, block_q, block_k)
    _check_range(q, k, softmax_scale, mods)
    empty = torch.empty(0)
    args = ForwardArgs(
        q=_rows(q),
        k=_rows(k),
        v=empty if v is None else _rows(v),
        scale=softmax_scale.contiguous(),
        causal=bool(mods.causal),
        mask=empty if mods.mask is None else mods.mask,
        window=0 if mods.window is None else int(mods.window),
        softcap=0.0 if mods.softcap is None else float(mods.softcap),
        sinks=empty if mods.sinks is None else mods.sinks,
        alibi=empty if mods.alibi_slopes is None else mods.alibi_slopes,
        key_bias=empty if mods.key_bias is None else mods.key_bias,
        offset=k.shape[2] - q.shape[2],
        extra=sum(1 << EXTRA_STATE.index(name) for name in extra),  # w 1, c 2, lk 4, d 8, f 16, mk 32, rk 64
        first_keys=int(measure.first_keys),
        first_key=empty.long() if mods.first_key is None else mods.first_key.to(torch.int64),
        recent_keys=int(measure.recent_keys),
        block_q=int(block_q),
        block_k=int(block_k),
        profile=bool(profile),
        key_state=bool(key_state),
        counted=empty.bool() if counted is None else counted.to(device="cpu", dtype=torch.bool),
        spans=empty.long() if spans is None else spans.to(device="cpu", dtype=torch.int64).contiguous(),
    )
    return module.forward(args.native(module))


@dataclass(frozen=True)
class ForwardArgs:
    """The C++ row pass's arguments (attention_entropy.cpp's `ForwardArgs`, field for field): tensors on
    CPU (an empty one: none), the modifiers in the loop's form (window 0 and softcap 0.0: none), the
    accumulators as the loop's bits (`extra`), the tile and the switches."""

    q: torch.Tensor  # (B, Hq, T, D) float32, rows contiguous
    k: torch.Tensor  # (B, Hkv, S, D)
    v: torch.Tensor  # (B, Hkv, S, Dv) or empty: statistics only
    scale: torch.Tensor  # (Hq,) float32
    causal: bool
    mask: torch.Tensor  # bool (Mb, Mh, Mt, S) or empty
    window: int
    softcap: float
    sinks: torch.Tensor  # (Hq,) or empty
    alibi: torch.Tensor  # (Hq,) or empty
    key_bias: torch.Tensor  # (Kb, Hq, S) or empty
    offset: int  # S − T: query row i at key position i + offset
    extra: int
    first_keys: int
    first_key: torch.Tensor  # (B|1,) int64 or empty
    recent_keys: int
    block_q: int
    block_k: int
    profile: bool
    key_state: bool
    counted: torch.Tensor  # (B|1, T) bool or empty
    spans: torch.Tensor  # (B|1, n, 2) int64 key ranges [lo, hi) or empty

    def native(self, module):
        """The extension's own record with these fields (its type checks each one)."""
        record = module.ForwardArgs()
        for field in fields(self):
            setattr(record, field.name, getattr(self, field.name))
        return record


def _check_range(q, k, softmax_scale, mods: ScoreMods) -> None:
    """The C++ loop forms q·k in float32 before λ, and reads an infinite score as a row that counts for
    nothing or a NaN as a finite probability: inputs whose scores may leave float32's range are refused
    (contract.score_bound), never turned into finite numbers."""
    check_score_range(q, k, softmax_scale, mods, "native")


def _rows(x):
    """x as float32 whose rows (last dim) are contiguous and do not overlap: no copy where they already are."""
    x = x.detach().float()
    if x.stride(-1) != 1 or x.stride(-2) < x.shape[-1]:
        x = x.contiguous()
    return x


PROCESS_NATIVE = NativeState()  # callers that pass no state of their own: one per process
