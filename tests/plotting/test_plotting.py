"""Plot functions on small synthetic results: the Axes carry the expected lines, units, labels and
limits (properties, not pixels)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import seaborn as sns
from sweeps import random_result

from entropy_lens.analysis import Sweep, fit_scale_curve, moving_average
from entropy_lens.errors import EntropyLensError
from entropy_lens.plotting import (
    NOPE_SCALES,
    all_heads_grid,
    best_scale_by_position,
    entropy_loss,
    family_colors,
    head_lines,
    models_by_layers,
    paper_style,
    scale_vs_entropy,
    upper_bound_bits,
)

LN2 = np.log(2)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_entropy_loss_plots_bits_and_smoothed_nats():
    a, b = random_result(seed=0), random_result(seed=1, T=150)
    ax = entropy_loss([("A", a), ("B", b)], colors=["#111111", "#222222"], smooth=5)
    assert [line.get_label() for line in ax.get_lines()] == ["A", "B"]
    assert len(ax.get_lines()[0].get_xdata()) == 150  # truncated to the shortest result
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), a.mean_entropy[:150] / LN2, rtol=1e-6)
    loss_lines = ax.right_ax.get_lines()
    assert [line.get_linestyle() for line in loss_lines] == ["--", "--"]
    np.testing.assert_allclose(loss_lines[1].get_ydata(), moving_average(b.loss, 5), rtol=1e-6)
    assert loss_lines[0].get_color() == ax.get_lines()[0].get_color() == "#111111"
    assert "bits" in ax.get_ylabel() and "log Perplexity" in ax.right_ax.get_ylabel()
    assert ax.get_xlim() == (0, 149) and [t.get_text() for t in ax.get_legend().get_texts()] == ["A", "B"]


def test_entropy_loss_raw_loss_and_errors():
    a = random_result()
    ax = entropy_loss([("A", a)], smooth=0, length=100, train_len=50, legend=None)
    np.testing.assert_allclose(ax.right_ax.get_lines()[0].get_ydata(), a.loss[:100], rtol=1e-6)
    assert ax.get_lines()[-1].get_xdata()[0] == 50 and ax.get_legend() is None  # the L line
    with pytest.raises(EntropyLensError, match="one colour per curve"):
        entropy_loss([("A", a)], colors=["r", "g"])
    with pytest.raises(EntropyLensError, match="exceeds"):
        entropy_loss([("A", a)], length=500)
    with pytest.raises(EntropyLensError, match="--record none"):
        entropy_loss([("A", random_result(H=0))])
    with pytest.raises(EntropyLensError, match="at least one"):
        entropy_loss([])


def test_head_lines_one_line_per_head_with_bound_and_stride():
    r = random_result(H=14)
    ax = head_lines(r, 1, stride=10, bound=True)
    lines = ax.get_lines()
    assert len(lines) == 15  # 14 heads + the bound
    np.testing.assert_allclose(lines[3].get_ydata(), r.entropy[1, 3, ::10] / LN2, rtol=1e-6)
    assert lines[0].get_color() == lines[12].get_color()  # Paired repeats every 12 heads
    np.testing.assert_allclose(lines[-1].get_ydata(), np.log2(np.arange(200) + 1.0))
    assert lines[-1].get_linestyle() == "--"
    assert len(head_lines(r, 0, heads=[0, 2]).get_lines()) == 2


@pytest.mark.parametrize(
    ("kw", "match"), [({"layer": 3}, "layer 3"), ({"heads": [9]}, "heads"), ({"stride": 0}, "stride")]
)
def test_head_lines_errors(kw, match):
    args = {"layer": 0, **kw}
    with pytest.raises(EntropyLensError, match=match):
        head_lines(random_result(), args.pop("layer"), **args)


def test_head_lines_need_per_head_entropy():
    with pytest.raises(EntropyLensError, match="--record heads"):
        head_lines(random_result(H=1, reduction="mean"), 0)


def test_models_by_layers_grid_titles():
    fig = models_by_layers({"A": random_result(), "B": random_result(seed=2)}, [0, 1, 2])
    axes = fig.axes
    assert len(axes) == 6
    assert [ax.get_title() for ax in axes[:3]] == ["Layer 0", "A - Layer 1", "Layer 2"]
    assert axes[4].get_title() == "B - Layer 1" and all(len(ax.get_lines()) == 5 for ax in axes)
    assert fig.get_supxlabel() == "position i" and "bits" in fig.get_supylabel()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [f"head {h}" for h in range(5)]


def test_all_heads_grid_removes_unused_cells():
    fig = all_heads_grid(random_result(L=6, H=3), stride=4, title="T")
    assert [ax.get_title() for ax in fig.axes] == [f"Layer {i}" for i in range(6)]  # 8 cells, 2 removed
    assert all(len(ax.get_lines()) == 4 for ax in fig.axes)  # 3 heads + bound
    assert fig._suptitle.get_text() == "T"
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["head 0", "head 1", "head 2", "log₂(i+1)"]


def head_table(seed=0, clamp=()):
    rng = np.random.default_rng(seed)
    rows = [
        {"layer": layer, "head": h, "scale": s, "entropy_bits": 9 - 2 * s - layer + rng.normal(0, 0.1)}
        for layer in range(3)
        for h, s in enumerate(rng.uniform(1, 3, 8))
    ]
    table = pd.DataFrame(rows)
    table["on_clamp"] = False
    for layer, head in clamp:
        table.loc[(table["layer"] == layer) & (table["head"] == head), ["scale", "on_clamp"]] = (1.0, True)
    return table


def test_scale_vs_entropy_fits_each_layer_with_a_bootstrap_band():
    from matplotlib.collections import PathCollection, PolyCollection

    table = head_table()
    ax = scale_vs_entropy(table, ylim=(0, 13))
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(bands) == 3 and len(points) == 3  # per layer: seaborn's band + the heads
    fits = ax.get_lines()
    for layer, line in enumerate(fits):
        sub = table[table["layer"] == layer]
        slope, intercept = np.polyfit(sub["scale"], sub["entropy_bits"], 1)
        np.testing.assert_allclose(line.get_ydata(), intercept + slope * line.get_xdata(), rtol=1e-9)
        lo, hi = (
            bands[layer].get_paths()[0].vertices[:, 1].min(),
            bands[layer].get_paths()[0].vertices[:, 1].max(),
        )
        assert lo < line.get_ydata().min() and hi > line.get_ydata().max()  # the band holds the line
    tab10 = sns.color_palette("tab10")
    assert [tuple(p.get_facecolor()[0][:3]) for p in points] == [tuple(c) for c in tab10[:3]]
    assert ax.get_ylim() == (0, 13) and ax.get_xlabel() == "$\\lambda$"
    assert ax.xaxis.get_major_formatter()(1.5, 0) == "1.5/$\\sqrt{d}$"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["0", "1", "2"]
    no_band = scale_vs_entropy(head_table(), ax=plt.subplots()[1], band=False, legend=False)
    assert (
        not any(isinstance(c, PolyCollection) for c in no_band.collections) and no_band.get_legend() is None
    )
    with pytest.raises(EntropyLensError, match="lacks columns"):
        scale_vs_entropy(table.drop(columns="scale"))


def test_scale_vs_entropy_draws_heads_on_the_clamp_hollow():
    from matplotlib.collections import PathCollection

    ax = scale_vs_entropy(head_table(clamp=[(0, 2), (2, 5), (2, 6)]))
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    hollow = [p for p in points if len(p.get_facecolor()) == 0 or p.get_facecolor()[0][3] == 0]
    assert sorted(len(p.get_offsets()) for p in hollow) == [1, 2]  # layer 0: one head, layer 2: two
    assert all(np.all(p.get_offsets()[:, 0] == 1.0) for p in hollow)
    assert sum(len(p.get_offsets()) for p in points) == 24  # every head drawn once
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "on the clamp"


def test_best_scale_by_position_draws_fit_and_training_length():
    T, L, a = 400, 50, 0.3
    t = np.arange(T)
    s_star = 1 + a * np.log(np.maximum(t, 1) / L)
    scales = np.round(np.arange(0.9, 2.0001, 0.05), 2)
    loss = np.stack([(s - s_star) ** 2 + 2 for s in scales])
    sweep = Sweep(scales=scales, loss=loss, entropy=None, train_len=L, model="m", length=T)
    fit = fit_scale_curve(sweep)
    ax = best_scale_by_position(sweep, fit)
    best, fitted, vline = ax.get_lines()
    np.testing.assert_allclose(best.get_ydata(), scales[loss.argmin(0)])
    np.testing.assert_allclose(fitted.get_ydata(), fit.predict(np.arange(1, T)))
    assert vline.get_xdata()[0] == L and ax.get_ylim() == (0.9, 2.0)
    np.testing.assert_allclose(ax.right_ax.get_lines()[0].get_ydata(), loss.min(0))


def test_best_scale_by_position_draws_the_smoothed_fit_as_a_second_line():
    T, L, a = 400, 50, 0.3
    t = np.arange(T)
    s_star = 1 + a * np.log(np.maximum(t, 1) / L)
    scales = np.round(np.arange(0.5, 3.0001, 0.05), 2)
    noise = np.random.default_rng(0).normal(0, 0.05, (len(scales), T))
    loss = np.stack([(s - s_star) ** 2 + 2 for s in scales]) + noise
    sweep = Sweep(scales=scales, loss=loss, entropy=None, train_len=L, model="m", length=T)
    raw, smoothed = fit_scale_curve(sweep), fit_scale_curve(sweep, smooth=25)
    ax = best_scale_by_position(sweep, raw, smoothed_fit=smoothed)
    best, raw_line, smoothed_line, vline = ax.get_lines()
    assert vline.get_xdata()[0] == L
    np.testing.assert_allclose(best.get_ydata(), scales[loss.argmin(0)])  # the raw argmin
    np.testing.assert_allclose(smoothed_line.get_ydata(), smoothed.predict(np.arange(1, T)))
    assert smoothed_line.get_linestyle() == "-." and raw_line.get_linestyle() == "-"
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels[1].startswith("raw argmin") and f"{raw.r2:.3f}" in labels[1] and f"{raw.a:.3f}" in labels[1]
    assert labels[2].startswith("smoothed ±25") and f"{smoothed.r2:.3f}" in labels[2]
    assert ax.get_ylim() == (0.5, 3.0)  # widened to the grid: no best scale off the axes


def test_style_helpers():
    assert family_colors(NOPE_SCALES, 4) == list(NOPE_SCALES)
    assert family_colors(NOPE_SCALES, 2) == [NOPE_SCALES[0], NOPE_SCALES[-1]]
    assert len(family_colors(NOPE_SCALES, 6)) == 6
    np.testing.assert_allclose(upper_bound_bits(4), np.log2([1, 2, 3, 4]))
    before = matplotlib.rcParams["font.family"]
    with paper_style(font_size=14):
        assert matplotlib.rcParams["font.size"] == 14 and matplotlib.rcParams["font.family"] == ["serif"]
    assert matplotlib.rcParams["font.family"] == before


def test_loss_curves_draws_one_smoothed_line_per_curve_with_l_ticks():
    import matplotlib.pyplot as plt

    from entropy_lens.plotting import loss_curves

    rng = np.random.default_rng(0)
    curves = [("a", rng.normal(3, 1, 64)), ("b", rng.normal(4, 1, 80))]
    ax = loss_curves(curves, colors=["r", "b"], styles=["-", "--"], smooth=4, train_len=16)
    lines = [ln for ln in ax.get_lines() if ln.get_label() in ("a", "b")]
    assert [ln.get_linestyle() for ln in lines] == ["-", "--"]
    assert all(len(ln.get_xdata()) == 64 for ln in lines)  # cut to the shortest
    assert np.std(lines[0].get_ydata()) < np.std(curves[0][1])  # smoothed
    assert [t.get_text() for t in ax.get_xticklabels()][:3] == ["0", "1L", "2L"]
    with pytest.raises(EntropyLensError, match="colours and styles"):
        loss_curves(curves, colors=["r"])
    plt.close(ax.figure)


def test_perplexity_by_length_draws_each_row_with_its_interval():
    import matplotlib.pyplot as plt

    from entropy_lens.analysis import WindowPPL
    from entropy_lens.plotting import perplexity_by_length

    def cell(W, ppl):
        return WindowPPL(np.log(ppl), 0.05, ppl, ppl * 0.9, ppl * 1.2, 64, W, 4)

    rows = {"a": [cell(16, 30.0), cell(32, 60.0)], "b": [cell(16, 20.0), cell(32, 90.0)]}
    ax = perplexity_by_length(rows, colors=["r", "b"], styles=["-", "--"], train_len=16)
    assert [c.get_label() for c in ax.containers] == ["a", "b"]  # one errorbar container per row
    lines = [c.lines[0] for c in ax.containers]
    assert [ln.get_linestyle() for ln in lines] == ["-", "--"]
    np.testing.assert_allclose(lines[0].get_ydata(), [30.0, 60.0])
    bars = ax.containers[0].lines[2][0].get_segments()  # the error bars: from ppl_low to ppl_high
    np.testing.assert_allclose([seg[:, 1] for seg in bars], [[27.0, 36.0], [54.0, 72.0]])
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1L", "2L"]
    with pytest.raises(EntropyLensError, match="at least one row"):
        perplexity_by_length({})
    plt.close(ax.figure)


def test_the_passkey_retrieval_panels_plot_each_models_rows():
    """Figure 16's panels: per model a line of accuracy, needle mass and entropy by length, the intervals
    as bands, each model's context dotted in its colour; a model with one trial per length has no band."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from entropy_lens.plotting import passkey_retrieval

    def frame(acc, mass, spread):
        return pd.DataFrame(
            {
                "accuracy": acc,
                "accuracy_low": [a - 0.1 for a in acc],
                "accuracy_high": [a + 0.1 for a in acc],
                "needle_mass": mass,
                "needle_mass_low": [m - spread for m in mass],
                "needle_mass_high": [m + spread for m in mass],
                "entropy": [2.0, 3.0],
            },
            index=pd.Index([128, 256], name="length"),
        )

    rows = {"NoPE": frame([1.0, 0.2], [0.8, 0.5], 0.05), "ALiBi": frame([0.9, 0.8], [0.7, 0.6], float("nan"))}
    fig = passkey_retrieval(rows, {"NoPE": 128, "ALiBi": 256})
    accuracy, mass, entropy = fig.axes
    solid = [ln for ln in accuracy.get_lines() if ln.get_linestyle() == "-"]
    assert [ln.get_label() for ln in solid] == ["NoPE", "ALiBi"]
    assert list(solid[0].get_ydata()) == [1.0, 0.2] and list(entropy.get_lines()[0].get_ydata()) == [2.0, 3.0]
    assert len(accuracy.collections) == 2 and len(mass.collections) == 1  # ALiBi's mass has no interval
    dotted = [ln.get_xdata()[0] for ln in mass.get_lines() if ln.get_linestyle() == ":"]
    assert dotted == [128, 256] and accuracy.get_xscale() == "log"
    plt.close(fig)


