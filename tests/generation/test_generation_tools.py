"""What the tools of people who read attention while a model writes compute, from the generation recorder:
Lookback Lens' ratios and detector features, Wu et al.'s retrieval scores, and a logits processor that
receives each step's statistics; each equal to the same quantity from the model's eager float64
attention maps over the same tokens (each sequence alone, unpadded, teacher-forced)."""

import numpy as np
import pytest
import torch
from architectures import SUPPORTED, build, eager_probabilities

from entropy_lens import GenerationRecorder, load_model
from entropy_lens.data.passkey import passkey_prompt
from entropy_lens.errors import EntropyLensError

PROMPT, NEW, PAD, CONTEXT = (
    9,
    6,
    3,
    4,
)  # the context: real positions 0..3, as the authors' leaves a header out


def left_padded_prompts():
    ids = torch.randint(3, 300, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :PAD] = 0
    return ids, mask


def generated(model, **options):
    ids, mask = left_padded_prompts()
    with GenerationRecorder(model, **options) as rec:
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=None
        )
    return rec.result(), out


def eager_rows(model, sequence: torch.Tensor, rows: range) -> torch.Tensor:
    """(layers, heads, len(rows), T) float64: each row's probabilities over its keys, eager attention."""
    _, probs = eager_probabilities(model, sequence[None], None)
    return torch.stack([p[0][:, list(rows)] for p in probs])


@pytest.mark.parametrize("family", ("llama", "qwen2", "mistral"))
def test_lookback_ratios_equal_the_authors_formula_on_eager_maps(family):
    """A(context)/(A(context) + A(new)) as Lookback Lens computes it from full maps (the mean over the
    context's keys, and over the keys after it up to the row's own), per token, layer and head."""
    model = build(family, SUPPORTED[family][0])
    r, out = generated(model, stats="span_mass", spans={"context": (0, CONTEXT)})
    ratio = r.lookback_ratio("context")
    for b in range(2):
        P = int(r.prompt_len[b])
        real = out[b, PAD if b == 0 else 0 :]
        p = eager_rows(model, real[: P + NEW - 1], range(P - 1, P + NEW - 1))  # (L, H, N, T)
        want = np.empty((NEW, *p.shape[:2]))
        for n in range(NEW):
            row = P - 1 + n
            on_context = p[:, :, n, :CONTEXT].mean(-1)
            on_new = p[:, :, n, CONTEXT : row + 1].mean(-1)
            want[n] = (on_context / (on_context + on_new)).numpy()
        np.testing.assert_allclose(ratio[b], want, rtol=1e-5, atol=1e-6, err_msg=f"{family} row {b}")
    # the whole prompt as the context: the first token's row sees nothing after it, undefined there
    whole = r.lookback_ratio("prompt")
    assert np.isnan(whole[:, 0]).all() and np.isfinite(whole[:, 1:]).all()
    with pytest.raises(EntropyLensError, match="undefined lookback ratio"):
        r.lookback_features("prompt", window=2)


def test_lookback_features_are_the_detectors_input_and_a_detector_fits_them():
    """Sliding windows of the ratio, averaged and flattened layer-major as the authors' detectors take
    them; a predefined chunk; and a logistic regression fit on a labelled toy set (labels the test
    writes from one head's ratio) learns them."""
    sklearn = pytest.importorskip("sklearn.linear_model")
    model = build("llama", SUPPORTED["llama"][0])
    r, _ = generated(model, stats="span_mass", spans={"context": (0, CONTEXT)})
    ratio = r.lookback_ratio("context")
    features, rows = r.lookback_features("context", window=3)
    L, H = ratio.shape[2:]
    assert features.shape == (2 * (NEW - 2), L * H) and rows.tolist()[:2] == [[0, 2], [0, 3]]
    np.testing.assert_allclose(features[0], ratio[0, 0:3].mean(0).reshape(-1))  # L0-H0, L0-H1, ...
    chunk, where = r.lookback_features("context", tokens=(1, 5))
    np.testing.assert_allclose(chunk[1], ratio[1, 1:5].mean(0).reshape(-1))
    assert where.tolist() == [[0, 4], [1, 4]]
    with pytest.raises(EntropyLensError, match=r"tokens \(4, 9\) are outside sequence 0's 6"):
        r.lookback_features("context", tokens=(4, 9))
    labels = features[:, 0] > np.median(features[:, 0])  # a toy label: does head L0-H0 look back
    detector = sklearn.LogisticRegression(C=1e4, max_iter=10_000).fit(features, labels)
    assert (detector.predict(features) == labels).mean() >= 0.75


def test_retrieval_scores_equal_eager_top_keys_on_a_passkey_the_model_answers():
    """Wu et al.'s score per head on the embedded tiny-nope answering a passkey: a head retrieves when
    its most probable key lies in the needle and holds the digit written; equal to the score from the
    eager float64 maps, and some head does retrieve."""
    lm = load_model("tiny-nope", dtype="float32")
    prompt = passkey_prompt(lm.tokenizer, length=128, depth=0.5, key=48213, rng=np.random.default_rng(0))
    ids = torch.from_numpy(prompt.ids)[None]
    n = len(prompt.answer)
    with GenerationRecorder(lm.model, stats="top_key", top_keys=2) as rec, torch.no_grad():
        out = lm.model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    r = rec.result()
    assert r.tokens[0].tolist() == prompt.answer.tolist()  # it answers
    needle = (prompt.needle_start, int(prompt.key_positions.max()) + 1)
    scores = r.retrieval_scores(needle)[0]
    P = len(prompt.ids)
    p = eager_rows(lm.model, out[0, : P + n - 1], range(P - 1, P + n - 1))  # (L, H, n, T)
    top = p.argmax(-1)  # ties: the earliest, as torch's argmax gives it
    sequence = out[0].numpy()
    copied = (
        (sequence[top.numpy()] == r.tokens[0][None, None, :])
        & (top.numpy() >= needle[0])
        & (top.numpy() < needle[1])
    )
    want = copied.sum(-1) / (needle[1] - needle[0])
    np.testing.assert_allclose(scores, want)
    assert scores.max() > 0
    assert (r.retrieval_scores(needle, top=2) >= scores).all()
    with pytest.raises(EntropyLensError, match="top=3, but top_key holds 2 ranks"):
        r.retrieval_scores(needle, top=3)


