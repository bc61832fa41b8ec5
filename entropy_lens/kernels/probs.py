"""Exact attention slices at any length: the probabilities a block of query rows gives a block of keys,
each row normalised over every key it may see (and its sink), not only the slice, without T × S. ::

    attention_probs(q, k, *, softmax_scale, rows=(a, b), keys=(c, d), <the score modifiers>, backend="auto")
        -> (B, Hq, b − a, d − c) float32

Two steps: the rows' log-sum-exp from `backend`'s row pass (O(T) beside the inputs: the same pass the
statistics take), then the slice's scores, with every modifier, and e^(s − lse). Memory
O((b − a)(d − c) + T) per head. The reference backend slices its float64 materialised probabilities
(`reference.attention_probabilities`, small T: tests).

The slice is materialised: B · Hq · (b − a) · (d − c) float32 values, 4 bytes each (16K rows × 16K keys
of one head: 1 GiB), and the scores and their exponential beside it at the peak. A slice above
`max_bytes` (MAX_BYTES, 256 MiB, by default) is refused in one line before anything runs: ask for fewer
rows or keys, or raise `max_bytes`.
"""

from __future__ import annotations

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Measure
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.entrance import enter
from entropy_lens.kernels.plan import statistics_kernel
from entropy_lens.kernels.received import row_log_sum_exp
from entropy_lens.kernels.reference import attention_probabilities
from entropy_lens.kernels.torch_chunked import ScoreTiles
from entropy_lens.settings import check_argument

__all__ = ["MAX_BYTES", "attention_probs"]

MAX_BYTES = 1 << 28  # the largest slice `attention_probs` returns unless max_bytes= is raised: 256 MiB


def attention_probs(
    q,
    k,
    *,
    softmax_scale,
    rows=None,
    keys=None,
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
    backend="auto",
    max_bytes=MAX_BYTES,
) -> torch.Tensor:
    """The probabilities query rows a..b give keys c..d, exact (module docstring).

    Args:
        q: (B, Hq, T, D) queries after RoPE, any float dtype.
        k: (B, Hkv, S, D) keys; Hq % Hkv == 0.
        softmax_scale: λ, a float or an (Hq,) tensor; scores are λ_h q·k.
        rows: (a, b), 0 <= a < b <= T: the query rows (None: every row).
        keys: (c, d), 0 <= c < d <= S: the keys (None: every key).
        causal, mask, window, softcap, sinks, alibi_slopes, key_bias: the score modifiers, as
            `attention_stats` takes them.
        backend: "auto" or one of kernels.BACKENDS: the kernel of the rows' log-sum-exp.
        max_bytes: the largest slice returned, B · Hq · (b − a) · (d − c) · 4 bytes (MAX_BYTES, 256 MiB,
            by default); a larger one is refused before anything runs.

    Returns:
        Tensor: (B, Hq, b − a, d − c) float32; 0 where a row may not see a key (and for a row that sees
        none).

    Raises:
        ValueError: a span outside the rows or keys, a slice above `max_bytes`, or an input outside the
            contract (EntropyLensError), naming the fix.
    """
    measure = Measure.parse(backend=backend)
    call = enter(q, k, measure=measure, arguments=locals())
    T, S = q.shape[2], k.shape[2]
    a, b = checked_span("rows", rows, T)
    c, d = checked_span("keys", keys, S)
    check_argument("max_bytes", max_bytes, int, {"at_least": 1}, example=MAX_BYTES)
    size = q.shape[0] * q.shape[1] * (b - a) * (d - c) * 4  # the float32 slice returned
    if size > max_bytes:
        raise EntropyLensError(
            f"attention_probs: rows ({a}, {b}) x keys ({c}, {d}) of {q.shape[0]} x {q.shape[1]} heads is "
            f"{size:,} bytes of float32 ({size / 2**20:,.1f} MiB), above max_bytes={max_bytes:,}; ask for "
            f"fewer rows= or keys=, or pass max_bytes={size} to allow it"
        )
    kernel, kernel_mods = statistics_kernel(measure.backend, q, k, call.mods, one_pass=True)
    if backend_of(kernel).materialises:
        p, _, _ = attention_probabilities(q, k, call.softmax_scale, call.mods)
        return p[:, :, a:b, c:d].float()
    lse = row_log_sum_exp(kernel, q, k, call.softmax_scale, kernel_mods)  # (B, Hq, T); +inf: no outcome
    return probs_from_lse(q, k, lse, call.softmax_scale, call.mods, (a, b), (c, d))


def probs_from_lse(
    q, k, lse, softmax_scale, mods, rows: tuple[int, int], keys: tuple[int, int]
) -> torch.Tensor:
    """(B, Hq, b − a, d − c) float32: the probabilities rows a..b (of q's T) give keys c..d, e^(s − lse)
    from the rows' `lse` (B, Hq, T) a row pass gave, at the validated `softmax_scale` and `mods` it ran at
    (the second step of `attention_probs`; a capture's kept block)."""
    (a, b), (c, d) = rows, keys
    with torch.no_grad():
        tiles = ScoreTiles(q.detach(), k.detach(), softmax_scale, mods, k.shape[2] - q.shape[2])
        s = tiles.scores(tiles.queries(a, b), a, b, c, d)  # (B, Hkv, G, b − a, d − c), −inf: not seen
        s = s.reshape(q.shape[0], q.shape[1], b - a, d - c)
        return torch.exp(s - lse[:, :, a:b, None].float())


def checked_span(what: str, span, n: int) -> tuple[int, int]:
    """(start, stop) of `span` within n, 0 <= start < stop <= n (None: (0, n)); EntropyLensError in one
    line otherwise, suggesting a pair within n (the span cut to 0..n, or the whole (0, n))."""
    if span is None:
        return 0, n
    if not isinstance(span, (tuple, list)) or len(span) != 2:
        raise EntropyLensError(f"{what} must be (start, stop) with 0 <= start < stop <= {n}; got {span!r}")
    for value in span:
        check_argument(what, value, int, {}, example=0)
    start, stop = int(span[0]), int(span[1])
    if not (0 <= start <= n and 0 <= stop <= n):
        low, high = min(max(start, 0), n), min(max(stop, 0), n)
        pair = (low, high) if low < high else (0, n)
        fix = f"pass {what}={pair}" if what.isidentifier() else f"give {what} as {pair}"
        raise EntropyLensError(
            f"{what} ({start}, {stop}) must lie within 0..{n}: each at least 0 and at most {n}; {fix}"
        )
    if start >= stop:
        raise EntropyLensError(
            f"{what} ({start}, {stop}) is empty; pass (start, stop) with start < stop <= {n}"
        )
    return start, stop
