"""Render Figures 1–5, 7, 10–14 from `Runs.compute()`'s results, and the README beside them.

Each `figNN` returns (Figure, caption, headline lines); `render` saves PNG + PDF and writes
figures/README.md with the command, the inputs, every headline number and, per figure, the deliberate
differences from the paper (`entropy_lens.figures.differences`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from entropy_lens.analysis import (
    best_uniform_scale,
    head_entropy_vs_scale,
    inflection_agreement,
    inflections,
    pooled_within_layer,
    yarn_scale,
)
from entropy_lens.analysis.correlation import describe
from entropy_lens.errors import EntropyLensError
from entropy_lens.figures.differences import common_differences, differences
from entropy_lens.plotting import (
    NOPE,
    NOPE_DARK,
    NOPE_SCALES,
    ROPE,
    ROPE_DARK,
    ROPE_SCALES,
    all_heads_grid,
    best_scale_by_position,
    bits,
    entropy_loss,
    family_colors,
    loss_curves,
    models_by_layers,
    palette_colors,
    paper_style,
    perplexity_by_length,
    scale_vs_entropy,
)
from entropy_lens.results import atomic_write_text

__all__ = ["render"]


def render(d: dict, config, out: Path) -> list[Path]:
    """Save every figure as figure-NN.png and .pdf in `out` and write out/README.md."""
    import matplotlib.pyplot as plt

    sections, written = [], []
    items = [("figure", n, make) for n, make in FIGS.items()] + [
        ("table", n, make) for n, make in TABLES.items()
    ]
    for kind, number, make in items:
        with paper_style(font_size=14 if kind == "figure" and number in ("01", "02", "04") else None):
            fig, caption, numbers = make(d, config)
            different = differences(f"{kind}-{number}", d, config)
            for ext in ("png", "pdf"):
                path = out / f"{kind}-{number}.{ext}"
                fig.savefig(
                    path, metadata={"CreationDate": None} if ext == "pdf" else None
                )  # reproducible bytes
                written.append(path)
            plt.close(fig)
        sections.append((f"{kind}-{number}", caption, numbers, different))
    written.append(atomic_write_text(out / "README.md", _readme(sections, d, config)))
    return written


def _span_mean(curve, a: int, b: int) -> float:
    return float(np.mean(curve[a:b]))


def _inflection_lines(named: dict, L: int, smooth: int) -> list[str]:
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


def fig01(d, c):
    L, T = d["L"], d["short"]
    s = c.fig1_scale
    curves = {
        "NoPE": d["nope"],
        f"NoPE $\\lambda$={s:g}/$\\sqrt{{d}}$": d["nope_scaled"],
        "RoPE": d["rope"],
        "RoPE NTK": d["rope_ntk"],
    }
    ax = entropy_loss(list(curves.items()), colors=[NOPE, NOPE_DARK, ROPE, ROPE_DARK], smooth=c.smooth)
    plain = {k.replace("$\\lambda$", "λ").replace("/$\\sqrt{d}$", "/√d"): v for k, v in curves.items()}
    numbers = _inflection_lines(plain, L, c.smooth) + [
        f"{k}: mean loss {_span_mean(r.loss, L // 2, L):.3f} in [L/2, L) → {_span_mean(r.loss, L, T):.3f} in "
        f"[L, {T // L}L); mean entropy {_span_mean(bits(r.mean_entropy), L // 2, L):.2f} → "
        f"{_span_mean(bits(r.mean_entropy), L, T):.2f} bits"
        for k, r in plain.items()
    ]
    caption = (
        f"Mean attention entropy and per-position loss (smoothed ±{c.smooth}) of NoPE, NoPE with a uniform "
        f"scale {s:g}/√d, RoPE and RoPE with HF dynamic NTK ({c.ntk}), at {T // L}L."
    )
    return ax.figure, caption, numbers


def fig02(d, c):
    import matplotlib.pyplot as plt

    L = d["L"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 4))
    numbers = []
    for ax, family, palette, name in (
        (left, d["nope_family"], NOPE_SCALES, "NoPE"),
        (right, d["rope_family"], ROPE_SCALES, "RoPE"),
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
        numbers += _inflection_lines({f"{name} s={s:g}": r for s, r in family.items()}, L, c.smooth)
    results = [*d["nope_family"].values(), *d["rope_family"].values()]
    agree = inflection_agreement(inflections(results, train_len=L, smooth=c.smooth))
    diff = f"{agree.mean_abs_diff:.0f} positions" if agree.n else "undefined: no scan has both"
    numbers.append(
        f"entropy vs loss inflection over the {agree.n} scans where both exist: "
        f"{describe(agree.pearson_r, agree.pearson_p, agree.undefined)}, mean |difference| = {diff}"
    )
    fig.tight_layout()
    caption = (
        f"Uniform scales λ = s/√d: NoPE (left, s ∈ {c.nope_scales}) and RoPE (right, s ∈ {c.rope_scales}) "
        f"at {d['short'] // L}L; solid entropy, dashed loss."
    )
    return fig, caption, numbers


def fig03(d, c):
    n = d["nope"].n_layers
    layers = sorted({0, n // 2, n - 1})
    s = c.fig1_scale
    results = [d["nope"], d["short_heads"], d["nope_scaled"]]
    titles = ["NoPE", "NoPE $\\lambda^{(h)}$", f"NoPE $\\lambda$={s:g}/$\\sqrt{{d}}$"]
    fig = models_by_layers(dict(zip(titles, results)), layers)
    numbers = [
        f"{name}: converged (last-position) entropy {bits(r.entropy[:, :, -1]).min():.2f}–"
        f"{bits(r.entropy[:, :, -1]).max():.2f} bits (bound log₂ {r.length} = {np.log2(r.length):.2f})"
        for name, r in zip(["NoPE", "NoPE λ(h)", f"NoPE λ={s:g}/√d"], results)
    ]
    L, short = d["L"], d["short"]
    caption = (
        f"Per-head entropy (bits) of layers {layers}, all heads, at {short // L}L: NoPE, NoPE with the head "
        f"scales λ(h) searched at {short // L}L ({_search_words(d, c, short)}), NoPE with λ = {s:g}/√d; "
        f"{_rule(d['short_uniform'], L)}."
    )
    return fig, caption, numbers


def fig04(d, c):
    L, T, s = d["L"], d["long"], d["uniform_scale"]
    uniform, heads = d["long_uniform"], d["long_heads"]
    ax = entropy_loss(
        [(f"NoPE $\\lambda$={s:g}/$\\sqrt{{d}}$", uniform), ("NoPE $\\lambda^{(h)}$", heads)],
        colors=[NOPE_DARK, "#33a02c"],
        smooth=c.smooth,
    )
    choice = d["uniform"]
    whole = best_uniform_scale(d["sweep"], length=T, span=(0, T))
    numbers = [
        f"s* = {s:g}: mean loss {choice.loss:.3f} over {_span(choice.span, L)} in the sweep"
        + (
            " (the grid's edge scale: the sweep's grid does not bracket the minimum)"
            if choice.at_edge
            else ""
        )
        + f"; the scale with the lowest loss averaged over all of [0, {T // L}L) would be {whole.scale:g}"
    ]
    for k in range(1, T // L):
        a, b = k * L, (k + 1) * L
        numbers.append(
            f"[{k}L, {k + 1}L): loss uniform {_span_mean(uniform.loss, a, b):.3f}, λ(h) "
            f"{_span_mean(heads.loss, a, b):.3f} (Δ "
            f"{_span_mean(heads.loss, a, b) - _span_mean(uniform.loss, a, b):+.3f}); "
            f"entropy {_span_mean(bits(uniform.mean_entropy), a, b):.2f} vs "
            f"{_span_mean(bits(heads.mean_entropy), a, b):.2f} bits"
        )
    ends = [(2 * L - L // 2, 2 * L), (T - L // 2, T)]
    deltas = ", ".join(
        f"{_span((a, b), L)} {_span_mean(heads.loss, a, b) - _span_mean(uniform.loss, a, b):+.3f}"
        for a, b in ends
    )
    numbers.append(f"loss λ(h) − uniform at the far ends {deltas} (paper at 4K and 8K: about −0.2 and −0.8)")
    caption = (
        f"Uniform scale s* = {s:g}/√d vs per-head scales λ(h) searched at {T // L}L "
        f"({_search_words(d, c, T)}), at {T // L}L; {_rule(choice, L)}."
    )
    return ax.figure, caption, numbers


def _span(span, L: int) -> str:
    """'[3.5L, 4L) = [448, 512)'."""
    a, b = span
    return f"[{a / L:g}L, {b / L:g}L) = [{a}, {b})"


def _rule(choice, L: int) -> str:
    """How s* was chosen, with its value."""
    return (
        f"s* = {choice.scale:g}, the best single scale of the Figure 7 sweep for the last half-span "
        f"{_span(choice.span, L)} (the lowest mean loss there)"
    )


def _search_words(d, c, length: int) -> str:
    """How the λ(h) used at `length` were made: given, or the search's start and settings."""
    given = c.head_scales if length == d["long"] else c.short_head_scales
    if given:
        return f"given: {given}"
    init = d["search_inits"][length]
    s = (d["uniform"] if length == d["long"] else d["short_uniform"]).scale
    start = "from s*" if init == s else f"from {init:g}, the focus bound, as s* = {s:g} lies below it"
    return (
        f"{start}; {c.search_steps} steps of {c.search_batch} windows of {c.search_data}, "
        f"LR {c.search_lr:g}, λ(h) ≥ 1/√d"
    )


