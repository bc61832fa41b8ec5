"""Beyond entropy: Figure 17, the row statistics the scans record beside entropy, by position
past the training length L — max probability, mean distance back, first-token mass, varentropy and
collision entropy — for the embedded models at fit·L and a real pretrained model at twice its context,
set against what Scalable-Softmax, the attention-sink papers, entropix and Rényi-2 say.

Every statement is generated from the binned runs (`analysis.StatCurves`; the numbers behind it are the
pure functions of `analysis.beyond`): span means over [L/2, L)
(inside L) and over the last half-span [T − L/2, T), per head and averaged over layers and heads.
`beyond_numbers` and `beyond_comparisons` take the record alone, so a test words them from synthetic
curves."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from entropy_lens.analysis import StatCurves
from entropy_lens.analysis.beyond import (
    SINK_EPSILON,
    edge_spans,
    fading_exponent,
    mean_position,
    sink_share,
    ssmax_vector_fall,
)
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import BeyondEntropy, FigureData
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.plotting import ALIBI, NOPE, NOPE_DARK, REAL, ROPE_DARK, stat_by_position, window_label
from entropy_lens.results import span_label
from entropy_lens.statistics import FIRST_MASS

__all__ = [
    "STATS",
    "beyond_comparisons",
    "beyond_entropy",
    "beyond_numbers",
    "model_rows",
    "times",
]

STATS = ("max_prob", "distance", "first_mass", "varentropy", "collision_entropy")  # the panels, in order
LOG_Y = {"max_prob", "first_mass"}  # probabilities that fall by decades: a log axis
# Gu et al. (2024)'s sink metric (analysis.beyond.sink_share) over the rows of the first 64 tokens
SINK_ROWS = 64
COLORS = {"NoPE": NOPE, "NoPE s*": NOPE_DARK, "RoPE": ROPE_DARK, "ALiBi": ALIBI}


def model_rows(b: BeyondEntropy, L: int) -> list[tuple[str, StatCurves, int]]:
    """(name, curves, its L) for every model of the figure: the embedded ones, then the real one."""
    names = {"NoPE s*": f"NoPE λ={b.scale:g}/√d (s*)"}
    rows = [(names.get(k, k), c, L) for k, c in b.tiny.items()]
    if b.real is not None:
        rows.append((b.real.meta.get("model", "real"), b.real, b.real_train_len))
    return rows


def times(r: float) -> str:
    """'×0.76', '×1.44'; two significant digits below 0.1 ('×0.0053'), never a bare '×0.00'."""
    return f"×{r:.2f}" if r >= 0.1 else f"×{r:.2g}"


def _spans(c: StatCurves, L: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """[L/2, L) and the last half-span [T − L/2, T)."""
    return edge_spans(L, c.length)


def _head(values: np.ndarray, pick) -> str:
    layer, head = np.unravel_index(pick(values), values.shape)
    return f"layer {layer} head {head}"


def _first(c: StatCurves) -> str:
    return window_label(c.meta, FIRST_MASS.name)


def _summary(name: str, c: StatCurves, L: int) -> str:
    inside, far = _spans(c, L)
    m = {s: (c.span(s, *inside).mean(), c.span(s, *far).mean()) for s in (*STATS, "entropy")}
    u = c.units
    d0, d1 = (m["distance"][k] / mean_position(span) for k, span in enumerate((inside, far)))
    ratio = {s: m[s][1] / m[s][0] if m[s][0] > 0 else float("inf") for s in ("max_prob", "first_mass")}
    return (
        f"{name}, {span_label(inside, L)} → {span_label(far, L)} (L = {L}), means over layers and heads: max "
        f"probability {m['max_prob'][0]:.3f} → {m['max_prob'][1]:.3f} ({times(ratio['max_prob'])}, "
        f"α = {fading_exponent(c, L):+.2f}); mean distance {m['distance'][0]:.0f} → {m['distance'][1]:.0f} "
        f"{u['distance']}, {d0:.2f} → {d1:.2f} of the bound i (a uniform row: 0.50); {_first(c)} "
        f"{m['first_mass'][0]:.3g} → {m['first_mass'][1]:.3g} ({times(ratio['first_mass'])}); varentropy "
        f"{m['varentropy'][0]:.2f} → {m['varentropy'][1]:.2f} {u['varentropy']}; collision entropy "
        f"{m['collision_entropy'][0]:.2f} → {m['collision_entropy'][1]:.2f} {u['collision_entropy']} "
        f"(Shannon entropy {m['entropy'][0]:.2f} → {m['entropy'][1]:.2f} {u['entropy']})"
    )


def _by_layer(ratios: np.ndarray) -> str:
    """'0 ×0.41, 1 ×0.52, ...' for every layer, or the three extremes each way of a deep model."""
    order = np.argsort(ratios)
    if len(ratios) <= 6:
        return ", ".join(f"{layer} {times(r)}" for layer, r in enumerate(ratios))
    low, high = (", ".join(f"{i} ({times(ratios[i])})" for i in idx) for idx in (order[:3], order[::-1][:3]))
    return f"the smallest ratios in layers {low}, the largest in {high}"


def _most(ratio: float) -> str:
    """How the head of the smallest ratio moves: 'falls most', or 'rises least' when every head rises."""
    return "falls most" if ratio < 1 else "rises least"


def _least(ratio: float) -> str:
    """How the head of the largest ratio moves: 'falls least', or 'rises most' when it rises."""
    return "falls least" if ratio < 1 else "rises most"


def _heads(name: str, c: StatCurves, L: int) -> str:
    inside, far = _spans(c, L)
    p0, p1 = c.span("max_prob", *inside), c.span("max_prob", *far)
    ratio = p1 / p0
    fast, slow = np.unravel_index(ratio.argmin(), ratio.shape), np.unravel_index(ratio.argmax(), ratio.shape)
    rise = c.span("varentropy", *far) - c.span("varentropy", *inside)
    reach = c.span("distance", *far) / mean_position(far)
    return (
        f"{name}, by head ({c.n_layers} layers × {c.n_heads} heads): max probability {_most(ratio[fast])} "
        f"in layer {fast[0]} head {fast[1]} ({p0[fast]:.3g} → {p1[fast]:.3g}, {times(ratio[fast])}) and "
        f"{_least(ratio[slow])} in layer {slow[0]} head {slow[1]} ({times(ratio[slow])}); by layer "
        f"(mean over its heads), {_by_layer(p1.mean(axis=1) / p0.mean(axis=1))}; varentropy changes most in "
        f"{_head(np.abs(rise), np.argmax)} ({rise.flat[np.abs(rise).argmax()]:+.2f} {c.units['varentropy']}); "
        f"over {span_label(far, L)} the head looking farthest back is {_head(reach, np.argmax)} "
        f"({reach.max():.2g} of i), the nearest {_head(reach, np.argmin)} ({reach.min():.2g})"
    )


def _sinks(name: str, c: StatCurves, L: int) -> str:
    inside, far = _spans(c, L)
    spans = [(0, min(SINK_ROWS, c.length)), inside, far]
    shares = [sink_share(c, a, b) for a, b in spans]
    f0, f1 = c.span("first_mass", *inside), c.span("first_mass", *far)
    top = np.unravel_index(f0.argmax(), f0.shape)
    return (
        f"{name}: heads whose mean {_first(c)} exceeds ε = {SINK_EPSILON:g} (Gu et al.'s sink metric): "
        + ", ".join(f"{s:.0%} over rows [{a}, {b})" for s, (a, b) in zip(shares, spans))
        + f" (of {f0.size}); its strongest first-token head, layer {top[0]} head {top[1]}, "
        f"{f0[top]:.3g} → {f1[top]:.3g}"
    )


def beyond_numbers(b: BeyondEntropy, L: int) -> list[str]:
    """The README's bullets of Figure 17: per model its means, its heads and its sinks."""
    rows = model_rows(b, L)
    return [f(name, c, l) for f in (_summary, _heads, _sinks) for name, c, l in rows]


