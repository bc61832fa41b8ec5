"""received_max_later is undefined, not 0, at a step none of whose batch rows has a real key after its
first one (issue 65): a T = 1 forward, or one where every row holds a single real token. The record
holds NaN there; the scalars leave it out, the thresholds never cross it, the history file keeps it and
says so in its meta, the view says why it draws a gap; a step that has such a key keeps its value, a
forward without one adding nothing to it."""

import warnings

import numpy as np
import torch
from architectures import eager_probabilities
from tiny import make_tiny_model

from entropy_lens.monitor import AttentionMonitor, Thresholds, load_history
from entropy_lens.view.payload import build_payload
from entropy_lens.view.sources import gather

STATS = ("entropy", "received")


def single_tokens(B: int, T: int, seed: int = 0):
    """(ids, mask (B, T) long): each batch row left-padded to its one last token."""
    ids = torch.randint(2, 300, (B, T), generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(B, T, dtype=torch.long)
    mask[:, -1] = 1
    return ids, mask


def first_shares(model, ids, mask):
    """(layers, heads) float64: the eager probability each batch row's one real query gives its one real
    key, averaged over the batch rows (received_first of a forward of single tokens)."""
    _, probs = eager_probabilities(model, ids, mask)
    return torch.stack([p[:, :, -1, -1].mean(0) for p in probs]).numpy()


def test_a_step_without_a_later_key_has_received_max_later_undefined(tmp_path):
    model = make_tiny_model(n_layers=2, n_heads=4, n_kv_heads=2)
    one = torch.randint(2, 300, (2, 1), generator=torch.Generator().manual_seed(1))
    padded = single_tokens(3, 6)
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as mon:
        model(one)  # T = 1: the only key is the first
        model(*padded)  # every row's only real key is its first
    for step, (ids, mask) in enumerate(((one, torch.ones_like(one)), padded), start=1):
        values = mon.history.at(step)
        assert np.isnan(values["received_max_later"]).all(), step
        np.testing.assert_allclose(values["received_first"], first_shares(model, ids, mask), rtol=1e-6)
        assert np.isfinite(values["entropy"]).all()

    scalars = mon.scalars()
    assert not any("received_max_later" in name for name in scalars)
    assert all(np.isfinite(v) for v in scalars.values()) and "attention/received_first/layer_1/max" in scalars
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no threshold crossed by an undefined value
        rules = {"received_max_later": ("below", 1.0)}
        assert Thresholds(rules, stats=mon.summaries).check(mon.latest(), 2) == []

    path = tmp_path / "attention.npz"
    mon.save(path)
    loaded = load_history(path)
    assert np.isnan(loaded.values["received_max_later"]).all()
    np.testing.assert_array_equal(loaded.values["received_first"], mon.history.values["received_first"])
    (history,) = build_payload([], [], histories=gather([path]).histories)["histories"]
    assert "received_max_later" in history["meta"]["undefined"] and "2 steps" in history["meta"]["undefined"]


def test_a_forward_without_a_later_key_adds_nothing_to_its_steps_maximum():
    """One step of a T = 1 forward and a T = 8 one: the T = 8 forward's received_max_later alone; a batch
    row of a single real token beside a full one: the full row's alone."""
    model = make_tiny_model(n_layers=2, n_heads=4, n_kv_heads=2)
    one = torch.randint(2, 300, (2, 1), generator=torch.Generator().manual_seed(1))
    full = torch.randint(2, 300, (1, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as alone:
        model(full)
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as step:
        step.step = 1
        model(one)
        model(full)
    want = alone.latest()["received_max_later"]
    assert np.isfinite(want).all()
    # float32 sums over 8 rows; two forwards may run other paths (fused "auto" chooses by timing)
    np.testing.assert_allclose(step.latest()["received_max_later"], want, rtol=1e-6)

    ids, mask = single_tokens(2, 8, seed=3)
    ids[0], mask[0] = full[0], 1  # row 0 whole, row 1 a single real token
    with torch.no_grad(), AttentionMonitor(model, stats=STATS) as both:
        model(ids, attention_mask=mask)
    np.testing.assert_allclose(both.latest()["received_max_later"], want, rtol=1e-6)
