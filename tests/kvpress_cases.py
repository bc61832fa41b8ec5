"""entropy_lens.kvpress against kvpress itself. Runs only in the kvpress environment (.venv-kvpress: kvpress
0.5.5 and transformers 5.2, which kvpress needs), in a child process that tests/kvpress/test_kvpress.py
starts; elsewhere every case skips.

- scores: our ObservedAttentionPress's scores equal kvpress's own on eager attention (each layer's hook
  inputs handed to both), for a GQA Llama, Qwen3 (q_norm) and a Qwen2 with a sliding-window layer, and
  with our press's layer run on sdpa.
- the pipeline: kvpress's `kv-press-text-generation` keeps the same keys (the same positions per layer
  and key head) with our press on sdpa as with kvpress's press on eager, on a tiny Llama and on the
  bundled SmolLM2 (1,024 tokens); and our press completes the pipeline on sdpa, where kvpress's own
  press stops at its assertion (2,048 tokens, compression 0.75).
- from the forward: inside `with press(model):` each layer scores from its own forward's pass, as a pass
  beside sdpa does (padded or not) and as kvpress's press on eager does, with no pass beside it.
- padding: each sequence of a right- or left-padded batch scores as it does alone (sdpa and eager); kvpress's
  own press does not on a right-padded one (the guide says so).
- the guide (docs/guides/kvpress.md): its Python blocks run as written, at a test's length.
- the benchmark (benchmarks/kvpress_cpu.py) at a toy size: every press's row, the same keys kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

kvpress = pytest.importorskip("kvpress", reason="kvpress is not installed (make kvpress-env builds it)")

from kvpress import ObservedAttentionPress as KVPressObserved
from kvpress.pipeline import KVPressTextGenerationPipeline
from transformers import DynamicCache

from entropy_lens.kvpress import ObservedAttentionPress

GUIDE = Path(__file__).parents[1] / "docs" / "guides" / "kvpress.md"
RTOL = 1e-4  # the issue's bound on the scores' relative difference


def test_the_environment_is_transformers_5_2_with_kvpress():
    """This file's environment (make kvpress-env) is what it was built for: transformers 5.2.0, the floor's
    line, and kvpress 0.5.5."""
    import importlib.metadata

    import transformers

    assert [transformers.__version__, importlib.metadata.version("kvpress")] == ["5.2.0", "0.5.5"]


def tiny_model(kind: str):
    """A tiny random model of `kind` in float32 (eval mode), its query/key weights enlarged."""
    from architectures import build
    from tiny import make_tiny_model, make_tiny_sliding_window_model

    if kind == "llama":
        return make_tiny_model()
    if kind == "qwen2-sliding":
        return make_tiny_sliding_window_model(window=8)
    model = build("qwen3", {"head_dim": 8, "initializer_range": 0.2})
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(4.0)
    return model


def with_attention(model, implementation: str):
    model.set_attn_implementation(implementation)
    return model


def both_scores(model, ids) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ours, kvpress's) scores for each layer of one eager prefill of `ids`, from the same hook inputs."""
    ours, theirs, found = ObservedAttentionPress(0.5), KVPressObserved(0.5), []

    def hook(module, args, kwargs, output):
        cache = kwargs["past_key_values"].layers[module.layer_idx]
        inputs = (module, kwargs["hidden_states"], cache.keys, cache.values, output[1], kwargs)
        found.append((ours.score(*inputs), theirs.score(*inputs)))

    hooks = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in model.model.layers]
    try:
        with torch.no_grad():
            model.model(input_ids=ids, past_key_values=DynamicCache())
    finally:
        for h in hooks:
            h.remove()
    return found


def assert_scores_close(ours, theirs):
    assert ours.shape == theirs.shape and ours.dtype == torch.float32
    scale = theirs.abs().max().item()
    torch.testing.assert_close(ours, theirs.float(), rtol=RTOL, atol=RTOL * scale)


@pytest.mark.parametrize("kind", ["llama", "qwen3", "qwen2-sliding"])
def test_scores_equal_kvpress_on_eager(kind):
    model = with_attention(tiny_model(kind), "eager")
    ids = torch.randint(3, 300, (1, 48), generator=torch.Generator().manual_seed(0))
    found = both_scores(model, ids)
    assert len(found) == model.config.num_hidden_layers
    for ours, theirs in found:
        assert_scores_close(ours, theirs)
        assert theirs.std() > 0.1 * theirs.mean()  # far from uniform: a real comparison


