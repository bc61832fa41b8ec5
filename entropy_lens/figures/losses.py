"""Loss by position of scaled variants against their baselines, with span means: Figure 13 (§2.4's
position-dependent scales, measured), Figure 14 (the paper's Table 4, the λ(h) search's ablations) and
Figure 15 (the published schedules, with the entropy they leave beyond L)."""

from __future__ import annotations

import numpy as np

from entropy_lens.analysis import best_uniform_scale
from entropy_lens.errors import EntropyLensError
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.figures.words import search_words, smoothing_words, span_mean, span_words
from entropy_lens.plotting import DASHED, HEADS, NOPE_DARK, NOPE_PLAIN, SOLID, VARIANTS, loss_curves
from entropy_lens.results import span_label

__all__ = ["ablations", "published_schedules", "schedules"]


def _loss_panel(curves, c: FiguresConfig, L: int):
    """(Axes, {name: loss}) for `curves` of (legend label, short name, loss (T,), colour, line style)."""
    ax = loss_curves(
        [(label, loss) for label, _, loss, _, _ in curves],
        colors=[color for *_, color, _ in curves],
        styles=[style for *_, style in curves],
        smooth=c.smooth,
        train_len=L,
    )
    return ax, {name: loss for _, name, loss, _, _ in curves}


def _span_means(losses: dict, a: int, b: int) -> dict:
    return {name: span_mean(loss, a, b) for name, loss in losses.items()}


def _means_line(means: dict, span, L: int) -> str:
    return f"mean loss over {span_words(span, L)}: " + ", ".join(f"{n} {v:.3f}" for n, v in means.items())


def _schedules_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        "not a figure of the paper: §2.4 states the result (no improvement) without a figure or numbers",
        (
            f"the piecewise scale beyond L is the sweep's best single scale for "
            f"{span_label((data.L, data.fit_len), data.L)}, "
            "one choice of many the paper does not specify; the log schedule's a is Figure 7's raw fit"
        ),
        smoothing_words(data, c),
    ]


