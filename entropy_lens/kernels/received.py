"""Attention received by every key, exact without T × S: the key statistics of
entropy_lens.statistics.KEY_STATISTICS from two streaming passes, O(T + S) memory beside the inputs.

    attention_received(q, k, *, softmax_scale, stats=("received",), query_window=None, causal=True,
                       mask=None, window=None, softcap=None, sinks=None, alibi_slopes=None, key_bias=None,
                       backend="auto", block_q=None, block_k=None)
        -> {name: (B, Hq, S) float32} for each of `stats` (a name, names comma-separated, a sequence, or
           "all") of entropy_lens.statistics.KEY_STATISTICS

    q, k, softmax_scale and every score modifier: as `attention_stats` (the contract in
           entropy_lens.kernels), validated by the same functions into one `ScoreMods` record
    For key j of query head h, over the counted query rows i of the call, p_ij the probability row i
    gives key j (a sink's share is the row's sink_mass, never a key's; padded keys, which no row may
    attend, receive exactly 0):
        received       Σ_i p_ij                      (at most n_j)
        received_max   max_i p_ij                    (0 where no counted row gives anything)
        received_mean  Σ_i p_ij / n_j, n_j the counted rows that may attend key j (causality, window,
                       mask); 0 where n_j = 0 (kvpress's ObservedAttentionPress normalisation)
    counted rows   the call's real query rows: with a mask, row i (at key position i + S − T) is padding
           when its own position is a key the mask lets no row of its batch row attend (left or right
           padding: a padded token), and real otherwise (rows before the first key, T > S, are real; they
           see no key when causal); without a mask every row is real. A padded row gives nothing and is
           not counted, whatever the mask lets it see.
    query_window  None, or W >= 1: only the last W real rows of each batch row count (SnapKV's
           observation window; with fewer real rows, all of them)
    GQA/MQA: per query head. A key head's score is the sum over its group's Hq/Hkv query heads,
           `received.view(B, Hkv, Hq // Hkv, S).sum(2)` (received_max: `.amax(2)`).
    backend  "auto" (triton on CUDA; native on CPU where it builds, else torch_chunked), "reference"
           (float64, materialised probabilities: the definition, kernels/received_reference.py),
           "torch_chunked" (kernels/received_torch.py), "native" (C++, kernels/native), "triton"
           (kernels/triton_received.py; a mask per query or per head, or a key bias, runs torch_chunked, as
           for the row statistics: `plan.statistics_kernel`)
    block_q, block_k  the column pass's tile (query rows × keys) on torch_chunked and native; None:
           their defaults. Exact at any tile.

Method: two passes. The row pass is the row kernels' own streaming state, whose m + ln l is each row's
log-sum-exp lse_i (`stats.log_sum_exp`; the sink logit is one of the row's outcomes, so its share is
in lse and never in a key's p). The column pass runs over (key tile, query tile), recomputes
p_ij = e^(s_ij − lse_i) from q, k and lse as flash attention's backward does, and keeps per key the sum,
the largest and the count of rows that may attend it (`KEY_STATE`). The native kernel does it in one
pass (its backend's `keeps_key_state`, kernels/backends.py): its row pass keeps each tile's e^(s − m_t) for the query block's rows, and
once the rows are final adds p = e^(s − m_t) · e^(m_t − m) / l into the keys (kernels/native). Each key
statistic is read off that state (`@read` of kernels/stats.py's one registry, checked against KEY_STATISTICS at import). `received_from_lse` is the column
pass alone, for a caller that has its rows' LSE already (a capture's forward): a row whose lse is +∞
counts for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from entropy_lens.flags import Backend, Measure, parse_backend, parse_stats
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.contract import validate_block
from entropy_lens.kernels.entrance import enter
from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.kernels.plan import run, statistics_kernel
from entropy_lens.kernels.received_reference import received_reference, reference_state
from entropy_lens.kernels.received_torch import KEY_STATE
from entropy_lens.kernels.stats import READS, log_sum_exp, read
from entropy_lens.statistics import KEYS, RECEIVED, check_registered


@read("received")
def _received(state):
    return state["sum"]


@read("received_max")
def _received_max(state):
    return state["max"]


@read("received_mean")
def _received_mean(state):
    return (state["sum"] / state["count"]).nan_to_num_(nan=0.0)  # n_j = 0: no row gave anything, 0/0


# every declared key statistic's read, in KEY_STATISTICS's order; the import fails where one lacks its read
KEY_READS = check_registered(READS, "kernels/received.py reads", KEYS)


def validate_rows(rows, B: int, T: int) -> torch.Tensor | None:
    """`rows` as a (B|1, T) bool tensor (the counted rows), or None; ValueError in one line otherwise."""
    if rows is None:
        return None
    if not isinstance(rows, torch.Tensor) or rows.dtype != torch.bool or rows.ndim != 2:
        got = f"{tuple(rows.shape)} {rows.dtype}" if isinstance(rows, torch.Tensor) else type(rows).__name__
        raise ValueError(f"rows must be a (B|1, T) bool tensor, True where a row counts; got {got}")
    if rows.shape[0] not in (1, B) or rows.shape[1] != T:
        raise ValueError(
            f"rows must be (B|1, T) = ({B}|1, {T}), one flag per query row; got {tuple(rows.shape)} "
            "(counted_rows(mods, T, S) makes it)"
        )
    return rows


def check_lse(lse: torch.Tensor) -> None:
    """ValueError in one line where a row's log-sum-exp is NaN or −∞ (no row's m + ln l is: +∞ marks a row
    that counts for nothing), so no backend reads it as a row that gives nothing or as NaN alone."""
    bad = torch.isnan(lse) | (lse == -torch.inf)
    if bool(bad.any()):
        where = ", ".join(
            f"{d} {int(i)}" for d, i in zip(("batch", "head", "row"), bad.nonzero()[0], strict=True)
        )
        raise ValueError(
            f"lse holds {int(bad.sum())} NaN or −inf value(s) (first at {where}); pass each row's "
            "log-sum-exp m + ln l from a finite forward (+inf for a row that counts for nothing)"
        )


def real_rows(mask, T: int, S: int) -> torch.Tensor | None:
    """(B|1, T) bool: the real query rows of a validated bool mask (B|1, Hq|1, T|1, S) (module
    docstring: row i is padding where its key position i + S − T is a key no row of its batch row may
    attend); None for no mask (every row real)."""
    if mask is None:
        return None
    seen = mask.any(dim=2).any(dim=1)  # (B|1, S): the keys some row may attend
    position = torch.arange(T, device=mask.device) + (S - T)
    return (position < 0) | seen[:, position.clamp_min(0)]


def real_rows_after(mask, T: int, S: int, device=None) -> torch.Tensor:
    """(B|1, S) float32: for each key j, the real query rows at or after its position (i + S − T >= j,
    `real_rows`; rows before the first key, T > S, see none): the rows a causal key may be attended by
    whatever window a model has, kvpress's ObservedAttentionPress divisor (S − j without padding; a
    right-padded sequence's own length − j, as the sequence alone)."""
    real = real_rows(mask, T, S)
    if real is None:
        real = torch.ones(1, T, dtype=torch.bool, device=device)
    at = torch.zeros(real.shape[0], S + max(T - S, 0), device=real.device)  # rows by key position
    at[:, at.shape[1] - T :] = real.float()
    at = at[:, at.shape[1] - S :] if S else at[:, :0]  # rows placed before key 0 see no key
    return at.flip(-1).cumsum(-1).flip(-1)


