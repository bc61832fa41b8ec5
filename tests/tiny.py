"""Tiny random Hugging Face causal LMs and tokenizers made on the fly (no downloads).

`make_tiny_dir(path, ...)` writes an ordinary Hugging Face folder (config.json,
model.safetensors, tokenizer files) that every loader in the package accepts.
"""

from __future__ import annotations

from pathlib import Path

import torch

TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. "
) * 4


def make_tokenizer(vocab_size: int = 300):
    """A byte-level BPE tokenizer trained on a paragraph, with <s> and </s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def tiny_config(*, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, vocab_size=300, **kw):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=n_heads * head_dim,
        intermediate_size=2 * n_heads * head_dim,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads,
        head_dim=head_dim,
        max_position_embeddings=4096,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        **kw,
    )


def make_tiny_model(seed: int = 0, **kw):
    """A random LlamaForCausalLM in float32, eval mode. Query/key weights are enlarged so
    attention is far from uniform (random init alone gives near-uniform attention)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return _sharpen(LlamaForCausalLM(tiny_config(**kw)).eval())


def make_tiny_sliding_window_model(window: int, seed: int = 0):
    """A random Qwen2ForCausalLM whose first layer attends in full and second through a sliding
    window of `window` keys (transformers builds one mask per kind of layer)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=window,
        max_window_layers=1,
    )
    assert config.layer_types == ["full_attention", "sliding_attention"]
    return _sharpen(Qwen2ForCausalLM(config).eval())


def _sharpen(model):
    """Enlarge query/key weights: random init alone gives near-uniform attention."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return model


def make_tiny_dir(path: Path, *, seed: int = 0, extra_tensors: dict | None = None, **kw) -> Path:
    """Save a tiny random model + tokenizer as a Hugging Face folder; `extra_tensors` are
    added to model.safetensors (e.g. `model.layers.0.self_attn.scale_param`)."""
    path = Path(path)
    model = make_tiny_model(seed, **kw)
    model.save_pretrained(path)
    make_tokenizer(model.config.vocab_size).save_pretrained(path)
    if extra_tensors:
        from safetensors.torch import load_file, save_file

        weights = load_file(path / "model.safetensors")
        weights.update(extra_tensors)
        save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path
