"""Where NoPE's attention goes beyond L: Figure 19, not a figure of the paper. The embedded NoPE model,
its RoPE twin and NoPE with a uniform scale λ = s/√d at long·L, each scan recording the attention every
key receives from the rows beyond L (`--stats received,received_mean --query-window long − L`): by key
position per layer, the first key's share, the share of the mass on the keys beyond L, and how evenly
those keys share it, by position and from window to window, each beside rows attending uniformly.

Every statement is generated from the runs (`analysis.key_shares`); `model_words` and `answer` take
the numbers alone (`KeyShares`), so a test words them from planted scans.
"""

from __future__ import annotations

import numpy as np

from entropy_lens.analysis import KeyShares, key_shares
from entropy_lens.figures.beyond import times
from entropy_lens.figures.config import FiguresConfig
from entropy_lens.figures.record import FigureData, KeysReceived
from entropy_lens.figures.registry import Drawn, figure
from entropy_lens.plotting import NOPE, NOPE_DARK, ROPE_DARK, bits, layer_bars, received_by_key
from entropy_lens.results import span_label

__all__ = ["EVEN", "PILED", "answer", "model_words", "received_numbers", "shares_of"]

# a model spreads its attention evenly by position over the keys beyond L where, in every layer, a head's
# spread there is at most EVEN times the uniform rows' over the same keys
EVEN = 2.0
# a head piles onto particular tokens where its evenness over windows is below this: as if fewer than one
# window in 4 gave a key all it receives
PILED = 0.25


def shares_of(r: KeysReceived, L: int) -> dict[str, KeyShares]:
    """{model: its numbers} in the figure's order (NoPE, RoPE, NoPE λ=s/√d)."""
    return {name: key_shares(result, L) for name, result in r.runs.items()}


def _each(values, fmt: str) -> str:
    return ", ".join(format(v, fmt) for v in values)


def _layers(layers) -> str:
    return ", ".join(map(str, layers))


