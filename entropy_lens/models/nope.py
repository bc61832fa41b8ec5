"""NoPE: remove rotary position embeddings from a loaded model, in place.

How: every rotary module in transformers turns positions into angles as
    angle(p, i) = p · inv_freq[i],   cos/sin = cos(angle)·a, sin(angle)·a   (a = attention_scaling)
so zeroing `inv_freq` (and `original_inv_freq`, the copy dynamic RoPE restores from) and setting
a = 1 gives cos = 1, sin = 0 at every position, and `q·cos + rotate_half(q)·sin = q`: the
rotation is the identity. The attention code, masks and the AttentionInterface stay untouched, so
the capture machinery sees the same model with positions removed.

Why not patch `apply_rotary_pos_emb`? It is a module-level function per model family; patching it
is global, leaks across models in one process and breaks when a family renames it. Buffers are
per-model state, which is what we want to change.

What was checked in transformers 5.23 (models/llama/modeling_llama.py, modeling_rope_utils.py):
- `LlamaRotaryEmbedding.forward` reads `self.inv_freq` on every call and caches nothing.
- `@dynamic_rope_update` recomputes `inv_freq` during forward only for rope types containing
  "dynamic" (on growth past the cached length, or resetting to `original_inv_freq`) and for
  "longrope" (copies `long_inv_freq` or `original_inv_freq` into `inv_freq`). Default, linear,
  llama3 and yarn compute it once at init. We therefore also set the module's `rope_type` to
  "default" (per layer type when it is a dict, as in Gemma 3), which turns the update off, and zero
  `long_inv_freq` too. `_init_weights` recomputes `inv_freq` only while loading, so call this
  after `from_pretrained`, never before.
- Multi-layer-type modules (Gemma 3) keep `{layer_type}_inv_freq` and
  `{layer_type}_attention_scaling`: every buffer/attribute whose name ends that way is handled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from entropy_lens.errors import EntropyLensError

if TYPE_CHECKING:
    from torch import nn

__all__ = ["apply_nope", "rotary_modules"]


def rotary_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) for every submodule that owns an `*inv_freq` buffer (a rotary embedding)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if any(buf.endswith("inv_freq") for buf, _ in module.named_buffers(recurse=False))
    ]


def _neutralise(module: nn.Module) -> None:
    import torch

    with torch.no_grad():
        for name, buf in module.named_buffers(recurse=False):
            if name.endswith("inv_freq"):
                buf.zero_()
            elif name.endswith("cos_cached"):  # older remote-code rotaries precompute cos/sin tables
                buf.fill_(1.0)
            elif name.endswith("sin_cached"):
                buf.zero_()
        # Plain attributes (not buffers): longrope's lazily built `long_inv_freq` and the post-scaling
        # factor a (yarn/longrope set a != 1, which would scale q and k even with zero angles).
        for attr, value in list(vars(module).items()):
            if attr.startswith("_"):
                continue
            if attr.endswith("inv_freq") and isinstance(value, torch.Tensor):
                setattr(module, attr, torch.zeros_like(value))
            elif attr.endswith("attention_scaling") and isinstance(value, (int, float)):
                setattr(module, attr, 1.0)
    # Rope types named "dynamic*"/"longrope" rewrite inv_freq inside forward; "default" never does.
    rope_type = getattr(module, "rope_type", None)
    if isinstance(rope_type, str):
        module.rope_type = "default"
    elif isinstance(rope_type, dict):
        module.rope_type = {key: "default" for key in rope_type}


def apply_nope(model: nn.Module) -> int:
    """Make every rotary embedding of `model` the identity, in place; returns how many were changed.

    After this, the model's outputs do not depend on position_ids (only on token order through the
    causal mask). Raises EntropyLensError when the model has no rotary embedding to remove.
    """
    modules = rotary_modules(model)
    if not modules:
        raise EntropyLensError(
            f"{type(model).__name__} has no rotary embedding (no submodule with an `inv_freq` buffer), "
            "so there is nothing to remove for NoPE; use a RoPE model or pass nope=False"
        )
    for _, module in modules:
        _neutralise(module)
    return len(modules)
