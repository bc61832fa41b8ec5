"""Attention-entropy kernels: pure functions, no transformers import.

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
           The reference and torch_chunked take it; `backend_for` names torch_chunked for it on CUDA (the
           Triton kernel and `merge.shard_state` do not take it).
    -> H_i = −Σ_j p_ij ln p_ij over attendable keys and, with sinks, − p_sink ln p_sink (the sink is one
       outcome of the distribution), in nats, accumulated in fp32. A row with no attendable key gets 0
       (with sinks: p_sink = 1, H = 0); callers exclude such rows from averages.
       sink_mass: p_sink per row (B, Hq, T) float32, a probability in [0, 1]; zeros when sinks is None.
    block_q, block_k  torch_chunked's tile, query rows × keys. The reference has no tiles and the
           Triton kernel autotunes its own, so there they change nothing (the entropy is exact at any
           tile size).
Every entry point (these functions, the backends' own, `merge.shard_state`) takes exactly the keywords
it names: a misspelt one (`sofcap=`) is a TypeError on every backend, never a silently different number.

The attention output with its entropy, from the same score tiles (for models whose output sdpa cannot
compute: softcap, sinks; ALiBi, which sdpa takes only as a materialised T × S bias):
`attention_with_entropy_torch(q, k, v, softmax_scale, ...)` (torch_chunked.py, exact, any backend's masks),
`attention_with_entropy_native` (the same loop in C++ for CPU, kernels/native: built on first use,
`native_status()` says whether it is and why not) and `triton_entropy.attention_with_entropy_triton` (GPU).

Backends (`backend`): "reference" (float64, materialises scores; tests only), "torch_chunked" (exact
streaming, the CPU path and fallback everywhere; on CPU its per-tile step is compiled, fold.py), "triton" (the GPU kernel, triton_entropy.py; on
CPU only under TRITON_INTERPRET=1, for tests). The choice is made here, once, in two steps:
`resolve_backend` turns "auto" into a name (triton for CUDA tensors when triton is installed,
torch_chunked otherwise, overridable with the ENTROPY_LENS_BACKEND environment variable), and
`backend_for` sends masks the Triton kernel does not take (per query or per head; it takes key
padding, a sliding window and transformers' causal forms of both, see `masks.as_key_padding`) to
torch_chunked. `backend_for` names the backend that will run, so callers record what ran; the
Triton launcher refuses other masks rather than handing them on. The argument checks live in
contract.py, shared with `merge.shard_state`.
"""

from __future__ import annotations

import os

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.contract import (
    validate,
    validate_alibi,
    validate_extras,
    validate_key_bias,
    validate_window,
)
from entropy_lens.kernels.fold import compile_requested, fold_status
from entropy_lens.kernels.masks import as_key_padding
from entropy_lens.kernels.merge import (
    entropy_from_state,
    merge_states,
    shard_state,
    sink_mass_from_state,
    sink_state,
)
from entropy_lens.kernels.native import (
    attention_with_entropy_native,
    entropy_native,
    native_available,
    native_status,
)
from entropy_lens.kernels.reference import attention_probabilities, entropy_reference
from entropy_lens.kernels.torch_chunked import (
    BLOCK_K,
    BLOCK_Q,
    attention_with_entropy_torch,
    entropy_torch_chunked,
)

__all__ = [
    "BACKENDS",
    "attention_entropy",
    "attention_probabilities",
    "attention_with_entropy_native",
    "attention_with_entropy_torch",
    "backend_for",
    "compile_requested",
    "entropy_from_state",
    "entropy_native",
    "entropy_reference",
    "entropy_torch_chunked",
    "fold_status",
    "merge_states",
    "native_available",
    "native_status",
    "resolve_backend",
    "shard_state",
    "sink_mass_from_state",
    "sink_state",
]

BACKENDS = ("reference", "torch_chunked", "triton")
ENV_VAR = "ENTROPY_LENS_BACKEND"


