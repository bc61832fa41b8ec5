"""The paper's training, watched: Figure 18, not a figure of the paper. The embedded NoPE,
RoPE and ALiBi models' pretraining rerun with the attention monitor (per-head entropy and max logit
every 10th step), and the λ(h) search watched every step; the entropy-vs-λ(h) correlation of Figures 5
and 14 also from the search's own converged entropy (its last step's).

Every statement is generated from the histories (figures/watching.py's runs) by the pure functions of
`analysis.trajectories`: which heads collapse or sharpen and from which step, how the largest logit
grows, whether the rerun's losses are the embedded run's. `watched_numbers` takes the record's
`Watched` alone, so a test words it from synthetic histories.
"""

from __future__ import annotations

import numpy as np

from entropy_lens.analysis import converged_entropy_vs_scale, head_entropy_vs_scale, pooled_within_layer
from entropy_lens.analysis.trajectories import (
    COLLAPSE_NATS,
    SHARPEN_RATIO,
    head_trajectories,
    logit_growth,
    loss_agreement,
)
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.figures.watching import SEARCH_EVERY, TRAIN_EVERY, Watched, WatchedRun
from entropy_lens.plotting import TAB10, palette_colors, stat_by_step

__all__ = [
    "correlation_numbers",
    "head_words",
    "loss_words",
    "same_scales_words",
    "watched_numbers",
    "watched_training",
]

LN2 = float(np.log(2))


def _b(nats: float) -> str:
    return f"{nats / LN2:.2f}"


def _count(n: int, verb: str) -> str:
    """'no head collapses', '1 head collapses', '3 heads collapse'."""
    return f"{'no' if n == 0 else n} head{'s' if n > 1 else ''} {verb if n <= 1 else verb[:-1]}"


def head_words(name: str, steps, entropy) -> str:
    """Which heads collapse or sharpen, and from which step (analysis.trajectories's definitions)."""
    t = head_trajectories(steps, entropy)
    parts = []
    for verdict, rule in (
        ("collapses", f"final entropy ≤ {COLLAPSE_NATS:g} nats = {_b(COLLAPSE_NATS)} bits"),
        ("sharpens", f"entropy at most {SHARPEN_RATIO:.0%} of its first record's"),
    ):
        rows = t[t["verdict"] == verdict].sort_values("step")
        heads = ", ".join(
            f"layer {r.layer} head {r.head} from step {r.step} ({_b(r.first)} → {_b(r.final)} bits)"
            for r in rows.itertuples()
        )
        parts.append(f"{_count(len(rows), verdict)} ({rule}){': ' + heads if len(rows) else ''}")
    rest = {v: _count(int((t["verdict"] == v).sum()), v) for v in ("holds", "broadens")}
    mean = np.asarray(entropy, dtype=np.float64).mean(axis=(1, 2))
    return (
        f"{name}, {len(t)} heads, steps {int(steps[0])}–{int(steps[-1])}: mean entropy {_b(mean[0])} → "
        f"{_b(mean[-1])} bits; " + "; ".join(parts) + f"; {rest['holds']} (fall by less than half), "
        f"{rest['broadens']}"
    )


def logit_words(name: str, steps, max_logit) -> str:
    """How the largest attention logit grew."""
    g = logit_growth(steps, max_logit)
    layers = ", ".join(f"{i} {v:.1f}" for i, v in enumerate(g.by_layer))
    return (
        f"{name}: the largest attention logit over heads {g.first:.1f} at step {int(steps[0])} → {g.final:.1f} "
        f"at step {int(steps[-1])} (×{g.ratio:.2f}, in layer {g.final_head[0]} head {g.final_head[1]}); its "
        f"peak {g.peak:.1f} at step {g.peak_step} (layer {g.peak_head[0]} head {g.peak_head[1]}); at the "
        f"last step, by layer: {layers}"
    )


def loss_words(run: WatchedRun) -> str:
    """Whether the rerun's losses are the embedded run's."""
    a = loss_agreement(run.log, run.embedded_log, up_to=run.steps)
    threads = f"rerun on {run.threads} CPU thread(s), the embedded pretraining on {run.embedded_threads}"
    if not a.steps:
        return f"{run.name}: no logged step is shared with the embedded run's log ({threads})"
    if a.identical:
        return (
            f"{run.name}: the rerun's losses equal the embedded run's exactly at all {a.steps} logged steps "
            f"≤ {run.steps} ({threads}): the watched run is the embedded one"
        )
    return (
        f"{run.name}: the rerun's losses differ from the embedded run's at {a.steps - a.equal} of {a.steps} "
        f"logged steps ≤ {run.steps}, first at step {a.first_difference}, by at most {a.max_difference:.3g} "
        f"nats ({threads}; the monitor itself changes no weight, so the difference is the run's own "
        "rounding): the histories describe a run of the same recipe, not the embedded weights"
    )