def test_a_logits_processor_receives_each_steps_statistics_and_steers():
    """generate(logits_processor=[rec.logits_processor(fn)]): fn gets the step's statistics, those the
    result holds for the same token, and the token it forces from them is the token written."""
    model = build("llama", SUPPORTED["llama"][0])
    ids, mask = left_padded_prompts()
    vocab = model.config.vocab_size

    def steer(input_ids, scores, stats):  # entropix-style: choose by the attention's entropy
        entropy = stats["entropy"]  # (B, layers, heads)
        forced = (entropy[:, 0, 0] * 1000).long() % vocab
        return torch.full_like(scores, float("-inf")).scatter(1, forced[:, None], 0.0)

    with GenerationRecorder(model, stats=("entropy", "varentropy")) as rec:
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
            logits_processor=[rec.logits_processor(steer)],
        )
    r = rec.result()
    entropy = torch.from_numpy(r.stat("entropy"))  # (B, N, layers, heads)
    assert out[:, PROMPT:].tolist() == ((entropy[:, :, 0, 0] * 1000).long() % vocab).tolist()
    with GenerationRecorder(model) as rec, pytest.raises(EntropyLensError, match="return the scores"):
        model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=2,
            pad_token_id=0,
            logits_processor=[rec.logits_processor(lambda *a: None)],
        )


@pytest.mark.parametrize("family", ("llama", "qwen2", "mistral"))
def test_kept_probabilities_are_the_eager_block(family):
    """keep_probs=("generated", "generated"): row n's probabilities over the generated tokens' keys (the
    block lm-polygraph's attention_all holds), and ("generated", "prompt"), equal to eager float64."""
    model = build(family, SUPPORTED[family][0])
    r, out = generated(model, keep_probs=("generated", "generated"))
    block = r.stat("probs")  # (B, N, layers, heads, K)
    assert block.shape[-1] == NEW - 1 and r.meta["keep_probs"] == ["generated", "generated"]
    prompt, _ = generated(model, keep_probs=("generated", "prompt"))
    for b in range(2):
        P = int(r.prompt_len[b])
        real = out[b, PAD if b == 0 else 0 :]
        p = eager_rows(model, real[: P + NEW - 1], range(P - 1, P + NEW - 1)).numpy()  # (L, H, N, T)
        want = np.zeros((NEW, *p.shape[:2], NEW - 1))
        for n in range(NEW):
            want[n, :, :, :n] = p[:, :, n, P : P + n]
        np.testing.assert_allclose(block[b], want, atol=1e-5, err_msg=f"{family} row {b}")  # a float32 model
        on_prompt = prompt.stat("probs")[b, :, :, :, :P]
        np.testing.assert_allclose(on_prompt, p[:, :, :, :P].transpose(2, 0, 1, 3), atol=1e-5)
    with pytest.raises(EntropyLensError, match="keep_probs must be .'generated', keys."):
        GenerationRecorder(model, keep_probs=("prompt", "prompt"))
    with pytest.raises(EntropyLensError, match="keep_probs' keys 'doc' name no span"):
        GenerationRecorder(model, keep_probs=("generated", "doc"))


def test_top_key_ranks_exact_ties_earliest_and_says_float32_equals_may_not_be_ties():
    """Issue 80 item 7: "ties the earliest first" holds for exact ties of the values ranked (a generated
    token's float64 probabilities); two keys whose probabilities differ below float32's rounding show one
    top_key_prob and rank the later first, which top_key's description now says."""
    from entropy_lens.kernels.slices import Sight, slices_reference
    from entropy_lens.results.generation import TOP_KEY_PROB
    from entropy_lens.statistics import TOP_KEY
    from entropy_lens.statistics.slices import Slices

    slices = Slices.parse(("top_key",), top_keys=2, per_token=True)
    near = 0.3 + 1e-12  # the same float32 as 0.3, a larger float64
    p = torch.tensor([[[0.3, 0.3, 0.4], [0.3, near, 0.4 - 1e-12]]], dtype=torch.float64)  # (B=1, H=2, S=3)
    sight = Sight(torch.arange(3)[None], torch.tensor([[2]]), torch.zeros(1, dtype=torch.int64))
    got = slices_reference(p[:, :, None], torch.ones(1, 2, 1, 3, dtype=torch.bool), sight, slices)
    top, prob = got["top_key"][0, :, 0], got[TOP_KEY_PROB][0, :, 0].float()
    assert top[0].tolist() == [2, 0] and top[1].tolist() == [2, 1]  # exact tie: key 0; near-tie: the later
    assert prob[1, 1] == torch.tensor(0.3, dtype=torch.float32) == torch.tensor(near, dtype=torch.float32)
    assert (
        "exact ties the earliest first" in TOP_KEY.description
        and "rank the later first" in TOP_KEY.description
    )
