"""The committed tiny NoPE/RoPE pair shows the paper's effects on the held-out novel at 4L.

Thresholds leave margin below what the committed weights measure (see their README.md and the
issue note); if a retrained pair misses one, change the recipe, not the threshold.
"""

from __future__ import annotations

import numpy as np
import pytest

from entropy_lens.models import BUNDLED_MODELS, load_model
from entropy_lens.training.report import length_report

SPANS = ["[L/2, L)", "[L, 2L)", "[2L, 3L)", "[3L, 4L)"]


# Sweeps of the committed pair over 64 windows of 4L (the cards have 128; each claim below holds there
# with the same margins: the spans' means move by a few hundredths, the log-law fit by 0.01), a quarter
# minute each on one core. The tests that use them are marked slow, out of the inner loop (`pytest -m "not
# slow"`); those sharing tiny-nope's sweep are kept on one worker (xdist_group), which makes it once.
SAMPLES = 64
SHARES_THE_NOPE_SWEEP = pytest.mark.xdist_group("tiny-nope-sweep")


@pytest.fixture(scope="module")
def nope():
    """Scales 1 to 1.6, entropy recorded at s = 1 only (the one scale whose entropy the tests read); the
    others are loss-only scans (a third less time each)."""
    return length_report("tiny-nope", scales=(1.0, 1.2, 1.4, 1.6), samples=SAMPLES, entropy_at=(1.0,))


@pytest.fixture(scope="module")
def rope():
    """Losses only (its test reads no entropy), every scale through the same route, so the scales are
    compared as the report compares them."""
    return length_report("tiny-rope", scales=(1.0, 1.1, 1.2), samples=SAMPLES, entropy_at=())


@pytest.mark.parametrize("name", ["tiny-nope", "tiny-rope"])
def test_loads_by_name_and_by_path(name):
    by_name = load_model(name)
    by_path = load_model(str(BUNDLED_MODELS[name].path()))
    assert by_name.config_hash == by_path.config_hash and by_name.source == by_path.source
    assert (by_name.train_len, by_name.nope) == (128, name == "tiny-nope")
    assert (by_name.n_layers, by_name.n_heads, by_name.n_kv_heads, by_name.head_dim) == (4, 6, 6, 32)
    assert (BUNDLED_MODELS[name].path() / "README.md").is_file()


@pytest.mark.slow
def test_scan_records_the_declared_train_len(tmp_path):
    from entropy_lens.runs.scan import ScanConfig, scan

    config = ScanConfig(model="tiny-nope", length=256, samples=1, data="austen:persuasion")
    assert scan(config, progress=False).meta["train_len"] == 128
    overridden = ScanConfig(model="tiny-nope", length=256, samples=1, data="austen:persuasion", train_len=64)
    assert scan(overridden, progress=False).meta["train_len"] == 64


@pytest.mark.slow
@SHARES_THE_NOPE_SWEEP
def test_nope_loss_and_entropy_rise_beyond_train_len(nope):
    loss, ent = nope.loss[1.0], nope.entropy[1.0]
    assert loss["[3L, 4L)"] > loss["[L/2, L)"] + 0.25
    assert ent["[L, 2L)"] > ent["[L/2, L)"] and ent["[3L, 4L)"] > ent["[L/2, L)"] + 0.5


@pytest.mark.slow
@SHARES_THE_NOPE_SWEEP
def test_uniform_scale_helps_nope_beyond_2L_and_best_scale_grows(nope):
    best = nope.best_scale
    for span in ("[2L, 3L)", "[3L, 4L)"):
        assert best[span] > 1.0
        assert nope.loss[best[span]][span] < nope.loss[1.0][span] - 0.03
    assert [best[s] for s in SPANS] == sorted(best[s] for s in SPANS)  # non-decreasing with position
    assert best["[3L, 4L)"] > best["[L/2, L)"]


