"""Entropy and loss by position: Figures 1, 2 and 4, with where each curve departs (its inflection)."""

from __future__ import annotations

import pandas as pd

from entropy_lens.analysis import best_uniform_scale, inflection_agreement, inflections
from entropy_lens.analysis.correlation import describe
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.figures.words import (
    search_differences,
    search_words,
    smoothing_words,
    span_mean,
    span_words,
    uniform_rule,
)
from entropy_lens.plotting import (
    HEADS,
    NOPE,
    NOPE_DARK,
    NOPE_SCALES,
    ROPE,
    ROPE_DARK,
    ROPE_SCALES,
    bits,
    entropy_loss,
    family_colors,
)
from entropy_lens.results import span_label

__all__ = ["entropy_and_loss", "heads_vs_uniform", "inflection_lines", "uniform_scales"]


def inflection_lines(named: dict, L: int, smooth: int) -> list[str]:
    """'{name}: entropy departs at ...; loss departs at ...' for each {name: ScanResult}."""
    table = inflections(list(named.values()), train_len=L, smooth=smooth)
    return [
        f"{name}: entropy {_departs(row, 'entropy', L)}; loss {_departs(row, 'loss', L)}"
        for name, (_, row) in zip(named, table.iterrows())
    ]


def _departs(row, name: str, L: int) -> str:
    """Where one curve departs, with the threshold used and where the curve ±1σ would depart."""
    at, low, high = (row[f"{name}_{k}"] for k in ("inflection", "low", "high"))
    rule = f"threshold {row[f'{name}_k']:.1f}σ"
    if pd.isna(at):
        band = "nor does the curve 1σ higher" if pd.isna(low) else f"the curve 1σ higher would at {int(low)}"
        return f"departs at no position ({rule}; {band})"
    later = "the curve 1σ lower would not depart" if pd.isna(high) else f"{int(high)} for the curve 1σ lower"
    return f"departs at {int(at)} ({int(at) / L:.2f} L; {int(low)} for the curve 1σ higher, {later}; {rule})"


def _entropy_and_loss_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        smoothing_words(data, c),
        "colours of the scaled NoPE and RoPE NTK curves chosen here (the notebook keeps none)",
    ]


@figure("figure-01", differences=_entropy_and_loss_differences, font_size=14)
def entropy_and_loss(data: FigureData, c: FiguresConfig) -> Drawn:
    """NoPE, NoPE scaled, RoPE and RoPE NTK at short·L: entropy and loss by position."""
    L, T = data.L, data.short
    s = c.fig1_scale
    curves = {
        "NoPE": data.nope,
        f"NoPE $\\lambda$={s:g}/$\\sqrt{{d}}$": data.nope_scaled,
        "RoPE": data.rope,
        "RoPE NTK": data.rope_ntk,
    }
    ax = entropy_loss(
        list(curves.items()), colors=[NOPE, NOPE_DARK, ROPE, ROPE_DARK], smooth=c.smooth, style_key=True
    )
    plain = {k.replace("$\\lambda$", "λ").replace("/$\\sqrt{d}$", "/√d"): v for k, v in curves.items()}
    numbers = inflection_lines(plain, L, c.smooth) + [
        f"{k}: mean loss {span_mean(r.loss, L // 2, L):.3f} in {span_label((L // 2, L), L)} → "
        f"{span_mean(r.loss, L, T):.3f} in {span_label((L, T), L)}; mean entropy "
        f"{span_mean(bits(r.mean_entropy), L // 2, L):.2f} → "
        f"{span_mean(bits(r.mean_entropy), L, T):.2f} bits"
        for k, r in plain.items()
    ]
    caption = (
        f"Mean attention entropy and per-position loss (smoothed ±{c.smooth}) of NoPE, NoPE with a uniform "
        f"scale {s:g}/√d, RoPE and RoPE with HF dynamic NTK ({c.ntk}), at {T // L}L."
    )
    return Drawn(ax.figure, caption, numbers)


def _uniform_scales_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        smoothing_words(data, c),
        "the two panels drawn as one figure (the paper: two separate 8×4 in panels side by side)",
    ]