def fig05(d, c):
    import matplotlib.pyplot as plt

    heads, plain = d["long_heads"], d["long_nope"]
    n = heads.n_layers
    layers = list(range(1, n, 3)) if n >= 10 else list(range(n))  # the paper: range(1, 22, 3)
    scales = np.asarray(heads.meta["scales"], dtype=np.float64)
    panels = {"NoPE λ(h): entropy after scaling": heads, "NoPE: entropy without the scales": plain}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    chosen = scales[layers]
    on_clamp = int(np.sum(np.abs(chosen - d["clamp"]) <= 1e-6))
    numbers = [
        (
            f"searched multipliers of layers {layers} span {chosen.min():.2f}–{chosen.max():.2f} (/√d); "
            f"{on_clamp} of {chosen.size} heads sit on the clamp λ(h) = {d['clamp']:g}/√d (drawn hollow)"
        )
    ]
    for ax, (name, result) in zip(axes, panels.items()):
        hs = head_entropy_vs_scale(result, scales, layers=layers, lower_bound=d["clamp"])
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
        f"Converged (last-position) entropy at {heads.length} ({heads.length // d['L']}L) of each head of "
        f"layers {layers} against its searched λ(h): left, the entropy of the model with λ(h) (the paper's "
        "choice); right, of NoPE without them. Per layer a linear fit with seaborn's 95% bootstrap band; "
        "hollow: heads on the clamp (the search's focus bound), whose scale is censored."
    )
    return fig, caption, numbers


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