def test_scores_on_sdpa_equal_kvpress_on_eager():
    """The press's own use: the layer on sdpa (no weights), scores against kvpress's from eager."""
    ids = torch.randint(3, 300, (1, 64), generator=torch.Generator().manual_seed(1))
    eager = [theirs for _, theirs in both_scores(with_attention(tiny_model("llama"), "eager"), ids)]
    sdpa_model = with_attention(tiny_model("llama"), "sdpa")
    ours = []

    def hook(module, args, kwargs, output):
        assert output[1] is None  # sdpa returns no weights: kvpress's own press would assert here
        cache = kwargs["past_key_values"].layers[module.layer_idx]
        press = ObservedAttentionPress(0.5)
        ours.append(press.score(module, kwargs["hidden_states"], cache.keys, cache.values, None, kwargs))

    hooks = [l.self_attn.register_forward_hook(hook, with_kwargs=True) for l in sdpa_model.model.layers]
    with torch.no_grad():
        sdpa_model.model(input_ids=ids, past_key_values=DynamicCache())
    for h in hooks:
        h.remove()
    for mine, theirs in zip(ours, eager, strict=True):
        assert_scores_close(mine, theirs)


def layer_scores(model, ids, mask=None, press=None) -> list[torch.Tensor]:
    """Each layer's scores of `press` (ours by default) from one prefill of `ids` with the 2-D `mask`
    (positions as generate places them: cumsum(mask) − 1, so a left-padded row's tokens start at 0)."""
    press, found = press or ObservedAttentionPress(0.5), []

    def hook(module, args, kwargs, output):
        cache = kwargs["past_key_values"].layers[module.layer_idx]
        inputs = (module, kwargs["hidden_states"], cache.keys, cache.values, output[1], kwargs)
        found.append(press.score(*inputs))

    positions = None if mask is None else (mask.long().cumsum(-1) - 1).clamp_min(0)
    hooks = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in model.model.layers]
    try:
        with torch.no_grad():
            model.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=DynamicCache()
            )
    finally:
        for h in hooks:
            h.remove()
    return found


def forward_scores(model, ids, mask=None, press=None) -> list[torch.Tensor]:
    """Each layer's scores of `press` (ours from the forward by default) as kvpress's hooks call it inside
    `with press(model):`, from one prefill of `ids` with the 2-D `mask` (positions as `layer_scores`)."""
    press, found = press or ObservedAttentionPress(0.5), []
    score = press.score

    def keep(*args):
        found.append(score(*args))
        return found[-1]

    press.score = keep
    positions = None if mask is None else (mask.long().cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad(), press(model):
        model.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=DynamicCache()
        )
    return found


@pytest.mark.parametrize("kind", ["llama", "qwen3", "qwen2-sliding"])
@pytest.mark.parametrize("padding", ["none", "right", "left"])
def test_scores_from_the_forward_equal_a_pass_beside_it(kind, padding, monkeypatch):
    """Issue 70, item 9: inside `with press(model):` each layer is scored from its own forward (the
    capture's pass, one pass over the keys with the native kernel): the same scores as a pass of its own
    beside sdpa (`from_forward=False`), padded or not, and no such pass runs."""
    model = with_attention(tiny_model(kind), "sdpa")
    ids, mask, _, _ = padded_pair("right" if padding == "none" else padding)
    mask = None if padding == "none" else mask
    beside = forward_scores(model, ids, mask, ObservedAttentionPress(0.5, from_forward=False))
    assert model.config._attn_implementation == "sdpa"  # the press's session put it back
    beside_runs = []
    monkeypatch.setattr(ObservedAttentionPress, "received_beside", lambda *a: beside_runs.append(a))
    press = ObservedAttentionPress(0.5)
    ours = forward_scores(model, ids, mask, press)
    assert not beside_runs and not press._received  # every layer's sums taken by its own hook
    assert len(ours) == len(beside) == model.config.num_hidden_layers
    for mine, theirs in zip(ours, beside, strict=True):
        assert_scores_close(mine, theirs)
    assert model.config._attn_implementation == "sdpa"


