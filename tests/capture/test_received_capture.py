"""Attention received inside a capture (capture/received.py): `EntropyRecorder(stats=(..., "received",
...))` records, for every architecture family the capture supports, padded or not, by either route, the
column statistics of the model's own eager attention (`output_attentions`), per key at its true position,
averaged over batch rows (received_max: the largest); the column pass reuses the row pass's log-sum-exp
(no third pass over the keys), or the native row pass keeps the column state itself (one pass), and
runs only when a key statistic is asked for."""

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, build, eager_probabilities, ids_and_mask

from entropy_lens.capture import EntropyRecorder
from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import ENTROPY, KEY_STATISTICS

KEYS = tuple(KEY_STATISTICS)


def eager_key_statistics(model, ids, mask, query_window=None):
    """{name: (layers, heads, n) float64}: each key statistic from the eager probabilities of the real
    query rows (or their last `query_window`), per batch row, placed at the keys' true positions and
    combined over batch rows as the recorder does (mean; received_max: max)."""
    _, probs = eager_probabilities(model, ids, mask)
    p = torch.stack(probs)  # (L, B, H, T, S), T = S here
    L, B, H, T, S = p.shape
    real = torch.ones(B, T, dtype=torch.bool) if mask is None else mask.bool()
    rows = real.clone()
    if query_window is not None:
        after = real.flip(-1).long().cumsum(-1).flip(-1)
        rows &= after <= query_window
    counted = rows[None, :, None, :, None]
    pc = torch.where(counted, p, 0.0)
    # the rows that may attend each key: causal, and for a sliding-window model what its eager mask lets
    # through (p > 0: a visible key of these sharpened models can underflow to 0 only where no window is)
    causal = torch.ones(T, S, dtype=torch.bool).tril()[None, None, None]
    visible = (
        causal
        & counted
        & (p > 0 if getattr(model.config.get_text_config(), "sliding_window", None) else True)
    )
    per_row = {
        "received": pc.sum(3),
        "received_max": pc.amax(3),
        "received_mean": (pc.sum(3) / visible.sum(3)).nan_to_num(0.0),
    }
    pos = real.long().cumsum(1) - 1
    n = int(pos.max()) + 1
    out = {}
    for name, values in per_row.items():
        combine_max = name == "received_max"
        total = torch.full((L, H, n), -np.inf if combine_max else 0.0, dtype=torch.float64)
        count = torch.zeros(n)
        for b in range(B):
            for j in range(S):
                if real[b, j]:
                    at = pos[b, j]
                    v = values[:, b, :, j]
                    total[:, :, at] = (
                        torch.maximum(total[:, :, at], v) if combine_max else total[:, :, at] + v
                    )
                    count[at] += 1
        out[name] = (total if combine_max else total / count).numpy()
    return out


@pytest.mark.parametrize("fused", ["off", "on"])
@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_received_equals_the_column_sums_of_eager_attention(model_type, padding, fused):
    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask(padding)
    want = eager_key_statistics(model, ids, mask)
    with EntropyRecorder(model, fused=fused, stats=("entropy", *KEYS)) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    assert rec.key_stats == KEYS
    for name in KEYS:
        got = rec.received(name)
        assert got.shape == want[name].shape, name
        np.testing.assert_allclose(got, want[name], atol=2e-5, rtol=1e-5, err_msg=name)
    assert want["received"].std() > 0.05, "attention near uniform: the case would not test much"


def test_a_query_window_counts_the_last_real_rows_alone():
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = ids_and_mask("left")
    want = eager_key_statistics(model, ids, mask, query_window=3)
    with EntropyRecorder(model, stats="received,received_mean", query_window=3) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    for name in ("received", "received_mean"):
        np.testing.assert_allclose(rec.received(name), want[name], atol=2e-5, rtol=1e-5, err_msg=name)


def _count_passes(monkeypatch) -> dict:
    """Counters of a capture's kernel passes: row passes (plan.run and the training pass), column passes
    (the column state), and the row passes that kept the column state themselves (`keys_in_rows`: the
    native kernel's one pass)."""
    import importlib

    received_module = importlib.import_module("entropy_lens.capture.received")
    paths_module = importlib.import_module("entropy_lens.capture.paths")
    calls = {"rows": 0, "columns": 0, "keys_in_rows": 0}

    def counting(kind, fn):
        def wrapped(*args, **kw):
            calls[kind] += 1
            calls["keys_in_rows"] += bool(kw.get("key_state"))
            return fn(*args, **kw)

        return wrapped

    monkeypatch.setattr(paths_module, "run", counting("rows", paths_module.run))
    monkeypatch.setattr(paths_module, "attention_train", counting("rows", paths_module.attention_train))
    monkeypatch.setattr(
        received_module, "received_state", counting("columns", received_module.received_state)
    )
    return calls


