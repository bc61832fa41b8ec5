"""Passkey retrieval: Figure 6 (RoPE, NoPE, training-free YaRN, λ(h) at two lengths), Figure 8 (the ALiBi
twin), Figure 9 (the λ(h) search's ablations), each a depth × length heat map per model as the paper
draws them, and Figure 16 (not in the paper): accuracy by length beside what the answer rows did at the
needle, the retrieval head's mass on the key and the answer rows' entropy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from entropy_lens.analysis import passkey_average, passkey_by_length, passkey_table
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData, PasskeyPanel
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.figures.words import search_differences
from entropy_lens.plotting import passkey_heatmap, passkey_retrieval

__all__ = ["passkey_ablations", "passkey_alibi", "passkey_families", "passkey_needle"]


def _no_passkeys(data: FigureData, c: FiguresConfig) -> str | None:
    """Why the passkey figures cannot be drawn: no passkey lengths are set."""
    if not c.passkey_lengths:  # the settings, not the runs: asking resolves nothing
        return "no passkey_lengths are set; set passkey_lengths, e.g. [1, 2, 4], to draw it"
    return None


def _no_alibi(data: FigureData, c: FiguresConfig) -> str | None:
    if c.passkey_lengths and not c.alibi:
        return "no ALiBi model is set; name one with alibi (--alibi-ckpt), trained as the pair, to draw it"
    return _no_passkeys(data, c)


def _heatmaps(panels: list[PasskeyPanel], columns: int = 3):
    """One heat map per panel (the paper's 6 × 5 in each), `columns` to a row; (figure, numbers)."""
    import matplotlib.pyplot as plt

    rows = math.ceil(len(panels) / columns)
    cols = min(columns, len(panels))
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 5 * rows), squeeze=False)
    numbers = []
    for ax, panel in zip(axes.flat, panels):
        table = passkey_table(panel.record)
        passkey_heatmap(table, context_length=panel.context, name=panel.name, ax=ax)
        numbers.append(_panel_words(panel, table))
    for ax in axes.flat[len(panels) :]:
        ax.remove()
    fig.tight_layout()
    return fig, numbers


def _panel_words(panel: PasskeyPanel, table: pd.DataFrame) -> str:
    """'NoPE (context 128): 0.98 within it; by length 128 1.00, 192 0.62, ...'."""
    by_length = ", ".join(f"{w} {table[w].mean():.2f}" for w in table.columns)
    if table.columns[0] > panel.context:
        within = "no average within it (every prompt is longer)"
    else:
        within = f"{passkey_average(table, panel.context):.2f} within it"
    return f"{panel.name} (context {panel.context}): {within}; by length {by_length}"


def _trials_words(data: FigureData, c: FiguresConfig) -> str:
    lengths = ", ".join(str(w) for w in passkey_table(data.passkeys.panels[0].record).columns)
    return (
        f"{c.passkey_depths} depths × {c.passkey_keys} keys per length at {lengths} tokens (multiples "
        f"{', '.join(f'{x:g}' for x in c.passkey_lengths)} of L = {data.L}; the paper: 16 lengths up to twice "
        "each model's context), greedy decoding in float32 on CPU (the paper: bf16 with flash attention)"
    )


def _prompt_words() -> str:
    return (
        "the paper's task text; the key snaps to a filler *sentence* boundary, not a whole filler block (a "
        "small L leaves room for few blocks), and each trial is seeded by (42, length, depth, trial) instead "
        "of one generator seeded 42 drawn in sequence"
    )


def _families_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        _trials_words(data, c),
        _prompt_words(),
        (
            f"models {c.rope} and {c.nope} as configured (the paper: TinyLlama-size models that retrieve "
            "zero-shot, never trained on the task)"
        ),
        (
            f"YaRN is training-free here (`--rope-scaling yarn:F`, F = {c.short} and {c.long}, context F·L); "
            "the paper's YaRN^fair is fine-tuned at 8K and 16K"
        ),
        search_differences(data, c, data.short_head_scales, "the paper's λ(h) 8k: at 8K = 4L"),
        search_differences(data, c, data.head_scales, "the paper's λ(h) 18k: at 18K = 9L"),
    ]


@figure("figure-06", differences=_families_differences, missing=_no_passkeys)
def passkey_families(data: FigureData, c: FiguresConfig) -> Drawn:
    """The paper's Figure 6: passkey accuracy by depth and length, RoPE and NoPE families."""
    fig, numbers = _heatmaps(data.passkeys.families)
    caption = (
        "Passkey retrieval accuracy by needle depth (rows) and prompt length in tokens (columns); the dashed "
        "line marks each model's context length and the title averages the lengths within it (the paper's "
        "convention). Panels: RoPE and NoPE (context L), RoPE with training-free YaRN and NoPE with λ(h) "
        f"searched at {data.short // data.L}L and {data.long // data.L}L (context the factor or search length)."
    )
    return Drawn(fig, caption, numbers)


def _alibi_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        _trials_words(data, c),
        _prompt_words(),
        f"one ALiBi model, {c.alibi}, trained as the pair (the paper: BLOOM-1.1B and MPT-7B, zero-shot)",
    ]


@figure("figure-08", differences=_alibi_differences, missing=_no_alibi)
def passkey_alibi(data: FigureData, c: FiguresConfig) -> Drawn:
    """The paper's Figure 8: passkey retrieval of the ALiBi baseline."""
    fig, numbers = _heatmaps([data.passkeys.alibi], columns=1)
    caption = (
        f"Passkey retrieval of the ALiBi model {c.alibi}, as Figure 6: the dashed line marks its training "
        "length L."
    )
    return Drawn(fig, caption, numbers)


