"""The best uniform scale by position and its log fit: Figure 7 (an early checkpoint left, the final
model right)."""

from __future__ import annotations

import numpy as np

from entropy_lens.analysis import yarn_scale
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData, SweepFit
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.figures.words import span_words
from entropy_lens.plotting import best_scale_by_position
from entropy_lens.results import span_label

__all__ = ["best_scale"]


def trained_words(panel: SweepFit) -> str:
    """'300 steps' where the checkpoint records its training (with its passkey phase, train-tiny
    --passkey-steps, named: '3900 steps (1500 pretraining + 2400 passkey)'), else its name."""
    if not panel.steps:
        return panel.model
    if panel.passkey_steps:
        return f"{panel.steps} steps ({panel.steps - panel.passkey_steps} pretraining + {panel.passkey_steps} passkey)"
    return f"{panel.steps} steps"


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


def _share_words(early: int | None, final: int | None, passkey: int | None) -> str:
    """' at 300 of its 3900 steps (8%; 20% of its 1500 pretraining steps)': where the early checkpoint
    sits in the final model's training (training.json's steps), "" where either records none."""
    if not early or not final:
        return ""
    pretraining = final - (passkey or 0)
    of_pretraining = (
        f"; {early / pretraining:.0%} of its {pretraining} pretraining steps"
        if passkey and pretraining > 0
        else ""
    )
    return f" at {early} of its {final} steps ({early / final:.0%}{of_pretraining})"


def _best_scale_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    sweep = data.final.sweep
    if data.early is None:
        lines = [
            "the left panel (NoPE after 10K of 50K training steps) is left out: no early checkpoint given"
        ]
    else:
        share = _share_words(data.early.steps, data.final.steps, data.final.passkey_steps)
        lines = [
            (
                f"the left panel is {data.early.model}, a checkpoint of {data.final.model}'s own training "
                f"run{share} (the paper: 10K of 50K steps, 20%)"
            )
        ]
        if data.final.passkey_steps:
            lines.append(
                f"{data.final.model}'s last {data.final.passkey_steps} steps were a passkey phase (train-tiny "
                "--passkey-steps: the task taught inside L), counted in its steps (the paper: pretraining only)"
            )
    lines += [
        (
            f"grid {c.sweep_scales} (start:stop:step; the paper: step 0.01, range not stated; its plot shows "
            f"0.9–2.0), {c.sweep_samples} windows at {sweep.length} per scale (the paper: not stated)"
        ),
        "the y axis spans the whole grid (the paper: 0.9–2.0)",
    ]
    steps = sorted({round(float(x), 6) for x in np.diff(sweep.scales)})
    if len(steps) > 1:
        lines.append(
            f"the grid's steps are {', '.join(f'{x:g}' for x in steps)}: where the argmin falls on a coarser "
            + "part, it is placed only to that step"
        )
    if data.final.fit_smoothed is not None:
        lines.append(f"a second fit, to the argmin of loss curves smoothed ±{c.fit_smooth} (an addition)")
    for panel in (data.early, data.final):
        fit = panel.fit if panel is not None else None
        if fit is not None and fit.at_edge and fit.at_edge[0]:
            lines.append(
                f"{panel.model}: {fit.at_edge[0]} fitted positions have their best scale at the grid's smallest, "
                f"{fit.grid[0]:g}: the fit counts them at that value though their best may lie below, towards "
                "uniform attention (s → 0)"
            )
    return lines


@figure("figure-07", differences=_best_scale_differences)
def best_scale(data: FigureData, c: FiguresConfig) -> Drawn:
    """The best uniform multiplier per position, its best loss and the fit 1 + a ln(i/L)."""
    import matplotlib.pyplot as plt

    panels = [data.early, data.final] if data.early else [data.final]  # the paper: 10K steps left, 50K right
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    numbers = []
    for ax, panel in zip(axes[0], panels):
        name, fit, smoothed = trained_words(panel), panel.fit, panel.fit_smoothed
        best_scale_by_position(panel.sweep, fit, smoothed_fit=smoothed, ax=ax, title=f"NoPE, {name}")
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
    L = data.L
    numbers += [
        (
            "paper, TinyLlama-NoPE raw argmin: 10K steps a = 0.3010, R² = 0.9954; 50K steps a = 0.3973, "
            f"R² = 0.9773, implied 1.28 / 1.55 / 1.83 at 2L / 4L / 8L; YaRN's (1 + 0.1 ln k)²: {yarn}"
        ),
        *(
            f"s* for {u.span[1] // L}L sequences (lowest mean loss over {span_words(u.span, L)}): {u.scale:g}"
            for u in (data.short_uniform, data.uniform)
        ),
    ]
    sweep = data.final.sweep
    second = (
        f"; dash-dot: the same fit to the argmin of loss curves smoothed ±{c.fit_smooth}"
        if c.fit_smooth
        else ""
    )
    left = f"left: {trained_words(data.early)}, right: {trained_words(data.final)}; " if data.early else ""
    caption = (
        f"Best uniform multiplier per position ({left}blue: the raw argmin over {len(sweep.scales)} scales "
        f"{c.sweep_scales} (start:stop:step), {c.sweep_samples} windows at {sweep.length}), its best loss (red) "
        f"and the fit 1 + a ln(i/L) over {span_label((L, sweep.length), L)} (black){second}."
    )
    return Drawn(fig, caption, numbers)
