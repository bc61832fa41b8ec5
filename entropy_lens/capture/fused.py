"""Which way a capturing layer computes its output: sdpa + an entropy-only pass, or one fused pass.

    "separate"  torch sdpa (its flash kernels on GPU and CPU) for the output, then the entropy kernel
                on the same q, k: two passes over K.
    "fused"     output AND entropy from the same score tiles, one pass over K/V: on CUDA the Triton
                kernel's WITH_OUTPUT variant, on CPU `kernels.attention_with_entropy_torch` (its
                elementwise step compiled, kernels/fold.py).

`--fused` / `EntropyRecorder(fused=...)`: "off" always separate; "on" fused wherever it applies;
"auto" (default) measures both on the real work: the first calls of each shape run separate,
fused, separate, fused (the first of each a warm-up: compilation, Triton autotuning), every result
is used, and the faster of the two timed calls is kept for the rest of the process, as
`@triton.autotune` does for block sizes. No work is run only to be timed.

The fused pass applies only where it computes exactly what the layer's output path would: no
gradient wanted, no dropout, and a backend that has it: triton for these inputs
(`kernels.backend_for`) with a mask that is None or key padding and a sliding window
(transformers' causal, padding and sliding-window masks qualify, see `kernels.masks.as_key_padding`)
and equal q/v head sizes, or torch_chunked on CPU, which takes every mask. Softcapping and attention
sinks both implement; any other extra argument is refused before this
(capture.attention.check_kwargs). A `sliding_window` argument is ignored, as sdpa ignores it: the
mask carries the window.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

FUSED_MODES = ("auto", "on", "off")
_CHOICES: dict[tuple, str] = {}  # shape key -> "fused" | "separate", measured once per process
_TRIALS: dict[tuple, dict[str, list[float]]] = {}  # shape key -> seconds of each path's runs so far


def fused_applies(backend: str, query, key, value, mask, dropout: float) -> bool:
    """`backend`: what `kernels.backend_for` picks for the layer's entropy; `mask`: None or the
    kernels' form of the layer's mask (key padding (B, 1, 1, S) where transformers' mask allows)."""
    if dropout or (torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))):
        return False
    if backend == "torch_chunked":
        return query.device.type == "cpu"
    if backend != "triton":
        return False
    return value.shape[-1] == query.shape[-1] and (mask is None or mask.shape[1] == mask.shape[2] == 1)


def choose(
    mode: str, shape_key: tuple, run: dict[str, Callable[[], object]], timer=None
) -> tuple[str, object]:
    """(path, its result) for `mode`: "off" runs `run["separate"]`, "on" `run["fused"]`; "auto" runs the
    path kept for `shape_key` or, until one is kept, the next trial: each path twice in turn, timed by
    `timer(fn) -> (result, seconds)` (default `wall_seconds`), and the faster second run is kept."""
    if mode != "auto":
        path = "fused" if mode == "on" else "separate"
        return path, run[path]()
    if shape_key in _CHOICES:
        path = _CHOICES[shape_key]
        return path, run[path]()
    trials = _TRIALS.setdefault(shape_key, {name: [] for name in run})
    path = min(trials, key=lambda name: len(trials[name]))  # fewest runs so far; ties in `run`'s order
    result, seconds = (timer or wall_seconds)(run[path])
    trials[path].append(seconds)
    if all(len(times) >= 2 for times in trials.values()):
        _CHOICES[shape_key] = min(trials, key=lambda name: trials[name][-1])
        del _TRIALS[shape_key]
    return path, result


def measured_choices() -> dict[tuple, str]:
    """What "auto" chose so far in this process, by shape key."""
    return dict(_CHOICES)


def wall_seconds(fn) -> tuple[object, float]:
    """(fn(), its wall time in seconds), synchronising CUDA around it when CUDA is in use."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    if sync:
        sync()
    t0 = time.perf_counter()
    result = fn()
    if sync:
        sync()
    return result, time.perf_counter() - t0