def _direction(values: dict[str, tuple[float, float]], up: str, down: str) -> str:
    """'falls for NoPE (×0.41), RoPE (×0.52); rises for ALiBi (×1.10)' from {name: (inside, far)}."""
    parts = []
    for word, keep in ((down, lambda r: r < 1), (up, lambda r: r >= 1)):
        named = [f"{n} ({times(f / i)})" for n, (i, f) in values.items() if i > 0 and keep(f / i)]
        if named:
            parts.append(f"{word} for {', '.join(named)}")
    return "; ".join(parts)


def beyond_comparisons(b: BeyondEntropy, L: int) -> list[str]:
    """Figure 17 against the cited papers, like for like where they report a comparable number, else the
    direction only; every number here is ours."""
    rows = model_rows(b, L)

    def change(stat):
        return {n: tuple(c.span(stat, *s).mean() for s in _spans(c, l)) for n, c, l in rows}

    alphas = ", ".join(f"{n} {fading_exponent(c, l):+.2f}" for n, c, l in rows)
    toy = {(l, c.length): ssmax_vector_fall(l, c.length) for _, c, l in rows}
    toy_words = ", ".join(
        f"{times(r)} from {span_label(edge_spans(l, T)[0], l)} to {span_label(edge_spans(l, T)[1], l)} at L = {l}"
        for (l, T), r in toy.items()
    )
    early = ", ".join(f"{n} {sink_share(c, 0, min(SINK_ROWS, c.length)):.0%}" for n, c, _ in rows)
    H, H2 = change("entropy"), change("collision_entropy")
    gap = ", ".join(f"{n} {H[n][0] - H2[n][0]:.2f} → {H[n][1] - H2[n][1]:.2f}" for n in H)
    varentropy = ", ".join(f"{n} {i:.2f} → {f:.2f}" for n, (i, f) in change("varentropy").items())
    unit = rows[0][1].units
    return [
        (
            "Scalable-Softmax (Nakanishi 2025): the largest output of a softmax falls toward 0 as its input grows "
            "(attention fading), shown on a constructed vector (its Figure 1: +3 at one element, −2 at the "
            f"others), whose maximum e⁵/(e⁵ + n − 1) over a row's n keys falls {toy_words}; it reports no "
            "maximum probability by position of a trained softmax model's rows to set beside these. Here, "
            "over the same spans, the mean max probability "
            + _direction(change("max_prob"), "rises", "falls")
            + f"; as a power of position beyond L, α = {alphas} (a uniform row: −1, no fading: 0). Its remedy "
            "multiplies the logits by s·log n, growing with the length n; s* is one constant factor"
        ),
        (
            "Attention sinks (Xiao et al. 2023, StreamingLLM; Gu et al. 2024): a large share of attention "
            "goes to the first tokens whatever they say, within the training length; Gu et al. count the "
            f"heads whose mean first-token mass over the first {SINK_ROWS} rows exceeds ε = {SINK_EPSILON:g}. "
            f"That metric here, like for like but thresholded on the mean over windows (theirs per prompt): "
            f"{early}. Neither paper measures the first-token mass beyond the training length; here it "
            + _direction(change("first_mass"), "grows", "falls")
        ),
        (
            "entropix (xjdr-alt/entropix): varentropy, chiefly of the next-token distribution, steers its "
            "sampler; for attention it combines each head's row entropy and the spread of that entropy "
            "over heads (torch_sampler.py), and its AttnStats (torch_stats.py) holds the per-row varentropy "
            "measured here. It publishes thresholds, not measurements by position, so only the direction: "
            f"varentropy ({unit['varentropy']}) from inside L to the last half-span, {varentropy}"
        ),
        (
            "Rényi-2: collision entropy H₂ = −ln Σp² is at most the Shannon entropy H and weighs the largest "
            "probabilities most; we cite no measurement of it on attention rows. The gap H − H₂ "
            f"({unit['collision_entropy']}) from inside L to the last half-span: {gap}"
        ),
    ]


