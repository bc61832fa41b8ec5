"""QK-clip (MuonClip, Kimi K2): after an optimizer step, shrink W_q and W_k of each head whose max
attention logit exceeded τ, so that head's logits shrink by γ_h = τ / max_logit_h.

    with AttentionMonitor(model, stats=("max_logit",)) as mon:
        for batch in batches:
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
            qk_clip(model, mon.latest()["max_logit"], tau=100.0)

The logit of head h is λ·(W_q x)_h·(W_k y)_g (RoPE rotates both, a scale commutes with it), g its key
head. Without GQA each side takes √γ_h, as MuonClip does. A key head shared by the G query heads of a
group (GQA/MQA) is scaled by √γ_min, the group's smallest γ, and each query head by γ_h/√γ_min: every
head's logits are multiplied by exactly its own γ_h (1 for the heads under τ, whose logits stay as they
were). Biases of q_proj and k_proj scale with their rows. Layers whose queries or keys are normalised
after the projection (q_norm, k_norm) are refused: a scale of W_q would be undone there.
"""

from __future__ import annotations

import numpy as np
import torch

from entropy_lens.errors import EntropyLensError


def qk_clip(model, max_logit, tau: float) -> np.ndarray:
    """Rescale q_proj and k_proj of every attention layer of `model` (see the module docstring) for the
    per-head `max_logit` (layers, heads) and threshold `tau` > 0; returns γ (layers, heads) float64, the
    factor each head's logits were multiplied by (1 where max_logit <= tau).

    Args:
        model: a transformers model whose attention layers have q_proj and k_proj (no q_norm, k_norm);
            their rows are rescaled in place.
        max_logit: (layers, heads) finite, each head's largest attention logit (AttentionMonitor's
            max_logit: `mon.latest()["max_logit"]`).
        tau: the threshold τ > 0, in the logits' unit.

    Returns:
        (layers, heads) float64 γ, in (0, 1].

    Raises:
        EntropyLensError: tau not a finite number above 0, max_logit not finite or not (layers, heads)
            for this model, or a layer that normalises its queries or keys.
    """
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not np.isfinite(tau) or tau <= 0:
        raise EntropyLensError(f"tau must be a finite number above 0 (got {tau!r}); pass e.g. tau=100.0")
    max_logit = np.asarray(max_logit, dtype=np.float64)
    layers = [m for m in model.modules() if hasattr(m, "q_proj") and hasattr(m, "k_proj")]
    cfg = model.config.get_text_config()
    heads, kv_heads = (
        cfg.num_attention_heads,
        getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
    )
    if max_logit.shape != (len(layers), heads) or not np.isfinite(max_logit).all():
        raise EntropyLensError(
            f"max_logit must be finite numbers of shape ({len(layers)}, {heads}) (layers, heads) for this "
            f"model (got {max_logit.shape}); pass mon.latest()['max_logit']"
        )
    gamma = np.where(max_logit > tau, tau / np.maximum(max_logit, tau), 1.0)  # (layers, heads) in (0, 1]
    group = heads // kv_heads
    with torch.no_grad():
        for layer, attn in zip(layers, gamma, strict=True):
            if getattr(layer, "q_norm", None) is not None or getattr(layer, "k_norm", None) is not None:
                raise EntropyLensError(
                    f"{type(layer).__name__} normalises its queries or keys after the projection, which would "
                    "undo a scale of W_q and W_k; qk_clip does not apply to it"
                )
            key = np.sqrt(attn.reshape(kv_heads, group).min(axis=1))  # (kv_heads,)
            query = attn / np.repeat(key, group)  # (heads,): γ_h / √γ_min of its group
            _scale_rows(layer.q_proj, query)
            _scale_rows(layer.k_proj, key)
    return gamma


def _scale_rows(proj: torch.nn.Linear, factors: np.ndarray) -> None:
    """Multiply the output rows of head h of `proj` (weight (heads · d, in), bias (heads · d,)) by
    factors[h]."""
    if np.all(factors == 1.0):
        return
    rows = proj.weight.shape[0] // len(factors)
    f = torch.as_tensor(factors, dtype=proj.weight.dtype, device=proj.weight.device).repeat_interleave(rows)
    proj.weight.mul_(f[:, None])
    if proj.bias is not None:
        proj.bias.mul_(f)