def test_the_passkey_heat_map_is_figure_6s():
    """Depth rows (0% on top) × ascending lengths, one-decimal cells, the dashed line after the last
    length within the context, and the title's average over those lengths only."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from entropy_lens.analysis import passkey_average, passkey_table
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.plotting import PASSKEY_COLORS, passkey_heatmap

    accuracy = {
        (128, 0.0): 1.0,
        (128, 0.5): 0.8,
        (256, 0.0): 0.6,
        (256, 0.5): 0.4,
        (512, 0.0): 0.0,
        (512, 0.5): 0.2,
    }
    record = {
        "results": [{"length": w, "depth": d, "accuracy": a} for (w, d), a in reversed(accuracy.items())]
    }
    table = passkey_table(record)
    assert list(table.index) == [0.0, 0.5] and list(table.columns) == [128, 256, 512]
    assert passkey_average(table, 256) == pytest.approx(0.7) and passkey_average(table, 128) == pytest.approx(
        0.9
    )
    with pytest.raises(EntropyLensError, match="undefined"):
        passkey_average(table, 64)
    ax = passkey_heatmap(table, context_length=256, name="NoPE")
    assert ax.get_title() == "NoPE acc 0.70"
    assert [t.get_text() for t in ax.texts] == ["1.0", "0.6", "0.0", "0.8", "0.4", "0.2"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0%", "50%"]
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert line.get_xdata()[0] == pytest.approx(1.5) and to_hex(line.get_color()) == "#000000"
    image = ax.get_images()[0]
    assert (
        to_hex(image.cmap(0.0)) == PASSKEY_COLORS[0].lower()
        and to_hex(image.cmap(1.0)) == PASSKEY_COLORS[2].lower()
    )
    plt.close("all")


def test_stat_by_position_draws_each_models_mean_in_its_unit():
    """Figure 17's panels: per model the mean over layers and heads at each bin's mean position, the
    statistic's unit on the axis, L dotted with ticks in multiples of L, the distance's bound i and a
    uniform row's i/2, and a percentile band over the heads where asked."""
    from beyond_inputs import planted_curves
    from matplotlib.colors import to_hex

    from entropy_lens.plotting import stat_by_position

    a, b = planted_curves(), planted_curves(fast=(0, 0), model="b")
    ax = stat_by_position(
        [("A", a), ("B", b)], "max_prob", colors=["#111111", "#222222"], train_len=16, log=True
    )
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines[:2]] == ["A", "B"] and to_hex(lines[0].get_color()) == "#111111"
    np.testing.assert_allclose(lines[0].get_ydata(), a.mean("max_prob"))
    np.testing.assert_allclose(lines[0].get_xdata(), a.positions)
    assert ax.get_ylabel() == "max probability (probability)" and ax.get_yscale() == "log"
    assert lines[2].get_xdata()[0] == 16 and [t.get_text() for t in ax.get_xticklabels()][:3] == [
        "0",
        "1L",
        "2L",
    ]
    ax = stat_by_position([("A", a)], "distance", bound=True, band=(10, 90), legend=None)
    bound, uniform = ax.get_lines()[1:3]
    assert bound.get_label() == "bound $i$" and uniform.get_ydata()[100] == 50
    assert ax.get_ylabel() == "mean distance back (tokens)" and len(ax.collections) == 1
    assert stat_by_position([("A", a)], "first_mass").get_ylabel() == "first-token mass (probability)"
    assert stat_by_position([("A", a)], "varentropy").get_ylabel() == "varentropy (nats²)"
    with pytest.raises(EntropyLensError, match="one colour per curve"):
        stat_by_position([("A", a)], "max_prob", colors=["r", "g"])
    with pytest.raises(EntropyLensError, match="at least one"):
        stat_by_position([], "max_prob")