@pytest.mark.parametrize("backend", ["native", "torch_chunked"])
def test_the_column_pass_reuses_the_forwards_lse_and_runs_only_when_asked(monkeypatch, backend):
    """One row pass per layer with or without key statistics, on every route (sdpa then a statistics
    pass, the one fused pass, a training step's fused pass, the model's eager weights): its LSE feeds the
    column pass, never a second row pass; no column pass where none is asked for. The native kernel's row
    pass keeps the column state itself (plan.ONE_PASS_KEYS): no column pass there, but beside a training
    step's or eager's own pass, whose statistics pass is not run_route's."""
    from entropy_lens.kernels import native_available
    from entropy_lens.kernels.plan import ONE_PASS_KEYS

    if backend == "native" and not native_available():
        pytest.skip("the native kernel is not built here")
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = ids_and_mask("none")
    calls = _count_passes(monkeypatch)
    layers = model.config.num_hidden_layers
    one_pass = backend in ONE_PASS_KEYS
    for stats, keys in ((("entropy",), 0), (("entropy", "received"), layers)):
        for fused in ("off", "on"):
            calls.update(rows=0, columns=0, keys_in_rows=0)
            with EntropyRecorder(model, fused=fused, backend=backend, stats=stats) as rec, torch.no_grad():
                model(ids, attention_mask=mask)
            want = {
                "rows": layers,
                "columns": 0 if one_pass else keys,
                "keys_in_rows": keys if one_pass else 0,
            }
            assert calls == want, (stats, fused)
            assert rec.key_stats == stats[1:]
    assert rec.received("received_max") is None  # not asked for: not recorded
    # a training step (trainable scales: the fused-train route) and eager's weights (output_attentions)
    scales = torch.ones(layers, model.config.num_attention_heads, requires_grad=True)
    calls.update(rows=0, columns=0, keys_in_rows=0)
    with EntropyRecorder(model, scales=scales, backend=backend, stats=("entropy", "received")) as rec:
        model(ids, attention_mask=mask).logits.sum().backward()
    assert calls == {"rows": layers, "columns": layers, "keys_in_rows": 0}
    assert rec.session.paths == {"fused-train"}
    model.set_attn_implementation("eager")
    calls.update(rows=0, columns=0, keys_in_rows=0)
    with EntropyRecorder(model, backend=backend, stats=("entropy", "received")) as rec, torch.no_grad():
        model(ids, attention_mask=mask, output_attentions=True)
    assert calls == {"rows": layers, "columns": layers, "keys_in_rows": 0}  # a pass beside eager's
    assert rec.session.paths == {"eager-then-entropy"}


def test_a_route_without_its_lse_is_refused_not_given_a_second_row_pass(monkeypatch):
    """The column pass takes the row pass's LSE; a route that gave none is an error naming it."""
    import dataclasses
    import importlib

    paths_module = importlib.import_module("entropy_lens.capture.paths")
    real_run = paths_module.run
    monkeypatch.setattr(paths_module, "run", lambda *a, **k: dataclasses.replace(real_run(*a, **k), lse=None))
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = ids_and_mask("none")
    recorder = EntropyRecorder(model, fused="off", stats=("entropy", "received"))
    with pytest.raises(RuntimeError, match="route gave no log-sum-exp"), recorder, torch.no_grad():
        model(ids, attention_mask=mask)


def test_key_statistic_arguments_are_checked_at_once():
    model = build("llama", SUPPORTED["llama"][0])
    with pytest.raises(EntropyLensError, match="query_window must be at least 1"):
        EntropyRecorder(model, stats="received", query_window=0)
    # either axis's names, and the close match (issue 65: "unknown row statistic" listed rows alone)
    with pytest.raises(
        EntropyLensError, match=r"unknown statistic \['recieved_max'\] \(did you mean received_max"
    ):
        EntropyRecorder(model, stats="received,recieved_max")


@pytest.mark.parametrize("model_type", ["llama", "gpt_oss", "bloom"])
def test_a_scan_writes_the_column_statistics_of_eager_attention(model_type, tmp_path):
    """`scan --stats received,received_max,received_mean --query-window 5` writes arrays (layers, heads,
    key positions) equal to the eager attention's column statistics over the same windows, as schema
    version 3, the row statistics untouched; an older reader's versions refuse it in one line."""
    from architectures import save_folder

    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model
    from entropy_lens.results import ScanResult
    from entropy_lens.results.schema import READABLE_VERSIONS
    from entropy_lens.runs.scan import ScanConfig, scan

    folder = save_folder(tmp_path, model_type, SUPPORTED[model_type][0])
    config = ScanConfig(
        model=str(folder), length=16, samples=3, data="austen:persuasion", stats="all", query_window=5
    )
    scan(config, out=tmp_path / "x.npz", progress=False)
    result = ScanResult.load(tmp_path / "x.npz")
    assert result.meta["schema_version"] == 3 in READABLE_VERSIONS and result.meta["query_window"] == 5
    assert result.key_names == KEYS and ENTROPY.name in result.stat_names
    assert not set(result.stat_names) & set(KEYS)
    lm = load_model(str(folder), dtype="float32")
    ids = torch.from_numpy(token_chunks(lm.tokenizer, config.data, length=16, samples=3).ids)[:, :-1]
    want = eager_key_statistics(lm.model, ids, None, query_window=5)
    for name in KEYS:
        np.testing.assert_allclose(result.received(name), want[name], atol=2e-5, rtol=1e-5, err_msg=name)
    with pytest.raises(EntropyLensError, match="is a key statistic"):
        result.stat("received")


def test_scan_flags_for_key_statistics_are_checked_before_anything_runs():
    from entropy_lens.runs.scan import ScanConfig

    for kw, refusal in (
        ({"stats": "received", "entropy": "none"}, "needs --record heads or mean"),
        ({"query_window": 4}, "--query-window 4 counts rows for the key statistics"),
        # issue 65: both axes' names and the close match, not "unknown row statistic" and the rows alone
        (
            {"stats": "received,recieved_mean"},
            r"--stats: unknown statistic .*did you mean received_mean.*key statistics",
        ),
    ):
        with pytest.raises(EntropyLensError, match=refusal):
            ScanConfig(model="tiny-nope", length=16, **kw).check()
    plain = ScanConfig(model="tiny-nope", length=16)
    windowed = ScanConfig(model="tiny-nope", length=16, stats="received", query_window=4)
    assert "query_window" not in plain.cache_key() and windowed.cache_key()["query_window"] == 4