def correlation_numbers(w: Watched, today, *, seed: int = 0) -> list[str]:
    """The entropy-vs-λ(h) correlation from the search's converged entropy (its last step's, mean over
    its batch's rows) beside today's (`today`: Figure 5's scan with λ(h), the last position), and the
    difference."""
    search = w.search
    converged = search.values["entropy"][-1]
    ours = converged_entropy_vs_scale(converged, w.search_scales, lower_bound=w.clamp)
    theirs = head_entropy_vs_scale(today, w.search_scales, lower_bound=w.clamp)
    p_ours, p_theirs = (pooled_within_layer(t.table, seed=seed) for t in (ours, theirs))

    def said(p):
        if p.undefined is not None:
            return f"undefined: {p.undefined}"
        return f"{p.r:.2f} ({p.level:.0%} bootstrap CI {p.low:.2f} to {p.high:.2f})"

    layers = "; ".join(
        f"layer {int(a.layer)} r {a.pearson_r:.2f} vs {b.pearson_r:.2f}"
        for a, b in zip(ours.correlations.itertuples(), theirs.correlations.itertuples(), strict=True)
    )
    gap = (
        f"the search's is {p_ours.r - p_theirs.r:+.2f} from today's"
        if p_ours.undefined is None and p_theirs.undefined is None
        else "no difference is defined"
    )
    return [
        (
            f"entropy vs λ(h), pooled within-layer Pearson r over {p_ours.n} heads: from the search's converged "
            f"entropy (its step {int(search.steps[-1])}, the mean over every row of that step's batch "
            f"at {today.length}) {said(p_ours)}; today's (Figures 5/14: "
            f"the last position of the held-out scan at {today.length} with the searched λ(h)) {said(p_theirs)}: "
            f"{gap}"
        ),
        f"per layer, Pearson r from the search's entropy vs today's: {layers}",
    ]


def same_scales_words(w: Watched, searched_file: str) -> str:
    """Whether the watched search found the figures' own λ(h) (the monitor changes no number)."""
    import json
    from pathlib import Path

    theirs = np.asarray(json.loads(Path(searched_file + ".json").read_text())["scales"], dtype=np.float64)
    name = Path(searched_file).name
    if np.array_equal(w.search_scales, theirs):
        return f"the watched search found the λ(h) of the figures' own search ({name}) bit for bit"
    return (
        f"the watched search's λ(h) differ from the figures' own search's ({name}) by at most "
        f"{np.abs(w.search_scales - theirs).max():.3g} (the monitor changes no number: a rerun's own rounding, as "
        "on another thread count); the scatter uses the watched search's"
    )


def watched_numbers(w: Watched) -> list[str]:
    """The README's bullets of Figure 18 from the histories alone (not the correlation)."""
    lines = []
    for name, run in w.runs.items():
        if run is None:
            lines.append(f"{name}: no watched run in the cache (figures/runs/{w.missing[name]})")
            continue
        h = run.history
        lines += [
            loss_words(run),
            head_words(name, h.steps, h.values["entropy"]),
            logit_words(name, h.steps, h.values["max_logit"]),
        ]
    if w.search is not None:
        h = w.search
        lines += [
            head_words("the λ(h) search", h.steps, h.values["entropy"]),
            logit_words("the λ(h) search", h.steps, h.values["max_logit"]),
        ]
    elif w.search_file is not None:
        lines.append(f"the λ(h) search: no watched search in the cache (figures/runs/{w.search_file})")
    return lines


def _missing(data: FigureData, c: FiguresConfig) -> str | None:
    w = data.watched
    if not any(r is not None for r in w.runs.values()) and w.search is None:
        return (
            "no watched run: no configured model was made by train-tiny (its training.json) and the λ(h) "
            "were given, or the cache holds none of Figure 18's histories (run `entropy-lens figures 18` "
            "without --cached-only)"
        )
    return None


