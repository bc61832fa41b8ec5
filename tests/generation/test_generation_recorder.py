"""GenerationRecorder: every generated token's row statistics inside generate() equal float64 statistics
of the model's own eager attention over the same tokens, each sequence alone, unpadded and
teacher-forced, on left-padded batches of five families; ends, refusals and the saved file."""

import json

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, build
from generation_reference import (
    BINS,
    FAMILIES,
    NEW,
    OFFSETS,
    PAD,
    PROMPT,
    SLICING,
    SPANS,
    STATS,
    float64_rows,
    float64_slices,
    left_padded_prompts,
)

from entropy_lens import EntropyRecorder, GenerationRecorder, GenerationResult
from entropy_lens.errors import EntropyLensError


@pytest.mark.parametrize("family", FAMILIES)
def test_every_generated_token_equals_eager_float64_teacher_forced(family):
    model = build(family, SUPPORTED[family][0])
    ids, mask = left_padded_prompts()
    stats = (*STATS, "sink_mass") if family == "gpt_oss" else STATS
    with GenerationRecorder(model, stats=stats) as rec:
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=None
        )
    r = rec.result()
    assert np.array_equal(r.tokens, out[:, PROMPT:].numpy()) and r.prompt_len.tolist() == [
        PROMPT - PAD,
        PROMPT,
    ]
    assert r.lengths.tolist() == [NEW, NEW] and r.stats == stats
    for b in range(2):
        real = out[b, PAD if b == 0 else 0 :]  # the sequence alone: its real prompt and what it wrote
        P = int(r.prompt_len[b])
        want = float64_rows(model, real[: P + NEW - 1], range(P - 1, P + NEW - 1))
        for name in stats:
            got = r.stat(name)[b].astype(np.float64)  # (N, layers, heads)
            np.testing.assert_allclose(got, want[name], atol=2e-4, err_msg=f"{family} {name} row {b}")


@pytest.mark.parametrize("family", FAMILIES)
def test_row_slice_statistics_of_every_generated_token_equal_eager_float64(family):
    """The row-slice statistics on a left-padded batch, positions counted in real tokens, sliding-window
    caches (mistral, gemma2) included: equal to the float64 rows of each sequence alone, teacher-forced;
    the top keys' positions wherever the float64 ranks are apart by more than the tolerance."""
    model = build(family, SUPPORTED[family][0])
    ids, mask = left_padded_prompts()
    stats = ("entropy", "span_mass", "offset_prob", "top_key", "distance_mass")
    with GenerationRecorder(model, stats=stats, **SLICING) as rec:
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=None
        )
    r = rec.result()
    assert r.stats == stats and r.span_names == ("prompt", "generated", *SPANS) and r.offsets == OFFSETS
    assert r.slots("distance_mass") == tuple(map(str, BINS)) and r.meta["distance_bins"] == list(BINS)
    for b in range(2):
        real = out[b, PAD if b == 0 else 0 :]
        P = int(r.prompt_len[b])
        want = float64_slices(model, real[: P + NEW - 1], P, range(P - 1, P + NEW - 1))
        for name in ("span_mass", "offset_prob", "top_key_prob", "distance_mass"):
            got = r.stat(name)[b].astype(np.float64)
            np.testing.assert_allclose(got, want[name], atol=2e-4, err_msg=f"{family} {name} row {b}")
        probs = want["top_key_prob"]  # a rank past the keys a row sees (probability 0) holds no key: −1
        expected = np.where(probs > 0, want["top_key"], -1).astype(np.int64)
        apart = np.diff(probs, axis=-1, prepend=2.0, append=-1.0)  # each rank's gap to its neighbours
        clear = ((-apart[..., :-1] > 2e-4) & (-apart[..., 1:] > 2e-4)) | (probs == 0)
        assert clear.mean() > 0.5, f"{family}: the ranks are too close to test"
        assert np.array_equal(r.stat("top_key")[b][clear], expected[clear]), family