def counted_rows(
    mods: ScoreMods, T: int, S: int, query_window: int | None = None, device=None
) -> torch.Tensor | None:
    """(B|1, T) bool: the rows that count (the real ones, or the last `query_window` real ones of each
    batch row); None where every row counts."""
    real = real_rows(mods.mask, T, S)
    if query_window is None or (real is None and query_window >= T):
        return real
    if real is None:
        real = torch.ones(1, T, dtype=torch.bool, device=device)
    after = real.flip(-1).cumsum(-1).flip(-1)  # the real rows at or after each row
    return real & (after <= query_window)


def row_log_sum_exp(kernel: Backend, q, k, softmax_scale, mods: ScoreMods) -> torch.Tensor:
    """(B, Hq, T) float32: each row's log-sum-exp from `kernel`'s row pass (its streaming state, no
    extra accumulator), +∞ for a row with no outcome."""
    state, _ = backend_of(kernel).stream(q, k, None, softmax_scale, mods)
    return log_sum_exp(state)


def received_from_lse(
    q,
    k,
    lse,
    softmax_scale,
    mods: ScoreMods,
    *,
    rows=None,
    stats=(RECEIVED.name,),
    backend: Backend | str = Backend.AUTO,
    block_q: int | None = None,
    block_k: int | None = None,
) -> dict[str, torch.Tensor]:
    """The column pass alone: {name: (B, Hq, S) float32} for each of `stats`, from q (B, Hq, T, D), k
    (B, Hkv, S, D), the rows' log-sum-exp lse (B, Hq, T) (a forward's m + ln l, the sink among the
    outcomes; +∞ for a row that counts for nothing), softmax_scale (Hq,) float32 and the validated
    `mods` of the forward that gave lse; `rows` (B|1, T) bool or None: the rows that count
    (`counted_rows`). The reference ignores lse: it materialises the probabilities (the definition).

    Args:
        q: (B, Hq, T, D) queries after RoPE, any float dtype.
        k: (B, Hkv, S, D) keys; Hq % Hkv == 0.
        lse: (B, Hq, T) the rows' log-sum-exp, any float dtype (cast to float32); +∞ for a row that
            counts for nothing; None only for the reference, which materialises the probabilities.
        softmax_scale: (Hq,) float32, the validated scale of the forward.
        mods: the validated ScoreMods of the forward that gave lse.
        rows: None, or (B|1, T) bool: the query rows that count (`counted_rows`).
        stats: key statistics of entropy_lens.statistics.KEY_STATISTICS, or "all".
        backend: "auto" or one of kernels.BACKENDS.
        block_q: the column pass's tile, query rows (torch_chunked, native); None: the default.
        block_k: the column pass's tile, keys; None: the default.

    Returns:
        dict: {name: (B, Hq, S) float32} for each of `stats`.

    Raises:
        ValueError: lse not (B, Hq, T) or holding NaN/−inf, rows not (B|1, T) bool, a block size that is
            not a positive integer, scores beyond float32's range, an unknown statistic or backend.
    """
    stats, backend = parse_stats(stats, KEYS), parse_backend(backend)
    block_q, block_k = validate_block(block_q, "block_q"), validate_block(block_k, "block_k")
    rows = validate_rows(rows, q.shape[0], q.shape[2])
    kernel, _ = statistics_kernel(backend, q, k, mods, one_pass=True)
    if backend_of(kernel).materialises:
        return received_reference(q, k, softmax_scale, mods, rows, stats=stats)
    state = received_state(
        q, k, lse, softmax_scale, mods, rows=rows, backend=kernel, block_q=block_q, block_k=block_k
    )
    return read_received(state, stats)


