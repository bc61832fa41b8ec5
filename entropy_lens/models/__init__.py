"""Loading checkpoints for analysis: HF folders, GGUF files and bundled names; NoPE; head scales.

    from entropy_lens.models import load_model
    lm = load_model("smollm2", dtype="float32", device="cpu", nope=True)
    lm.model, lm.tokenizer, lm.n_layers, lm.head_scales

Importing this package is cheap (numpy only): torch and transformers load when a function runs.
"""

from entropy_lens.models.bundled import BUNDLED_MODELS, DEFAULT_MODEL, BundledModel
from entropy_lens.models.devices import resolve_device, resolve_dtype
from entropy_lens.models.loading import (
    LoadedModel,
    checkpoint_tokenizer,
    declared_train_len,
    load_model,
    resolve_ckpt,
)
from entropy_lens.models.nope import apply_nope
from entropy_lens.models.scales import (
    load_head_scales_file,
    read_checkpoint_head_scales,
    validate_head_scales,
)

__all__ = [
    "BUNDLED_MODELS",
    "DEFAULT_MODEL",
    "BundledModel",
    "LoadedModel",
    "apply_nope",
    "checkpoint_tokenizer",
    "declared_train_len",
    "load_head_scales_file",
    "load_model",
    "read_checkpoint_head_scales",
    "resolve_ckpt",
    "resolve_device",
    "resolve_dtype",
    "validate_head_scales",
]