def fig07(d, c):
    import matplotlib.pyplot as plt

    panels = (
        [(c.early, d["early_sweep"], d["early_fit"], d["early_fit_smoothed"])] if d["early_sweep"] else []
    )
    panels.append((c.nope, d["sweep"], d["fit"], d["fit_smoothed"]))  # the paper: 10K steps left, 50K right
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    numbers = []
    for ax, (model, sweep, fit, smoothed) in zip(axes[0], panels):
        name = _trained(d, model)
        best_scale_by_position(sweep, fit, smoothed_fit=smoothed, ax=ax, title=f"NoPE, {name}")
        numbers.append(_fit_words(f"{name}, raw argmin (the paper's fit)", fit))
        if smoothed is not None:
            numbers.append(
                _fit_words(f"{name}, argmin of the loss curves smoothed ±{smoothed.smooth}", smoothed)
            )
        numbers += [
            _edge_words(f, f"{name}, {how}")
            for f, how in ((fit, "raw"), (smoothed, "smoothed"))
            if f is not None
        ]
    fig.tight_layout()
    yarn = " / ".join(f"{yarn_scale(k):.2f}" for k in (2, 4, 8))
    numbers += [
        (
            "paper, TinyLlama-NoPE raw argmin: 10K steps a = 0.3010, R² = 0.9954; 50K steps a = 0.3973, "
            f"R² = 0.9773, implied 1.28 / 1.55 / 1.83 at 2L / 4L / 8L; YaRN's (1 + 0.1 ln k)²: {yarn}"
        ),
        *(
            f"s* for {u.span[1] // d['L']}L sequences (lowest mean loss over {_span(u.span, d['L'])}): "
            f"{u.scale:g}"
            for u in (d["short_uniform"], d["uniform"])
        ),
    ]
    sweep = d["sweep"]
    second = (
        f"; dash-dot: the same fit to the argmin of loss curves smoothed ±{c.fit_smooth}"
        if c.fit_smooth
        else ""
    )
    left = f"left: {_trained(d, c.early)}, right: {_trained(d, c.nope)}; " if d["early_sweep"] else ""
    caption = (
        f"Best uniform multiplier per position ({left}blue: the raw argmin over {len(sweep.scales)} scales "
        f"{c.sweep_scales} (start:stop:step), {c.sweep_samples} windows at {sweep.length}), its best loss (red) "
        f"and the fit 1 + a ln(i/L) over [L, {sweep.length // d['L']}L) (black){second}."
    )
    return fig, caption, numbers