def test_row_slice_parameters_are_checked_in_one_line():
    model = build("llama", SUPPORTED["llama"][0])
    with pytest.raises(EntropyLensError, match="spans= is read by the statistic span_mass"):
        GenerationRecorder(model, spans={"doc": (0, 4)})
    with pytest.raises(EntropyLensError, match=r"offset_prob needs offsets=\(d, ...\)"):
        GenerationRecorder(model, stats="offset_prob")
    with pytest.raises(EntropyLensError, match="offsets .0, 0. name an offset twice"):
        GenerationRecorder(model, stats="offset_prob", offsets=(0, 0))
    with pytest.raises(EntropyLensError, match="span name 'prompt'"):
        GenerationRecorder(model, stats="span_mass", spans={"prompt": (0, 4)})
    with pytest.raises(EntropyLensError, match=r"span 'doc' \(4, 4\) is empty"):
        GenerationRecorder(model, stats="span_mass", spans={"doc": (4, 4)})
    with pytest.raises(EntropyLensError, match="top_keys must be"):
        GenerationRecorder(model, stats="top_key", top_keys=0)
    with pytest.raises(EntropyLensError, match="distance_mass needs distance_bins="):
        GenerationRecorder(model, stats="distance_mass")
    with pytest.raises(TypeError, match="unexpected keyword 'distance_bin'"):
        GenerationRecorder(model, stats="distance_mass", distance_bin=(0, 4))
    with pytest.raises(
        ValueError, match="span_mass needs spans="
    ):  # a recorder of every row: no built-in span
        EntropyRecorder(model, stats=("entropy", "span_mass"))


def test_sampling_and_an_early_end():
    """Sampled tokens are generate's own; a sequence that writes its end token has −1 and NaN after it,
    and every live value is a number."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    with GenerationRecorder(model, stats="entropy") as rec:
        torch.manual_seed(0)
        first = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=True, pad_token_id=0)
    end = int(first[0, PROMPT + 2])  # row 0 writes this token third: make it the end token
    with GenerationRecorder(model, stats="entropy") as rec:
        torch.manual_seed(0)
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=NEW, do_sample=True, pad_token_id=0, eos_token_id=end
        )
    r = rec.result()
    ended = int(np.argmax(out[0, PROMPT:].numpy() == end)) + 1
    assert r.lengths[0] == ended and (r.tokens[0, ended:] == -1).all()
    assert np.isnan(r.stat("entropy")[0, ended:]).all() and np.isfinite(r.stat("entropy")[r.live]).all()


def test_generate_asked_for_hidden_states_records_the_same():
    """generate(output_hidden_states=True) (lm-polygraph asks for it) passes the flag down to every
    attention call: the capture runs as without it, the same statistics."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    results = []
    for hidden in (False, True):
        with GenerationRecorder(model, stats="entropy") as rec:
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=3,
                do_sample=False,
                pad_token_id=0,
                output_hidden_states=hidden,
                return_dict_in_generate=hidden,
            )
        results.append(rec.result().stat("entropy"))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-6)  # float32; a path may differ


def test_a_decode_loop_of_your_own():
    """A loop with a KV cache: the ids each step fed are the tokens, the last one −1 until given."""
    from transformers import DynamicCache

    model = build("llama", SUPPORTED["llama"][0])
    ids = torch.randint(3, 300, (1, PROMPT), generator=torch.Generator().manual_seed(2))
    with GenerationRecorder(model, stats="entropy") as rec, torch.no_grad():
        cache, step, fed = DynamicCache(), ids, []
        for _ in range(4):
            logits = model(step, past_key_values=cache, use_cache=True).logits
            step = logits[:, -1:].argmax(-1)
            fed.append(int(step))
    r = rec.result()
    assert r.tokens[0].tolist() == [*fed[:3], -1] and r.lengths.tolist() == [4]
    assert rec.result(sequences=torch.tensor([[*ids[0].tolist(), *fed]])).tokens[0].tolist() == fed


def test_refusals_in_one_line():
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    with pytest.raises(EntropyLensError, match="beam search .num_beams=2"), GenerationRecorder(model):
        model.generate(ids, attention_mask=mask, max_new_tokens=2, num_beams=2, pad_token_id=0)
    assert "generate" not in model.__dict__  # the wrapper is gone with the block
    with pytest.raises(EntropyLensError, match="received is a key statistic"):
        GenerationRecorder(model, stats=("entropy", "received"))
    with pytest.raises(TypeError, match="unexpected keyword 'stat'"):
        GenerationRecorder(model, stat="entropy")
    with pytest.raises(EntropyLensError, match="no forward ran"):
        GenerationRecorder(model).result()