def resolve_backend(backend: str = "auto", device: torch.device | str | None = None) -> str:
    """The backend `attention_entropy` will use for tensors on `device` (None: only check the name)."""
    if backend == "auto":
        backend = os.environ.get(ENV_VAR, "auto")
    if backend == "auto":
        if device is not None and torch.device(device).type == "cuda" and triton_available():
            return "triton"
        return "torch_chunked"
    if backend not in BACKENDS:
        raise EntropyLensError(
            f"unknown entropy backend {backend!r}; choose one of auto, {', '.join(BACKENDS)} "
            f"(via --backend or {ENV_VAR})"
        )
    if backend == "triton":
        if not triton_available():
            raise EntropyLensError(
                "the triton backend needs the triton package: pip install triton "
                "(or use --backend torch_chunked)"
            )
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
        if device is not None and torch.device(device).type != "cuda" and not interpret:
            raise EntropyLensError(
                f"the triton backend runs on CUDA tensors, not {torch.device(device).type}; use --device "
                "cuda, --backend torch_chunked, or set TRITON_INTERPRET=1 (tests only) before importing "
                "entropy_lens"
            )
    return backend


def triton_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def backend_for(
    backend: str,
    q,
    k,
    *,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
) -> str:
    """The backend `attention_entropy(q, k, ..., backend=backend)` runs for these inputs (same arguments):
    `resolve_backend`'s choice, except that triton becomes torch_chunked for a mask or a key bias the
    Triton kernel does not take (every backend takes softcap, sinks and alibi_slopes). Errors as
    `attention_entropy`'s."""
    mask4 = validate(q, k, 1.0, mask)[1]
    validate_extras(q, softcap, sinks)
    validate_alibi(q, alibi_slopes)
    key_bias = validate_key_bias(q, k, key_bias)
    return _plan(backend, q, k, causal, mask4, validate_window(window, causal), key_bias)[0]


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
    """See the module docstring for the contract."""
    softmax_scale, mask4 = validate(q, k, softmax_scale, mask)
    softcap, sinks = validate_extras(q, softcap, sinks)
    alibi_slopes = validate_alibi(q, alibi_slopes)
    key_bias = validate_key_bias(q, k, key_bias)
    backend, mask4, window = _plan(backend, q, k, causal, mask4, validate_window(window, causal), key_bias)
    extras = (softcap, sinks, alibi_slopes)
    if backend == "reference":
        return entropy_reference(
            q,
            k,
            softmax_scale,
            causal,
            mask4,
            window,
            *extras,
            key_bias=key_bias,
            return_sink_mass=return_sink_mass,
        )
    if backend == "triton":
        from entropy_lens.kernels.triton_entropy import entropy_triton

        return entropy_triton(
            q, k, softmax_scale, causal, mask4, window, *extras, return_sink_mass=return_sink_mass
        )
    return entropy_torch_chunked(
        q,
        k,
        softmax_scale,
        causal,
        mask4,
        window,
        *extras,
        key_bias=key_bias,
        return_sink_mass=return_sink_mass,
        block_q=block_q,
        block_k=block_k,
    )


def _plan(backend: str, q, k, causal: bool, mask4, window, key_bias=None):
    """(backend, mask, window) for validated inputs: for triton the mask is reduced to key padding
    (B|1, 1, 1, S) or None and the window merged with the mask's own, so the launcher does not check
    a (T, S) mask again."""
    backend = resolve_backend(backend, q.device)
    if backend == "triton" and key_bias is not None:  # the Triton kernel takes no key bias
        return "torch_chunked", mask4, window
    if backend != "triton" or mask4 is None:
        return backend, mask4, window
    form = as_key_padding(mask4, q.shape[0], q.shape[2], k.shape[2], causal, window)
    if form is None:  # per query or per head: the exact streaming path
        return "torch_chunked", mask4, window
    return ("triton", *form)
