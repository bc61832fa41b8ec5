"""GenerationRecorder under the conditions a model writes in besides a growing cache and one generate()
call: every cache class transformers ships (pre-allocated, sliding, offloaded), a prompt prefilled in
chunks, a prompt given as embeddings, two generate() calls in one recorder; each held to the float64 rows
of each sequence alone, teacher-forced. The decoding modes that feed several rows per step and the
padding it cannot place are refused in one line."""

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, build
from generation_reference import PAD, SLICING, STATS, assert_equals_float64, left_padded_prompts

from entropy_lens import EntropyRecorder, GenerationRecorder
from entropy_lens.errors import EntropyLensError

EVERY = (*STATS, "span_mass", "offset_prob", "top_key", "distance_mass")
GREEDY = {"do_sample": False, "pad_token_id": 0, "eos_token_id": None}
ON_A_GPU = (pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))


def recorder(model, stats=EVERY):
    return GenerationRecorder(model, stats=stats, **SLICING)


# full, softcap + hybrid sliding, window 4, ALiBi with a 2-D mask over the cache's slots (BLOOM's generate)
@pytest.mark.parametrize("family", ("llama", "gemma2", "mistral", "bloom"))
@pytest.mark.parametrize(
    "cache",
    ("static", *(pytest.param(name, marks=ON_A_GPU) for name in ("offloaded", "offloaded_static"))),
)
def test_every_cache_class_equals_float64(family, cache):
    """A pre-allocated cache hands each layer all its slots, a static sliding layer rolls once full, and
    generate hands the model 4-D masks: positions, padding and the prompt's ids are those of a growing
    cache, every statistic float64's (on mistral the window of 4 is passed during the prompt). The
    offloaded caches move a GPU's layers to the host and back: on a GPU alone."""
    device = "cuda" if cache.startswith("offloaded") else "cpu"
    model = build(family, SUPPORTED[family][0]).to(device)
    ids, mask = (x.to(device) for x in left_padded_prompts())
    with recorder(model) as rec:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=6, cache_implementation=cache, **GREEDY)
    r = rec.result()
    assert r.prompt_len.tolist() == [ids.shape[1] - PAD, ids.shape[1]]
    assert np.array_equal(r.prompt[0, : ids.shape[1] - PAD], ids[0, PAD:].cpu().numpy())
    assert np.array_equal(r.tokens, out[:, ids.shape[1] :].cpu().numpy())
    assert_equals_float64(model, r, out, [PAD, 0])


def test_a_model_that_keeps_no_cache():
    """MPT's generate feeds the whole sequence again at every step, one position more: each forward's
    last row is the step's."""
    model = build("mpt", SUPPORTED["mpt"][0])
    ids, mask = left_padded_prompts()
    with recorder(model) as rec:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=4, **GREEDY)
    r = rec.result()
    assert r.tokens.shape == (2, 4) and np.array_equal(r.prompt[1], ids[1].numpy())
    assert_equals_float64(model, r, out, [PAD, 0])


def test_a_static_cache_in_a_decode_loop_of_your_own():
    """A StaticCache of 32 slots given to the model step by step, with the 2-D mask: the same numbers."""
    from transformers import StaticCache

    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    with recorder(model) as rec, torch.no_grad():
        cache = StaticCache(config=model.config, max_cache_len=32)
        step, fed = ids, ids
        for _ in range(5):
            logits = model(step, attention_mask=mask, cache=cache, use_cache=True).logits
            step = logits[:, -1:].argmax(-1)
            fed, mask = torch.cat([fed, step], 1), torch.cat([mask, torch.ones_like(step)], 1)
    r = rec.result(sequences=fed)
    assert_equals_float64(model, r, fed, [PAD, 0])


def test_a_prompt_prefilled_in_chunks():
    """generate(prefill_chunk_size=4): the prompt's chunks are no token's rows; token 0's row is the
    prompt's last position."""
    model = build("qwen2", SUPPORTED["qwen2"][0])
    ids, mask = left_padded_prompts()
    with recorder(model) as rec:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=5, prefill_chunk_size=4, **GREEDY)
    r = rec.result()
    assert r.tokens.shape == (2, 5) and np.array_equal(r.prompt[1], ids[1].numpy())
    assert_equals_float64(model, r, out, [PAD, 0])


