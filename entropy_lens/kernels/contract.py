"""The kernels' input contract, checked once where a public entry point builds its `ScoreMods`
(mods.py): each function turns one public argument into the normalised form every backend takes (a
(Hq,) float32 softmax_scale, a bool 4-D mask or None, an int window or None, a float softcap or None,
(Hq,) float32 sinks, ALiBi slopes or None, a (B|1, Hq, S) key bias or None), with errors that say which
argument to fix. See `entropy_lens.kernels` for the contract itself.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from contextvars import ContextVar

import torch

from entropy_lens.settings import check_argument


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast runs attention in on `device_type` now (sdpa is one of autocast's
    lower-precision ops on CPU and CUDA: it casts q, k and v to it), None where autocast is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def validate_shapes(q, k) -> None:
    """ValueError unless q (B, Hq, T, D) and k (B, Hkv, S, D) agree, Hq a multiple of Hkv."""
    if q.ndim != 4 or k.ndim != 4:
        raise ValueError(f"q and k must be 4-D (B, H, T, D); got {tuple(q.shape)} and {tuple(k.shape)}")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim")
    Hq, Hkv = q.shape[1], k.shape[1]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key heads ({Hkv})")


POSITIONS = ("batch", "head", "position")  # what the dimensions of q, k, v (B, H, T|S, D) count


def check_finite(x, name: str, dims=POSITIONS, *, fix: str | None = None) -> None:
    """ValueError, in one line, unless every value of the tensor `x` is finite: how many are not and the
    first one's place ('q holds 1 non-finite value (first at batch 0, head 2, position 17); ...'), `dims`
    naming x's leading dimensions. One pass over x, O(T·D) for q or k: small beside the O(T²·D) scores.
    A non-finite input has no attention statistics: a NaN score has no probability, and an inf one
    makes every other key's e^(s − m) 0, so no backend may turn it into a finite number.

    Args:
        x: any tensor; one that is not a floating-point tensor passes unchecked.
        name: x's name in the message ("q").
        dims: the names of x's leading dimensions, for the first bad value's place.
        fix: the message's fix; None: "pass a finite <name> ...".

    Raises:
        ValueError: a value of x is NaN or infinite.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return
    bad = ~torch.isfinite(x.detach())
    if not bool(bad.any()):
        return
    count = int(bad.sum())
    first = [int(i) for i in bad.nonzero()[0]]
    where = ", ".join(f"{dim} {i}" for dim, i in zip(dims, first, strict=False))
    fix = fix or f"pass a finite {name} (attention statistics of NaN or inf scores are undefined)"
    plural = "" if count == 1 else "s"
    raise ValueError(f"{name} holds {count} non-finite value{plural} (first at {where}); {fix}")


def validate_block(value, name: str):
    """A tile size as a positive int (None: the kernel's default): the one rule for integers
    (settings.check_argument, as --first-keys); EntropyLensError (a ValueError) in one line otherwise, so a
    block of 0 or −5 is never a silent empty loop or uninitialised memory."""
    if value is None:
        return None
    check_argument(name, value, int, {"at_least": 1}, example=64)
    return int(value)


# float32's largest finite value over 8: a score bound below it leaves s − m, ALiBi and the bias finite
SAFE_SCORE = torch.finfo(torch.float32).max / 8


def score_bound(q, k, softmax_scale, mods, *, on_device: bool = False, largest_key=None):
    """An upper bound on |s| for every score s of q (B, Hq, T, D) and k (B, Hkv, S, D) under `mods` (a
    ScoreMods): |λ_h q·k| <= max|λ|·D·max|q|·max|k| (which bounds every product and partial sum of the
    dot product too), plus the largest ALiBi bias max slope·(T + S) and the largest |key bias|. One
    pass over q and k (and the bias), no copy of them; a float, or with `on_device` a 0-d float64 tensor
    on q's device that nothing here reads (reading it on a GPU is a synchronisation). `largest_key`: a
    0-d tensor, max|k| where the caller knows it (a decode step's cache, its new keys taken in), instead
    of a pass over k."""
    if q.numel() == 0 or k.numel() == 0:
        return torch.zeros((), dtype=torch.float64, device=q.device) if on_device else 0.0

    def largest(x):
        return torch.linalg.vector_norm(x.detach(), ord=math.inf).to(torch.float64)

    k_max = largest(k) if largest_key is None else largest_key.to(torch.float64)
    bound = largest(softmax_scale) * q.shape[-1] * largest(q) * k_max
    if getattr(mods, "alibi_slopes", None) is not None:
        bound = bound + largest(mods.alibi_slopes) * (q.shape[2] + k.shape[2])
    if getattr(mods, "key_bias", None) is not None:
        bound = bound + largest(mods.key_bias)
    return bound if on_device else float(bound)


