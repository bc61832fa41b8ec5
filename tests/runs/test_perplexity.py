"""Sliding-window perplexity (the paper's Table 2): the analysis against float64 references on hand-built
results, the run's settings and order with a stand-in scan, and `entropy-lens ppl` end to end on the
embedded tiny-nope against the model's own logits."""

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from entropy_lens.analysis import WindowPPL, ppl_table, sliding_window_ppl
from entropy_lens.cli import main
from entropy_lens.errors import EntropyLensError
from entropy_lens.results import SCHEMA_VERSION, ScanResult
from entropy_lens.runs.perplexity import PerplexityConfig, perplexity
from entropy_lens.runs.scan import ScanConfig

Z = 1.959963984540054  # the standard normal's 97.5% quantile


def result_of(values, *, meta=None, dtype=np.float64) -> ScanResult:
    """A loss-only ScanResult from `values[i]`, the token NLLs (nats) averaged at position i."""
    T = len(values)
    loss = np.array([np.mean(v) for v in values], dtype=dtype)
    loss_sq = np.array([np.mean(np.square(v)) for v in values], dtype=dtype)
    count = np.array([len(v) for v in values], dtype=np.int64)
    empty = np.zeros((1, 0, T), dtype=np.float32)
    return ScanResult(empty, empty.copy(), loss, loss_sq, count, meta={"length": T, **(meta or {})})


def reference(values, stride: int) -> tuple[float, float]:
    """(mean NLL, its standard error) of the last `stride` positions, in float64: the mean over every
    scored token; the error of a stratified mean, Σ_i (n_i/N)² s_i²/n_i with s_i² the sample variance."""
    scored = [np.asarray(v, dtype=np.float64) for v in values[len(values) - stride :]]
    N = sum(len(v) for v in scored)
    nll = np.concatenate(scored).mean()
    variance = sum((len(v) / N) ** 2 * np.var(v, ddof=1) / len(v) for v in scored)
    return float(nll), float(np.sqrt(variance))