def _duration(seconds: float) -> str:
    """'95 s' below 10 min, else '17 min'."""
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def _windows_held(meta: dict, length: int) -> int | None:
    """How many non-overlapping windows of `length` + 1 tokens the scan's text holds, from the token
    count its data_description records ('austen:persuasion (1 document, 115,863 tokens)'); None where
    it records none (a .npy of rows)."""
    found = re.search(r"([\d,]+) tokens\)$", str(meta.get("data_description", "")))
    return int(found.group(1).replace(",", "")) // (length + 1) if found else None


def _beyond_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    b, L = data.beyond, data.L
    tiny = next(iter(b.tiny.values()))
    lines = [
        (
            "not a figure of the paper, which measures entropy alone: the statistics kernels/stats.py "
            "declares (issue 41), beside the papers that use them"
        ),
        (
            f"the embedded models (2.6M parameters, L = {L}) at {tiny.length // L}L and {c.samples} windows "
            f"of {c.data} each, on CPU in {tiny.meta.get('dtype')}: tiny models, our corpus"
        ),
    ]
    if b.real is not None:
        m = b.real.meta
        minutes = m["wall_time_s"] / 60
        source = Path(str(m.get("model_source", ""))).name
        source = f"{source}, dequantised to {m['dtype']}" if source.endswith(".gguf") else m["dtype"]
        held = _windows_held(m, b.real.length)
        windows = (
            f"{m['samples']} of the {held} non-overlapping windows of {b.real.length + 1:,} tokens (--len + 1) "
            f"that {m['data']} holds"
            if held
            else f"{m['samples']} window(s) of {m['data']}"
        )
        lines.append(
            f"{m['model']} ({source}; context {b.real_train_len}) at "
            f"{b.real.length // b.real_train_len}× its context: {windows} (the embedded models: "
            f"{c.samples}); the scan took {minutes:.0f} min "
            f"({_duration(m['wall_time_s'] / m['samples'])} per window) on {m.get('threads', '?')} CPU "
            f"thread(s), backend {m['backend']}"
        )
    else:
        lines.append("no real pretrained model (real: null): the figure's second row is left out")
    widths = ", ".join(f"{n} {cv.width}" for n, cv, _ in model_rows(b, L))
    lines += [
        (
            f"each run kept as its means over bins of positions (tokens per bin: {widths}), so that every head "
            "at 16K stays small in figures/runs; span means over whole bins are exact"
        ),
        (
            f"the {_first(tiny)} counts the first key(s) of each window, which starts mid-text with no BOS "
            "token; lines are unweighted means over layers and heads (as Eq. 1 averages entropy)"
        ),
    ]
    return lines


