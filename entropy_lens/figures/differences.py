"""Every deliberate difference between a rendered figure and the paper's, in words, for figures/README.md.

`differences(number, d, config)` lists them for one figure from the runs' results `d` and the settings,
so the README states what was run (model, data, lengths, grids, counts), never a number typed by hand.
The paper's own values (its lengths, smoothing, layer choices) are quoted as the paper states them
(the figure spec, the authors' notebooks); `common_differences` are those of every figure.
"""

from __future__ import annotations

__all__ = ["common_differences", "differences"]


def common_differences(d: dict, c) -> list[str]:
    """Differences shared by every figure."""
    L = d["L"]
    tiny = c.nope == "tiny-nope" and c.rope == "tiny-rope"
    models = (
        "the embedded tiny pair (2.6M-parameter Llama without and with RoPE, trained by this project) "
        f"stands in for TinyLlama-NoPE-1.1B and its RoPE twin; lengths are the paper's multiples of L, with "
        f"L = {L} here (the paper: 2048)"
        if tiny
        else f"models {c.nope} and {c.rope} at L = {L}"
    )
    return [
        models,
        (
            f"evaluation text {c.data}, {c.samples} windows per scan (the paper: SlimPajama validation, n not "
            "stated, at most 1000)"
        ),
        (
            f"entropy from {d['nope'].meta.get('dtype', 'float32')} probabilities (the paper: half-precision "
            "probabilities)"
        ),
        "mathtext instead of LaTeX, and DejaVu Serif where Times New Roman is not installed",
    ]


def differences(number: str, d: dict, c) -> list[str]:
    """The deliberate differences of figure `number` ("01", ..., "14") from the paper's."""
    return _BY_FIGURE[number](d, c)


def _smoothing(d, c) -> str:
    return (
        f"loss smoothed ±{c.smooth} positions (the paper: ±50 at L = 2048; ±{c.smooth} is "
        f"{c.smooth / d['L']:.2g} L)"
    )


def _search(d, c, length: int, given: str | None, paper: str) -> str:
    if given:
        return f"λ(h) at {length // d['L']}L given ({given}); {paper}"
    return (
        f"λ(h) at {length // d['L']}L searched here ({c.search_steps} steps of {c.search_batch} windows of "
        f"{c.search_data}, LR {c.search_lr:g}, from {d['search_inits'][length]:g}); {paper}"
    )


def _fig01(d, c):
    return [
        _smoothing(d, c),
        "colours of the scaled NoPE and RoPE NTK curves chosen here (the notebook keeps none)",
    ]


def _fig02(d, c):
    return [
        _smoothing(d, c),
        "the two panels drawn as one figure (the paper: two separate 8×4 in panels side by side)",
    ]


def _fig03(d, c):
    n = d["nope"].n_layers
    return [
        (
            f"every head of layers 0, {n // 2} and {n - 1} of {n} (the paper: heads 0–21 of 32 in layers "
            "0/10/20 of 22)"
        ),
        _search(d, c, d["short"], c.short_head_scales, "the paper's hs4k is not released"),
        "a legend of the heads' colours and axis labels (the paper: none)",
    ]


def _fig04(d, c):
    u = d["uniform"]
    return [
        (
            f"uniform scale s* = {u.scale:g} from this sweep's rule, the best single scale for [{u.span[0]}, "
            f"{u.span[1]}) (the paper: 1.6, the best uniform scale of its grid search at 8K)"
        ),
        _search(
            d, c, d["long"], c.head_scales, "the paper: the released hs8k, searched on SlimPajama + Starcoder"
        ),
        _smoothing(d, c),
        "colours and legend labels chosen here (the notebook keeps none)",
    ]


def _fig05(d, c):
    n = d["long_heads"].n_layers
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
        f"y from 0 to log₂ {d['long']} + 0.5 bits (the paper: 0–13 at 8K); a legend entry for the clamp",
    ]


def _fig07(d, c):
    fit, sweep = d["fit"], d["sweep"]
    lines = [
        (
            "the left panel (NoPE after 10K of 50K training steps) is left out: it needs an early training "
            "checkpoint, and the committed tiny model is not retrained"
        ),
        (
            f"grid {c.sweep_scales} (the paper: step 0.01, range not stated; its plot shows 0.9–2.0), "
            f"{c.sweep_samples} windows at {sweep.length} per scale (the paper: not stated)"
        ),
        "the y axis spans the whole grid (the paper: 0.9–2.0)",
    ]
    if d["fit_smoothed"] is not None:
        lines.append(f"a second fit, to the argmin of loss curves smoothed ±{c.fit_smooth} (an addition)")
    if fit.at_edge and fit.at_edge[0]:
        lines.append(
            f"{fit.at_edge[0]} fitted positions have their best scale at the grid's smallest, "
            f"{fit.grid[0]:g}: the fit counts them at that value though their best may lie below"
        )
    return lines


def _grid(key):
    def lines(d, c):
        result = d[key]
        stride = max(1, result.length // 64)
        out = [
            (
                f"every {stride}th of {result.length} positions, 64 points per head as the paper's every 128th "
                "of 8192"
            ),
            "4 layers a row on A4 with a legend of the heads' colours",
        ]
        if key == "long_uniform":
            out.append(f"uniform scale s* = {d['uniform_scale']:g} (see Figure 4)")
        if key == "long_heads":
            out.append(_search(d, c, d["long"], c.head_scales, "the paper: the released hs8k"))
        return out

    return lines


_BY_FIGURE = {
    "01": _fig01,
    "02": _fig02,
    "03": _fig03,
    "04": _fig04,
    "05": _fig05,
    "07": _fig07,
    "10": _grid("long_heads"),
    "11": _grid("long_uniform"),
    "12": _grid("long_nope"),
    "13": lambda d, c: [
        "not a figure of the paper: §2.4 states the result (no improvement) without a figure or numbers",
        (
            f"the piecewise scale beyond L is the sweep's best single scale for [L, {d['fit_len'] // d['L']}L), "
            "one choice of many the paper does not specify; the log schedule's a is Figure 7's raw fit"
        ),
        _smoothing(d, c),
    ],
    "14": lambda d, c: [
        (
            "the paper's Table 4 reports perplexity at lengths; here the loss by position at the search's own "
            f"length {d['long'] // d['L']}L, with span means"
        ),
        "both ablations search with the full search's steps, data and learning rate, each changing one thing",
        _smoothing(d, c),
    ],
}