_RANGE_CHECKED: ContextVar[bool] = ContextVar("entropy_lens_score_range_checked", default=False)


@contextlib.contextmanager
def score_range_checked():
    """Inside the block the caller has taken `score_bound` on the device and refuses its inputs later
    where it exceeds SAFE_SCORE (the capture on a GPU: capture/call.py's `check_finite_inputs`), so
    `check_score_range` and torch_chunked's tile guard skip their reads of it, each a synchronisation."""
    token = _RANGE_CHECKED.set(True)
    try:
        yield
    finally:
        _RANGE_CHECKED.reset(token)


def range_checked_by_caller() -> bool:
    """Whether a `score_range_checked` block is active."""
    return _RANGE_CHECKED.get()


def check_score_range(q, k, softmax_scale, mods, kernel) -> None:
    """`refuse_overflow` where `score_bound` exceeds SAFE_SCORE: for the kernels that form scores in float32
    without checking them (native, triton); nothing inside `score_range_checked`."""
    if range_checked_by_caller():
        return
    bound = score_bound(q, k, softmax_scale, mods)
    if bound > SAFE_SCORE:
        refuse_overflow(bound, str(kernel))


def refuse_overflow(bound: float, kernel: str) -> None:
    """ValueError in one line: the scores may leave float32's range (`score_bound` above SAFE_SCORE), where
    `kernel` would turn an infinite score into a finite number (a row that counts for nothing, a
    probability of e^(s − m) with s − m NaN)."""
    raise ValueError(
        f"scores λ·q·k may reach {bound:.3g}, beyond float32's range ({torch.finfo(torch.float32).max:.3g}) in "
        f"which the {kernel} kernel computes them; scale q and k down, or pass backend='reference' (float64)"
    )


def validate_inputs(q, k, v=None) -> None:
    """`validate_shapes`, and ValueError naming the tensor and the place of its first non-finite value
    (`check_finite`) for q, k and the values v (None: none)."""
    validate_shapes(q, k)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x is not None:
            check_finite(x, name)


def validate_scale(q, k, softmax_scale) -> torch.Tensor:
    """softmax_scale (a float or a (Hq,) tensor) as (Hq,) float32 on q's device, after `validate_shapes`."""
    validate_shapes(q, k)
    Hq = q.shape[1]
    if not isinstance(softmax_scale, torch.Tensor):
        if not math.isfinite(float(softmax_scale)):
            raise ValueError(f"softmax_scale must be a finite number; got {softmax_scale!r}")
        return torch.full((Hq,), float(softmax_scale), device=q.device)
    softmax_scale = softmax_scale.detach().to(device=q.device, dtype=torch.float32).reshape(-1)
    check_finite(softmax_scale, "softmax_scale", ("head",))
    if softmax_scale.numel() == 1:
        softmax_scale = softmax_scale.expand(Hq)
    if softmax_scale.numel() != Hq:
        raise ValueError(
            f"softmax_scale must be a float or a ({Hq},) tensor; got shape {tuple(softmax_scale.shape)}"
        )
    return softmax_scale


def validate_mask(q, k, mask) -> torch.Tensor | None:
    """The mask as bool (B|1, Hq|1, T|1, S) on q's device, or None; ValueError naming what to fix."""
    if mask is None:
        return None
    validate_shapes(q, k)
    B, Hq, T, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = attend); got {getattr(mask, 'dtype', mask)!r}")
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
    return mask.to(q.device)


def first_real_key(mask) -> torch.Tensor | None:
    """(B|1,) int64: for each batch row of a validated bool mask (B|1, Hq|1, T|1, S), the index of the
    first key the mask lets through for any head and query row, where first_mass's K keys begin (a
    left-padded row's first real key, 0 for right padding); 0 where it lets none through (those rows see
    no key). None for no mask: every row's first key is key 0."""
    if mask is None:
        return None
    seen = mask.any(dim=2).any(dim=1)  # (B|1, S): the keys some row of the batch row may see
    return seen.to(torch.uint8).argmax(dim=-1)