@pytest.mark.slow
@SHARES_THE_NOPE_SWEEP
def test_best_scale_per_position_follows_the_papers_log_law(nope):
    """Figure 7 in miniature: s = 1 + a ln(i/L) fits the best scale per position beyond L (the
    paper's 50K-step TinyLlama-NoPE: a = 0.40). Four scales and 64 windows: the loss curves are
    smoothed (±25 positions) before the argmin; the committed weights give a ≈ 0.48, R² ≈ 0.92 (64
    windows and 128 alike)."""
    from entropy_lens.analysis import Sweep, fit_scale_curve

    fit = fit_scale_curve(Sweep.from_results([nope.results[s] for s in sorted(nope.results)]), smooth=25)
    assert fit.train_len == 128 and 0.3 < fit.a < 0.6 and fit.r2 > 0.7


@pytest.mark.slow
def test_no_uniform_scale_above_one_helps_rope(rope):
    for span in SPANS:
        for s in rope.loss:
            assert s == 1.0 or rope.loss[s][span] > rope.loss[1.0][span]


@pytest.mark.slow
@SHARES_THE_NOPE_SWEEP
def test_heads_differ_and_lower_layers_are_more_dispersed(nope):
    he = nope.head_entropy  # (layers, heads) at the last position, nats
    upper = np.log(nope.length)  # log i: a uniform head
    assert he.max() > 0.95 * upper and he.min() < 0.7 * upper and he.max() - he.min() > 1.5
    assert he[0].mean() > he[-1].mean() + 0.5


@pytest.mark.slow
@SHARES_THE_NOPE_SWEEP
def test_searched_head_scales_beat_every_uniform_scale_at_4L(nope, tmp_path):
    """The paper's §3.2 in miniature: λ(h) searched on the training novels (weights frozen, focus
    constraint λ(h) ≥ 1/√d) lowers the held-out loss at L' = 4L below the best uniform scale."""
    from entropy_lens.runs.scan import ScanConfig, scan
    from entropy_lens.training.head_search import HeadSearchConfig, save_head_scales, search_head_scales

    def window_loss(span_loss: dict[str, float]) -> float:  # mean over positions [L/2, 4L)
        return sum(span_loss[n] * (b - a) for n, (a, b) in nope.spans.items()) / (4 - 0.5) / nope.train_len

    uniform = {s: window_loss(nope.loss[s]) for s in nope.loss}
    init = min(uniform, key=uniform.get)
    config = HeadSearchConfig(
        model="tiny-nope",
        length=nope.length,
        init=init,
        steps=8,  # the window loss 0.07 below the best uniform scale's (0.09 after 12 steps)
        lr=0.1,
        batch=8,
        micro_batch=8,
        data="austen-minus:persuasion",
    )
    result = search_head_scales(config, progress=False)
    assert result.scales.min() >= 1.0 and result.log[-1]["loss"] < result.log[0]["loss"]
    path = save_head_scales(result, tmp_path / "heads.safetensors")
    scanned = scan(
        ScanConfig(
            model="tiny-nope",
            length=nope.length,
            samples=nope.samples,
            data=nope.data,
            head_scales=str(path),
            entropy="none",
        ),
        progress=False,
    )
    searched = window_loss({n: float(scanned.loss[a:b].mean()) for n, (a, b) in nope.spans.items()})
    assert searched < uniform[init] - 0.02


@pytest.mark.slow  # 30 trials of each embedded model (the passkey path: test_passkey.py, random models)
@pytest.mark.parametrize("name", ["tiny-nope", "tiny-rope", "tiny-alibi"])
def test_retrieves_the_passkey_inside_the_training_length(name):
    """Each embedded model was taught the passkey task inside L (train-tiny's passkey phase): at L it
    answers at least 90% of 10 depths x 3 keys exactly (the cards: 10 x 10 at L, 2L and 4L)."""
    from entropy_lens.analysis import passkey_by_length
    from entropy_lens.runs.passkey import PasskeyConfig, passkey

    record = passkey(PasskeyConfig(model=name, lengths=(128,), depths=10, keys=3), progress=False)
    row = passkey_by_length(record, 128).loc[128]
    assert row.trials == 30 and row.accuracy >= 0.9
