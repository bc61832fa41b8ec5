"""Attention-entropy kernels: pure functions, no transformers import.

    attention_entropy(q, k, *, scale, causal=True, mask=None, window=None, impl="auto")
        -> (B, Hq, T) float32, nats

    q      (B, Hq, T, D)  queries after RoPE (if any), any float dtype
    k      (B, Hkv, S, D) keys after RoPE; Hq % Hkv == 0 (MHA, GQA, MQA); head h uses key head h // (Hq/Hkv)
    scale  float or (Hq,) tensor: the softmax scale λ_h (scores are λ_h q·k)
    causal query i sees keys j <= i + S − T (bottom-right, so a query block at the end of a KV cache works)
    mask   None, or bool (True = attend) of shape (B, S) [key padding] or broadcastable 4-D (B|1, Hq|1, T|1, S)
    window None, or a sliding window W >= 1 (causal only): query i sees only the W keys ending at its own
           position, j > i + S − T − W (transformers' `sliding_window`); the kernels skip the key blocks
           behind it, so the work is O(T·W)
    -> H_i = −Σ_j p_ij ln p_ij over attendable keys, accumulated in fp32. A row with no attendable key
       gets 0; callers exclude such rows from averages.

Backends (`impl`): "reference" (float64, materialises scores; tests only), "torch_chunked" (exact
streaming, the CPU path and fallback everywhere), "triton" (the GPU kernel, triton_entropy.py; on
CPU only under TRITON_INTERPRET=1, for tests). "auto" picks triton for CUDA tensors when triton is
installed and torch_chunked otherwise, overridable with the ENTROPY_LENS_BACKEND environment
variable; `resolve_impl` returns the name actually used so callers can record it.
"""

from __future__ import annotations

import os

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.merge import entropy_from_state, merge_states, shard_state
from entropy_lens.kernels.reference import entropy_reference
from entropy_lens.kernels.torch_chunked import entropy_torch_chunked

__all__ = ["IMPLS", "attention_entropy", "entropy_from_state", "entropy_reference", "entropy_torch_chunked",
           "merge_states", "resolve_impl", "shard_state"]  # fmt: skip

IMPLS = ("reference", "torch_chunked", "triton")
ENV_VAR = "ENTROPY_LENS_BACKEND"


def resolve_impl(impl: str = "auto", device: torch.device | str | None = None) -> str:
    """The backend `attention_entropy` will use for tensors on `device` (None: only check the name)."""
    if impl == "auto":
        impl = os.environ.get(ENV_VAR, "auto")
    if impl == "auto":
        if device is not None and torch.device(device).type == "cuda" and triton_available():
            return "triton"
        return "torch_chunked"
    if impl not in IMPLS:
        raise EntropyLensError(
            f"unknown entropy backend {impl!r}; choose one of auto, {', '.join(IMPLS)} "
            f"(via --backend or {ENV_VAR})"
        )
    if impl == "triton":
        if not triton_available():
            raise EntropyLensError("the triton backend needs the triton package: pip install triton "
                                   "(or use --backend torch_chunked)")  # fmt: skip
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
        if device is not None and torch.device(device).type != "cuda" and not interpret:
            raise EntropyLensError(
                f"the triton backend runs on CUDA tensors, not {torch.device(device).type}; use --device cuda, "
                "--backend torch_chunked, or set TRITON_INTERPRET=1 (tests only) before importing entropy_lens"
            )
    return impl


def triton_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def attention_entropy(q, k, *, scale, causal=True, mask=None, window=None, impl="auto", **block_sizes):
    """See the module docstring for the contract. `block_sizes` go to torch_chunked."""
    scale_t, mask4 = _validate(q, k, scale, mask)
    window = _validate_window(window, causal)
    impl = resolve_impl(impl, q.device)
    if impl == "reference":
        return entropy_reference(q, k, scale_t, causal, mask4, window)
    if impl == "triton":
        from entropy_lens.kernels.triton_entropy import entropy_triton

        return entropy_triton(q, k, scale_t, causal, mask4, window)
    return entropy_torch_chunked(q, k, scale_t, causal, mask4, window, **block_sizes)


def _validate_window(window, causal: bool) -> int | None:
    if window is None:
        return None
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"window must be None or a positive number of keys; got {window!r}")
    if not causal:
        raise ValueError("a sliding window applies to causal attention; pass causal=True or window=None")
    return int(window)


def _validate(q, k, scale, mask):
    if q.ndim != 4 or k.ndim != 4:
        raise ValueError(f"q and k must be 4-D (B, H, T, D); got {tuple(q.shape)} and {tuple(k.shape)}")
    B, Hq, T, D = q.shape
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim")
    Hkv, S = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key heads ({Hkv})")
    if isinstance(scale, torch.Tensor):
        scale_t = scale.detach().to(device=q.device, dtype=torch.float32).reshape(-1)
        if scale_t.numel() == 1:
            scale_t = scale_t.expand(Hq)
        if scale_t.numel() != Hq:
            raise ValueError(f"scale must be a float or a ({Hq},) tensor; got shape {tuple(scale.shape)}")
    else:
        scale_t = torch.full((Hq,), float(scale), device=q.device)
    if mask is None:
        return scale_t, None
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (True = attend); got {mask.dtype}")
    if mask.ndim == 2:
        mask = mask[:, None, None, :]
    ok = (
        mask.ndim == 4
        and mask.shape[0] in (1, B)
        and mask.shape[1] in (1, Hq)
        and mask.shape[2] in (1, T)
        and mask.shape[3] == S
    )
    if not ok:
        raise ValueError(f"mask shape {tuple(mask.shape)} is not (B, S) or broadcastable to {(B, Hq, T, S)}")
    return scale_t, mask.to(q.device)
