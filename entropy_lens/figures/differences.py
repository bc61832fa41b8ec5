"""Every deliberate difference between a rendered figure and the paper's, in words, for figures/README.md.

`differences(number, d, config)` lists them for one figure from the runs' results `d` and the settings,
so the README states what was run (model, data, lengths, grids, counts), never a number typed by hand.
The paper's own values (its lengths, smoothing, layer choices) are quoted as the paper states them
(the figure spec, the authors' notebooks); `common_differences` are those of every figure.
"""

from __future__ import annotations

import numpy as np

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


def differences(item: str, d: dict, c) -> list[str]:
    """The deliberate differences of `item` ("figure-01", ..., "figure-14", "table-02") from the paper's."""
    return _BY_ITEM[item](d, c)


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
    sweep = d["sweep"]
    if d["early_sweep"] is None:
        lines = [
            "the left panel (NoPE after 10K of 50K training steps) is left out: no early checkpoint given"
        ]
    else:
        trained = [d["steps"].get(m) for m in (c.early, c.nope)]
        share = f", {trained[0] / trained[1]:.0%} of its steps" if all(trained) else ""
        lines = [
            f"the left panel is {c.early}, a checkpoint of {c.nope}'s own training run{share} (the paper: "
            + "10K of 50K steps, 20%)"
        ]
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
    if d["fit_smoothed"] is not None:
        lines.append(f"a second fit, to the argmin of loss curves smoothed ±{c.fit_smooth} (an addition)")
    for fit, model in ((d["early_fit"], c.early), (d["fit"], c.nope)):
        if fit is not None and fit.at_edge and fit.at_edge[0]:
            lines.append(
                f"{model}: {fit.at_edge[0]} fitted positions have their best scale at the grid's smallest, "
                f"{fit.grid[0]:g}: the fit counts them at that value though their best may lie below, towards "
                "uniform attention (s → 0)"
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


_BY_ITEM = {
    "figure-01": _fig01,
    "figure-02": _fig02,
    "figure-03": _fig03,
    "figure-04": _fig04,
    "figure-05": _fig05,
    "figure-07": _fig07,
    "figure-10": _grid("long_heads"),
    "figure-11": _grid("long_uniform"),
    "figure-12": _grid("long_nope"),
    "figure-13": lambda d, c: [
        "not a figure of the paper: §2.4 states the result (no improvement) without a figure or numbers",
        (
            f"the piecewise scale beyond L is the sweep's best single scale for [L, {d['fit_len'] // d['L']}L), "
            "one choice of many the paper does not specify; the log schedule's a is Figure 7's raw fit"
        ),
        _smoothing(d, c),
    ],
    "figure-14": lambda d, c: [
        (
            "the paper's Table 4 reports perplexity at lengths; here the loss by position at the search's own "
            f"length {d['long'] // d['L']}L, with span means"
        ),
        "both ablations search with the full search's steps, data and learning rate, each changing one thing",
        _smoothing(d, c),
    ],
    "table-02": lambda d, c: [
        (
            f"the embedded pair on {c.data} (the paper: TinyLlama-size models on PG19 and proof-pile test "
            "documents, 2M scored tokens per cell); windows may span the text's document boundaries"
        ),
        (
            f"rows: NoPE, RoPE, RoPE with {c.ntk} (the paper: the best of an unstated NTK grid), the paper's "
            f"uniform scales {', '.join(f'{s:g}' for s in c.ppl_scales)}, s* of Figure 4, and λ(h) searched "
            f"at {d['short'] // d['L']}L and {d['long'] // d['L']}L here (the paper: 4K, 8K and 18K); no "
            "fine-tuned PI or YaRN rows, no BLOOM/MPT"
        ),
        "mean NLL in float32 on CPU (the paper: bf16 with flash attention); a 95% interval per cell (an addition)",
    ],
}
