"""Row-slice statistics summed over rows (capture/slices.py): `EntropyRecorder(stats=(..., "span_mass",
"offset_prob", "top_key", "distance_mass"), spans=..., offsets=..., distance_bins=...)`, a scan's `--stats
... --spans --offsets --distance-bins` and `AttentionMonitor` record span_mass@<span>, offset_prob@<d>,
distance_mass@<bin> and top_key per position, equal to the same statistics of the model's own eager
attention (float64) on every family, by either route; read off the row pass's log-sum-exp (one row pass
per layer); a left-padded batch counts every position from each row's first real key; every flag refused
in one line."""

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, build, eager_probabilities, ids_and_mask, mean_by_position

from entropy_lens import AttentionMonitor, EntropyRecorder, attention_stats
from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.configs import ScanConfig

SPANS = {"head": (0, 3), "middle": (4, 9)}
OFFSETS = (0, 1, 3)
BINS = (0, 2, 5)
STATS = ("entropy", "span_mass", "offset_prob", "top_key", "distance_mass")
SLICING = {"spans": SPANS, "offsets": OFFSETS, "distance_bins": BINS}


def eager_slices(model, ids, mask):
    """{array: (layers, heads, n) float64} of the eager probabilities' span masses, offset probabilities and
    top keys per row, at the rows' true positions, averaged over batch rows as the recorder places them."""
    _, probs = eager_probabilities(model, ids, mask)
    T = ids.shape[1]
    first = (
        torch.zeros(ids.shape[0], dtype=torch.long)
        if mask is None
        else (mask == 0).sum(1) * (mask[:, 0] == 0)
    )
    per_row = {}
    keys = torch.arange(T).view(1, 1, 1, T) - first.view(-1, 1, 1, 1)  # (B, 1, 1, T) real positions
    for name, (a, b) in SPANS.items():
        per_row[f"span_mass@{name}"] = [(p * ((keys >= a) & (keys < b))).sum(-1) for p in probs]
    rows = torch.arange(T)
    behind = rows.view(1, 1, T, 1) - torch.arange(T).view(1, 1, 1, T)  # i − j
    for a, b in zip(BINS, (*BINS[1:], T + 1), strict=True):
        per_row[f"distance_mass@{a}"] = [(p * ((behind >= a) & (behind < b))).sum(-1) for p in probs]
    for d in OFFSETS:
        key = rows - d
        per_row[f"offset_prob@{d}"] = [
            torch.where(key >= 0, p[..., rows, key.clamp_min(0)], 0.0) for p in probs
        ]
    per_row["top_key"] = [
        (p.argmax(-1) - first.view(-1, 1, 1)).double() for p in probs
    ]  # argmax: the first largest
    return {name: mean_by_position(values, mask) for name, values in per_row.items()}


@pytest.mark.parametrize("fused", ["off", "on"])
@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_the_recorder_equals_eager_attention(model_type, fused):
    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask("right")
    want = eager_slices(model, ids, mask)
    with (
        EntropyRecorder(model, fused=fused, stats=STATS, **SLICING) as rec,
        torch.no_grad(),
    ):
        model(ids, attention_mask=mask)
    assert set(want) <= set(rec.stats)
    for name, values in want.items():
        got = rec.mean(name)
        assert got.shape == values.shape, name
        if name == "top_key":  # a position: equal where the eager argmax is no near tie
            continue
        np.testing.assert_allclose(got, values, atol=2e-5, rtol=1e-5, err_msg=name)
    assert np.abs(rec.mean("top_key") - want["top_key"]).mean() < 0.05
    assert want["offset_prob@1"].std() > 0.02, "attention near uniform: the case would not test much"


def test_a_left_padded_batch_counts_real_positions():
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = ids_and_mask("left")
    want = eager_slices(model, ids, mask)
    with EntropyRecorder(model, stats=STATS, **SLICING) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    for name, values in want.items():
        if name != "top_key":
            np.testing.assert_allclose(rec.mean(name), values, atol=2e-5, rtol=1e-5, err_msg=name)
    assert np.abs(rec.mean("top_key") - want["top_key"]).mean() < 0.05


def test_one_row_pass_per_layer_feeds_them(monkeypatch):
    """One row pass per layer gives the log-sum-exp the slice pass reads, and sums the span masses itself
    (its backend's `spans_in_rows`): the slice pass streams the others alone."""
    import importlib

    paths = importlib.import_module("entropy_lens.capture.paths")
    slices = importlib.import_module("entropy_lens.kernels.slices")
    calls, streamed = [], []
    run, stream = paths.run, slices._streamed
    monkeypatch.setattr(
        paths, "run", lambda *a, **kw: calls.append((kw["with_lse"], "spans" in kw)) or run(*a, **kw)
    )
    monkeypatch.setattr(slices, "_streamed", lambda *a: streamed.append(a[-1].stats) or stream(*a))
    model = build("llama", SUPPORTED["llama"][0])
    ids, _ = ids_and_mask("none")
    with EntropyRecorder(model, stats="offset_prob", offsets=(1,)), torch.no_grad():
        model(ids)
    layers = model.config.num_hidden_layers
    assert calls == [(True, False)] * layers
    calls.clear(), streamed.clear()
    with (
        EntropyRecorder(model, stats=("span_mass", "offset_prob"), spans=SPANS, offsets=(1,)),
        torch.no_grad(),
    ):
        model(ids)
    assert calls == [(True, True)] * layers and streamed == [("offset_prob",)] * layers