def _trained(d, model: str) -> str:
    """'300 steps' where the checkpoint records its training, else its name."""
    steps = d["steps"].get(model)
    return f"{steps} steps" if steps else model


def _fit_words(name: str, fit) -> str:
    implied = ", ".join(f"{k}L: {v:.2f}" for k, v in fit.implied((2, 4, 8)).items())
    return (
        f"{name}: a = {fit.a:.4f} ± {fit.a_stderr:.4f}, R² = {fit.r2:.4f} over [{fit.fit_range[0]}, "
        f"{fit.fit_range[1]}); implied multipliers {implied}"
    )


def _edge_words(fit, name: str) -> str:
    """How many fitted argmins sit on the grid's edges (censored: the best may lie beyond)."""
    (lo, hi), (n_lo, n_hi) = fit.grid, fit.at_edge
    if not n_lo and not n_hi:
        return f"{name} argmin on the grid's edges ({lo:g}, {hi:g}): at none of the {fit.n_points} fitted positions"
    return (
        f"{name} argmin on the grid's edges: at its smallest scale {lo:g} at {n_lo}, at its largest {hi:g} "
        f"at {n_hi} of the {fit.n_points} fitted positions (there the best scale may lie beyond the grid)"
    )


def _loss_panel(curves, c, L: int):
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
    return {name: _span_mean(loss, a, b) for name, loss in losses.items()}


def _means_line(means: dict, span, L: int) -> str:
    return f"mean loss over {_span(span, L)}: " + ", ".join(f"{n} {v:.3f}" for n, v in means.items())