def validate_first_key(q, mask, first_key) -> torch.Tensor | None:
    """first_mass's per-batch start as (B|1,) int64 on q's device: `first_key` given (a key shard's: the
    global index of each row's first real key, an int or (B,) integers >= 0), else `first_real_key` of
    the validated mask."""
    if first_key is None:
        return first_real_key(mask)
    B = q.shape[0]
    first_key = torch.as_tensor(first_key, device=q.device)
    if first_key.is_floating_point() or first_key.dtype == torch.bool or first_key.ndim > 1:
        raise ValueError(f"first_key must be an int or ({B},) integers; got {first_key!r}")
    first_key = first_key.reshape(-1).to(torch.int64)
    if first_key.numel() not in (1, B) or bool((first_key < 0).any()):
        raise ValueError(
            f"first_key must be one index >= 0 per batch row ({B},): each row's first real key; got {first_key}"
        )
    return first_key


def validate_window(window, causal: bool) -> int | None:
    """The sliding window as an int >= 1, or None; ValueError for anything else or a non-causal window."""
    if window is None:
        return None
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"window must be None or a positive number of keys; got {window!r}")
    if not causal:
        raise ValueError("a sliding window applies to causal attention; pass causal=True or window=None")
    return int(window)


def validate_extras(q, softcap, sinks) -> tuple[float | None, torch.Tensor | None]:
    """(softcap as a positive finite float or None, sinks as (Hq,) float32 on q's device or None) for
    q (B, Hq, T, D); ValueError naming the argument that breaks the contract."""
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
            raise ValueError(f"softcap must be None or a positive float (Gemma2: 50.0); got {softcap!r}")
        softcap = float(softcap)
        if not (0.0 < softcap < float("inf")):
            raise ValueError(f"softcap must be positive and finite (or None for no capping); got {softcap}")
    if sinks is None:
        return softcap, None
    return softcap, _per_query_head(q, sinks, "sinks", "logit", "gpt-oss: module.sinks", "a sink")


def _per_query_head(q, x, name: str, what: str, example: str, none_means: str) -> torch.Tensor:
    """`x` as (Hq,) float32 on q's device, one `what` per query head; ValueError naming `name` otherwise."""
    Hq = q.shape[1]
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"{name} must be a float tensor of one {what} per query head, ({Hq},); got {x!r}")
    if x.ndim != 1 or x.shape[0] != Hq:
        raise ValueError(
            f"{name} must have shape ({Hq},), one {what} per query head ({example}); got {tuple(x.shape)}"
        )
    x = x.detach().to(device=q.device, dtype=torch.float32)
    check_finite(
        x, name, ("head",), fix=f"pass finite {name}, or {name}=None for attention without {none_means}"
    )
    return x


def validate_alibi(q, alibi_slopes) -> torch.Tensor | None:
    """ALiBi slopes (one per query head, flash-attn's `alibi_slopes`) as (Hq,) float32 on q's device, or
    None, for q (B, Hq, T, D); ValueError naming the argument that breaks the contract."""
    if alibi_slopes is None:
        return None
    return _per_query_head(
        q, alibi_slopes, "alibi_slopes", "slope", "BLOOM, MPT, Falcon: the model's alibi slopes", "ALiBi"
    )


def validate_key_bias(q, k, key_bias) -> torch.Tensor | None:
    """A bias per key and query head (Falcon's ALiBi as its builder rounds it) as (B, Hq, S) float32 on
    q's device, or None; raises ValueError for another shape or a value that is not finite."""
    if key_bias is None:
        return None
    B, Hq, S = q.shape[0], q.shape[1], k.shape[2]
    if not isinstance(key_bias, torch.Tensor) or not key_bias.is_floating_point() or key_bias.ndim != 3:
        raise ValueError(f"key_bias must be a float tensor (B, Hq, S) = ({B}, {Hq}, {S}); got {key_bias!r}")
    if key_bias.shape[1:] != (Hq, S) or key_bias.shape[0] not in (1, B):
        raise ValueError(f"key_bias must have shape ({B}|1, {Hq}, {S}); got {tuple(key_bias.shape)}")
    key_bias = key_bias.detach().to(device=q.device, dtype=torch.float32)
    check_finite(
        key_bias, "key_bias", ("batch", "head", "key"), fix="masked keys belong in `mask`, not in the bias"
    )
    return key_bias
