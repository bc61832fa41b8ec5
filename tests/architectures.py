"""The architectures the tests build, and the references they are held to (shared by
test_architectures, test_passkey, test_schedule, test_figures, test_train_route and test_context_threads;
pytest puts tests/ on sys.path, so they import it as `architectures`).

Each architecture is built from its config with random weights (initializer_range 0.5, so attention is far
from uniform), in float32. `eager_probabilities` is the model's own eager `output_attentions` (the
reference the capture is held to), `eager` the float64 entropy from it (a sink, where the model has one,
counted as one more outcome) and `mean_by_position` that entropy placed as the recorder places it;
`ids_and_mask` gives the token ids and the padding (none, left, right) they run with.
`python tests/capture/test_architectures.py` prints the table of supported architectures (docs/guides/architectures.md) from the lists
below.
"""

import math
from pathlib import Path

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
    # attention classes of their own, routed through the capture (capture/own_attention.py)
    "bloom": (
        {"num_attention_heads": 6, "hidden_size": 48},
        "own attention class: ALiBi (6 heads: the slopes of a head count not a power of 2), fused qkv",
    ),
    "mpt": (
        {"num_attention_heads": 6, "hidden_size": 48, "max_seq_len": 256},
        "own attention class: ALiBi (MPT's slopes and key-index form), bool mask",
    ),
    "falcon": (
        {"alibi": False, "multi_query": True, "parallel_attn": True, "new_decoder_architecture": False},
        "own attention class: rotary, multi-query, parallel attention (Falcon-7B's layout)",
    ),
    "falcon (alibi=True)": (
        {"alibi": True, "multi_query": False, "num_attention_heads": 32, "hidden_size": 128},
        (
            "own attention class: ALiBi as its builder rounds it to bfloat16, a bias per key (32 heads, "
            "as Falcon-RW-1B); reference: its sdpa scores (its eager ALiBi adds the bias twice)"
        ),
    ),
}
# Eager-only architectures (transformers supports neither sdpa nor flex attention for them): refused.
EAGER_ONLY = {"deepseek_v4": {}}


def build(model_type: str, overrides: dict, seed: int = 0):
    """`model_type` as SUPPORTED names it ("falcon (alibi=True)": the model type, then the variant)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type = model_type.split(" ")[0]
    torch.manual_seed(seed)
    nested = "text_config" in overrides  # a multimodal wrapper: COMMON describes its language model
    config = AutoConfig.for_model(model_type, **(overrides if nested else {**COMMON, **overrides}))
    return AutoModelForCausalLM.from_config(config).float().eval()


def ids_and_mask(padding: str, B: int = 2, T: int = 12, pad: int = 3):
    """(B, T) token ids from seed 1 and their attention mask: None for "none", else row 0 with `pad`
    padded tokens on the "left" or the "right" (row 1 unpadded)."""
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


def falcon_alibi_reference(model, ids, mask):
    """(logits, per-layer (B, H, T, S) float64 probabilities) of a Falcon with alibi=True as its sdpa
    forward computes it: softmax(q·k/√d + the mask it builds, which carries its ALiBi bias (slope·position
    rounded to bfloat16, /√d) where a key is seen), materialised in float64 from each layer's own q, k
    and mask. Its eager `output_attentions` add the bias a second time, so they are no reference."""
    seen = []
    layers = [block.self_attention for block in model.transformer.h]
    hooks = [
        a.register_forward_pre_hook(lambda m, a, kw: seen.append((a[0], kw)), with_kwargs=True)
        for a in layers
    ]
    try:
        with torch.no_grad():
            logits = model(ids, attention_mask=mask).logits
    finally:
        for hook in hooks:
            hook.remove()
    probs = []
    for attn, (hidden, kw) in zip(layers, seen, strict=True):
        q, k, _ = attn._split_heads(attn.query_key_value(hidden).detach())
        q, k = q.transpose(1, 2).double(), k.transpose(1, 2).double()  # (B, H|1, T, D)
        scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim) + kw["attention_mask"].double()
        probs.append(torch.softmax(scores, dim=-1))
    return logits, probs


def eager_probabilities(model, ids, mask):
    """(logits, per-layer (B, H, T, S) float64 probabilities): the model's own eager `output_attentions`.
    A model that cannot switch its implementation (Falcon: its sdpa layers take a bool mask that their
    eager `output_attentions` branch would add) runs as an eager twin with the same weights; Falcon with
    ALiBi as `falcon_alibi_reference`."""
    from transformers import AutoModelForCausalLM

    if model.config.model_type == "falcon" and model.config.alibi:
        return falcon_alibi_reference(model, ids, mask)
    prev = model.config._attn_implementation
    if prev != "eager" and not model._can_set_attn_implementation():
        twin = AutoModelForCausalLM.from_config(model.config, attn_implementation="eager")
        twin.load_state_dict(model.state_dict())
        return eager_probabilities(twin.to(next(model.parameters()).dtype).eval(), ids, mask)
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(ids, attention_mask=mask, output_attentions=True)
    finally:
        model.set_attn_implementation(prev)
    return out.logits, [p.double() for p in out.attentions]


def eager(model, ids, mask, *, sink_mass: bool = False):
    """(logits, per-layer (B, H, T) float64 entropy with the sink's share counted [, sink mass]) from
    `eager_probabilities` (a sink's share is what the probabilities leave of 1)."""
    logits, probs = eager_probabilities(model, ids, mask)
    entropies, sinks = [], []
    for p in probs:
        sink = (1.0 - p.sum(-1)).clamp_min(0.0)  # 0 up to rounding for models without a sink
        entropies.append(-torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(sink, sink))
        sinks.append(sink)
    return (logits, entropies, sinks) if sink_mass else (logits, entropies)


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


def save_folder(tmp_path: Path, model_type: str, overrides: dict) -> Path:
    """A saved folder (model and tokenizer) of `build(model_type, overrides)`, named by its model type."""
    from tiny import make_tokenizer

    folder = tmp_path / model_type.split(" ")[0]
    build(model_type, overrides).save_pretrained(folder)
    make_tokenizer(COMMON["vocab_size"]).save_pretrained(folder)
    return folder