def fig13(d, c):
    """Not in the paper: §2.4's negative claim, measured (issue 15)."""
    L, T, sweep = d["L"], d["fit_len"], d["sweep"]
    beyond, a, runs = d["schedule_uniform"], d["schedule_a"], d["schedules"]
    at = {float(x): i for i, x in enumerate(sweep.scales)}
    if 1.0 not in at:
        raise EntropyLensError(f"the sweep {c.sweep_scales} has no scale 1.0 for the NoPE curve; include 1.0")
    ax, losses = _loss_panel(
        [
            ("NoPE", "NoPE", sweep.loss[at[1.0]], "#1f78b4", "-"),
            (
                f"uniform {beyond.scale:g} (best for [L, {T // L}L))",
                "uniform",
                sweep.loss[at[beyond.scale]],
                NOPE_DARK,
                "-",
            ),
            (
                f"piecewise 1 → {beyond.scale:g} beyond L",
                "piecewise",
                runs["piecewise"].loss,
                "#e31a1c",
                "--",
            ),
            (f"log schedule, a = {a:.3g} (Figure 7)", "log", runs["log"].loss, "#ff7f00", "--"),
            ("$\\lambda^{(h)}$", "λ(h)", runs["heads"].loss, "#33a02c", "-"),
            ("$\\lambda^{(h)}$ × log schedule", "λ(h) × log", runs["heads_log"].loss, "#6a3d9a", "--"),
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
        f"{envelope:.3f} over [L, {T // L}L)"
    )
    verdicts = [("piecewise", "uniform"), ("log", "uniform"), ("λ(h) × log", "λ(h)")]
    numbers.append(
        f"against the baseline each refines, over [L, {T // L}L): "
        + "; ".join(f"{x} − {y} {whole[x] - whole[y]:+.3f} nats" for x, y in verdicts)
        + " (negative: the position-dependent scale helps; the paper reports it did not)"
    )
    fitted = d["fit"].a
    clamped = f" (the fit's a = {fitted:.3g} < 0 is taken as 0: a schedule must not shrink the scale)"
    caption = (
        f"§2.4 tested: loss by position at {T // L}L for NoPE, the best single uniform scale for [L, {T // L}L) "
        f"({beyond.scale:g}), a piecewise scale (1 inside L, {beyond.scale:g} beyond), the log schedule "
        f"m(i) = 1 + a ln(max(i, L)/L) with Figure 7's raw fit a = {a:.3g}{clamped if fitted < 0 else ''}, "
        f"λ(h) searched at {d['long'] // L}L, and λ(h) with the log schedule on top; loss only, the sweep's windows."
    )
    return ax.figure, caption, numbers


def fig14(d, c):
    """Not a figure of the paper: its Table 4 (the λ(h) search's ablations), as loss by position."""
    L, T = d["L"], d["long"]
    s, abl = d["uniform_scale"], d["ablations"]
    ax, losses = _loss_panel(
        [
            (f"uniform s* = {s:g}", "uniform", d["long_uniform"].loss, NOPE_DARK, "-"),
            ("$\\lambda^{(h)}$ (focus constraint, from s*)", "λ(h)", d["long_heads"].loss, "#33a02c", "-"),
            ("without the focus constraint", "no constraint", abl["no_constraint"].loss, "#e31a1c", "--"),
            ("without the initialisation (from 1.0)", "init 1.0", abl["init_one"].loss, "#ff7f00", "--"),
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
    for name, path in d["ablation_files"].items():
        scales = np.asarray(json.loads(Path(path + ".json").read_text())["scales"], dtype=np.float64)
        below = int((scales < d["clamp"]).sum())
        numbers.append(
            f"{name.replace('_', ' ')}: λ(h) multipliers {scales.min():.2f}–{scales.max():.2f}, {below} of "
            f"{scales.size} below the focus bound {d['clamp']:g}"
        )
    caption = (
        f"The paper's Table 4 at {T // L}L: the λ(h) search (focus constraint λ(h) ≥ 1/√d, from s* = {s:g}) "
        "against the same search without the constraint and without the initialisation, each evaluated "
        f"like the full search; uniform s* for reference. The full search: {_search_words(d, c, T)}."
    )
    return ax.figure, caption, numbers


def table02(d, c):
    """The paper's Table 2: sliding-window perplexity by window length (a table, and drawn)."""
    L, rows = d["L"], d["ppl"]
    cells = {name: [cell["ppl"] for cell in row.values()] for name, row in rows.items()}
    lengths = [w.length for w in next(iter(cells.values()))]
    styles = ["--" if name.startswith("RoPE") else "-" for name in cells]
    ax = perplexity_by_length(cells, colors=palette_colors("tab10")[: len(cells)], styles=styles, train_len=L)
    ax.figure.set_size_inches(8, 6)
    stride = next(iter(cells.values()))[0].stride
    table = [
        "| | " + " | ".join(f"{w // L}L = {w}" for w in lengths) + " |",
        "|---" * (len(lengths) + 1) + "|",
    ]
    table += [f"| {name} | " + " | ".join(_ppl(w) for w in row) + " |" for name, row in cells.items()]
    scored = sorted({w.n_tokens for row in cells.values() for w in row})
    best = {w: min(cells, key=lambda n: cells[n][i].ppl) for i, w in enumerate(lengths)}
    numbers = [
        "lowest perplexity per window length: " + ", ".join(f"{w // L}L {name}" for w, name in best.items()),
        *(
            f"{name}: PPL ×{row[-1].ppl / row[0].ppl:.2f} from {lengths[0] // L}L to {lengths[-1] // L}L"
            for name, row in cells.items()
        ),
    ]
    caption = (
        f"Sliding-window perplexity (Press et al. 2022, the paper's Table 2 protocol) on {c.data}: windows of W "
        f"tokens starting every {stride} tokens (L/{L // stride}, as the paper's 256 at L = 2048), only the "
        f"last {stride} of each scored, {c.ppl_samples} windows per cell ({'/'.join(map(str, scored))} "
        "scored tokens); in brackets a 95% interval that treats the scored tokens as independent (a lower "
        "bound on the uncertainty).\n\n" + "\n".join(table)
    )
    return ax.figure, caption, numbers


def _ppl(w) -> str:
    """'41.2 [40.1–42.3]', in the paper's '>1e3' beyond a thousand."""
    if not w.ppl < 1e3:
        return "> 10³"
    return f"{w.ppl:.3g} [{_num(w.ppl_low)}–{_num(w.ppl_high)}]"


def _num(x: float) -> str:
    return f"{x:.3g}" if x < 1e3 else f"{x:,.0f}"


def _grid(d, key, title, what):
    result = d[key]
    stride = max(1, result.length // 64)  # the paper: every 128th of 8192 positions
    fig = all_heads_grid(result, stride=stride, title=title)
    last = bits(result.entropy[:, :, -1])
    numbers = [
        f"layer {i}: last-position entropy {row.min():.2f}–{row.max():.2f} bits (bound "
        f"{np.log2(result.length):.2f})"
        for i, row in enumerate(last)
    ]
    caption = (
        f"{what}: every head of every layer at {result.length} ({result.length // d['L']}L), every "
        f"{stride}th position, with the bound log₂(i+1) dashed."
    )
    return fig, caption, numbers


FIGS = {
    "01": fig01,
    "02": fig02,
    "03": fig03,
    "04": fig04,
    "05": fig05,
    "07": fig07,
    "10": lambda d, c: _grid(d, "long_heads", "NoPE $\\lambda^{(h)}$", "NoPE λ(h)"),
    "11": lambda d, c: _grid(
        d,
        "long_uniform",
        f"NoPE $\\lambda$={d['uniform_scale']:g}/$\\sqrt{{d}}$",
        f"NoPE λ={d['uniform_scale']:g}/√d",
    ),
    "12": lambda d, c: _grid(d, "long_nope", "NoPE", "NoPE"),
    "13": fig13,
    "14": fig14,
}
TABLES = {"02": table02}  # drawn as figures too: table-NN.png / .pdf


def _timing(compute: dict | None) -> str:
    """The runs' measured time, as their results record it (never typed)."""
    if not compute:
        return "How long the runs took is not recorded."
    threads = compute["threads"]
    on = f" with {'/'.join(map(str, threads))} CPU thread(s)" if threads else ""
    missing = f" ({' and '.join(compute['unrecorded'])} not recorded)" if compute["unrecorded"] else ""
    return (
        f"Computing the {compute['runs']} runs behind these figures took {compute['seconds'] / 60:.1f} min"
        f"{on}{missing}: the sum of the wall times their cached results record. A rerun from the cache "
        "only redraws."
    )


def _readme(sections, d, config) -> str:
    settings = json.dumps(dataclasses.asdict(config), indent=1)
    lines = [
        "# Figures",
        "",
        (
            "Regenerated by `entropy-lens figures` (settings below; `--config FILE` takes them as YAML). "
            "Lengths are "
            f"multiples of the NoPE model's training length L = {d['L']}: Figures 1–3 at {d['short']} (the "
            "paper's 4K = "
            f"2L), Figures 4, 5, 10–12 at {d['long']} (8K = 4L), Figures 7 and 13 at {d['fit_len']} (16K = 8L), "
            "Table 2 at windows of L to 8L (2K–16K). Entropy is plotted in bits, loss (log-PPL) in nats. The "
            "runs behind them are committed in `figures/runs/` (the figures command's default cache; each "
            "file named by a hash of its settings): "
            "`entropy-lens figures` on a fresh clone only redraws, and `entropy-lens figures --cached-only` "
            "regenerates this README from them, as a test does."
        ),
        "",
        "```json",
        settings,
        "```",
        "",
        _timing(d.get("compute")),
        "",
    ]
    lines += ["Deliberate differences from the paper in every figure:", ""]
    lines += [f"- {n}" for n in common_differences(d, config)] + [""]
    for stem, caption, numbers, different in sections:
        kind, number = stem.split("-")
        title = f"{kind.capitalize()} {int(number)}"
        lines += [f"## {title}", "", f"![{title}]({stem}.png)", "", caption, ""]
        lines += [f"- {n}" for n in numbers] + [""]
        lines += ["Differences from the paper:", ""] + [f"- {n}" for n in different] + [""]
    return "\n".join(lines)