def test_a_prompt_given_as_embeddings():
    """generate(inputs_embeds=...): the tokens are generate's output, the prompt's ids unknown (−1, which
    `ids_at` returns), every statistic float64's."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    embeds = model.get_input_embeddings()(ids).detach()
    with recorder(model) as rec:
        out = model.generate(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=5, **GREEDY)
    r = rec.result()
    assert np.array_equal(r.tokens, out.numpy()) and (r.prompt[1] == -1).all()
    assert (r.ids_at(np.array([[0], [3]])) == -1).all()
    assert_equals_float64(model, r, torch.cat([ids, out], 1), [PAD, 0])
    with GenerationRecorder(model, stats="entropy") as rec:  # the kernels' statistics alone too
        model.generate(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=3, **GREEDY)
    assert rec.result().stat("entropy").shape == (2, 3, 2, 4)


def test_each_generate_call_is_a_generation():
    """Two calls with other prompts, batch sizes and lengths: `results()` holds both, `result()` the last,
    each with its own tokens, prompts and rows."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    other = torch.randint(3, 300, (3, 5), generator=torch.Generator().manual_seed(4))
    other_mask = torch.ones_like(other)
    other_mask[2, :2] = 0
    with recorder(model) as rec:
        first = model.generate(ids, attention_mask=mask, max_new_tokens=4, **GREEDY)
        second = model.generate(other, attention_mask=other_mask, max_new_tokens=3, **GREEDY)
    one, two = rec.results()
    assert one.tokens.shape == (2, 4) and two.tokens.shape == (3, 3)
    assert two.prompt_len.tolist() == [5, 5, 3] and np.array_equal(rec.result().tokens, two.tokens)
    assert_equals_float64(model, one, first, [PAD, 0])
    assert_equals_float64(model, two, second, [0, 0, 2])


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"prompt_lookup_num_tokens": 3}, "assisted generation .an assistant model or prompt lookup"),
        ({"penalty_alpha": 0.6, "top_k": 4}, "contrastive search feeds several rows"),
        ({"dola_layers": "high"}, "dola generation feeds several rows"),
        ({"num_beams": 2}, r"beam search \(num_beams=2\) reorders the cache"),
    ],
)
def test_decoding_modes_that_feed_several_rows_are_refused(options, refusal):
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = (x[1:] for x in left_padded_prompts())  # one sequence: assisted decoding's batch
    with pytest.raises(EntropyLensError, match=refusal), GenerationRecorder(model) as rec:
        model.generate(ids, attention_mask=mask, max_new_tokens=3, **{**GREEDY, **options})
    assert not rec.results()  # nothing ran


def test_several_rows_fed_after_the_prompt_are_refused():
    """A decode loop of your own that feeds two tokens after the prompt: which row chose which token is
    not one per forward."""
    model = build("llama", SUPPORTED["llama"][0])
    ids = torch.randint(3, 300, (1, 6), generator=torch.Generator().manual_seed(2))
    with GenerationRecorder(model), torch.no_grad():
        out = model(ids, use_cache=True)
        with pytest.raises(EntropyLensError, match="fed 2 positions; GenerationRecorder records one"):
            model(ids[:, :2], cache=out.cache, use_cache=True)


