"""Which way a capturing layer computes its output: sdpa + an entropy-only pass, or one fused pass.

    "separate"  torch sdpa (flash/efficient kernels on GPU) for the output, then the entropy kernel
                on the same q, k: two passes over K.
    "fused"     the Triton kernel's WITH_OUTPUT variant: output AND entropy in one pass over K/V.

`--fused` / `EntropyRecorder(fused=...)`: "off" always separate; "on" fused wherever it applies;
"auto" (default) times both on the first forward of each shape (after a warm-up that includes the
kernel's autotuning) and keeps the faster for the rest of the process, as `@triton.autotune` does
for block sizes. Timing needs CUDA: elsewhere "auto" means separate.

The fused pass applies only where it computes exactly what the layer's output path would: the
triton backend for these inputs (`kernels.backend_for`), no gradient wanted, no dropout, and a mask
that is None or key padding and a sliding window (transformers' causal, padding and sliding-window
masks qualify, see `kernels.masks.as_key_padding`). Softcapping and attention sinks it implements;
any other extra argument is refused before this (capture.attention.check_kwargs). A `sliding_window`
argument is ignored, as sdpa ignores it: the mask carries the window.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

FUSED_MODES = ("auto", "on", "off")
_CHOICES: dict[tuple, str] = {}  # shape key -> "fused" | "separate", measured once per process


def fused_applies(backend: str, query, key, value, mask, dropout: float) -> bool:
    """`backend`: what `kernels.backend_for` picks for the layer's entropy; `mask`: None or the
    kernels' form of the layer's mask (key padding (B, 1, 1, S) where transformers' mask allows)."""
    if backend != "triton" or dropout:
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return False
    return value.shape[-1] == query.shape[-1] and (mask is None or mask.shape[1] == mask.shape[2] == 1)


def choose(mode: str, shape_key: tuple, run: dict[str, Callable[[], object]], timer=None) -> str:
    """ "fused" or "separate" for `mode`; under "auto" the faster of `run`'s two closures, timed once
    per `shape_key` by `timer(fn) -> seconds` (`cuda_seconds` for CUDA tensors; None: nothing to time
    on, separate)."""
    if mode == "off":
        return "separate"
    if mode == "on":
        return "fused"
    if shape_key not in _CHOICES:
        if timer is None:
            return "separate"
        for fn in run.values():  # warm-up: compilation and autotuning are not timed
            fn()
        _CHOICES[shape_key] = min(run, key=lambda name: timer(run[name]))
    return _CHOICES[shape_key]


def measured_choices() -> dict[tuple, str]:
    """What "auto" chose so far in this process, by shape key."""
    return dict(_CHOICES)


def cuda_seconds(fn, repeats: int = 3) -> float:
    """Best of `repeats` CUDA-synchronised wall times of `fn()`."""
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best
