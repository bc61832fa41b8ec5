"""Which models a sequence can be sharded over (--context-parallel, capture/context_parallel.py): refused
before any forward where the sharded forward would differ from the one-process forward."""

from __future__ import annotations

import inspect

from entropy_lens.capture.context_parallel import refusal
from entropy_lens.capture.own_attention import own_attention_layers
from entropy_lens.errors import EntropyLensError

# families routed by capture/own_attention.py whose ALiBi the kernels rebuild from true key indices:
# they take no position ids and need none
ALIBI_FAMILIES = ("BloomAttention", "MptAttention")


def check_shardable(model) -> None:
    """EntropyLensError, before any forward, for a model whose sharded forward would differ from its
    one-process forward: Falcon's ALiBi (a bias per key), chunked attention (Llama 4's
    `attention_chunk_size`), bidirectional attention, or a decoder that takes no position ids (other
    than the ALiBi families the kernels handle by true key indices)."""
    config = model.config.get_text_config()
    name = type(model).__name__
    if getattr(config, "model_type", None) == "falcon" and getattr(config, "alibi", False):
        raise EntropyLensError(
            refusal(
                f"{name} (Falcon with alibi=True)",
                "its ALiBi comes as a bias per key, built for the local keys only",
            )
        )
    if getattr(config, "attention_chunk_size", None):
        raise EntropyLensError(refusal(name, "its chunked attention lives in its mask alone"))
    if getattr(config, "is_causal", True) is False:
        raise EntropyLensError(refusal(name, "its attention is not causal"))
    if takes_positions(model):
        return
    if not any(type(layer).__name__ in ALIBI_FAMILIES for layer in own_attention_layers(model)):
        raise EntropyLensError(
            refusal(name, "its decoder takes no position ids, so a shard cannot say where its tokens are")
        )


def takes_positions(model) -> bool:
    """Whether the model's decoder takes `position_ids` (BLOOM and MPT do not: ALiBi only)."""
    return "position_ids" in inspect.signature(model.get_decoder().forward).parameters