def test_received_by_key_and_layer_bars_draw_what_they_are_given():
    """Figure 19's panels: a line per model by key position with the uniform rows dashed and L dotted
    (ticks in multiples of L), on the Axes given; grouped bars per layer with a dashed reference."""
    from entropy_lens.plotting import layer_bars, received_by_key

    share = np.linspace(1, 2, 64)
    _, ax = plt.subplots()
    assert received_by_key([("A", share), ("B", share * 2)], uniform=share / 2, train_len=16, ax=ax) is ax
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["A", "B", "uniform rows", "$L$ = 16"]
    np.testing.assert_allclose(lines[1].get_ydata(), share * 2)
    assert lines[2].get_linestyle() == "--" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()][:3] == ["0", "1L", "2L"]
    ax = layer_bars([("A", np.array([1.0, 2.0])), ("B", np.array([3.0, 4.0]))], ylabel="y", reference=2.5)
    assert [p.get_height() for p in ax.patches] == [1.0, 2.0, 3.0, 4.0] and ax.get_ylabel() == "y"
    assert ax.get_lines()[0].get_ydata()[0] == 2.5 and ax.get_xlabel() == "layer"
    with pytest.raises(EntropyLensError, match="same layers"):
        layer_bars([("A", np.ones(2)), ("B", np.ones(3))], ylabel="y")
    with pytest.raises(EntropyLensError, match="one colour per series"):
        received_by_key([("A", share)], colors=["r", "g"])
    with pytest.raises(EntropyLensError, match="at least one"):
        layer_bars([], ylabel="y")