@settings(max_examples=60, deadline=None)
@given(
    T=st.integers(2, 12),
    stride_fraction=st.floats(0.0, 1.0),
    windows=st.integers(2, 7),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_a_float64_reference_on_windows(T, stride_fraction, windows, seed):
    stride = 1 + round(stride_fraction * (T - 1))
    nll = np.random.default_rng(seed).gamma(2.0, 1.5, size=(windows, T))  # (windows, positions), nats
    result = result_of(list(nll.T))
    w = sliding_window_ppl(result, stride)
    ref_nll, ref_err = reference(list(nll.T), stride)
    assert w.nll == pytest.approx(ref_nll, rel=1e-12) and w.stderr == pytest.approx(ref_err, rel=1e-9)
    # the same error, written per window: positions are strata, one token of each per window
    alt = np.sqrt(np.var(nll[:, T - stride :], axis=0, ddof=1).sum() / windows) / stride
    assert w.stderr == pytest.approx(alt, rel=1e-9)
    assert w.ppl == pytest.approx(math.exp(ref_nll), rel=1e-12)
    assert w.ppl_low == pytest.approx(math.exp(ref_nll - Z * ref_err), rel=1e-9)
    assert w.ppl_high == pytest.approx(math.exp(ref_nll + Z * ref_err), rel=1e-9)
    assert w.ppl_low <= w.ppl <= w.ppl_high
    assert (w.n_tokens, w.length, w.stride) == (windows * stride, T, stride)


def test_positions_weighted_by_count():
    rng = np.random.default_rng(3)
    values = [rng.exponential(2.0, size=n) for n in (5, 2, 9, 3, 40, 6)]
    w = sliding_window_ppl(result_of(values), 4)
    ref_nll, ref_err = reference(values, 4)
    assert w.nll == pytest.approx(ref_nll, rel=1e-12) and w.stderr == pytest.approx(ref_err, rel=1e-9)
    assert w.n_tokens == 9 + 3 + 40 + 6


def test_float32_arrays_as_results_files_store_them():
    nll = np.random.default_rng(5).gamma(2.0, 1.5, size=(64, 32))
    w = sliding_window_ppl(result_of(list(nll.T), dtype=np.float32), 8)
    ref_nll, ref_err = reference(list(nll.T), 8)
    assert w.nll == pytest.approx(ref_nll, rel=1e-6) and w.stderr == pytest.approx(ref_err, rel=1e-4)


def test_invariants_shift_and_unscored_positions():
    nll = np.random.default_rng(7).gamma(2.0, 1.0, size=(5, 10))
    base = sliding_window_ppl(result_of(list(nll.T)), 3)
    shifted = sliding_window_ppl(result_of(list(nll.T + 0.5)), 3)
    assert shifted.ppl == pytest.approx(base.ppl * math.exp(0.5), rel=1e-12)
    assert shifted.stderr == pytest.approx(base.stderr, rel=1e-9)
    changed = nll.copy()
    changed[:, :7] = 100.0  # positions before the last 3 are context only
    assert sliding_window_ppl(result_of(list(changed.T)), 3) == base


def test_one_window_per_position_leaves_the_error_undefined():
    w = sliding_window_ppl(result_of([[1.0], [2.0], [3.0]]), 2)
    assert w.nll == 2.5 and w.ppl == pytest.approx(math.exp(2.5))
    assert all(math.isnan(x) for x in (w.stderr, w.ppl_low, w.ppl_high))


@pytest.mark.parametrize(
    "values, stride, meta, match",
    [
        ([[1.0, 2.0]] * 4, 5, None, "stride 5 does not fit windows of 4 tokens; pass a stride from 1 to 4"),
        ([[1.0, 2.0]] * 4, 0, None, "pass a stride from 1 to 4"),
        ([[1.0, 2.0]] * 3 + [[np.nan, 1.0]], 2, None, "not finite; rescan"),
        ([[1.0, 2.0]] * 3 + [[np.inf, 1.0]], 1, None, "not finite"),
        (
            [[1.0, 2.0]] * 4,
            2,
            {"scan_config": {"stride": 3}},
            "start every 3 tokens .*pass stride 3, or rescan",
        ),
    ],
)
def test_refusals_say_the_fix(values, stride, meta, match):
    with pytest.raises(EntropyLensError, match=match) as err:
        sliding_window_ppl(result_of(values, meta=meta), stride)
    assert len(str(err.value).splitlines()) == 1


def test_a_matching_or_absent_meta_stride_is_accepted():
    values = [[1.0, 2.0]] * 4
    same = sliding_window_ppl(result_of(values, meta={"scan_config": {"stride": 2}}), 2)
    assert same == sliding_window_ppl(result_of(values, meta={"scan_config": {}}), 2)
    assert isinstance(same, WindowPPL)


def test_ppl_table_rows_in_insertion_order_and_lengths_ascending():
    rng = np.random.default_rng(11)
    cells = {
        (name, T): result_of(list(rng.gamma(2.0, 1.0, size=(3, T)).T))
        for name, T in [("rope", 16), ("nope", 8), ("nope", 16), ("rope", 8), ("yarn", 16)]
    }
    table = ppl_table(cells, 4)
    assert list(table.index) == ["rope", "nope", "yarn"] and list(table.columns) == [8, 16]
    for (name, T), result in cells.items():
        assert table.loc[name, T] == sliding_window_ppl(result, 4).ppl
    assert math.isnan(table.loc["yarn", 8])


# --- the run: settings, order, the stand-in scan ---------------------------------------------------


def test_stride_is_recorded_and_keys_the_cache():
    """`stride` is newer than results schema 1: recorded always (a file without it reads as unset), and
    part of the cache key, as it changes the windows."""
    from entropy_lens.runs.output import scan_difference

    plain, strided = ScanConfig(model="m", length=8), ScanConfig(model="m", length=8, stride=2)
    assert plain.to_dict()["stride"] is None and strided.to_dict()["stride"] == 2
    old = {k: v for k, v in plain.to_dict().items() if k != "stride"}
    assert scan_difference(plain.to_dict(), old) is None
    assert scan_difference(strided.to_dict(), old) == "--stride (2 here, None there)"
    assert strided.cache_key() != plain.cache_key()


@pytest.mark.parametrize(
    "stride, match",
    [(0, "--stride must be at least 1"), (9, "--stride 9 exceeds --len 8.*--stride 8 or less")],
)
def test_scan_config_checks_the_stride(stride, match):
    with pytest.raises(EntropyLensError, match=match):
        ScanConfig(model="m", length=8, stride=stride).check()


def test_runs_one_loss_only_scan_per_length_longest_first():
    seen = []

    def fake_scan(config: ScanConfig) -> ScanResult:
        seen.append(config)
        nll = np.full((4, config.length), float(config.length))
        nll[::2] += 0.5  # windows differ: a finite, non-zero error
        result = result_of(list(nll.T), meta={"scan_config": config.to_dict(), "wall_time_s": 1.5})
        return result

    config = PerplexityConfig(model="m", lengths=[32, 64, 128], stride=8, samples=4, scale=1.2, seed=3)
    rows = perplexity(config, scan=fake_scan, progress=False)
    assert list(rows) == [32, 64, 128] and [c.length for c in seen] == [128, 64, 32]
    for c in seen:
        assert (c.stride, c.samples, c.entropy, c.scale, c.seed, c.model) == (8, 4, "none", 1.2, 3, "m")
    for length, row in rows.items():
        assert row["ppl"].nll == pytest.approx(length + 0.25) and row["ppl"].n_tokens == 32
        assert row["wall_time_s"] == 1.5 and row["result"].length == length


def test_default_stride_is_an_eighth_of_the_training_length():
    assert PerplexityConfig(model="m", lengths=[256], train_len=128).resolved().stride == 16
    assert PerplexityConfig(model="tiny-nope", lengths=[256]).resolved().stride == 16  # its config.json
    given = PerplexityConfig(model="m", lengths=[256], stride=5)
    assert given.resolved() is given


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"lengths": [64, 32]}, "not ascending; .*--lens 32 64"),
        ({"lengths": [32, 32]}, "not ascending"),
        ({"lengths": []}, "no window lengths"),
        ({"lengths": [16, 32]}, "--lens 16 is not longer than --stride 16"),
        ({"stride": 0}, "--stride must be at least 1"),
        ({"scale": 1.2, "rope_scaling": "dynamic:2"}, "--scale and --rope-scaling both given"),
        ({"samples": 0}, "--samples must be at least 1"),
    ],
)
def test_config_refusals(changes, match):
    with pytest.raises(EntropyLensError, match=match):  # when the config is made, or when it is checked
        config = dataclasses.replace(PerplexityConfig(model="m", lengths=[32, 64], stride=16), **changes)
        perplexity(config, scan=lambda c: pytest.fail("no scan may run"), progress=False)