def _differences(data: FigureData, c: FiguresConfig) -> list[str]:
    w = data.watched
    lines = [
        "not a figure of the paper, which shows no training curves: the monitor's histories (issue 50)",
        (
            f"each model's pretraining recipe rerun (its training.json's, without the passkey phase) with "
            f"--monitor entropy,max_logit --monitor-every {TRAIN_EVERY}: each record the mean entropy over the "
            "step's 32 × L query rows, the max logit their maximum; the embedded weights are not replaced"
        ),
        (
            f"the λ(h) search rerun with the monitor every {SEARCH_EVERY} step, on the figures' own search "
            "settings; entropy at the λ(h) of that step, on that step's training batch"
        ),
    ]
    missing = [f"{n} (figures/runs/{f})" for n, f in w.missing.items()]
    if w.search is None and w.search_file is not None:
        missing.append(f"the λ(h) search (figures/runs/{w.search_file})")
    if missing:
        lines.append(f"left out, not in the cache: {', '.join(missing)}")
    return lines


@figure("figure-18", differences=_differences, missing=_missing)
def watched_training(data: FigureData, c: FiguresConfig) -> Drawn:
    """Not in the paper: per-head entropy and max logit over the embedded models' pretraining and the λ(h) search."""
    import matplotlib.pyplot as plt

    w = data.watched
    runs = [r for r in w.runs.values() if r is not None]
    rows = len(runs) + (w.search is not None)
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.2 * rows), squeeze=False)
    for r, run in enumerate(runs):
        h = run.history
        # the layers' colours are the same in every panel: one legend, in the first
        stat_by_step(
            h.steps, h.values["entropy"], ylabel="entropy (bits)", to_bits=True, legend=r == 0, ax=axes[r, 0]
        )
        stat_by_step(
            h.steps, h.values["max_logit"], ylabel="max attention logit", legend=False, ax=axes[r, 1]
        )
        for ax in axes[r]:
            ax.set_title(f"{run.name}: pretraining, {run.steps} steps", fontsize="medium")
    numbers = watched_numbers(w)
    if w.search is not None:
        h, ax = w.search, axes[-1, 0]
        stat_by_step(
            h.steps,
            h.values["entropy"],
            ylabel="entropy (bits)",
            to_bits=True,
            legend=not runs,
            ax=ax,
            xlabel="search step",
        )
        ax.set_title(f"λ(h) search at {data.long} ({data.long // data.L}L)", fontsize="medium")
        today = data.long_heads
        _converged(w, today, axes[-1, 1])
        numbers += [same_scales_words(w, data.head_scales.file), *correlation_numbers(w, today, seed=c.seed)]
    fig.tight_layout()
    caption = (
        "Attention watched while it trains: one line per head, coloured by its layer. Rows: the embedded "
        f"models' pretraining rerun with the monitor (a record every {TRAIN_EVERY} steps), left the head's "
        "entropy (bits; mean over the step's query rows), right its max attention logit (the largest λ·q·k, "
        "with the position bias, over the step's rows); "
        + (
            f"bottom left, the λ(h) search at {data.long} watched every step; bottom right, each head's converged "
            "entropy against its searched λ(h): filled, the search's last step (mean over its batch's rows); "
            "hollow, today's Figure 5 (last position of the held-out scan with λ(h)). "
            if w.search is not None
            else ""
        )
        + "Below: which heads collapse or sharpen and when, the logits' growth, and the correlation."
    )
    return Drawn(fig, caption, numbers)


def _converged(w: Watched, today, ax) -> None:
    """Converged entropy (bits) against λ(h)·√d: the search's (filled) and today's (hollow), by layer."""
    from matplotlib.lines import Line2D

    colors = palette_colors(TAB10)
    ours = w.search.values["entropy"][-1] / LN2
    theirs = today.entropy[:, :, -1] / LN2
    for layer in range(ours.shape[0]):
        color = colors[layer % len(colors)]
        ax.scatter(w.search_scales[layer], ours[layer], color=color, s=22)
        ax.scatter(w.search_scales[layer], theirs[layer], facecolors="none", edgecolors=color, s=22)
    ax.axvline(w.clamp, color="0.6", lw=0.8, ls=":")
    ax.set_xlabel("searched λ(h)·√d")
    ax.set_ylabel("converged entropy (bits)")
    ax.set_title("entropy vs λ(h)", fontsize="medium")
    handles = [
        Line2D([], [], marker="o", ls="", color="0.3", label="search's last step (colour: layer)"),
        Line2D([], [], marker="o", ls="", mfc="none", color="0.3", label="Figure 5 (scan, last position)"),
        Line2D([], [], color="0.6", lw=0.8, ls=":", label="clamp (focus bound)"),
    ]
    ax.legend(handles=handles, fontsize="x-small", frameon=False, loc="best")