def _ablations_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        _trials_words(data, c),
        _prompt_words(),
        (
            f"the ablations of Figure 14, searched at {data.long // data.L}L with the full search's steps "
            "(the paper: at 18K; its ReLU0 variant starts from 1.7, here from s*)"
        ),
    ]


@figure("figure-09", differences=_ablations_differences, missing=_no_passkeys)
def passkey_ablations(data: FigureData, c: FiguresConfig) -> Drawn:
    """The paper's Figure 9: passkey retrieval of the λ(h) search's ablations."""
    fig, numbers = _heatmaps([data.passkeys.heads, *data.passkeys.ablations])
    caption = (
        f"Passkey retrieval of λ(h) searched at {data.long // data.L}L (as Figure 6) beside its two ablations "
        "(Figure 14): without the focus constraint (λ(h) ≥ 0) and started from 1.0."
    )
    return Drawn(fig, caption, numbers)


def _needle_differences(data: FigureData, c: FiguresConfig) -> list[str]:
    return [
        "not a figure of the paper: it reports accuracy only",
        (
            "the retrieval head is chosen per model as the layer and head with the most mass on the key, "
            "averaged over the trials within the model's context (at the shortest prompt where every prompt "
            "is longer); the mass is the answer rows' mean over the answer's tokens"
        ),
    ]


@figure("figure-16", differences=_needle_differences, missing=_no_passkeys)
def passkey_needle(data: FigureData, c: FiguresConfig) -> Drawn:
    """Not in the paper: does retrieval fail where the needle's attention mass falls or the entropy rises?"""
    panels = data.passkeys.panels
    contexts = {p.name: p.context for p in panels}
    rows = {p.name: passkey_by_length(p.record, _reference(p)) for p in panels}
    fig = passkey_retrieval(rows, contexts)
    lengths = list(next(iter(rows.values())).index)
    table = ["| model | head | " + " | ".join(map(str, lengths)) + " |", "|---" * (len(lengths) + 2) + "|"]
    for name, frame in rows.items():
        cells = [
            f"{r.accuracy:.2f} [{r.accuracy_low:.2f}–{r.accuracy_high:.2f}]; {_mass(r)}; {r.entropy:.2f}"
            for r in frame.itertuples()
        ]
        table.append(f"| {name} | {frame['head'].iloc[0]} | " + " | ".join(cells) + " |")
    caption = (
        "Per model and prompt length (tokens): accuracy [Wilson 95% interval]; the retrieval head's mean mass on "
        "the key's tokens ± a 95% interval over trials; the answer rows' entropy averaged over every head "
        "(nats). The retrieval head is the one with the most mass within the model's context. Panels: "
        "accuracy, needle mass and entropy by length, the dashed line at each model's context.\n\n"
        + "\n".join(table)
    )
    return Drawn(fig, caption, _needle_verdicts(rows, contexts))


def _reference(panel: PasskeyPanel) -> int:
    """The length up to which a model counts as inside its context: its context length, or the shortest
    prompt where every prompt is longer."""
    return max(panel.context, int(passkey_table(panel.record).columns[0]))  # the table checks the record


def _mass(r) -> str:
    if not np.isfinite(r.needle_mass_high):
        return f"{r.needle_mass:.2f} (one trial: no interval)"
    return f"{r.needle_mass:.2f} ± {r.needle_mass_high - r.needle_mass:.2f}"


def _needle_verdicts(rows: dict[str, pd.DataFrame], contexts: dict[str, int]) -> list[str]:
    """Per model, where accuracy first falls below half its value at the model's context length (or the
    shortest prompt, where every prompt is longer), what
    the retrieval head's mass and the entropy did there; then how accuracy follows mass and entropy over
    every (model, length) cell."""
    from scipy.stats import spearmanr

    lines = []
    for name, frame in rows.items():
        context = max(contexts[name], frame.index[0])  # as _reference
        inside = frame[frame.index <= context].iloc[-1]
        failed = frame[(frame.index > context) & (frame.accuracy < inside.accuracy / 2)]
        if inside.accuracy == 0:
            lines.append(f"{name}: no key retrieved at {context} (accuracy 0.00), so no fall to locate")
            continue
        if failed.empty:
            lines.append(
                f"{name}: accuracy {inside.accuracy:.2f} at {context} stays above half that up to "
                f"{frame.index[-1]} (lowest {frame.accuracy.min():.2f})"
            )
            continue
        at, where = failed.iloc[0], failed.index[0]
        lines.append(
            f"{name}: accuracy {inside.accuracy:.2f} at {context} → {at.accuracy:.2f} at {where}; "
            f"head {at['head']}'s needle mass {inside.needle_mass:.2f} → {at.needle_mass:.2f}, answer-row "
            f"entropy {inside.entropy:.2f} → {at.entropy:.2f} nats"
        )
    pooled = pd.concat(rows.values())
    for what in ("needle_mass", "entropy"):
        if pooled.accuracy.nunique() < 2 or pooled[what].nunique() < 2:
            lines.append(f"Spearman ρ(accuracy, {what}) is undefined: one of them is constant over the cells")
            continue
        rho = spearmanr(pooled.accuracy, pooled[what]).statistic
        lines.append(f"Spearman ρ(accuracy, {what}) over all {len(pooled)} (model, length) cells: {rho:+.2f}")
    return lines