def test_padding_it_cannot_place_is_refused():
    """Right padding (generate warns and goes on), a sequence with no real token, a mask with a hole in
    a later step, and a forward of another batch size: one line each."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    right = mask.flip(-1)
    refusal = "sequence 0 of the prompt has padding after a real token"
    with (
        pytest.raises(EntropyLensError, match=refusal),
        GenerationRecorder(model, stats=("entropy", "span_mass")),
    ):
        model.generate(ids, attention_mask=right, max_new_tokens=2, **GREEDY)
    empty = mask.clone()
    empty[1] = 0
    refusal = "sequence 1 of the prompt has no real token"
    with pytest.raises(EntropyLensError, match=refusal), GenerationRecorder(model):
        model.generate(ids, attention_mask=empty, max_new_tokens=2, **GREEDY)
    with GenerationRecorder(model) as rec, torch.no_grad():
        out = model(ids, attention_mask=mask, use_cache=True)
        holed = torch.cat([mask, torch.zeros_like(mask[:, :1])], 1)
        with pytest.raises(EntropyLensError, match="attention mask of the forward at position 9 is not"):
            model(ids[:, -1:], attention_mask=holed, cache=out.cache, use_cache=True)
    with GenerationRecorder(model) as rec, torch.no_grad():
        out = model(ids, attention_mask=mask, use_cache=True)
        with pytest.raises(EntropyLensError, match="a forward of 1 sequences continues a generation of 2"):
            model(ids[:1, -1:], cache=out.cache, use_cache=True)
    refusal = "continues a cache of 9 tokens it did not see"  # a cache it did not see fill
    with GenerationRecorder(model) as rec, torch.no_grad(), pytest.raises(EntropyLensError, match=refusal):
        model(ids[:, -1:], attention_mask=torch.cat([mask, mask[:, :1]], 1), cache=out.cache)
    assert not rec.results()


@pytest.mark.parametrize("family", ("llama", "gemma2", "mistral", "bloom", "falcon"))
def test_an_entropy_recorder_around_generate_on_a_static_cache(family):
    """EntropyRecorder around generate(cache_implementation="static"): generate hands the model 4-D masks
    over the cache's slots; the padding is read off the prompt's and continued step by step, so every
    row, and the attention each key receives (where the cache keeps every key), lands where a growing
    cache puts it."""
    model = build(family, SUPPORTED[family][0])
    ids, mask = left_padded_prompts()
    rows = ("entropy", "distance", "first_mass", "recent_mass")
    keys = ("received",) if family == "llama" else ()  # a sliding layer's cache drops keys: refused there
    means = []
    for cache in ("dynamic", "static"):
        with EntropyRecorder(model, stats=(*rows, *keys)) as rec:
            model.generate(ids, attention_mask=mask, max_new_tokens=6, cache_implementation=cache, **GREEDY)
        means.append({name: rec.mean(name) for name in rows} | {name: rec.received(name) for name in keys})
    for name in means[0]:
        np.testing.assert_allclose(means[1][name], means[0][name], atol=2e-5, err_msg=name)


def test_a_quantized_cache_equals_float64_of_the_keys_it_hands():
    """generate(cache_implementation="quantized", fp8): the layers see keys rounded to 8 bits, so the
    reference is float64 attention of the very queries and keys each layer was handed (kept by a wrapper
    around the attention function), each key placed at its real position as a growing cache places it."""
    from entropy_lens.capture import attention

    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    handed, run = [], attention._attention

    def keep(module, query, key, value, attention_mask, scaling, dropout, kwargs):
        handed.append((module.layer_idx, query[:, :, -1].double(), key.double(), attention_mask, scaling))
        return run(module, query, key, value, attention_mask, scaling, dropout, kwargs)

    stats = ("entropy", "distance", "span_mass", "top_key")
    with pytest.MonkeyPatch.context() as patch, GenerationRecorder(model, stats=stats) as rec:
        patch.setattr(attention, "_attention", keep)
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=5,
            cache_implementation="quantized",
            cache_config={"backend": "fp8"},
            **GREEDY,
        )
    r, P, L = rec.result(), ids.shape[1], model.config.num_hidden_layers
    for n in range(5):
        fed = P + n  # positions fed up to this step's row
        for layer, q, k, m, scaling in handed[n * L : (n + 1) * L]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)  # (B, Hq, S, D)
            S = k.shape[2]
            scores = torch.einsum("bhd,bhsd->bhs", q, k) * scaling
            if m is not None:
                scores = scores.masked_fill(~m[:, :, -1, -S:].bool(), -torch.inf)
            p = scores.softmax(-1)  # (B, Hq, S)
            pos = torch.arange(fed - S, fed)[None] - torch.tensor([PAD, 0])[:, None]  # real positions
            entropy = -torch.special.xlogy(p, p).sum(-1)
            distance = (p * (pos[:, None, -1:] - pos[:, None, :])).sum(-1)
            prompt = (p * (pos[:, None, :] < torch.from_numpy(r.prompt_len)[:, None, None])).sum(-1)
            for name, want in (("entropy", entropy), ("distance", distance)):
                np.testing.assert_allclose(r.stat(name)[:, n, layer], want, atol=2e-5, err_msg=name)
            np.testing.assert_allclose(r.stat("span_mass")[:, n, layer, :, 0], prompt, atol=2e-5)
            top = torch.gather(pos[:, None, :].expand_as(p), -1, p.argmax(-1, keepdim=True))[..., 0]
            clear = (p.topk(2).values.diff(dim=-1)[..., 0] < -1e-4).numpy()
            assert np.array_equal(r.stat("top_key")[:, n, layer, :, 0][clear], top.numpy()[clear])
    assert np.array_equal(r.tokens, out[:, P:].numpy())


def test_top_keys_never_outgrow_the_keys_a_row_sees():
    """top_keys=100000 on a 9-token prompt and 3 new tokens: the top keys' last axis is the most keys a
    row saw (11), not 100000 ranks of padding; the ranks past a row's keys are −1."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    with GenerationRecorder(model, stats="top_key", top_keys=100_000) as rec:
        model.generate(ids, attention_mask=mask, max_new_tokens=3, **GREEDY)
    r = rec.result()
    top = r.stat("top_key")
    assert top.shape == (2, 3, 2, 4, ids.shape[1] + 2) and r.meta["top_keys"] == 100_000
    assert (top[0, 0, ..., ids.shape[1] - PAD :] == -1).all()  # 6 real keys at the first row of row 0
    assert (top[1, 2] >= 0).all() and (r.stat("top_key_prob")[top == -1] == 0).all()