@figure("figure-02", differences=_uniform_scales_differences, font_size=14)
def uniform_scales(data: FigureData, c: FiguresConfig) -> Drawn:
    """Families of uniform scales at short·L: NoPE left, RoPE right."""
    import matplotlib.pyplot as plt

    L = data.L
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 4))
    numbers = []
    for ax, family, palette, name in (
        (left, data.nope_family, NOPE_SCALES, "NoPE"),
        (right, data.rope_family, ROPE_SCALES, "RoPE"),
    ):
        curves = [(f"$\\bf{{{name}}}$ $\\lambda$={s:g}/$\\sqrt{{d}}$", r) for s, r in family.items()]
        entropy_loss(
            curves,
            colors=family_colors(palette, len(curves)),
            ax=ax,
            smooth=c.smooth,
            entropy_label="Entropy $\\bar{H}_i$ (bits)" if name == "NoPE" else None,
            loss_label="log Perplexity (nats)" if name == "RoPE" else None,
        )
        numbers += inflection_lines({f"{name} s={s:g}": r for s, r in family.items()}, L, c.smooth)
    results = [*data.nope_family.values(), *data.rope_family.values()]
    agree = inflection_agreement(inflections(results, train_len=L, smooth=c.smooth))
    diff = f"{agree.mean_abs_diff:.0f} positions" if agree.n else "undefined: no scan has both"
    numbers.append(
        f"entropy vs loss inflection over the {agree.n} scans where both exist: "
        f"{describe(agree.pearson_r, agree.pearson_p, agree.undefined)}, mean |difference| = {diff}"
    )
    fig.tight_layout()
    caption = (
        f"Uniform scales λ = s/√d: NoPE (left, s ∈ {c.nope_scales}) and RoPE (right, s ∈ {c.rope_scales}) "
        f"at {data.short // L}L; solid entropy, dashed loss."
    )
    return Drawn(fig, caption, numbers)


def _heads_vs_uniform_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    u = data.uniform
    return [
        (
            f"uniform scale s* = {u.scale:g} from this sweep's rule, the best single scale for [{u.span[0]}, "
            f"{u.span[1]}) (the paper: 1.6, the best uniform scale of its grid search at 8K)"
        ),
        search_differences(
            data, c, data.head_scales, "the paper: the released hs8k, searched on SlimPajama + Starcoder"
        ),
        smoothing_words(data, c),
        "colours and legend labels chosen here (the notebook keeps none)",
    ]


@figure("figure-04", differences=_heads_vs_uniform_differences, font_size=14)
def heads_vs_uniform(data: FigureData, c: FiguresConfig) -> Drawn:
    """The uniform scale s* against the per-head scales λ(h), at long·L."""
    L, T, s = data.L, data.long, data.uniform_scale
    uniform, heads = data.long_uniform, data.long_heads
    ax = entropy_loss(
        [(f"NoPE $\\lambda$={s:g}/$\\sqrt{{d}}$", uniform), ("NoPE $\\lambda^{(h)}$", heads)],
        colors=[NOPE_DARK, HEADS],
        smooth=c.smooth,
    )
    choice = data.uniform
    whole = best_uniform_scale(data.final.sweep, length=T, span=(0, T))
    numbers = [
        f"s* = {s:g}: mean loss {choice.loss:.3f} over {span_words(choice.span, L)} in the sweep"
        + (
            " (the grid's edge scale: the sweep's grid does not bracket the minimum)"
            if choice.at_edge
            else ""
        )
        + f"; the scale with the lowest loss averaged over all of {span_label((0, T), L)} would be {whole.scale:g}"
    ]
    for k in range(1, T // L):
        a, b = k * L, (k + 1) * L
        numbers.append(
            f"{span_label((a, b), L)}: loss uniform {span_mean(uniform.loss, a, b):.3f}, λ(h) "
            f"{span_mean(heads.loss, a, b):.3f} (Δ "
            f"{span_mean(heads.loss, a, b) - span_mean(uniform.loss, a, b):+.3f}); "
            f"entropy {span_mean(bits(uniform.mean_entropy), a, b):.2f} vs "
            f"{span_mean(bits(heads.mean_entropy), a, b):.2f} bits"
        )
    ends = [(2 * L - L // 2, 2 * L), (T - L // 2, T)]
    deltas = ", ".join(
        f"{span_words((a, b), L)} {span_mean(heads.loss, a, b) - span_mean(uniform.loss, a, b):+.3f}"
        for a, b in ends
    )
    numbers.append(f"loss λ(h) − uniform at the far ends {deltas} (paper at 4K and 8K: about −0.2 and −0.8)")
    caption = (
        f"Uniform scale s* = {s:g}/√d vs per-head scales λ(h) searched at {T // L}L "
        f"({search_words(data.head_scales, c)}), at {T // L}L; {uniform_rule(choice, L)}."
    )
    return Drawn(ax.figure, caption, numbers)