def test_the_monitor_records_them_per_head():
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = ids_and_mask("right")
    monitored = ("entropy", "offset_prob", "distance_mass")
    with (
        AttentionMonitor(model, stats=monitored, offsets=OFFSETS, distance_bins=BINS) as mon,
        torch.no_grad(),
    ):
        model(ids, attention_mask=mask)
    bins = tuple(f"distance_mass@{b}" for b in BINS)
    assert mon.summaries == ("entropy", "offset_prob@0", "offset_prob@1", "offset_prob@3", *bins)
    latest = mon.latest()
    _, probs = eager_probabilities(model, ids, mask)
    rows, T = mask.bool(), ids.shape[1]
    behind = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # i − j
    per_row = {}
    for d in OFFSETS:
        key = torch.arange(T) - d
        per_row[f"offset_prob@{d}"] = [
            torch.where(key >= 0, p[..., torch.arange(T), key.clamp_min(0)], 0.0) for p in probs
        ]
    for name, a, b in zip(bins, BINS, (*BINS[1:], T + 1), strict=True):
        per_row[name] = [(p * ((behind >= a) & (behind < b))).sum(-1) for p in probs]
    for name, values in per_row.items():  # the mean over the real rows, per layer and head
        mean = (torch.stack(values) * rows[None, :, None]).sum((1, 3)) / rows.sum()
        np.testing.assert_allclose(latest[name], mean.numpy(), atol=2e-5, rtol=1e-5, err_msg=name)


def test_a_scan_records_them_and_refuses_each_flag_in_one_line(tmp_path):
    config = ScanConfig(
        model="tiny-rope",
        length=32,
        samples=2,
        stats="offset_prob,span_mass,top_key,distance_mass",
        offsets="0,1",
        spans="doc=3:10",
        distance_bins="0,16,256",
    )
    assert config.measure.slices.arrays == (
        "offset_prob@0",
        "offset_prob@1",
        "span_mass@doc",
        "top_key",
        "distance_mass@0",
        "distance_mass@16",
        "distance_mass@256",
    )
    assert config.measure.recorded()["distance_bins"] == [0, 16, 256]
    assert (
        config.cache_key()["offsets"] == "0,1"
        and "spans" not in ScanConfig(model="tiny-rope", length=32).cache_key()
    )
    for kw, match in (
        ({"stats": "entropy", "offsets": "0,1"}, "--offsets is read by offset_prob"),
        ({"stats": "offset_prob"}, "--stats offset_prob needs --offsets"),
        ({"stats": "span_mass"}, "--stats span_mass needs --spans"),
        ({"stats": "span_mass", "spans": "doc=4"}, "NAME=START:STOP"),
        ({"stats": "span_mass", "spans": "doc=4:2"}, "is empty"),
        ({"stats": "span_mass", "spans": "doc=0:3,doc=1:2"}, "'doc' is given twice .doc=0:3 and doc=1:2"),
        ({"stats": "offset_prob", "offsets": "1,x"}, "not a whole number"),
        (
            {"stats": "distance_mass"},
            "--stats distance_mass needs --distance-bins, e.g. --distance-bins 0,16,256",
        ),
        ({"stats": "entropy", "distance_bins": "0,4"}, "--distance-bins is read by distance_mass"),
        ({"stats": "distance_mass", "distance_bins": "0,4,2"}, "increasing edges from 0"),
    ):
        with pytest.raises(EntropyLensError, match=match):
            ScanConfig(model="tiny-rope", length=32, **kw).check()


def test_the_kernels_public_functions_point_to_row_slice_stats():
    q = torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match="row_slice_stats"):
        attention_stats(q, q, softmax_scale=0.3, stats="offset_prob")


@pytest.mark.parametrize("fused", ["off", "on"])
@pytest.mark.parametrize("model_type", ["llama", "gemma2", "gpt_oss"])
def test_a_kept_block_is_eager_attentions_block(model_type, fused):
    """EntropyRecorder(keep_probs=((a, b), (c, d))): each layer's probabilities of query positions a..b
    over keys c..d, normalised over every key, of the forward that holds them (a decode step that does not
    hold them keeps nothing)."""
    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask("right")
    _, probs = eager_probabilities(model, ids, mask)
    want = torch.stack(probs)[:, :, :, 5:11, 2:9].numpy()  # (layers, B, H, 6, 7)
    with EntropyRecorder(model, fused=fused, keep_probs=((5, 11), (2, 9))) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
        model(ids[:, :4])  # holds no row of the block: keeps nothing
    assert len(rec.probs) == 1 and rec.probs[0].dtype == np.float32
    np.testing.assert_allclose(rec.probs[0], want, atol=2e-5, rtol=1e-5)
    with pytest.raises(EntropyLensError, match="is empty"):
        EntropyRecorder(model, keep_probs=((3, 3), (0, 2)))
