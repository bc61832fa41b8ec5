"""The native CPU kernel: attention output, entropy and sink mass from the same score tiles in one C++
loop (attention_entropy.cpp beside this file), built as a PyTorch extension on first use.

    attention_with_entropy_native(q, k, v, softmax_scale, causal=True, mask=None, window=None, softcap=None,
                                  sinks=None, alibi_slopes=None, *, key_bias=None, block_q=None,
                                  block_k=BLOCK_K)  # block_q None: block_rows(T)
        -> (out (B, T, Hq, Dv) in q's dtype, entropy (B, Hq, T) float32 nats, sink mass (B, Hq, T) float32)
    entropy_native(q, k, softmax_scale, ...same...) -> entropy, or (entropy, sink mass) with
        return_sink_mass: the same loop without the value GEMM.
Arguments, semantics and errors are `attention_with_entropy_torch`'s (kernels/torch_chunked.py), checked
by the same contract.py; the kernel is that path's loop written in C++ as PyTorch's CPU flash
attention is: per (batch, query head, query block) a BLAS GEMM for the scores, one vectorised pass
for the masks, max, exp and the sums l and u, a GEMM for e·V, `at::parallel_for` over the blocks
(torch's intra-op pool, so `torch.set_num_threads` / `--threads` sets its threads). Everything is
accumulated in fp32; bf16/fp16 inputs are converted to fp32 first (keys and values once, as
torch_chunked does).

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

import torch

from entropy_lens.kernels.contract import (
    validate,
    validate_alibi,
    validate_extras,
    validate_key_bias,
    validate_window,
)
from entropy_lens.kernels.native.build import build_extension, failure_reason

ENV_VAR = "ENTROPY_LENS_NATIVE"  # "0": never build or use the native kernel
BLOCK_K = 512  # keys per tile; query rows per tile: `block_rows(T)` (benchmarks/fold_cpu.py's native rows)


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
    """Whether the native kernel can run here (builds it on first call)."""
    return native_module(state) is not None


def native_status(state: NativeState | None = None) -> str:
    """ "built", "not built" (not asked for yet) or "unavailable (why)"."""
    return (state or PROCESS_NATIVE).status


@torch.no_grad()
def attention_with_entropy_native(
    q,
    k,
    v,
    softmax_scale,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    *,
    key_bias=None,
    block_q=None,
    block_k=BLOCK_K,
):
    """See the module docstring; as `attention_with_entropy_torch`, on CPU tensors. block_q None:
    `block_rows(T)`."""
    if v.ndim != 4 or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must be (B, Hkv, S, Dv) like k {tuple(k.shape)}; got {tuple(v.shape)}")
    extras = (causal, mask, window, softcap, sinks, alibi_slopes, key_bias)
    out, entropy, sink_mass, _ = _run(q, k, v, softmax_scale, extras, block_q, block_k)
    return out.to(q.dtype), entropy, sink_mass


@torch.no_grad()
def entropy_native(
    q,
    k,
    softmax_scale,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    *,
    key_bias=None,
    return_sink_mass=False,
    block_q=None,
    block_k=BLOCK_K,
):
    """The entropy (and sink mass) alone: the same loop without the value GEMM."""
    extras = (causal, mask, window, softcap, sinks, alibi_slopes, key_bias)
    _, entropy, sink_mass, _ = _run(q, k, None, softmax_scale, extras, block_q, block_k)
    return (entropy, sink_mass) if return_sink_mass else entropy


@torch.no_grad()
def profile_native(q, k, v, softmax_scale, *, block_q=None, block_k=BLOCK_K) -> dict[str, float]:
    """Where one causal call's time goes: thread-seconds in the score GEMMs (QKᵀ), the row passes
    (masks, max, exp, the sums l and u) and the e·V GEMMs, each summed over threads (the benchmarks'
    profile of the native kernel; the timers cost a few clock reads per tile)."""
    extras = (True, None, None, None, None, None, None)
    *_, times = _run(q, k, v, softmax_scale, extras, block_q, block_k, profile=True)
    return dict(zip(("scores_gemm", "row_pass", "values_gemm"), times.tolist(), strict=True))


def block_rows(T: int) -> int:
    """Query rows per tile for T queries: PyTorch's CPU flash attention's rule (256 from 768 rows, 64
    from 192, else 32): long tiles feed the GEMMs, short ones still split small inputs across threads."""
    return 256 if T >= 768 else 64 if T >= 192 else 32


def _run(q, k, v, softmax_scale, extras, block_q, block_k, profile=False):
    """Validate as the torch path does, then the C++ forward: (out fp32 or empty, entropy, sink mass,
    times or empty)."""
    causal, mask, window, softcap, sinks, alibi_slopes, key_bias = extras
    softmax_scale, mask = validate(q, k, softmax_scale, mask)
    window = validate_window(window, causal)
    softcap, sinks = validate_extras(q, softcap, sinks)
    alibi_slopes = validate_alibi(q, alibi_slopes)
    key_bias = validate_key_bias(q, k, key_bias)
    if q.device.type != "cpu":
        raise ValueError(
            f"the native kernel runs on CPU tensors, not {q.device.type}; use the torch or triton path"
        )
    block_q = block_rows(q.shape[2]) if block_q is None else block_q
    if int(block_q) < 1 or int(block_k) < 1:
        raise ValueError(f"block_q and block_k must be >= 1; got {block_q}, {block_k}")
    module = native_module()
    if module is None:
        raise RuntimeError(
            f"the native CPU kernel is {native_status()}; run the torch path (--fused off, or fix the build)"
        )
    empty = torch.empty(0)
    return module.forward(
        _rows(q),
        _rows(k),
        empty if v is None else _rows(v),
        softmax_scale.contiguous(),
        bool(causal),
        empty if mask is None else mask,
        0 if window is None else int(window),
        0.0 if softcap is None else float(softcap),
        empty if sinks is None else sinks,
        empty if alibi_slopes is None else alibi_slopes,
        empty if key_bias is None else key_bias,
        k.shape[2] - q.shape[2],
        int(block_q),
        int(block_k),
        bool(profile),
    )


def _rows(x):
    """x as float32 whose rows (last dim) are contiguous and do not overlap: no copy where they already are."""
    x = x.detach().float()
    if x.stride(-1) != 1 or x.stride(-2) < x.shape[-1]:
        x = x.contiguous()
    return x


PROCESS_NATIVE = NativeState()  # callers that pass no state of their own: one per process
