"""Layers that compute attention in their own code instead of transformers' attention interface:
BLOOM, MPT and Falcon (ALiBi and rotary), routed through the `entropy_lens` attention function so that
they are captured and scaled like every other model.

    with routed_attention(model):        # entered by ScaleSession / EntropyRecorder
        model(ids)                       # each layer's q, k, v, mask and ALiBi go through
                                         # capture/attention.py's entropy_lens_attention

For each family a forward does what the layer's own forward does before the attention (the fused qkv
projection and head split, Falcon's rotary embedding, the cache update) and after it (the output
projection, BLOOM's tensor-parallel slices and residual), with the attention itself handed to
`entropy_lens_attention`: q, k, v, the mask as a bool (True = attend) and the ALiBi bias.
- BLOOM and MPT: `alibi_slopes`, the per-head slopes of the model's own ALiBi builder. The kernels add
  −slope_h·(i − j), equal per query row up to a constant to the models' slope·(position of j) forms
  (BLOOM counts the positions of real tokens, MPT key indices): the same softmax with no, left or
  right padding, and the Triton kernel takes it.
- Falcon: `key_bias`, the bias per key its builder made (slope·position rounded to bfloat16, so not
  linear in the distance) times 1/√d, as Falcon's sdpa path adds it; the torch paths take it. Falcon
  loaded with eager attention and alibi=True is refused (transformers adds its bias twice there).
The session's scales multiply q·k, never the bias.
BLOOM's layers also hand over their own attention code's output (`own_output`, `_bloom_context`: the
model's ALiBi tensor by baddbmm, its additive mask, a float32 softmax, its dropout), which a training
step at the model's own scale keeps (capture/paths.py's "own-then-entropy"): a monitored step's weights
are then the unwatched step's bit for bit, where sdpa's float mask would round differently.

`routed_attention` sets the replacement forward on each layer instance (never the class, never a
transformers global) and deletes it on exit, errors included: the model is as it was.

Anything else computing attention in its own code stays refused (capture/recorder.py).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from entropy_lens.capture.attention import entropy_lens_attention
from entropy_lens.errors import EntropyLensError


def _module_function(layer, name: str):
    """A function of the layer's own modeling file (its ALiBi builder, rotary, dropout_add)."""
    return getattr(sys.modules[type(layer).__module__], name)


def _attend(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The model's 4-D mask as a bool, True = attend: an additive float mask (eager's; Falcon's ALiBi
    mask, which carries the bias where a key is seen) is True where above the dtype's lowest half."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


def _attention(layer, q, k, v, mask, *, scaling: float, dropout: float, **extras) -> torch.Tensor:
    """(B, T, Hq·D): the attention of q (B, Hq, T, D) over k, v (B, Hkv, S, D) through
    entropy_lens_attention, heads merged; `extras`: alibi_slopes, key_bias, position_ids."""
    dropout = dropout if layer.training else 0.0
    out, _ = entropy_lens_attention(layer, q, k, v, _attend(mask), scaling=scaling, dropout=dropout, **extras)
    return out.reshape(*out.shape[:2], -1)


# ---- BLOOM ------------------------------------------------------------------------------------------


def _bloom_slopes(layer, device) -> torch.Tensor:
    ones = torch.ones(1, 2, dtype=torch.long, device=device)
    alibi = _module_function(layer, "build_alibi_tensor")(ones, layer.num_heads, torch.float32)
    return alibi[:, 0, 1]  # slope · position 1


def _bloom_context(layer, q, k, v, alibi, mask) -> tuple[torch.Tensor, None]:
    """(out (B, T, Hq, D), None): BloomAttention.forward's own attention, op for op, for q, k, v
    (B, Hq, T|S, D) and the model's alibi (B·Hq, 1, S) and mask (additive, or None)."""
    B, H, T, D = q.shape
    scores = alibi.baddbmm(
        batch1=q.reshape(B * H, -1, D),
        batch2=k.reshape(B * H, -1, D).transpose(-1, -2),
        beta=layer.beta,
        alpha=layer.inv_norm_factor,
    )
    weights = scores.view(B, H, T, -1)
    if mask is not None:
        weights = weights + mask
    probs = layer.attention_dropout(F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype))
    context = torch.bmm(probs.view(B * H, T, -1), v.reshape(B * H, -1, D))
    return context.view(B, H, T, D).transpose(1, 2), None