def read_received(state: Mapping[str, torch.Tensor], stats) -> dict[str, torch.Tensor]:
    """{name: (B, Hq, S) float32} for each of `stats` (parsed key statistics), read off the column pass's
    state (KEY_STATE: sum, max, count), which may be the combination of several passes' states over
    disjoint query rows (the sums and counts added, the maxima the larger: a sharded sequence)."""
    return {name: KEY_READS[name].read(state) for name in stats}


def received_state(
    q,
    k,
    lse,
    softmax_scale,
    mods: ScoreMods,
    *,
    rows=None,
    backend: Backend | str = Backend.AUTO,
    block_q: int | None = None,
    block_k: int | None = None,
) -> dict[str, torch.Tensor]:
    """The column pass's state {"sum", "max", "count": (B, Hq, S) float32} (KEY_STATE) from the rows'
    `lse`, before any statistic is read (`read_received`): what passes over disjoint query rows combine.
    Arguments as `received_from_lse`'s; the reference builds it from its materialised probabilities.

    Args:
        q: (B, Hq, T, D) queries after RoPE, any float dtype.
        k: (B, Hkv, S, D) keys; Hq % Hkv == 0.
        lse: (B, Hq, T) the rows' log-sum-exp; +∞ for a row that counts for nothing.
        softmax_scale: (Hq,) float32, the validated scale of the forward.
        mods: the validated ScoreMods of the forward that gave lse.
        rows: None, or (B|1, T) bool: the query rows that count (`counted_rows`).
        backend: "auto" or one of kernels.BACKENDS.
        block_q: the column pass's tile, query rows (torch_chunked, native); None: the default.
        block_k: the column pass's tile, keys; None: the default.

    Returns:
        dict: {"sum", "max", "count"}, each (B, Hq, S) float32.

    Raises:
        ValueError: lse not (B, Hq, T) or holding NaN/−inf, rows not (B|1, T) bool, or a block size that
            is not a positive integer.
    """
    block_q, block_k = validate_block(block_q, "block_q"), validate_block(block_k, "block_k")
    kernel, kernel_mods = statistics_kernel(parse_backend(backend), q, k, mods, one_pass=True)
    B, Hq, T = q.shape[0], q.shape[1], q.shape[2]
    if backend_of(kernel).materialises:  # from the materialised probabilities; lse unused
        return reference_state(q, k, softmax_scale, mods, validate_rows(rows, B, T))
    if lse is None or tuple(lse.shape) != (B, Hq, T):
        got = None if lse is None else tuple(lse.shape)
        raise ValueError(f"lse must be (B, Hq, T) = {(B, Hq, T)}, one per query row; got {got}")
    lse = lse.to(device=q.device, dtype=torch.float32)
    check_lse(lse)
    rows = validate_rows(rows, B, T)
    if rows is not None:
        lse = torch.where(rows.to(q.device).view(rows.shape[0], 1, T), lse, torch.inf)
    blocks = {"block_q": block_q, "block_k": block_k}
    blocks = {name: size for name, size in blocks.items() if size is not None}
    return backend_of(kernel).key_state(q, k, lse, softmax_scale, kernel_mods, blocks)


