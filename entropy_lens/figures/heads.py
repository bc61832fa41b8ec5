"""Per-head entropy: Figure 3 (three models × three layers), Figure 5 (searched scale vs converged
entropy) and Figures 10–12 (every head of every layer at long·L)."""

from __future__ import annotations

import numpy as np

from entropy_lens.analysis import head_entropy_vs_scale, pooled_within_layer
from entropy_lens.analysis.correlation import describe
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.figures.words import search_differences, search_words, uniform_rule
from entropy_lens.plotting import all_heads_grid, bits, models_by_layers, scale_vs_entropy

__all__ = [
    "every_head_heads",
    "every_head_nope",
    "every_head_uniform",
    "per_head_entropy",
    "scale_vs_converged",
]


def _per_head_entropy_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    n = data.nope.n_layers
    return [
        (
            f"every head of layers 0, {n // 2} and {n - 1} of {n} (the paper: heads 0–21 of 32 in layers "
            "0/10/20 of 22)"
        ),
        search_differences(data, c, data.short_head_scales, "the paper's hs4k is not released"),
        "a legend of the heads' colours and axis labels (the paper: none)",
    ]


@figure("figure-03", differences=_per_head_entropy_differences)
def per_head_entropy(data: FigureData, c: FiguresConfig) -> Drawn:
    """Every head's entropy by position in three layers: NoPE, NoPE λ(h), NoPE scaled, at short·L."""
    n = data.nope.n_layers
    layers = sorted({0, n // 2, n - 1})
    s = c.fig1_scale
    results = [data.nope, data.short_heads, data.nope_scaled]
    titles = ["NoPE", "NoPE $\\lambda^{(h)}$", f"NoPE $\\lambda$={s:g}/$\\sqrt{{d}}$"]
    fig = models_by_layers(dict(zip(titles, results)), layers)
    numbers = [
        f"{name}: converged (last-position) entropy {bits(r.entropy[:, :, -1]).min():.2f}–"
        f"{bits(r.entropy[:, :, -1]).max():.2f} bits (bound log₂ {r.length} = {np.log2(r.length):.2f})"
        for name, r in zip(["NoPE", "NoPE λ(h)", f"NoPE λ={s:g}/√d"], results)
    ]
    L, short = data.L, data.short
    caption = (
        f"Per-head entropy (bits) of layers {layers}, all heads, at {short // L}L: NoPE, NoPE with the head "
        f"scales λ(h) searched at {short // L}L ({search_words(data.short_head_scales, c)}), NoPE with "
        f"λ = {s:g}/√d; {uniform_rule(data.short_uniform, L)}."
    )
    return Drawn(fig, caption, numbers)


def _scale_vs_converged_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    n = data.long_heads.n_layers
    shown = (
        "layers 1, 4, 7, ... as the paper"
        if n >= 10
        else f"all {n} layers (the paper: 7 of 22, 1, 4, ..., 19)"
    )
    return [
        shown,
        "a second panel, the entropy of NoPE without the scales, beside the paper's (the model with them)",
        (
            "a pooled within-layer correlation with a bootstrap interval, and heads on the clamp drawn hollow "
            "(additions)"
        ),
        f"y from 0 to log₂ {data.long} + 0.5 bits (the paper: 0–13 at 8K); a legend entry for the clamp",
    ]


@figure("figure-05", differences=_scale_vs_converged_differences)
def scale_vs_converged(data: FigureData, c: FiguresConfig) -> Drawn:
    """Each head's converged entropy against its searched λ(h): with the scales (left), without (right)."""
    import matplotlib.pyplot as plt

    heads, plain = data.long_heads, data.long_nope
    n = heads.n_layers
    layers = list(range(1, n, 3)) if n >= 10 else list(range(n))  # the paper: range(1, 22, 3)
    scales = np.asarray(heads.meta["scales"], dtype=np.float64)
    panels = {"NoPE λ(h): entropy after scaling": heads, "NoPE: entropy without the scales": plain}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    chosen = scales[layers]
    on_clamp = int(np.sum(np.abs(chosen - data.clamp) <= 1e-6))
    numbers = [
        (
            f"searched multipliers of layers {layers} span {chosen.min():.2f}–{chosen.max():.2f} (/√d); "
            f"{on_clamp} of {chosen.size} heads sit on the clamp λ(h) = {data.clamp:g}/√d (drawn hollow)"
        )
    ]
    for ax, (name, result) in zip(axes, panels.items()):
        hs = head_entropy_vs_scale(result, scales, layers=layers, lower_bound=data.clamp)
        scale_vs_entropy(
            hs.table, ax=ax, ylim=(0, np.log2(result.length) + 0.5), seed=c.seed, legend=ax is axes[0]
        )
        ax.set_title(name.replace("λ(h)", "$\\lambda^{(h)}$"), fontsize="medium", pad=50)  # above the legend
        numbers += [f"{name}: {line}" for line in _correlation_lines(hs)]
        free = hs.table[~hs.table["on_clamp"]]
        numbers.append(
            f"{name}: {_pooled_words(pooled_within_layer(hs.table, seed=c.seed))}; without the heads on the "
            f"clamp {_pooled_words(pooled_within_layer(free, seed=c.seed))}"
        )
    fig.tight_layout()
    caption = (
        f"Converged (last-position) entropy at {heads.length} ({heads.length // data.L}L) of each head of "
        f"layers {layers} against its searched λ(h): left, the entropy of the model with λ(h) (the paper's "
        "choice); right, of NoPE without them. Per layer a linear fit with seaborn's 95% bootstrap band; "
        "hollow: heads on the clamp (the search's focus bound), whose scale is censored."
    )
    return Drawn(fig, caption, numbers)


def _correlation_lines(hs) -> list[str]:
    lines = []
    for _, r in hs.correlations.iterrows():
        if isinstance(r["undefined"], str):  # a reason; pandas reads a column of None as NaN
            lines.append(f"layer {int(r['layer'])}: correlations undefined: {r['undefined']}")
            continue
        pearson = describe(r["pearson_r"], r["pearson_p"], None)
        spearman = describe(r["spearman_r"], r["spearman_p"], None, name="Spearman ρ")
        lines.append(f"layer {int(r['layer'])}: {pearson}, {spearman}")
    return lines


def _pooled_words(p) -> str:
    if p.undefined is not None:
        return f"pooled within-layer r undefined: {p.undefined}"
    return (
        f"pooled within-layer r = {p.r:.2f} ({p.level:.0%} bootstrap CI {p.low:.2f} to {p.high:.2f}; {p.n} "
        f"heads, {p.n_layers} layers)"
    )


def _grid(data: FigureData, result, title: str, what: str) -> Drawn:
    """Figures 10–12: every head of every layer of `result`, every (length/64)th position."""
    stride = max(1, result.length // 64)  # the paper: every 128th of 8192 positions
    fig = all_heads_grid(result, stride=stride, title=title)
    last = bits(result.entropy[:, :, -1])
    numbers = [
        f"layer {i}: last-position entropy {row.min():.2f}–{row.max():.2f} bits (bound "
        f"{np.log2(result.length):.2f})"
        for i, row in enumerate(last)
    ]
    caption = (
        f"{what}: every head of every layer at {result.length} ({result.length // data.L}L), every "
        f"{stride}th position, with the bound log₂(i+1) dashed."
    )
    return Drawn(fig, caption, numbers)


def _grid_differences(result) -> list[str]:
    stride = max(1, result.length // 64)
    return [
        (
            f"every {stride}th of {result.length} positions, 64 points per head as the paper's every 128th "
            "of 8192"
        ),
        "4 layers a row on A4 with a legend of the heads' colours",
    ]


def _every_head_heads_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return _grid_differences(data.long_heads) + [
        search_differences(data, c, data.head_scales, "the paper: the released hs8k")
    ]


@figure("figure-10", differences=_every_head_heads_differences)
def every_head_heads(data: FigureData, c: FiguresConfig) -> Drawn:
    """Every head's entropy by position at long·L: NoPE with λ(h)."""
    return _grid(data, data.long_heads, "NoPE $\\lambda^{(h)}$", "NoPE λ(h)")


def _every_head_uniform_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return _grid_differences(data.long_uniform) + [
        f"uniform scale s* = {data.uniform_scale:g} (see Figure 4)"
    ]


@figure("figure-11", differences=_every_head_uniform_differences)
def every_head_uniform(data: FigureData, c: FiguresConfig) -> Drawn:
    """Every head's entropy by position at long·L: NoPE with the uniform scale s*."""
    s = data.uniform_scale
    return _grid(data, data.long_uniform, f"NoPE $\\lambda$={s:g}/$\\sqrt{{d}}$", f"NoPE λ={s:g}/√d")


@figure("figure-12", differences=lambda data, c: _grid_differences(data.long_nope))
def every_head_nope(data: FigureData, c: FiguresConfig) -> Drawn:
    """Every head's entropy by position at long·L: NoPE unscaled."""
    return _grid(data, data.long_nope, "NoPE", "NoPE")