@figure("figure-13", differences=_schedules_differences)
def schedules(data: FigureData, c: FiguresConfig) -> Drawn:
    """Not in the paper: §2.4's negative claim, measured."""
    L, T, sweep = data.L, data.fit_len, data.final.sweep
    runs = data.schedules
    beyond, a = runs.uniform, runs.a
    at = {float(x): i for i, x in enumerate(sweep.scales)}
    if 1.0 not in at:
        raise EntropyLensError(f"the sweep {c.sweep_scales} has no scale 1.0 for the NoPE curve; include 1.0")
    piecewise, log, heads_log = VARIANTS  # the variants' colours
    ax, losses = _loss_panel(
        [
            ("NoPE", "NoPE", sweep.loss[at[1.0]], NOPE_PLAIN, SOLID),
            (
                f"uniform {beyond.scale:g} (best for {span_label((L, T), L)})",
                "uniform",
                sweep.loss[at[beyond.scale]],
                NOPE_DARK,
                SOLID,
            ),
            (f"piecewise 1 → {beyond.scale:g} beyond L", "piecewise", runs.piecewise.loss, piecewise, DASHED),
            (f"log schedule, a = {a:.3g} (Figure 7)", "log", runs.log.loss, log, DASHED),
            ("$\\lambda^{(h)}$", "λ(h)", runs.heads.loss, HEADS, SOLID),
            ("$\\lambda^{(h)}$ × log schedule", "λ(h) × log", runs.heads_log.loss, heads_log, DASHED),
        ],
        c,
        L,
    )
    numbers = [_means_line(_span_means(losses, *span), span, L) for span in [(L, T), (T - L, T)]]
    whole = _span_means(losses, L, T)
    envelope = np.mean(
        [best_uniform_scale(sweep, length=T, span=(k * L, (k + 1) * L)).loss for k in range(1, T // L)]
    )
    numbers.append(
        f"the best uniform scale chosen per span of L with hindsight (an oracle, from the sweep) averages "
        f"{envelope:.3f} over {span_label((L, T), L)}"
    )
    verdicts = [("piecewise", "uniform"), ("log", "uniform"), ("λ(h) × log", "λ(h)")]
    numbers.append(
        f"against the baseline each refines, over {span_label((L, T), L)}: "
        + "; ".join(f"{x} − {y} {whole[x] - whole[y]:+.3f} nats" for x, y in verdicts)
        + " (negative: the position-dependent scale helps; the paper reports it did not)"
    )
    fitted = data.final.fit.a
    clamped = f" (the fit's a = {fitted:.3g} < 0 is taken as 0: a schedule must not shrink the scale)"
    caption = (
        f"§2.4 tested: loss by position at {T // L}L for NoPE, the best single uniform scale for {span_label((L, T), L)} "
        f"({beyond.scale:g}), a piecewise scale (1 inside L, {beyond.scale:g} beyond), the log schedule "
        f"m(i) = 1 + a ln(max(i, L)/L) with Figure 7's raw fit a = {a:.3g}{clamped if fitted < 0 else ''}, "
        f"λ(h) searched at {data.long // L}L, and λ(h) with the log schedule on top; loss only, the sweep's windows."
    )
    return Drawn(ax.figure, caption, numbers)


def _ablations_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        (
            "the paper's Table 4 reports perplexity at lengths; here the loss by position at the search's own "
            f"length {data.long // data.L}L, with span means"
        ),
        "both ablations search with the full search's steps, data and learning rate, each changing one thing",
        smoothing_words(data, c),
    ]


@figure("figure-14", differences=_ablations_differences)
def ablations(data: FigureData, c: FiguresConfig) -> Drawn:
    """Not a figure of the paper: its Table 4 (the λ(h) search's ablations), as loss by position."""
    L, T = data.L, data.long
    s, abl = data.uniform_scale, data.ablations
    no_constraint, init_one = VARIANTS[:2]  # the ablations' colours
    ax, losses = _loss_panel(
        [
            (f"uniform s* = {s:g}", "uniform", data.long_uniform.loss, NOPE_DARK, SOLID),
            ("$\\lambda^{(h)}$ (focus constraint, from s*)", "λ(h)", data.long_heads.loss, HEADS, SOLID),
            (
                "without the focus constraint",
                "no constraint",
                abl.no_constraint.result.loss,
                no_constraint,
                DASHED,
            ),
            ("without the initialisation (from 1.0)", "init 1.0", abl.init_one.result.loss, init_one, DASHED),
        ],
        c,
        L,
    )
    numbers = []
    for span in [(L, T), (T - L, T)]:
        means = _span_means(losses, *span)
        numbers.append(
            _means_line(means, span, L)
            + f" (ablations − λ(h): {means['no constraint'] - means['λ(h)']:+.3f}, "
            f"{means['init 1.0'] - means['λ(h)']:+.3f})"
        )
    for name, ablation in (("no constraint", abl.no_constraint), ("init one", abl.init_one)):
        scales = ablation.scales
        below = int((scales < data.clamp).sum())
        numbers.append(
            f"{name}: λ(h) multipliers {scales.min():.2f}–{scales.max():.2f}, {below} of "
            f"{scales.size} below the focus bound {data.clamp:g}"
        )
    caption = (
        f"The paper's Table 4 at {T // L}L: the λ(h) search (focus constraint λ(h) ≥ 1/√d, from s* = {s:g}) "
        "against the same search without the constraint and without the initialisation, each evaluated "
        f"like the full search; uniform s* for reference. The full search: {search_words(data.head_scales, c)}."
    )
    return Drawn(ax.figure, caption, numbers)


def _published_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    L = data.L
    return [
        (
            "not a figure of the paper: the schedules production models ship (Llama 4, Qwen, YaRN) set "
            "against its §2.4 claim, on the embedded NoPE model"
        ),
        (
            f"Llama 4's floor F = 8192 lies beyond every position here ({data.fit_len // L}L = {data.fit_len}), "
            "so its published schedule is the identity; its fitted variant puts F at L"
        ),
        (
            "the fitted variants replace each schedule's slope by Figure 7's raw fit a: qwen-logn's "
            "ln(i + 1)/ln L = 1 + ln((i + 1)/L)/ln L becomes log:a (Figure 13's log schedule), YaRN's "
            "(1 + C ln s)² ≈ 1 + 2C ln s takes C = a/2"
        ),
        smoothing_words(data, c),
    ]


@figure("figure-15", differences=_published_differences)
def published_schedules(data: FigureData, c: FiguresConfig) -> Drawn:
    """Not in the paper: the published temperature schedules against §2.4's claim."""
    import matplotlib.pyplot as plt

    from entropy_lens.plotting import bits

    L, T, pub = data.L, data.fit_len, data.published
    baselines = {"NoPE": NOPE_PLAIN, "uniform": NOPE_DARK, "λ(h)": HEADS}
    colors = [*baselines.values()] + [VARIANTS[i // 2] for i in range(len(pub.schedules))]
    styles = [SOLID] * len(baselines) + [SOLID if i % 2 == 0 else DASHED for i in range(len(pub.schedules))]
    beyond, inside = span_label((L, T), L), span_label((L // 2, L), L)
    labels = {
        "uniform": f"uniform {data.schedules.uniform.scale:g} (best for {beyond})",
        "λ(h)": "$\\lambda^{(h)}$",
    }
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    names = list(pub.runs)
    loss_curves(
        [(labels.get(n, n), pub.runs[n].loss) for n in names],
        colors=colors,
        styles=styles,
        ax=top,
        smooth=c.smooth,
        train_len=L,
    )
    loss_curves(
        [(n, bits(pub.runs[n].mean_entropy)) for n in names],
        colors=colors,
        styles=styles,
        ax=bottom,
        smooth=c.smooth,
        train_len=L,
        legend=None,
    )
    bottom.set_ylabel("Entropy $\\bar{H}_i$ (bits)")
    loss = {n: span_mean(r.loss, L, T) for n, r in pub.runs.items()}
    drift = {
        n: span_mean(bits(r.mean_entropy), L, T) - span_mean(bits(r.mean_entropy), L // 2, L)
        for n, r in pub.runs.items()
    }
    numbers = [
        f"mean loss over {beyond}: " + ", ".join(f"{n} {v:.3f}" for n, v in loss.items()),
        f"mean entropy over {beyond} minus over {inside} (bits): "
        + ", ".join(f"{n} {v:+.2f}" for n, v in drift.items()),
    ]
    for name, spec in pub.schedules.items():
        helps = loss[name] < loss["uniform"]
        numbers.append(
            f"{name}, `{spec}`: loss over {beyond} {loss[name] - loss['NoPE']:+.3f} nats against NoPE, "
            f"{loss[name] - loss['uniform']:+.3f} against the best uniform scale, "
            f"{loss[name] - loss['λ(h)']:+.3f} against λ(h), so §2.4's claim (no gain over a uniform scale) "
            + ("does not hold for it" if helps else "holds for it")
            + f"; entropy beyond L {drift[name]:+.2f} bits from its level in {inside} (NoPE {drift['NoPE']:+.2f})"
        )
    caption = (
        f"Published position-dependent scales at {T // L}L, loss (top) and mean entropy (bottom) by position: "
        f"Llama 4's attention temperature tuning, Qwen's logn attention and YaRN's attention factor per "
        f"position, each with its published constants (solid) and with Figure 7's fitted a = {pub.a:.3g} "
        "(dashed), beside NoPE, the best single uniform scale for "
        f"{beyond} and λ(h) searched at {data.long // L}L; the sweep's windows. Where a published constant "
        "leaves a schedule at 1 (Llama 4's F here), its curve lies on NoPE's."
    )
    return Drawn(fig, caption, numbers)