@figure("figure-17", differences=_beyond_differences)
def beyond_entropy(data: FigureData, c: FiguresConfig) -> Drawn:
    """Not in the paper: the row statistics beyond entropy by position."""
    import matplotlib.pyplot as plt

    b, L = data.beyond, data.L
    rows = [[(name, cv, L) for name, cv, _ in model_rows(b, L)[: len(b.tiny)]]]
    rows += [[model_rows(b, L)[-1]]] if b.real is not None else []
    fig, axes = plt.subplots(
        len(rows), len(STATS), figsize=(4.4 * len(STATS), 3.9 * len(rows)), squeeze=False
    )
    for r, row in enumerate(rows):
        row_L = row[0][2]
        colors = [COLORS.get(k, REAL) for k in (b.tiny if r == 0 else ["real"])]
        for k, stat in enumerate(STATS):
            stat_by_position(
                [(name, cv) for name, cv, _ in row],
                stat,
                colors=colors,
                ax=axes[r, k],
                train_len=row_L,
                band=(10, 90) if r else None,
                bound=stat == "distance",
                log=stat in LOG_Y,
                legend="above" if k == 0 else None,
            )
        bounds = [
            ln
            for ln in axes[r, STATS.index("distance")].get_lines()
            if ln.get_label() in ("bound $i$", "uniform row $i/2$")
        ]
        axes[r, STATS.index("distance")].legend(
            handles=bounds, loc="upper left", frameon=False, fontsize="small"
        )
    fig.tight_layout()
    tiny = next(iter(b.tiny.values()))
    real = (
        f"; bottom, {b.real.meta['model']} at {b.real.length // b.real_train_len}× its context "
        f"{b.real_train_len} ({b.real.meta['samples']} window(s)), with a band from the 10th to the 90th "
        "percentile over its layers × heads"
        if b.real is not None
        else ""
    )
    caption = (
        "Beyond entropy: max probability, mean distance back (with the bound i and a uniform row's i/2), "
        f"{_first(tiny)}, varentropy and collision entropy by position, each the unweighted mean over every "
        f"layer and head (as Figures 1, 2, 4 average entropy) at the mean position of each bin of positions. "
        f"Top, the embedded models at {tiny.length // L}L (L = {L}, dotted): NoPE, NoPE with λ = s*/√d "
        f"(s* = {b.scale:g}, Figure 4's), RoPE{', ALiBi' if 'ALiBi' in b.tiny else ''}{real}. Below, the "
        "numbers from [L/2, L) to the last half-span, then what the cited papers report."
    )
    return Drawn(fig, caption, beyond_numbers(b, L) + beyond_comparisons(b, L))
