"""A result read by span of positions: `spans_by_l` (in- and out-of-distribution spans in multiples of the
training length L, labelled by `span_label` and `in_l`) and `summary`, the table `entropy-lens scan`
prints: entropy and loss by span, then each further row statistic by its declared reduction."""

from __future__ import annotations

import itertools

import numpy as np

from entropy_lens.results.scan_result import ScanResult
from entropy_lens.statistics import MAX, QUERY_WINDOW, RECEIVED_MEAN, STATISTICS, ranked_rows, reduction_of

__all__ = ["in_l", "received_lines", "span_label", "spans_by_l", "summary"]


def in_l(position: int, L: int) -> str:
    """A position as a multiple of the training length L, as span labels write it: 0, L/2, L, 2L, 3.5L."""
    if position == 0 or position == L:
        return "0" if position == 0 else "L"
    return "L/2" if 2 * position == L else f"{position / L:.3g}L"


def span_label(span: tuple[int, int], L: int) -> str:
    """Positions [a, b) in multiples of L: '[L/2, L)', '[3.5L, 4L)'."""
    return f"[{in_l(span[0], L)}, {in_l(span[1], L)})"


def spans_by_l(length: int, L: int, *, start: int = 0) -> dict[str, tuple[int, int]]:
    """{label: (a, b)} for [0, L/2), [L/2, L), then [kL, (k+1)L) up to `length` (spans double in width
    beyond 8L; the last may be partial), leaving out the spans before `start`: in- and
    out-of-distribution positions side by side, as `summary` and the model cards tabulate them."""
    edges, width = [0, L // 2, L], L
    while edges[-1] < length:
        width = width * 2 if edges[-1] >= 8 * L else width
        edges.append(min(length, edges[-1] + width))
    pairs = [(a, b) for a, b in itertools.pairwise(edges) if a >= start and b <= length]
    return {span_label(pair, L): pair for pair in pairs}


def summary(result: ScanResult) -> str:
    """Mean entropy over heads and mean loss by span of positions: `spans_by_l` with a training length
    L in the meta (and len > L), otherwise the first, middle and last tenth; then, for a result with
    further row statistics (`scan --stats`), the mean of each over heads and the same spans, one column
    per statistic under its name and unit; a statistic whose declaration summarises it by a maximum
    (`Statistic.reduction` MAX: max_logit, QK-clip's quantity) shows the max over heads and positions
    instead, and a line under the table says so; for key statistics, `received_lines`.

    Args:
        result: a scan's result (a loss-only scan's too: its table has the loss alone).

    Returns:
        str: the table, as the CLI prints it after a scan.
    """
    T, L = result.length, result.meta.get("train_len")
    if isinstance(L, int) and 2 <= L < T:
        spans, head = spans_by_l(T, L), f"L = {L}"
    else:
        tenth = max(1, T // 10)
        middle = (T - tenth) // 2
        spans = {"first": (0, tenth), "middle": (middle, middle + tenth), "last": (T - tenth, T)}
        head = "tenth"
    h = result.mean_entropy if result.n_heads else None
    lines = [f"{head:<12}{'positions':>16}{'entropy (nats)':>17}{'loss (nats)':>14}"]
    for name, (a, b) in spans.items():
        entropy = f"{h[a:b].mean():>17.3f}" if h is not None else f"{'not recorded':>17}"
        lines.append(f"{name:<12}{f'[{a}, {b})':>16}{entropy}{np.nanmean(result.loss[a:b]):>14.3f}")
    if h is None:
        why = "entropy: not recorded, a loss-only scan (--record none); scan with --record heads to record it"
        return "\n".join([*lines, why])
    names = result.stat_names[1:]
    if names:  # a second block: one column per further statistic, its name above its unit
        widths = [max(len(n), len(result.stat_unit(n)), 8) + 2 for n in names]
        cells = lambda values: "".join(f"{v:>{w}}" for v, w in zip(values, widths))
        lines += ["", f"{head:<12}" + cells(names), " " * 12 + cells(map(result.stat_unit, names))]
        how = {n: reduction_of(n) for n in names}  # the mean, or the maximum
        curves = {n: how[n].summarize(result.stat(n), (0, 1)) for n in names}  # (len,) each
        for label, (a, b) in spans.items():
            lines.append(f"{label:<12}" + cells(f"{how[n].summarize(curves[n][a:b], 0):.3f}" for n in names))
        lines += [
            f"{n}: max over positions and heads of each span (QK-clip's quantity), not the mean"
            for n in names
            if how[n] is MAX
        ]
    for name in (n for n in names if n in STATISTICS):  # first_mass's K, recent_mass's W
        lines += [
            f"{name}: the mass on the {p.spanned(p.read(result.meta))}" for p in STATISTICS[name].parameters
        ]
    return "\n".join(lines + received_lines(result))


def received_lines(result: ScanResult, top: int = 3) -> list[str]:
    """The summary's block for a result with key statistics: per layer, what the first key receives and
    the `top` positions beyond it that receive most, by received_mean (each counted row's mean share)
    where recorded, else by received (the mass); mean over heads, over samples. [] without them.
    A mean over few rows is noise (the last keys of a causal scan are seen by 1, 2, ... rows), so
    received_mean ranks only the keys enough counted rows may see (statistics.ranked_rows), and the block
    says so."""
    if not result.key_names:
        return []
    name = RECEIVED_MEAN.name if RECEIVED_MEAN.name in result.key_names else result.key_names[0]
    values = reduction_of(name).summarize(result.received(name), 1)  # (layers, key positions)
    window = QUERY_WINDOW.read(result.meta)
    # a window as long as the scan's rows counts every row: said so, never "the last 1000" of 128
    counted = window if window and window < result.length else result.length
    rows = f"the last {window} rows of each window" if counted < result.length else "every row"
    keys = np.arange(values.shape[1])
    ranked = keys >= 1
    why = ""
    if name == RECEIVED_MEAN.name:  # a causal key j is seen by the counted rows at or after it
        least = ranked_rows(counted)
        ranked &= np.minimum(counted, result.length - keys) >= least
        why = f"; of the keys at least {least} counted rows see: a mean over fewer is noise"
    lines = [
        "",
        f"attention received by key position ({name}, {result.stat_unit(name)}; over {rows}, mean over heads)",
        f"{'layer':<8}{'first key':>10}   most received beyond it (position: value{why})",
    ]
    for layer, per_key in enumerate(values):
        candidates = keys[ranked]
        order = candidates[np.argsort(-per_key[candidates], kind="stable")[:top]]
        beyond = ", ".join(f"{j}: {per_key[j]:.3f}" for j in order)
        lines.append(f"{layer:<8}{per_key[0]:>10.3f}   {beyond}")
    return lines
