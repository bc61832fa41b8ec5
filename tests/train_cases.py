"""What the training-route tests share (test_train_route.py on CPU, test_train_route_cuda.py and
triton_train_interp_cases.py for the CUDA route): the families that keep their own attention, the float64
and sdpa references of the kernel-level tests, and a training step's gradients."""

import math

import torch

# the families whose scores flash's backward cannot take, and the route they keep
OWN_ATTENTION = {"gemma2": "eager-then-entropy", "gpt_oss": "eager-then-entropy"}
ALIBI = {name: "sdpa-alibi-mask-then-entropy" for name in ("mpt", "falcon (alibi=True)")}
ALIBI["bloom"] = "own-then-entropy"  # its layers hand over their own attention code's output
# where transformers' sdpa is not the model's own attention (it drops the softcap), the reference is eager
EAGER_REFERENCE = {"gemma2"}
FLOAT32_ONLY = {"gpt_oss"}  # its experts' grouped matmul takes no float64


def allowed_keys(T, S, causal, keep, window):
    """(B|1, 1, T, S) bool: bottom-right causal, the window, key padding."""
    rows, keys = torch.arange(T).view(-1, 1) + S - T, torch.arange(S).view(1, -1)
    allowed = torch.ones(T, S, dtype=torch.bool)
    if causal:
        allowed = allowed & (keys <= rows)
    if window is not None:
        allowed = allowed & (keys > rows - window)
    return allowed.view(1, 1, T, S) if keep is None else allowed & keep


def reference_attention(q, k, v, scale, allowed):
    """(B, T, Hq, Dv) attention materialised in q's dtype (the float64 truth)."""
    G = q.shape[1] // k.shape[1]
    s = (q * scale.view(1, -1, 1, 1)) @ k.repeat_interleave(G, 1).transpose(-1, -2)
    p = torch.softmax(s.masked_fill(~allowed, -math.inf), -1).nan_to_num(0.0)
    return (p @ v.repeat_interleave(G, 1)).transpose(1, 2)


def sdpa_attention(q, k, v, scale, allowed):
    """(B, T, Hq, Dv) from torch sdpa: what a plain step runs (its rows that see no key are 0 here)."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q * scale.view(1, -1, 1, 1).to(q.dtype), k, v, attn_mask=allowed, scale=1.0, enable_gqa=True
    )
    return out.transpose(1, 2).nan_to_num(0.0)


def step_grads(model, ids, mask, context=None, scales=None):
    """Every parameter's gradient (and the scales') of one step, zeros where none reached it."""
    model.zero_grad(set_to_none=True)
    labels = ids.masked_fill(mask == 0, -100)
    if context is None:
        model(ids, attention_mask=mask, labels=labels).loss.backward()
    else:
        with context:
            model(ids, attention_mask=mask, labels=labels).loss.backward()
    params = [p for p in model.parameters() if p.requires_grad] + ([] if scales is None else [scales])
    return [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]


def max_error(grads, truth) -> float:
    return max((a.double() - b).abs().max().item() for a, b in zip(grads, truth, strict=True))


def train_inputs(B, H, Hkv, T, S, D, *, per_head: bool, seed: int):
    """q (B, H, T, D), k, v (B, Hkv, S, D) float64 from `seed`, and the per-head scales (H,): a ramp
    0.2..0.6 where `per_head`, else 0.4 for every head; the generator, for what a test draws next."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(B, h, n, D, generator=g, dtype=torch.float64) for h, n in ((H, T), (Hkv, S), (Hkv, S))
    )
    scale = (
        torch.linspace(0.2, 0.6, H, dtype=torch.float64)
        if per_head
        else torch.full((H,), 0.4, dtype=torch.float64)
    )
    return q, k, v, scale, g