def test_scores_from_the_forward_equal_kvpress_on_eager():
    """The default press on sdpa, scoring from the forward, against kvpress's own press on eager."""
    ids = torch.randint(3, 300, (1, 64), generator=torch.Generator().manual_seed(1))
    eager = [theirs for _, theirs in both_scores(with_attention(tiny_model("llama"), "eager"), ids)]
    ours = forward_scores(with_attention(tiny_model("llama"), "sdpa"), ids)
    for mine, theirs in zip(ours, eager, strict=True):
        assert_scores_close(mine, theirs)


def padded_pair(side: str, long: int = 48, short: int = 30):
    """(ids (2, long), mask (2, long), the short sequence alone (1, short), its keys' slice in the batch)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 300, (2, long), generator=g)
    alone = ids[1:, :short].clone()
    mask = torch.ones(2, long, dtype=torch.long)
    real = slice(0, short) if side == "right" else slice(long - short, long)
    ids[1] = 0
    ids[1, real] = alone[0]
    mask[1] = 0
    mask[1, real] = 1
    return ids, mask, alone, real


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_a_padded_sequence_scores_as_it_does_alone(side, implementation):
    """Issue 65, item 1: a right-padded sequence's scores divided by S − j (the batch's length, not its
    own) were up to 99.6% off on SmolLM2; each key's divisor is now the real rows at or after it. Held
    to the sequence run alone, never to kvpress (whose own press is wrong here too: the next test)."""
    model = with_attention(tiny_model("llama"), implementation)
    ids, mask, alone, real = padded_pair(side)
    batch = layer_scores(model, ids, mask)
    single = layer_scores(model, alone)
    for padded, own in zip(batch, single, strict=True):
        assert_scores_close(padded[1:, :, real], own)
        assert torch.equal(padded[1:, :, mask[1] == 0], torch.zeros_like(padded[1:, :, mask[1] == 0]))
        assert own.std() > 0.1 * own.mean()  # far from uniform: a real comparison


def test_kvpress_own_press_is_wrong_on_a_right_padded_batch():
    """What docs/guides/kvpress.md says: kvpress's eager press sums the padded rows' weights and divides
    by S − j, so a right-padded sequence's scores are not its own (the lens press's are: above)."""
    model = with_attention(tiny_model("llama"), "eager")
    ids, mask, alone, real = padded_pair("right")
    theirs = layer_scores(model, ids, mask, KVPressObserved(0.5))
    single = layer_scores(model, alone, press=KVPressObserved(0.5))
    worst = max(
        ((a[1:, :, real] - b).abs() / b.abs()).max().item() for a, b in zip(theirs, single, strict=True)
    )
    assert worst > 0.2


def kept_positions(compressed: DynamicCache, full: DynamicCache) -> list[torch.Tensor]:
    """Per layer, (B, Hkv, n_kept) sorted positions of the keys `compressed` kept, found in `full` (the
    same prefill uncompressed) by the nearest key."""
    kept = []
    for small, whole in zip(compressed.layers, full.layers, strict=True):
        nearest = torch.cdist(small.keys, whole.keys).argmin(-1)  # (B, Hkv, n_kept)
        found = whole.keys.gather(2, nearest.unsqueeze(-1).expand_as(small.keys))
        assert torch.equal(found, small.keys)  # each kept key is that one of the prefill's, exactly
        kept.append(nearest.sort(-1).values)
    return kept


def run_pipeline(pipe, context: str, press, question: str = "", max_new_tokens: int = 3):
    cache = DynamicCache()
    answer = pipe(context, question=question, press=press, cache=cache, max_new_tokens=max_new_tokens)
    return answer["answer"], cache  # the pipeline takes its answer back out: the prefill's cache


def same_cache(make_model, tokenizer, context: str, ratio: float = 0.5):
    """(answers, kept positions) of kvpress's press on eager and ours on sdpa, through kvpress's pipeline."""
    out = {}
    for name, implementation, press in (
        ("kvpress", "eager", KVPressObserved(compression_ratio=ratio)),
        ("lens", "sdpa", ObservedAttentionPress(compression_ratio=ratio)),
    ):
        pipe = KVPressTextGenerationPipeline(
            model=with_attention(make_model(), implementation), tokenizer=tokenizer, device="cpu"
        )
        # the prefill uncompressed, through the same attention as the press's (ours: its capture's pass, whose
        # keys of later layers differ from sdpa's by float rounding)
        whole = ObservedAttentionPress(compression_ratio=0.0) if name == "lens" else None
        with torch.no_grad():
            answer, cache = run_pipeline(pipe, context, press)
            _, full = run_pipeline(pipe, context, whole)
        out[name] = (answer, kept_positions(cache, full), full.get_seq_length())
    return out


def test_the_pipeline_keeps_the_same_cache_on_a_tiny_llama():
    from tiny import TEXT, make_tokenizer

    out = same_cache(tiny_model_llama, make_tokenizer(), TEXT[:600])
    (answer_a, kept_a, length), (answer_b, kept_b, _) = out["kvpress"], out["lens"]
    assert length > 100 and kept_a[0].shape[-1] == int(length * 0.5)
    for a, b in zip(kept_a, kept_b, strict=True):
        assert torch.equal(a, b)
    assert answer_a == answer_b


def tiny_model_llama():
    return tiny_model("llama")


def austen(n_tokens: int, tokenizer) -> str:
    """About `n_tokens` tokens of Persuasion."""
    from entropy_lens.data import load_documents

    text = load_documents("austen:persuasion")[0][0][20000:]
    ids = tokenizer.encode(text[: n_tokens * 6], add_special_tokens=False)[:n_tokens]
    return tokenizer.decode(ids)


@pytest.mark.slow
def test_the_pipeline_keeps_the_same_cache_on_smollm2():
    loaded = load_smollm2()
    tokenizer = loaded.tokenizer

    def make():  # one model, its attention implementation switched per press
        return loaded.model

    out = same_cache(make, tokenizer, austen(1024, tokenizer), ratio=0.5)
    (answer_a, kept_a, length), (answer_b, kept_b, _) = out["kvpress"], out["lens"]
    assert length >= 1024 and len(kept_a) == loaded.n_layers
    differing = sum(int((a != b).any(-1).sum()) for a, b in zip(kept_a, kept_b, strict=True))
    assert differing == 0, f"{differing} (layer, key head) pairs kept different keys"
    assert answer_a == answer_b


@pytest.mark.slow
def test_the_lens_press_completes_the_pipeline_on_sdpa():
    """SmolLM2 on sdpa (no attention weights: kvpress's own press asserts eager) at 2,048 tokens: the
    pipeline answers from a cache compressed to a quarter."""
    loaded = load_smollm2()
    pipe = KVPressTextGenerationPipeline(model=loaded.model, tokenizer=loaded.tokenizer, device="cpu")
    assert loaded.model.config._attn_implementation == "sdpa"
    context = austen(2048, loaded.tokenizer)
    with torch.no_grad():
        answer, cache = run_pipeline(
            pipe, context, ObservedAttentionPress(compression_ratio=0.75), "Who is Anne?", 8
        )
    length = len(loaded.tokenizer.encode(context, add_special_tokens=False))
    assert answer.strip() and cache.get_seq_length() <= length // 4 + 64


@pytest.mark.parametrize("ratio", [1.0, 1.5, -0.1, float("nan"), "0.5", None, True])
def test_a_compression_ratio_outside_0_1_is_refused_when_the_press_is_made(ratio):
    """Issue 77, item 8: kvpress's bare AssertionError (1.0, −0.1, NaN) or TypeError ("0.5", None) at
    the first prefill is one line from the lens press, when it is made."""
    from entropy_lens.errors import EntropyLensError

    with pytest.raises(EntropyLensError, match=r"^compression_ratio must be .*compression_ratio=0.5") as err:
        ObservedAttentionPress(compression_ratio=ratio)
    assert "\n" not in str(err.value)


def prefill(model, ids) -> DynamicCache:
    cache = DynamicCache()
    with torch.no_grad():
        model.model(input_ids=ids, past_key_values=cache)
    return cache


def test_nested_lens_presses_are_refused_in_one_line():
    """Issue 77, item 8: a lens press entered inside a lens press (the same, or another) is refused when
    it is entered, before any forward; the outer one then runs as alone, and so does a later one."""
    from entropy_lens.errors import EntropyLensError

    model = with_attention(tiny_model("llama"), "sdpa")
    ids = torch.randint(3, 300, (1, 40), generator=torch.Generator().manual_seed(2))
    alone = ObservedAttentionPress(0.5)
    with alone(model):
        want = prefill(model, ids)
    outer = ObservedAttentionPress(0.5)
    for inner, words in (
        (outer, "already inside this press"),
        (ObservedAttentionPress(0.25), "another lens"),
    ):
        with outer(model):
            with pytest.raises(EntropyLensError, match=words) as err, inner(model):
                pass
            assert "\n" not in str(err.value) and "ComposedPress" in str(err.value)
            got = prefill(model, ids)
        for a, b in zip(got.layers, want.layers, strict=True):
            assert a.keys.shape[2] == 20 and torch.equal(a.keys, b.keys)
    with ObservedAttentionPress(0.5)(model):  # the context left: a press enters again
        assert prefill(model, ids).layers[0].keys.shape[2] == 20


def test_presses_chain_with_the_lens_press_first_and_a_compressed_cache_is_refused():
    """ComposedPress([lens, KnormPress]) keeps, of the keys the lens press keeps alone, those Knorm keeps;
    a cache another press compressed before the lens press scores it (Knorm first, or kvpress's press
    around the lens press) is refused in one line (its scores would be the leftovers')."""
    from kvpress import ComposedPress, KnormPress

    from entropy_lens.errors import EntropyLensError

    model = with_attention(tiny_model("llama"), "sdpa")
    ids = torch.randint(3, 300, (1, 40), generator=torch.Generator().manual_seed(3))
    with ObservedAttentionPress(0.5, from_forward=False)(model):  # sdpa's forward, as in ComposedPress
        first = prefill(model, ids)
    with ComposedPress([ObservedAttentionPress(0.5), KnormPress(0.5)])(model):
        chained = prefill(model, ids)
    for lens, both in zip(first.layers, chained.layers, strict=True):
        assert both.keys.shape[2] == 10
        # every key kept by the chain is one the lens press kept alone (per batch row and key head)
        assert (torch.cdist(both.keys, lens.keys).amin(-1) == 0).all()
    for press in (ComposedPress([KnormPress(0.5), ObservedAttentionPress(0.5)]), KnormPress(0.5)):
        with pytest.raises(EntropyLensError, match="cache holds 20 keys for the prefill's 40 queries") as err:
            if isinstance(press, KnormPress):  # kvpress's own press around the lens press
                with press(model), ObservedAttentionPress(0.5)(model):
                    prefill(model, ids)
            else:
                with press(model):
                    prefill(model, ids)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("progress", [True, False])
def test_a_long_prefill_reports_its_layers(monkeypatch, capsys, progress):
    """Issue 70, item 1: a prefill of PROGRESS_FROM tokens or more is one forward that a CPU takes minutes
    over; the lens press reports each layer as it is scored (one bar over the layers), unless told not to.
    Shorter prefills stay silent."""
    from entropy_lens.kvpress import observed

    assert f"A prefill of {observed.PROGRESS_FROM:,} tokens or more" in GUIDE.read_text(encoding="utf-8")
    model = with_attention(tiny_model("llama"), "sdpa")
    layers = model.config.num_hidden_layers
    ids = torch.randint(3, 300, (1, 40), generator=torch.Generator().manual_seed(0))
    for threshold, shown in ((40, progress), (41, False)):
        monkeypatch.setattr(observed, "PROGRESS_FROM", threshold)
        press = ObservedAttentionPress(0.5, progress=progress)
        with torch.no_grad(), press(model):
            model.model(input_ids=ids, past_key_values=DynamicCache())
        err = capsys.readouterr().err
        assert ("lens press, 40 tokens" in err and f"{layers}/{layers}" in err) == shown, err


def load_smollm2():
    from entropy_lens.models import load_model

    return load_model("smollm2")


def guide_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.mark.slow
def test_the_guide_runs_as_written():
    """The guide's Python blocks in order in one namespace, its length cut to a test's (TOKENS: 512, each
    of its three prefills and its scan a few seconds; the blocks' code is the same at any length)."""
    namespace: dict = {}
    blocks = guide_blocks()
    assert sum("TOKENS = 2_048" in block for block in blocks) == 1  # the length the test cuts
    for block in blocks:
        block = block.replace("TOKENS = 2_048", "TOKENS = 512")
        exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
    assert namespace["answer"]["answer"].strip() and namespace["unpressed"]["answer"].strip()
    full, kept = namespace["full"].get_seq_length(), namespace["kept"].get_seq_length()
    assert full > 512 and kept == int(full * (1 - 0.75))  # the unpressed prefill's keys, a quarter kept


@pytest.mark.slow
def test_the_benchmark_runs_both_presses(benchmark_script, tmp_path, monkeypatch):
    """benchmarks/kvpress_cpu.py at a toy size (SmolLM2, 64 tokens): a row per press and the plain
    prefill's, both caches halved, the lens press keeping the same keys as kvpress's on eager, each press's
    time over the plain prefill's. Its three workers run in this process (tests/bench_children.py), one
    command per press; under make test-full each in a child process of its own."""
    from bench_children import children_in_process

    bench = benchmark_script("kvpress_cpu")
    commands = children_in_process(bench, monkeypatch)
    out = tmp_path / "kvpress_cpu.json"
    assert bench.main(["--lengths", "64", "--out", str(out)]) == 0
    if commands:
        assert [c[c.index("--worker") + 1] for c in commands] == ["plain", "kvpress", "lens"]
    record = json.loads(out.read_text(encoding="utf-8"))
    plain, kv, lens = record["rows"]
    assert [(r["press"], r["attention"]) for r in (plain, kv, lens)] == [
        ("plain", "sdpa"),
        ("kvpress", "eager"),
        ("lens", "sdpa"),
    ]
    assert kv["cache_len"] == lens["cache_len"] == 32 and kv["median_s"] > 0 < lens["median_s"]
    assert plain["cache_len"] == 64 and "time_over_plain" not in plain
    assert lens["time_over_plain"] == pytest.approx(lens["median_s"] / plain["median_s"])
    assert lens["kept_agree"] == 1.0 and lens["max_rel_score_diff"] < 1e-4
    assert [(x["len"], x["kept_agree"]) for x in record["summary"]] == [(64, 1.0)]


def test_duo_attention_press_reads_the_lens_pattern(tmp_path):
    """A pattern folder the lens exported (`HeadProfile.export`) drives kvpress's DuoAttentionPress: the KV
    heads with the least distant mass become its streaming heads, as kvpress ranks DuoAttention's scores,
    and the pipeline answers with them; nothing is fetched."""
    import numpy as np
    from tiny import TEXT, make_tokenizer

    from entropy_lens.analysis import HeadProfile
    from entropy_lens.kvpress import DuoAttentionPress

    model = with_attention(tiny_model("llama"), "sdpa")
    layers, kv = model.config.num_hidden_layers, model.config.num_key_value_heads
    distant = np.random.default_rng(0).permutation(layers * kv).reshape(layers, kv) / (layers * kv)
    zeros = np.zeros_like(distant)
    folder = HeadProfile(zeros, zeros, distant, 4, 16, (19, 64)).export(tmp_path / "pattern")
    press = DuoAttentionPress(head_compression_ratio=0.5, pattern=folder)
    pipe = KVPressTextGenerationPipeline(model=model, tokenizer=make_tokenizer(), device="cpu")
    with torch.no_grad():
        answer, _ = run_pipeline(pipe, TEXT[:600], press)
    streaming = np.zeros(distant.size, dtype=bool)
    streaming[np.argsort(distant, axis=None)[: round(distant.size * 0.5)]] = True
    assert press.streaming_mask.cpu().numpy().tolist() == streaming.reshape(layers, kv).tolist()
    assert (press.sink_size, press.recent_size) == (4, 16) and isinstance(answer, str)


def test_duo_attention_press_reads_a_retrieval_pattern(tmp_path):
    """A passkey record's retrieval heads (`analysis.retrieval_pattern(...).export`) drive DuoAttentionPress:
    the KV heads whose query heads retrieve least become its streaming heads."""
    import numpy as np

    from entropy_lens.analysis import retrieval_pattern
    from entropy_lens.kvpress import DuoAttentionPress

    model = tiny_model("llama")
    config = model.config
    layers, heads, kv = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    scores = np.random.default_rng(1).permutation(layers * heads).reshape(layers, heads) / (layers * heads)
    table = np.ones((layers, heads)).tolist()
    trial = {"correct": True, "entropy": table, "needle_mass": table, "retrieval_score": scores.tolist()}
    record = {"model": {"n_kv_heads": kv}, "results": [{"length": 64, "per_trial": [trial]}]}
    pattern = retrieval_pattern(record, 64, sink_size=4, recent_size=16)
    press = DuoAttentionPress(head_compression_ratio=0.5, pattern=pattern.export(tmp_path / "pattern"))
    press.post_init_from_model(model)
    best = scores.reshape(layers, kv, heads // kv).max(-1)  # each KV head's best query head
    streaming = np.zeros(best.size, dtype=bool)
    streaming[np.argsort(best, axis=None)[: round(best.size * 0.5)]] = True
    assert press.streaming_mask.cpu().numpy().tolist() == streaming.reshape(layers, kv).tolist()
    assert (press.sink_size, press.recent_size) == (4, 16)


def _pattern(tmp_path, config=None, heads="0.5\t0.25\n0.75\t1.0\n", name="p"):
    folder = tmp_path / name
    folder.mkdir()
    text = config if isinstance(config, str) else json.dumps(config or {"sink_size": 4, "recent_size": 16})
    (folder / "config.json").write_text(text, encoding="utf-8")
    (folder / "full_attention_heads.tsv").write_bytes(heads if isinstance(heads, bytes) else heads.encode())
    return folder


TAMPERED = {  # issue 65, items 6 and 7: each accepted (or a traceback) on main
    "recent 0": ({"sink_size": 4, "recent_size": 0}, None, r"recent_size must be at least 1"),
    "sink -3": ({"sink_size": -3, "recent_size": 16}, None, r"sink_size must be at least 0"),
    "sink 1e30": ({"sink_size": 1e30, "recent_size": 16}, None, r"sink_size must be a whole number"),
    "sink huge": (
        {"sink_size": 10**30, "recent_size": 16},
        None,
        r"sink_size must be at least 0 and at most",
    ),
    "sink 1.9": ({"sink_size": 1.9, "recent_size": 16}, None, r"sink_size must be a whole number"),
    "sink '4'": ({"sink_size": "4", "recent_size": 16}, None, r"sink_size must be a whole number"),
    "sink true": ({"sink_size": True, "recent_size": 16}, None, r"sink_size must be a whole number"),
    "no recent": ({"sink_size": 4}, None, r"needs sink_size and recent_size"),
    "bad json": ("{not json", None, r"config.json is not readable JSON"),
    "nan score": (None, "nan\t0.5\n0.5\t0.5\n", r"needs head scores in \[0, 1\] \(layer 0 holds nan\)"),
    "inf score": (None, "0.5\t0.5\ninf\t0.5\n", r"needs head scores in \[0, 1\] \(layer 1 holds inf\)"),
    "1e308 score": (None, "1e308\t0.5\n0.5\t0.5\n", r"needs head scores in \[0, 1\]"),
    "-5 score": (None, "0.5\t-5\n0.5\t0.5\n", r"needs head scores in \[0, 1\]"),
    "text score": (None, "0.5\tretrieval\n", r"is not a table of numbers"),
    "binary": (None, b"\xff\xfe\x00\x81\tx\n", r"is not a table of numbers"),
    "empty": (None, "", r"needs head scores in \[0, 1\] \(it is empty\)"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_pattern_is_refused_in_one_line_when_the_press_is_made(tmp_path, case):
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.kvpress import DuoAttentionPress

    config, heads, message = TAMPERED[case]
    folder = _pattern(tmp_path, config, heads if heads is not None else "0.5\t0.25\n0.75\t1.0\n")
    with pytest.raises(EntropyLensError, match=message) as err:
        DuoAttentionPress(head_compression_ratio=0.5, pattern=folder)
    assert "\n" not in str(err.value) and ("export" in str(err.value))


@pytest.mark.parametrize("ratio", [1.5, -0.2, float("nan"), "0.5", True])
def test_a_head_compression_ratio_outside_0_1_is_refused(tmp_path, ratio):
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.kvpress import DuoAttentionPress

    with pytest.raises(EntropyLensError, match=r"^head_compression_ratio must be") as err:
        DuoAttentionPress(head_compression_ratio=ratio, pattern=_pattern(tmp_path))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("pattern", [3, "", None])
def test_a_pattern_that_is_no_folder_is_refused_in_one_line(pattern):
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.kvpress import DuoAttentionPress

    with pytest.raises(EntropyLensError, match=r"pattern") as err:
        DuoAttentionPress(head_compression_ratio=0.5, pattern=pattern)
    assert "\n" not in str(err.value)


def test_a_sound_pattern_is_read_as_written(tmp_path):
    from entropy_lens.kvpress import DuoAttentionPress, load_pattern

    folder = _pattern(tmp_path)
    sink, recent, scores = load_pattern(folder)
    assert (sink, recent) == (4, 16) and scores.tolist() == [[0.5, 0.25], [0.75, 1.0]]
    assert DuoAttentionPress(head_compression_ratio=0.0, pattern=str(folder)).pattern == str(folder)