def attention_received(
    q,
    k,
    *,
    softmax_scale,
    stats=(RECEIVED.name,),
    causal=True,
    mask=None,
    window=None,
    softcap=None,
    sinks=None,
    alibi_slopes=None,
    key_bias=None,
    backend="auto",
    block_q: int | None = None,
    block_k: int | None = None,
    **params,
) -> dict[str, torch.Tensor]:
    """Attention received by every key, exact without T × S (the contract: kernels/received.py).

    Args:
        q (Tensor): (B, Hq, T, D) queries after RoPE, any float dtype.
        k (Tensor): (B, Hkv, S, D) keys; Hq % Hkv == 0 (GQA/MQA: per query head).
        softmax_scale (float | Tensor): λ, or (Hq,) per head; scores are λ_h q·k.
        stats (str | Sequence[str]): key statistics of entropy_lens.statistics.KEY_STATISTICS (a name,
            comma-separated names, a sequence), or "all".
        causal, mask, window, softcap, sinks, alibi_slopes, key_bias: the score modifiers, as
            `attention_stats` takes them.
        backend (str): "auto" or one of kernels.BACKENDS (flags.Backend), as `attention_stats`'s.
        block_q, block_k (int | None): the column pass's tile (torch_chunked, native).
        **params: the key statistics' parameters by name (entropy_lens.statistics.PARAMETERS: the query
            window, only the last W real query rows counting: SnapKV's).

    Returns:
        dict[str, Tensor]: {name: (B, Hq, S) float32} for each of `stats`; padded keys 0.

    Raises:
        ValueError: an argument outside the contract, named with its fix (a row statistic in `stats`
            names `attention_stats`).
        TypeError: a keyword no backend takes (`sofcap=`).
    """
    measure = Measure.parse(key_stats=parse_stats(stats, KEYS), backend=backend, **params)
    call = enter(q, k, measure=measure, arguments=locals())
    mods, stats = call.mods, measure.key_stats
    rows = counted_rows(mods, q.shape[2], k.shape[2], measure.query_window, q.device)
    kernel, kernel_mods = statistics_kernel(measure.backend, q, k, mods, one_pass=True)
    if backend_of(kernel).materialises:
        return received_reference(q, k, call.softmax_scale, mods, rows, stats=stats)
    blocks = {"block_q": call.block_q, "block_k": call.block_k}
    if backend_of(
        kernel
    ).keeps_key_state:  # the row pass keeps the column state itself: one pass over the keys
        ran = run(kernel, q, k, None, call.softmax_scale, kernel_mods, key_state=True, counted=rows, **blocks)
        return read_received(ran.key_state, stats)
    lse = row_log_sum_exp(kernel, q, k, call.softmax_scale, kernel_mods)
    return received_from_lse(
        q, k, lse, call.softmax_scale, mods, rows=rows, stats=stats, backend=kernel, **blocks
    )


__all__ = [
    "KEY_READS",
    "KEY_STATE",
    "attention_received",
    "check_lse",
    "counted_rows",
    "read_received",
    "real_rows",
    "real_rows_after",
    "received_from_lse",
    "received_state",
    "row_log_sum_exp",
    "validate_rows",
]