def _bloom_forward(
    self,
    hidden_states,
    residual,
    alibi,
    attention_mask,
    layer_past=None,
    use_cache=False,
    output_attentions=False,
    **kwargs,
):
    q, k, v = self._reshape(self.query_key_value(hidden_states))
    if layer_past is not None:
        k, v = layer_past.update(k, v, self.layer_idx)
    slopes = _bloom_slopes(self, hidden_states.device)
    context = _attention(
        self,
        q,
        k,
        v,
        attention_mask,
        scaling=self.inv_norm_factor,
        dropout=self.attention_dropout.p,
        alibi_slopes=slopes,
        own_output=lambda: _bloom_context(self, q, k, v, alibi, attention_mask),
    )
    if self.pretraining_tp > 1 and self.slow_but_exact:
        slices = self.hidden_size / self.pretraining_tp
        output = torch.zeros_like(context)
        for i in range(self.pretraining_tp):
            a, b = int(i * slices), int((i + 1) * slices)
            output = output + F.linear(context[:, :, a:b], self.dense.weight[:, a:b])
    else:
        output = self.dense(context)
    dropout_add = _module_function(self, "dropout_add")
    return dropout_add(output, residual, self.hidden_dropout, self.training), None


# ---- MPT --------------------------------------------------------------------------------------------


def _mpt_forward(self, hidden_states, position_bias, past_key_values=None, attention_mask=None, **kwargs):
    B, T = hidden_states.shape[:2]
    mixed = self.Wqkv(hidden_states)
    if self.clip_qkv:
        mixed = mixed.clamp(min=-self.clip_qkv, max=self.clip_qkv)
    q, k, v = (x.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2) for x in mixed.chunk(3, dim=2))
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, self.layer_idx)
    # MPT's position_bias is slope_h · (j − (max_seq_len − 1)): the last key's minus the one before it
    slopes = None if position_bias is None else (position_bias[:, 0, -1] - position_bias[:, 0, -2]).float()
    mask = None if attention_mask is None else ~attention_mask  # MPT's mask is True where masked
    context = _attention(
        self, q, k, v, mask, scaling=self.softmax_scale, dropout=self.attn_dropout_p, alibi_slopes=slopes
    )
    return self.out_proj(context), None


# ---- Falcon -----------------------------------------------------------------------------------------


def _falcon_forward(
    self,
    hidden_states,
    alibi,
    attention_mask,
    position_ids=None,
    layer_past=None,
    use_cache=False,
    output_attentions=False,
    position_embeddings=None,
    **kwargs,
):
    """Falcon: rotary, or ALiBi as its builder made it, a bias per key (rounded to bfloat16), times 1/√d."""
    q, k, v = self._split_heads(self.query_key_value(hidden_states))
    B, T = q.shape[:2]
    n_kv = self.num_heads if self.new_decoder_architecture else self.num_kv_heads
    q = q.transpose(1, 2).reshape(B, self.num_heads, T, self.head_dim)
    k = k.transpose(1, 2).reshape(B, n_kv, T, self.head_dim)
    v = v.transpose(1, 2).reshape(B, n_kv, T, self.head_dim)
    if alibi is None:
        cos, sin = position_embeddings
        q, k = _module_function(self, "apply_rotary_pos_emb")(q, k, cos, sin)
    if layer_past is not None:
        k, v = layer_past.update(k, v, self.layer_idx)
    key_bias = None if alibi is None else alibi.view(B, self.num_heads, -1).float() * self.inv_norm_factor
    context = _attention(
        self,
        q,
        k,
        v,
        attention_mask,
        scaling=self.inv_norm_factor,
        dropout=self.attention_dropout.p if alibi is not None else 0.0,  # as Falcon: none without ALiBi
        key_bias=key_bias,
        position_ids=position_ids,  # a --scale-schedule's positions
    )
    return self.dense(context), None