def test_sink_mass_on_a_model_without_sinks_is_refused_when_the_recorder_is_made():
    """Issue 80 item 2: asked for by name on a model without sinks, sink_mass was dropped silently and
    `result.stat` then advised asking for it; refused now at GenerationRecorder(...), before any forward,
    by the monitor's probe (capture/probe.py), which leaves the model as it was. The default (no stats)
    still records it where it applies, and a model with sinks records it when asked."""
    model = build("llama", SUPPORTED["llama"][0])
    rng = torch.get_rng_state()
    with pytest.raises(EntropyLensError, match=r"does not report sink_mass in every layer.*drop it") as err:
        GenerationRecorder(model, stats=("entropy", "sink_mass", "span_mass"))
    assert "\n" not in str(err.value) and "GenerationRecorder's stats" in str(err.value)
    assert torch.equal(torch.get_rng_state(), rng) and model.config._attn_implementation == "sdpa"
    ids, mask = left_padded_prompts()
    with GenerationRecorder(model) as rec:  # the default: entropy alone on this model
        model.generate(ids, attention_mask=mask, max_new_tokens=2, pad_token_id=0)
    assert rec.result().stats == ("entropy",)
    sinks = build("gpt_oss", SUPPORTED["gpt_oss"][0])
    with GenerationRecorder(sinks, stats=("entropy", "sink_mass")) as rec:
        sinks.generate(ids, attention_mask=mask, max_new_tokens=2, pad_token_id=0)
    assert (rec.result().stat("sink_mass")[rec.result().live] > 0).all()


def test_the_file_round_trips_and_a_foreign_file_is_refused(tmp_path):
    model = build("gpt_oss", SUPPORTED["gpt_oss"][0])
    ids, mask = left_padded_prompts()
    stats = ("entropy", "max_prob", "span_mass", "top_key")
    with GenerationRecorder(model, stats=stats, spans={"doc": (0, 2)}, top_keys=2) as rec:
        model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    r = rec.result()
    back = GenerationResult.load(r.save(tmp_path / "gen.npz"))
    assert np.array_equal(back.tokens, r.tokens) and back.meta["stats"] == list(r.stats) == list(stats)
    assert back.span_names == ("prompt", "generated", "doc") and back.meta["top_keys"] == 2
    for name in (*r.stats, "top_key_prob"):
        assert np.array_equal(back.stat(name), r.stat(name), equal_nan=True)
    with np.load(tmp_path / "gen.npz") as z:  # numpy opens it without entropy_lens
        assert z["entropy"].shape == (2, 3, 2, 4) and z["span_mass"].shape == (2, 3, 2, 4, 3)
        assert z["top_key"].dtype == np.int64 and z["top_key_prob"].shape == (2, 3, 2, 4, 2)
    # a version 1 file (before the row-slice arrays and the prompt ids) still loads, without them
    with np.load(tmp_path / "gen.npz") as z:
        arrays = {
            name: z[name]
            for name in z.files
            if name not in ("prompt", "span_mass", "top_key", "top_key_prob")
        }
    meta = {**json.loads(str(arrays.pop("meta"))), "schema_version": 1, "stats": ["entropy", "max_prob"]}
    np.savez(tmp_path / "v1.npz", meta=np.array(json.dumps(meta)), **arrays)
    old = GenerationResult.load(tmp_path / "v1.npz")
    assert old.stats == ("entropy", "max_prob") and old.prompt is None
    assert np.array_equal(old.stat("entropy"), r.stat("entropy"), equal_nan=True)
    np.savez(tmp_path / "other.npz", tokens=np.zeros(2))
    with pytest.raises(EntropyLensError, match="not a generation result"):
        GenerationResult.load(tmp_path / "other.npz")
    with pytest.raises(EntropyLensError, match="'varentropy' was not recorded"):
        r.stat("varentropy")