def _entropy(result, L: int) -> str:
    """'mean entropy 4.67 bits over [L/2, L) → 6.73 over [L, 4L)' (rows, mean over layers and heads)."""
    inside, beyond = (L // 2, L), (L, result.length)
    e = [float(bits(result.entropy[..., a:b].mean())) for a, b in (inside, beyond)]
    return (
        f"mean entropy {e[0]:.2f} bits over the rows {span_label(inside, L)} → {e[1]:.2f} over "
        f"{span_label(beyond, L)}"
    )


def model_words(name: str, k: KeyShares, entropy: str | None = None) -> str:
    """One model's bullet: its numbers per layer beside the uniform rows'.

    Args:
        name: the model's name in the figure.
        k: its numbers (`analysis.key_shares`).
        entropy: its entropy words (None: left out).

    Returns:
        str: the README bullet.
    """
    L, T = k.train_len, k.length
    rows = (T - (k.window or T), T)
    layer, head = np.unravel_index(np.argmin(k.evenness), k.evenness.shape)
    return (
        f"{name}, the rows {span_label(rows, L)} = [{rows[0]}, {rows[1]}), layers {_layers(range(len(k.beyond)))}: "
        f"their mass on the keys beyond L {_each(k.beyond, '.0%')} (uniform rows {k.beyond_uniform:.0%}); "
        f"the first key's mean share {_each(k.first, '.2g')} "
        f"({_times(k.first / k.first_uniform)} a uniform row's {k.first_uniform:.2g}); a head's mean share "
        f"over the keys beyond L spread {_times(k.spread)} (uniform rows {times(k.spread_uniform)}), the last "
        f"L/2 keys receiving {_times(k.tilt)} the share of {span_label((L, L + L // 2), L)} (uniform rows "
        f"{times(k.tilt_uniform)}); evenness over windows {_each(k.evenness.mean(axis=1), '.2f')} (uniform "
        f"rows 1), least in layer {layer} head {head} ({k.evenness[layer, head]:.2f})"
        + (f"; {entropy}" if entropy else "")
    )


def _times(values) -> str:
    return ", ".join(times(v) for v in values)


def _uneven(k: KeyShares) -> list[int]:
    """The layers whose spread over the keys beyond L exceeds EVEN times the uniform rows'."""
    return [i for i, s in enumerate(k.spread) if s > EVEN * k.spread_uniform]


def _at(values, pick, fmt) -> str:
    """'98% (layer 3)': the value `pick` (np.argmax, np.argmin) chooses, formatted, and its layer."""
    layer = int(pick(values))
    return f"{fmt(values[layer])} (layer {layer})"


def _by_position(name: str, k: KeyShares) -> str:
    """How one model's mean share spreads over the keys beyond L, against EVEN × the uniform rows'."""
    uneven = _uneven(k)
    if not uneven:
        return f"at most {_at(k.spread, np.argmax, times)} for {name}, within the bound in every layer"
    tilts = k.tilt[uneven]
    lean = "its later keys receiving more" if (tilts > 1).all() else ""
    lean = "its earlier keys beyond L receiving more" if (tilts < 1).all() else lean
    lean = f", {lean}" if lean else ""
    return (
        f"for {name} beyond it in layers {_layers(uneven)}, up to {_at(k.spread, np.argmax, times)}"
        f"{lean} (the last L/2 keys {_times(tilts)} the share of [L, 1.5L))"
    )


def answer(shares: dict[str, KeyShares]) -> list[str]:
    """The bullets that answer where NoPE's attention goes beyond L, NoPE against the other models.

    Args:
        shares: {model: its numbers}, NoPE's first.

    Returns:
        list[str]: the README's bullets: where the mass goes, then how evenly, by position and by window.
    """
    (name, nope), *others = shares.items()
    where = "; ".join(
        f"{n}'s put up to {_at(k.beyond, np.argmax, '{:.0%}'.format)} of their mass on the keys beyond L "
        f"and give the first key {_at(k.first / k.first_uniform, np.argmin, times)} to "
        f"{_at(k.first / k.first_uniform, np.argmax, times)} a uniform row's share"
        for n, k in shares.items()
    )
    layers = len(nope.beyond)
    even = nope.evenness.mean()
    against = ", ".join(
        f"{n} {k.evenness.mean():.2f} ({name} more even in {int((nope.evenness.mean(1) > k.evenness.mean(1)).sum())} "
        f"of {layers} layers)"
        for n, k in others
    )
    most = all(even > k.evenness.mean() for _, k in others)
    layer, head = np.unravel_index(np.argmin(nope.evenness), nope.evenness.shape)
    low = nope.evenness[layer, head]
    return [
        (
            f"Where the rows beyond L send their attention (uniform rows: {nope.beyond_uniform:.0%} of it on "
            f"the keys beyond L): {where}"
        ),
        (
            f"Does {name}'s dispersed attention spread evenly over the keys beyond L, or pile onto particular "
            f"keys? By position, {'evenly' if not _uneven(nope) else 'not evenly'}: over those keys a head's "
            f"mean share spreads (95th over 5th percentile; uniform rows {times(nope.spread_uniform)}, the bound "
            f"{EVEN:g}× that) "
            + "; ".join(_by_position(n, k) for n, k in shares.items())
            + f". From window to window, {name}'s keys beyond L are "
            + ("the most even" if most else "not the most even")
            + f" (evenness over layers and heads {even:.2f}; {against})"
            + (": what a key receives varies less with the token the window puts there" if most else "")
            + f"; its least even head, layer {layer} head {head} ({low:.2f}), gives a key its mass as if "
            f"one window in {1 / low:.0f} gave it all"
            + (": that head piles onto particular tokens" if low < PILED else "")
        ),
    ]


def received_numbers(r: KeysReceived, L: int) -> list[str]:
    """The README's bullets of Figure 19: per model its numbers, then the answer.

    Args:
        r: the figure's runs.
        L: the training length, tokens.

    Returns:
        list[str]: one bullet per model, then `answer`'s.
    """
    shares = shares_of(r, L)
    lines = [model_words(n, k, _entropy(r.runs[n], L)) for n, k in shares.items()]
    return lines + answer(shares)


COLORS = {"NoPE": NOPE, "RoPE": ROPE_DARK}  # the scaled NoPE: NOPE_DARK, as Figure 17's


def _differences(data: FigureData, c: FiguresConfig) -> list[str]:
    r, L = data.received, data.L
    nope = r.runs["NoPE"]
    return [
        (
            "not a figure of the paper, which measures each query row's entropy: the attention each key "
            "receives (scan --stats received,received_mean), over the rows beyond L only (--query-window "
            f"{r.window})"
        ),
        (
            f"the embedded models (L = {L}) at {nope.length // L}L, {nope.meta.get('samples')} full windows "
            f"of {c.data} each (no padding: every key is attended by the same counted rows in every window, "
            "so the uniform rows' values are exact)"
        ),
        f"the scaled NoPE at λ = {r.scale:g}/√d, the setting received_scale",
        (
            "by key position, not by token: the windows start mid-text, so a position holds a different "
            "token in each window and the means mix them (the evenness over windows says how much they differ)"
        ),
    ]


@figure("figure-19", differences=_differences)
def received(data: FigureData, c: FiguresConfig) -> Drawn:
    """Not in the paper: where NoPE's attention goes beyond L, by key position."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    r, L = data.received, data.L
    shares = shares_of(r, L)
    names = list(shares)
    colors = [COLORS.get(n, NOPE_DARK) for n in names]
    first = shares[names[0]]
    n_layers = len(first.beyond)
    cols = max(n_layers, 4)
    fig, axes = plt.subplots(2, cols, figsize=(4.4 * cols, 7.8), squeeze=False)
    for layer in range(cols):
        ax = axes[0, layer]
        if layer >= n_layers:
            ax.axis("off")
            continue
        received_by_key(
            [(n, k.by_key[layer]) for n, k in shares.items()],
            colors=colors,
            uniform=first.by_key_uniform,
            train_len=L,
            legend="above" if layer == 0 else None,
            ylabel="mean share received" if layer == 0 else "",
            ax=ax,
        )
        ax.set_title(f"layer {layer}", loc="right")
    panels = [
        ("first key's mean share", "first", first.first_uniform, True),
        ("mass on keys beyond $L$", "beyond", first.beyond_uniform, False),
        ("spread over keys beyond $L$", "spread", first.spread_uniform, True),
        ("evenness over windows", "evenness", 1.0, False),
    ]
    for ax, (label, field, reference, log) in zip(axes[1], panels):
        values = [(n, getattr(k, field)) for n, k in shares.items()]
        if field == "evenness":
            values = [(n, v.mean(axis=1)) for n, v in values]
        layer_bars(values, ylabel=label, colors=colors, reference=reference, log=log, ax=ax)
    spread_ax = axes[1, 2]
    spread_ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    spread_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"×{v:g}"))
    spread_ax.yaxis.set_minor_formatter(NullFormatter())
    for ax in axes[1, len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    nope = r.runs[names[0]]
    T = nope.length
    caption = (
        f"Where NoPE's attention goes beyond L: attention received by key position at {T // L}L (L = {L}, "
        f"dotted) from the rows beyond L, {span_label((L, T), L)} (scan --stats received,received_mean "
        f"--query-window {r.window}), {nope.meta.get('samples')} windows of {c.data}: "
        f"{', '.join(names)}. Top, per layer, the mean share a key receives (received_mean, mean over "
        "heads, log scale) beside what rows attending uniformly would give it (dashed): received_mean "
        "divides a key's received mass by the counted rows that can attend it, so a later key, seen by "
        "fewer rows, is not drawn lower for that alone (received would fall toward the last key even "
        "under uniform rows). Bottom, per layer: the first key's mean share (log), the share of the "
        "counted rows' mass (received, heads pooled) on the keys beyond L, the spread of a head's mean "
        "share over the keys beyond L (95th over 5th percentile, geometric mean over heads; log), and the "
        "evenness over windows (mean² over mean square of a key's mass over the windows, mean over heads "
        "and keys beyond L; 1: every window gives a key the same), each beside the uniform rows' (dashed)."
    )
    return Drawn(fig, caption, received_numbers(r, L))
