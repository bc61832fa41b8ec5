"""Every causal-LM architecture of the installed transformers: exact entropy, or a clear refusal.

Each architecture is built from its config with random weights (initializer_range 0.5, so attention is
far from uniform), in float32 (transformers' eager attention gives NaN rows for left padding in
float64). The recorder's entropy must equal the float64 entropy of the model's own eager
`output_attentions` probabilities (a sink, where the model has one, counted as one more outcome: its
mass is what the eager probabilities leave of 1) within 1e-5 nats, and the logits under the capture
must equal eager's within 1e-4, with no padding, left padding and right padding. The same list goes
through `scan` (files). Architectures whose attention does not run through transformers' attention
interface are refused in one line, and nothing is written.

`python tests/test_architectures.py` prints the README's table of supported architectures from the
lists below; a test holds the README to it.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

COMMON = {
    "vocab_size": 300,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "initializer_range": 0.5,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
# transformers model_type -> (config overrides, what the case covers)
SUPPORTED = {
    "llama": ({}, "GQA, RoPE"),
    "mistral": ({"sliding_window": 4}, "sliding window"),
    "qwen2": (
        {
            "sliding_window": 4,
            "use_sliding_window": True,
            "layer_types": ["full_attention", "sliding_attention"],
        },
        "full and sliding-window layers",
    ),
    "qwen3": ({"head_dim": 8}, "q/k norm"),
    "gemma3": (
        {
            "text_config": {**COMMON, "head_dim": 8, "sliding_window": 4},
            "vision_config": {
                "hidden_size": 16,
                "intermediate_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "image_size": 28,
                "patch_size": 14,
            },
            "mm_tokens_per_image": 4,
        },
        "multimodal wrapper: its decoder gets the masks it built, not the 2-D mask",
    ),
    "gemma3_text": ({"head_dim": 8, "sliding_window": 4}, "sliding window, q/k norm"),
    "gemma": ({"head_dim": 8}, "scaled embeddings, GeGLU"),
    "gemma2": (
        {"head_dim": 8, "sliding_window": 4, "attn_logit_softcapping": 50.0, "query_pre_attn_scalar": 8},
        "logit softcapping (streamed output path), sliding window",
    ),
    "gpt_oss": (
        {"head_dim": 8, "num_local_experts": 2, "num_experts_per_tok": 1, "sliding_window": 4},
        "attention sinks (streamed output path, sink mass), MoE",
    ),
    "phi3": ({}, "fused qkv projection"),
    "phi": ({}, "partial rotary"),
    "gpt_neox": ({}, "parallel residual"),
    "gpt2": ({"n_embd": 32, "n_layer": 2, "n_head": 4}, "learned positions, Conv1D"),
    "olmo": ({}, "non-parametric norm"),
    "olmo2": ({}, "q/k norm"),
    "granite": ({}, "attention multiplier as scaling, logits_scaling in the loss"),
    "cohere": ({}, "parallel block, logit_scale in the loss"),
    "stablelm": ({}, "partial rotary"),
    "smollm3": ({"no_rope_layers": [1, 0]}, "a NoPE layer beside a RoPE layer"),
    "starcoder2": ({}, "biases, LayerNorm"),
    "opt": ({"ffn_dim": 48, "word_embed_proj_dim": 32}, "learned positions"),
}
# Eager-only architectures (transformers supports neither sdpa nor flex attention for them): refused.
EAGER_ONLY = {"deepseek_v4": {}}
# Architectures with attention classes of their own: refused (README says why and what to do).
REFUSED = {
    "falcon": {},
    "bloom": {"n_layer": 2, "n_head": 4},
    "mpt": {"d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 256},
}
PADDING = ("none", "left", "right")


def build(model_type: str, overrides: dict, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    nested = "text_config" in overrides  # a multimodal wrapper: COMMON describes its language model
    config = AutoConfig.for_model(model_type, **(overrides if nested else {**COMMON, **overrides}))
    return AutoModelForCausalLM.from_config(config).float().eval()


def ids_and_mask(padding: str, B: int = 2, T: int = 12, pad: int = 3):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, COMMON["vocab_size"], (B, T), generator=g)
    if padding == "none":
        return ids, None
    mask = torch.ones(B, T, dtype=torch.long)
    if padding == "left":
        mask[0, :pad] = 0
    else:
        mask[0, T - pad :] = 0
    return ids, mask


def eager(model, ids, mask, *, sink_mass: bool = False):
    """(logits, per-layer (B, H, T) float64 entropy with the sink's share counted [, sink mass])."""
    prev = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(ids, attention_mask=mask, output_attentions=True)
    finally:
        model.set_attn_implementation(prev)
    entropies, sinks = [], []
    for p in out.attentions:
        p = p.double()
        sink = (1.0 - p.sum(-1)).clamp_min(0.0)  # 0 up to rounding for models without a sink
        entropies.append(-torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(sink, sink))
        sinks.append(sink)
    return (out.logits, entropies, sinks) if sink_mass else (out.logits, entropies)


def mean_by_position(entropies, mask):
    """(layers, heads, n) mean over the real rows at their true positions (as the recorder places them)."""
    ent = torch.stack(entropies)  # (L, B, H, T)
    L, B, H, T = ent.shape
    keep = torch.ones(B, T, dtype=torch.bool) if mask is None else mask.bool()
    pos = keep.long().cumsum(1) - 1
    n = int(pos.max()) + 1
    total, count = torch.zeros(L, H, n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            if keep[b, t]:
                total[:, :, pos[b, t]] += ent[:, b, :, t]
                count[pos[b, t]] += 1
    return (total / count).numpy()


@pytest.mark.parametrize("fused", ["off", "on"])
@pytest.mark.parametrize("padding", PADDING)
@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_entropy_and_logits_equal_eager(model_type, padding, fused):
    """fused "on": the layer output comes from the streamed pass too (the CPU fused path)."""
    from entropy_lens.capture import EntropyRecorder

    model = build(model_type, SUPPORTED[model_type][0])
    ids, mask = ids_and_mask(padding)
    logits, entropies = eager(model, ids, mask)
    with EntropyRecorder(model, fused=fused) as rec, torch.no_grad():
        captured = model(ids, attention_mask=mask).logits
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    torch.testing.assert_close(captured[real], logits[real], atol=1e-4, rtol=0)
    expected = mean_by_position(entropies, mask)
    assert rec.entropy.shape == expected.shape
    np.testing.assert_allclose(rec.entropy, expected, atol=1e-5, rtol=0)
    assert expected.std() > 0.05, "attention near uniform: the case would not test much"


def test_sink_mass_is_what_eager_gives_the_sink():
    from entropy_lens.capture import EntropyRecorder

    model = build("gpt_oss", SUPPORTED["gpt_oss"][0])
    ids, mask = ids_and_mask("left")
    _, _, sinks = eager(model, ids, mask, sink_mass=True)
    with EntropyRecorder(model) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    expected = mean_by_position(sinks, mask)
    assert rec.has_sinks and expected.max() > 0.05  # the sinks take a visible share
    np.testing.assert_allclose(rec.sink_mass, expected, atol=1e-5, rtol=0)


def test_a_sink_applied_after_the_softmax_is_counted_like_gpt_oss(monkeypatch):
    """Granite-SWA scales its output by the share the sink leaves; its eager weights omit the sink.
    With gpt-oss's eager function (same sink, its share visible) the model computes the same logits,
    and the capture's entropy is that distribution's, sink included."""
    import transformers.models.gpt_oss.modeling_gpt_oss as gpt_oss
    import transformers.models.granite_swa.modeling_granite_swa as granite_swa

    from entropy_lens.capture import EntropyRecorder

    model = build("granite_swa", {})
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0, 2)
    ids, mask = ids_and_mask("left")
    own_logits, _ = eager(model, ids, mask)
    monkeypatch.setattr(granite_swa, "eager_attention_forward", gpt_oss.eager_attention_forward)
    logits, entropies, sinks = eager(model, ids, mask, sink_mass=True)
    real = mask.bool()
    torch.testing.assert_close(logits[real], own_logits[real], atol=1e-4, rtol=0)
    with EntropyRecorder(model) as rec, torch.no_grad():
        model(ids, attention_mask=mask)
    assert mean_by_position(sinks, mask).max() > 0.05
    np.testing.assert_allclose(rec.entropy, mean_by_position(entropies, mask), atol=1e-5, rtol=0)


def test_trainable_scales_on_softcapped_attention_get_gradients():
    """A trainable multiplier on a model with softcapping runs the model's own eager attention."""
    from entropy_lens.capture import ScaleSession

    model = build("gemma2", SUPPORTED["gemma2"][0])
    mult = torch.nn.Parameter(torch.full((2, 4), 1.2))
    with ScaleSession(model, scales=mult):
        loss = model(torch.randint(3, 300, (1, 8))).logits.float().logsumexp(-1).mean()
    loss.backward()
    assert mult.grad is not None and mult.grad.abs().sum() > 0


def _folder(tmp_path: Path, model_type: str, overrides: dict) -> Path:
    from tiny import make_tokenizer

    folder = tmp_path / model_type
    build(model_type, overrides).save_pretrained(folder)
    make_tokenizer(COMMON["vocab_size"]).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_scan_files_equal_eager(model_type, tmp_path):
    from entropy_lens.data import token_chunks
    from entropy_lens.models import load_model
    from entropy_lens.results import ScanResult
    from entropy_lens.runs.scan import ScanConfig, scan

    folder = _folder(tmp_path, model_type, SUPPORTED[model_type][0])
    config = ScanConfig(model=str(folder), length=16, samples=3, data="austen:persuasion", dtype="float32")
    scan(config, out=tmp_path / "x.npz", progress=False)
    result = ScanResult.load(tmp_path / "x.npz")
    lm = load_model(str(folder), dtype="float32")
    chunks = token_chunks(lm.tokenizer, config.data, length=16, samples=3)
    ids = torch.from_numpy(chunks.ids)
    logits, entropies, sinks = eager(lm.model, ids[:, :-1], None, sink_mass=True)
    np.testing.assert_allclose(result.entropy, mean_by_position(entropies, None), atol=2e-5, rtol=0)
    if model_type == "gpt_oss":  # the results file carries the sink mass, and only for models with sinks
        np.testing.assert_allclose(result.sink_mass, mean_by_position(sinks, None), atol=2e-5, rtol=0)
        assert result.meta["attention_path"] == "torch-streamed"
    else:
        assert result.sink_mass is None
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(0)
    np.testing.assert_allclose(result.loss, nll.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_models_with_their_own_attention_are_refused_in_one_line(model_type, tmp_path, capsys):
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.cli import main
    from entropy_lens.errors import EntropyLensError

    model = build(model_type, REFUSED[model_type])
    impl = model.config._attn_implementation
    refused = "own code, not through transformers' attention interface"
    with pytest.raises(EntropyLensError, match=refused), EntropyRecorder(model):
        pytest.fail("the recorder must refuse before any forward")
    assert model.config._attn_implementation == impl  # left as it was
    folder = _folder(tmp_path, model_type, REFUSED[model_type])
    capsys.readouterr()
    out = tmp_path / "x.npz"
    code = main(["scan", str(folder), "--len", "16", "--samples", "1", "--data", "austen", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "attention interface" in err[0], err
    assert not list(tmp_path.glob("x.npz*"))  # no file, no checkpoint


@pytest.mark.parametrize("model_type", sorted(EAGER_ONLY))
def test_eager_only_models_are_refused(model_type):
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    model = build(model_type, EAGER_ONLY[model_type])
    with (
        pytest.raises(EntropyLensError, match="runs only with transformers' eager attention"),
        EntropyRecorder(model),
    ):
        pytest.fail("the recorder must refuse before any forward")


def test_a_layer_outside_the_attention_interface_is_an_error_not_a_hole():
    """A forward in which a layer reports nothing (here: layer 1 bypasses the interface) raises."""
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    model = build("llama", {})
    attn = model.model.layers[1].self_attn
    original = attn.forward

    def own_attention(*args, **kwargs):  # as a model whose attention class computes it itself
        kwargs.pop("attention_mask", None)
        hidden = kwargs.pop("hidden_states", args[0] if args else None)
        return attn.o_proj(torch.zeros_like(hidden)), None

    attn.forward = own_attention
    try:
        missing = "layers 1 of 2 reported no attention entropy"
        with pytest.raises(EntropyLensError, match=missing), EntropyRecorder(model) as rec, torch.no_grad():
            model(torch.randint(3, 300, (1, 8)))
    finally:
        attn.forward = original
    assert rec.count.size == 0 or rec.count.all()


def test_an_attention_argument_the_capture_does_not_implement_is_refused():
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.capture.attention import entropy_lens_attention
    from entropy_lens.errors import EntropyLensError

    model = build("llama", {})
    q = torch.randn(1, 4, 5, 8, dtype=torch.float64)
    kv = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    module = model.model.layers[0].self_attn
    with EntropyRecorder(model):
        with pytest.raises(EntropyLensError, match="passes position_bias to its attention function"):
            entropy_lens_attention(module, q, kv, kv, None, position_bias=torch.zeros(1))
        out, _ = entropy_lens_attention(
            module, q, kv, kv, None, position_ids=torch.arange(5), use_cache=False
        )
    assert out.shape == (1, 5, 4, 8)


def readme_table() -> str:
    rows = ["| architecture (`model_type`) | what the test case covers | capture |", "|---|---|---|"]
    rows += [f"| `{name}` | {what} | exact |" for name, (_, what) in sorted(SUPPORTED.items())]
    rows += [
        f"| `{name}` | eager-only (neither sdpa nor flex in transformers) | refused |"
        for name in sorted(EAGER_ONLY)
    ]
    rows += [f"| `{name}` | own attention class | refused |" for name in sorted(REFUSED)]
    return "\n".join(rows)


def test_readme_lists_the_tested_architectures():
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert readme_table() in readme, "regenerate the table: python tests/test_architectures.py"


def test_the_survey_tool_writes_where_it_is_told(tmp_path):
    """tools/survey_architectures.py (the table's wider cousin) runs a type in a child process of its
    own and writes only under --out."""
    import json
    import subprocess

    tool = Path(__file__).parent.parent / "tools" / "survey_architectures.py"
    run = subprocess.run(
        [sys.executable, str(tool), "--out", str(tmp_path / "survey"), "llama"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    survey = json.loads((tmp_path / "survey" / "survey.json").read_text())
    assert survey["llama"]["cls"] == "EXACT", survey["llama"]
    paths = set(survey["llama"]["paddings"]["left"]["paths"])  # fused "auto" on CPU: either or both
    assert paths and paths <= {"sdpa-then-entropy", "torch-streamed"}  # this checkout's names
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["llama.json", "one", "survey", "survey.json"]


if __name__ == "__main__":
    sys.stdout.write(readme_table() + "\n")
