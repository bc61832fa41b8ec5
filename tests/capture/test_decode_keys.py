"""Issue 65, item 2: key statistics across `generate()`. main averaged each decode forward in as another
sample (key 0's received 0.298 against 1.787 from one forward over the same tokens; every value halved
after one step); a decode step now adds its rows to the keys of the sequence it continues
(capture/key_sums.py), so a generation records what one forward over its tokens records."""

import numpy as np
import pytest
import torch
from tolerances import sum_tolerance
from transformers import DynamicCache

from entropy_lens.capture.recorder import EntropyRecorder
from entropy_lens.errors import EntropyLensError
from entropy_lens.models import load_model

KEYS = ("received", "received_max", "received_mean")
STATS = "entropy," + ",".join(KEYS)


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-nope").model


def _recorded(model, run):
    with torch.no_grad(), EntropyRecorder(model, stats=STATS) as rec:
        run()
    return rec


def _assert_same_keys(a, b, terms):
    tol = sum_tolerance(terms)  # column sums of float32 probabilities in other tiles: T + S + D terms
    for name in KEYS:
        got, want = a.received(name), b.received(name)
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
    np.testing.assert_array_equal(a.key_sums["count"], b.key_sums["count"])


@pytest.mark.slow
def test_generate_records_what_one_forward_over_its_tokens_records(model):
    ids = torch.randint(3, 1000, (1, 40), generator=torch.Generator().manual_seed(0))
    out = []
    kw = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False}
    generated = _recorded(model, lambda: out.append(model.generate(ids, **kw)))
    tokens = out[0][:, :-1]  # the last new token never ran as a query
    one = _recorded(model, lambda: model(tokens))
    _assert_same_keys(generated, one, 3 * 46)
    assert generated.received("received")[3, 0, 0] > 1.0  # main: 0.298 (layer 3, head 0, key 0)
    np.testing.assert_array_equal(generated.count, one.count)  # the rows were right already


@pytest.mark.slow
def test_a_left_padded_batch_generates_as_its_padded_forward(model):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 1000, (2, 24), generator=g)
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, :7] = 0
    out = []
    kw = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0}
    generated = _recorded(model, lambda: out.append(model.generate(ids, attention_mask=mask, **kw)))
    tokens = out[0][:, :-1]
    full_mask = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
    positions = (full_mask.cumsum(1) - 1).clamp_min(0)
    one = _recorded(model, lambda: model(tokens, attention_mask=full_mask, position_ids=positions))
    _assert_same_keys(generated, one, 3 * 27)


def test_a_read_between_decode_steps_leaves_the_sequence_open(model):
    ids = torch.randint(3, 1000, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), EntropyRecorder(model, stats=STATS) as rec:
        cache = DynamicCache()
        model(ids[:, :20], past_key_values=cache)
        middle = rec.received("received")
        model(ids[:, 20:], past_key_values=cache)
    one = _recorded(model, lambda: model(ids))
    _assert_same_keys(rec, one, 3 * 30)
    assert middle.shape[-1] == 20 and rec.received("received").shape[-1] == 30


def test_separate_prompts_are_separate_samples(model):
    """A forward from key 0 begins new sequences: two prompts average as two samples, as before."""
    a, b = torch.randint(3, 1000, (2, 1, 16), generator=torch.Generator().manual_seed(3))
    both = _recorded(model, lambda: (model(a), model(b)))
    batch = _recorded(model, lambda: model(torch.cat([a, b])))
    _assert_same_keys(both, batch, 3 * 16)


def test_cached_keys_that_are_not_the_recorded_sequences_are_refused(model):
    ids = torch.randint(3, 1000, (1, 30), generator=torch.Generator().manual_seed(4))
    other = DynamicCache()
    with torch.no_grad():
        model(ids[:, :25], past_key_values=other)  # another sequence's cache, made unrecorded
    with torch.no_grad(), EntropyRecorder(model, stats=STATS):
        model(ids[:, :10])
        with pytest.raises(
            EntropyLensError,
            match=r"5 rows follow 25 cached keys, but the recorded sequences \(1 of 10 keys\).*\(DynamicCache\)",
        ) as err:
            model(ids[:, 25:], past_key_values=other)
    assert "\n" not in str(err.value)


def test_a_misspelt_key_statistic_is_refused_not_none(model):
    rec = _recorded(model, lambda: model(torch.randint(3, 1000, (1, 8))))
    with pytest.raises(EntropyLensError, match=r"'recieved' is no key statistic \(did you mean received"):
        rec.received("recieved")
    assert rec.received("received_sq") is not None