# --- `entropy-lens ppl` end to end -----------------------------------------------------------------


def test_ppl_command_matches_the_models_own_logits(tmp_path, capsys):
    import torch

    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model

    out = tmp_path / "ppl.json"
    argv = ["ppl", "tiny-nope", "--lens", "32", "64", "--stride", "8", "--samples", "4", "--device", "cpu"]
    assert main([*argv, "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "NLL (nats)" in printed and f"wrote {out}" in printed
    record = json.loads(out.read_text())
    assert record["kind"] == "entropy_lens.ppl" and record["config"]["stride"] == 8
    assert record["provenance"]["schema_version"] == SCHEMA_VERSION and [
        e["length"] for e in record["lengths"]
    ] == [
        32,
        64,
    ]

    lm = load_model("tiny-nope", dtype="float32", device="cpu")
    lm.model.set_attn_implementation("eager")  # the model's own attention, no capture
    for entry in record["lengths"]:
        W = entry["length"]
        ids = torch.from_numpy(
            token_chunks(lm.tokenizer, "austen:persuasion", length=W, samples=4, seed=0, stride=8).ids
        )
        with torch.no_grad():
            logits = lm.model(ids[:, :-1]).logits
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        scored = nll[:, -8:].double().numpy()  # (windows, stride)
        assert entry["n_tokens"] == scored.size == 32
        assert entry["nll"] == pytest.approx(scored.mean(), abs=1e-5)
        assert entry["ppl"] == pytest.approx(math.exp(scored.mean()), rel=1e-5)
        err = np.sqrt(np.var(scored, axis=0, ddof=1).sum() / 4) / 8
        assert entry["stderr"] == pytest.approx(err, rel=1e-4)
        assert entry["ppl_low"] < entry["ppl"] < entry["ppl_high"]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lens", "32", "64", "--stride", "0"], "--stride must be at least 1"),
        (["--lens", "32", "64", "--stride", "32"], "--lens 32 is not longer than --stride 32"),
        (["--lens", "64", "32", "--stride", "8"], "not ascending"),
    ],
)
def test_ppl_bad_flags_exit_2_in_one_line_and_write_nothing(tmp_path, capsys, flags, message):
    out = tmp_path / "ppl.json"
    assert main(["ppl", "tiny-nope", *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("entropy-lens: error: ") and message in err and len(err.splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []
