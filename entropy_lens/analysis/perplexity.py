"""Sliding-window perplexity (Press et al. 2022; the paper's Table 2) from a loss-only scan.

The scan (`entropy-lens scan --stride S`, or `runs.perplexity`) draws windows of W tokens starting
every S tokens and stores, per position i of the window, the mean NLL over windows `loss[i]`, the
mean squared NLL `loss_sq[i]` and the windows averaged `count[i]`. Only the last S positions are
scored: each scored token then sees at least W − S tokens of context, and since window starts
differ by S, no token is scored twice.

    nll    = Σ_i n_i m_i / N                     over the last S positions; n_i = count, m_i = loss, N = Σ n_i
    stderr = sqrt(Σ_i n_i s_i²) / N              s_i² = n_i/(n_i − 1) · (loss_sq_i − m_i²), the sample variance
    ppl    = exp(nll), interval exp(nll ∓ 1.96 stderr)

The standard error treats the N scored tokens as independent draws, stratified by position (the
variance between positions does not count as noise: every window contributes one token at each).
Tokens of one window share their context and are positively correlated in practice, which this
ignores: read the interval as a lower bound on the uncertainty. With one window per position the
variance is undefined and `stderr`, `ppl_low` and `ppl_high` are NaN.

numpy and pandas only, like the rest of `analysis`.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult

__all__ = ["Z_95", "WindowPPL", "ppl_table", "sliding_window_ppl"]

Z_95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval


@dataclass(frozen=True)
class WindowPPL:
    """Perplexity over the last `stride` positions of windows of `length` tokens.

    Args:
        nll: mean next-token NLL of the scored tokens, nats.
        stderr: standard error of `nll`, nats (NaN: one window per position; a lower bound otherwise).
        ppl: exp(nll).
        ppl_low: exp(nll − 1.96 stderr).
        ppl_high: exp(nll + 1.96 stderr).
        n_tokens: scored tokens: Σ count over the last `stride` positions.
        length: W, tokens per window (model input length).
        stride: S, positions scored per window.
    """

    nll: float  # mean next-token NLL of the scored tokens, nats
    stderr: float  # standard error of `nll`, nats (NaN: one window per position; a lower bound otherwise)
    ppl: float  # exp(nll)
    ppl_low: float  # exp(nll − 1.96 stderr)
    ppl_high: float  # exp(nll + 1.96 stderr)
    n_tokens: int  # scored tokens: Σ count over the last `stride` positions
    length: int  # W, tokens per window (model input length)
    stride: int  # S, positions scored per window


def sliding_window_ppl(result: ScanResult, stride: int) -> WindowPPL:
    """The perplexity of `result`'s last `stride` positions (module docstring).

    Args:
        result: a `scan --stride S` result (windows of length W starting every S tokens).
        stride: S, the positions scored per window, 1 <= S <= W.

    Returns:
        WindowPPL: the mean NLL (nats), its standard error and the perplexity with its interval.

    Raises:
        EntropyLensError: a stride out of range or other than the scan's, a non-finite loss, or a scored
            position that averages no window.
    """
    stride, T = operator.index(stride), result.length
    if not 1 <= stride <= T:
        raise EntropyLensError(
            f"stride {stride} does not fit windows of {T} tokens; pass a stride from 1 to {T} (the scan's --len)"
        )
    scanned = (result.meta.get("scan_config") or {}).get("stride")
    if scanned is not None and scanned != stride:
        raise EntropyLensError(
            f"this scan's windows start every {scanned} tokens (meta scan_config.stride) but stride {stride} "
            f"was asked; pass stride {scanned}, or rescan with --stride {stride}"
        )
    m = np.asarray(result.loss[T - stride :], dtype=np.float64)
    sq = np.asarray(result.loss_sq[T - stride :], dtype=np.float64)
    n = np.asarray(result.count[T - stride :], dtype=np.float64)
    if not (np.isfinite(m).all() and np.isfinite(sq).all()):
        raise EntropyLensError(
            f"the loss over the last {stride} positions is not finite; rescan in float32 (--dtype float32) "
            "or check the model's logits"
        )
    if (n < 1).any():
        raise EntropyLensError(
            f"some of the last {stride} positions average no windows (count 0); rerun the scan to the end"
        )
    N = n.sum()
    nll = float((n * m).sum() / N)
    stderr = math.nan
    if (n > 1).all():
        variance = np.clip(sq - m**2, 0.0, None) * n / (n - 1)  # (stride,) sample variance per position
        stderr = float(math.sqrt((n * variance).sum()) / N)
    half = Z_95 * stderr
    with np.errstate(over="ignore"):  # a diverged model's perplexity is inf, not an OverflowError
        ppl, low, high = (float(np.exp(x)) for x in (nll, nll - half, nll + half))
    return WindowPPL(
        nll=nll,
        stderr=stderr,
        ppl=ppl,
        ppl_low=low,
        ppl_high=high,
        n_tokens=int(N),
        length=T,
        stride=stride,
    )


def ppl_table(cells: dict[tuple[str, int], ScanResult], stride: int) -> pd.DataFrame:
    """The paper's Table 2 layout: one row per name (in insertion order), one column per window length
    (ascending), values the sliding-window perplexity; a missing (name, length) cell is NaN.

    Args:
        cells: {(name, length): ScanResult}, each a `scan --stride` result of windows of that length.
        stride: S, the positions scored per window, as `sliding_window_ppl`'s.

    Returns:
        DataFrame: perplexity by name (rows) and length (columns).
    """
    values = {key: sliding_window_ppl(result, stride).ppl for key, result in cells.items()}
    names = list(dict.fromkeys(name for name, _ in values))
    lengths = sorted({length for _, length in values})
    table = pd.DataFrame(np.nan, index=pd.Index(names, name="name"), columns=pd.Index(lengths, name="length"))
    for (name, length), ppl in values.items():
        table.loc[name, length] = ppl
    return table
