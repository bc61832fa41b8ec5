"""A freshly initialised tiny model for a recipe (`build_model`): a LlamaForCausalLM (NoPE or RoPE) or,
for the alibi kind, a BloomForCausalLM of the same width, depth and heads; its weights are drawn after
`torch.manual_seed(seed)`.

Saved, it is an ordinary Hugging Face folder (config.json, model.safetensors, tokenizer) with
three extra config keys: `train_len` (L), `nope` (bool) and `entropy_lens_recipe` (the
recipe). A NoPE model also carries `rope_parameters = {"rope_type": "linear", "factor": 1e30}`,
which makes every rotary angle 0 in float32, so even a stock `AutoModelForCausalLM` load
computes NoPE; `entropy_lens.load_model` zeroes the rotary frequencies outright.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from entropy_lens.training.recipe import TinyRecipe

__all__ = ["build_model"]

_NOPE_ROPE = {"rope_type": "linear", "factor": 1e30}  # angle = position * inv_freq / 1e30 -> 0


def build_model(recipe: TinyRecipe, vocab_size: int, separator: int) -> Any:
    """A freshly initialised LlamaForCausalLM for `recipe` (seeded), NoPE already applied; for the alibi
    kind a BloomForCausalLM of the same width, depth and heads."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from entropy_lens.models import apply_nope

    if recipe.kind == "alibi":
        return _build_bloom(recipe, vocab_size, separator)

    rope = {"rope_type": "default"} if recipe.kind == "rope" else dict(_NOPE_ROPE)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads,
        max_position_embeddings=recipe.train_len,  # the trained length (dynamic NTK scales beyond it)
        rope_parameters={**rope, "rope_theta": recipe.rope_theta},
        tie_word_embeddings=False,
        bos_token_id=separator,
        eos_token_id=separator,
        attn_implementation="sdpa",
    )
    config.train_len = recipe.train_len
    config.nope = recipe.kind == "nope"
    config.entropy_lens_recipe = dataclasses.asdict(recipe)
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(config)
    if config.nope:
        apply_nope(model)
    return model


def _build_bloom(recipe: TinyRecipe, vocab_size: int, separator: int) -> Any:
    import torch
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden,
        n_layer=recipe.layers,
        n_head=recipe.heads,
        tie_word_embeddings=False,
        bos_token_id=separator,
        eos_token_id=separator,
    )
    config.train_len = recipe.train_len
    config.entropy_lens_recipe = dataclasses.asdict(recipe)
    torch.manual_seed(recipe.seed)
    return BloomForCausalLM(config)