# The layer classes routed, by module and name (exactly these classes: a subclass, such as Falcon's
# flash-attention-2 layer, keeps its own forward and is refused).
FORWARDS = {
    ("transformers.models.bloom.modeling_bloom", "BloomAttention"): _bloom_forward,
    ("transformers.models.mpt.modeling_mpt", "MptAttention"): _mpt_forward,
    ("transformers.models.falcon.modeling_falcon", "FalconAttention"): _falcon_forward,
}


def own_attention_layers(model) -> list:
    """The model's layers of a routed family (empty for models using the attention interface)."""
    return [m for m in model.modules() if (type(m).__module__, type(m).__name__) in FORWARDS]


def routes(model) -> bool:
    """Whether `model` computes attention in layers this module routes (BLOOM, MPT, Falcon)."""
    return bool(own_attention_layers(model))


def check_routable(model) -> None:
    """EntropyLensError, before anything runs, for a routed model the capture cannot reproduce exactly."""
    implementation = model.config._attn_implementation
    if (
        getattr(model.config, "model_type", None) == "falcon"
        and model.config.alibi
        and implementation == "eager"
    ):
        raise EntropyLensError(
            f"{type(model).__name__} (Falcon with alibi=True) was loaded with eager attention, which in "
            "transformers adds the ALiBi bias twice (in its mask and in its scores), so its output differs "
            "from its sdpa output; load it with attn_implementation='sdpa' (the default), which entropy_lens "
            "reproduces. See README, ALiBi models"
        )
    implementation = model.config._attn_implementation
    if implementation not in ("eager", "sdpa"):
        raise EntropyLensError(
            f"{type(model).__name__} runs with attn_implementation={implementation!r}, whose masks entropy_lens does not "
            "read for this family; load it with attn_implementation='sdpa' (or 'eager')"
        )


@contextlib.contextmanager
def routed_attention(model) -> Iterator[None]:
    """Inside the block each routed layer of `model` runs its forward through entropy_lens_attention;
    on exit (errors included) the instances lose the replacement and run their class's forward."""
    check_routable(model)
    layers = own_attention_layers(model)
    try:
        for layer in layers:
            forward = FORWARDS[(type(layer).__module__, type(layer).__name__)]
            layer.forward = types.MethodType(forward, layer)
        yield
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)


def check_supported(model) -> None:
    """EntropyLensError, before anything runs, for a model whose attention cannot be switched to
    entropy_lens's (asked first: else transformers logs a warning and leaves the model unchanged)."""
    if routes(model):
        check_routable(model)
        return
    can_switch = getattr(model, "_can_set_attn_implementation", lambda: True)
    if not can_switch():
        refuse_switch(model)
    if (
        getattr(model, "_supports_sdpa", True) is False
        and getattr(model, "_supports_flex_attn", True) is False
    ):
        # eager-only (DeepSeek-V4, say): its layers may build on eager's tensor masks (extending them
        # with biases of their own), which the sdpa-style masks this implementation gets do not carry
        raise EntropyLensError(
            f"{type(model).__name__} runs only with transformers' eager attention (it supports neither "
            "sdpa nor flex attention), whose masks entropy_lens does not reproduce, so its entropy and "
            "output could silently differ; refused. See README, Supported architectures"
        )


def refuse_switch(model) -> None:
    """Models with attention classes of their own, other than those capture/own_attention.py routes,
    cannot switch to the entropy_lens attention: transformers only logs that, and they would run
    unmeasured."""
    raise EntropyLensError(
        f"{type(model).__name__} computes attention in its own code, not through transformers' "
        f"attention interface (its implementation stays {model.config._attn_implementation!r}), so "
        "entropy_lens can neither scale nor measure it; see README, Supported architectures"
    )
