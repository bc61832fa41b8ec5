"""Per-position next-token loss without holding T × vocab logits.

NLL in nats of token t+1 given tokens <= t, from the final hidden states, a chunk of positions at a
time: at 16K tokens a 32K vocabulary is 2 GB of fp32 logits at once. A chunk holds at most
LOGITS_BUDGET bytes of logits (`loss_chunk`: 524 positions of a 32K vocabulary, 341 of SmolLM2's 49K,
130 of Llama 3's 128K), one chunk at a time: the loss then adds that much to a scan's memory at any
length, instead of a constant that outweighed a sharded rank's activations (runs/memory_model.py).
The logits are the model's own: its output embedding, then the transforms causal LMs apply after it
(Cohere's `logit_scale`, Granite's `logits_scaling`, Gemma's `final_logit_softcapping`).
`check_logits` holds that to the model's forward on a short prefix, so a model with a transform not
listed here is refused instead of given a wrong loss.
"""

from __future__ import annotations

import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.contract import check_finite

LOGITS_BUDGET = 64 << 20  # bytes of float32 logits per chunk of the loss


def loss_chunk(batch: int, vocab: int) -> int:
    """Positions per chunk of `next_token_nll`'s logits: at most LOGITS_BUDGET bytes of (batch, chunk,
    vocab) float32, at least one position."""
    return max(1, LOGITS_BUDGET // (4 * max(1, batch) * max(1, vocab)))


def head_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """hidden (B, T, hidden) final states -> (B, T, V) float32 logits, as the model's forward makes them."""
    logits = model.get_output_embeddings()(hidden).float()
    config = model.config.get_text_config()
    scale = getattr(model, "logit_scale", None)  # Cohere: a float on the LM head's model
    if isinstance(scale, (int, float)) and scale != 1:
        logits = logits * scale
    divisor = getattr(config, "logits_scaling", None)  # Granite
    if divisor and divisor != 1:
        logits = logits / divisor
    softcap = getattr(config, "final_logit_softcapping", None)  # Gemma 2/3
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


@torch.no_grad()
def next_token_nll(
    model, hidden: torch.Tensor, targets: torch.Tensor, *, chunk: int | None = None
) -> torch.Tensor:
    """hidden (B, T, hidden) final (normed) states, targets (B, T) ids of the NEXT token
    -> (B, T) float32 NLL in nats. Targets < 0 (ignored) give NaN. `chunk`: positions of logits at a
    time (None: `loss_chunk`)."""
    B, T = targets.shape
    if chunk is None:
        head = model.get_output_embeddings()
        chunk = loss_chunk(
            B, getattr(head, "out_features", None) or model.config.get_text_config().vocab_size
        )
    out = torch.empty(B, T, dtype=torch.float32, device=hidden.device)
    for t0 in range(0, T, chunk):
        logits = head_logits(model, hidden[:, t0 : t0 + chunk])  # (B, c, V), a fresh tensor
        tgt = targets[:, t0 : t0 + chunk]
        picked = logits.gather(-1, tgt.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        # log Σ e^logits as torch.logsumexp computes it, in place: no (B, c, V) temporaries
        top = logits.amax(-1, keepdim=True)
        top.masked_fill_(top.isinf(), 0)  # as torch does: a row at ±inf keeps its inf, not NaN
        lse = logits.sub_(top).exp_().sum(-1).log_().add_(top.squeeze(-1))
        out[:, t0 : t0 + chunk] = torch.where(tgt >= 0, lse - picked, torch.full_like(lse, float("nan")))
        del logits  # before the next chunk's: else two chunks of logits are alive at once
    return out


@torch.no_grad()
def forward_hidden(model, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
    """Final hidden states (B, T, hidden) from the model's decoder, without computing logits."""
    out = model.get_decoder()(input_ids=input_ids, use_cache=False, **kwargs)
    return out.last_hidden_state


@torch.no_grad()
def check_logits(model, input_ids: torch.Tensor) -> None:
    """The chunked loss's logits equal the model's forward on `input_ids` (B, t), a short prefix;
    else EntropyLensError (the model transforms its logits in a way `head_logits` does not)."""
    theirs = model(input_ids=input_ids, use_cache=False).logits.float()
    if not bool(torch.isfinite(theirs).all()):
        raise EntropyLensError(non_finite_layer(model, input_ids))
    ours = head_logits(model, forward_hidden(model, input_ids))
    tol = 1e-3 * max(1.0, float(theirs.abs().max()))
    if not torch.allclose(ours, theirs, atol=tol, rtol=0):
        raise EntropyLensError(
            f"{type(model).__name__} turns its hidden states into logits in a way entropy_lens does not "
            f"reproduce (max difference {float((ours - theirs).abs().max()):.3g} on a short prefix), so the "
            "per-position loss would be wrong; please report the architecture (README: Supported "
            "architectures)"
        )


@torch.no_grad()
def non_finite_layer(model, input_ids: torch.Tensor) -> str:
    """The one-line reason a model's logits on `input_ids` are not finite: the first layer whose output
    holds NaN or inf (from its hidden states), where it is, and the fix."""
    hidden = model(input_ids=input_ids, use_cache=False, output_hidden_states=True).hidden_states or ()
    fix = (
        "the model produced NaN or inf: check its weights, and run in float32 (--dtype float32) if "
        "bfloat16/float16 overflowed"
    )
    for i, h in enumerate(hidden):
        try:
            check_finite(
                h, "the embeddings" if i == 0 else f"layer {i - 1}'s output", ("batch", "position"), fix=fix
            )
        except ValueError as err:
            return f"{type(model).__name__}: {err}"
    return (
        f"{type(model).__name__}'s logits are not finite on a short prefix (its layers' outputs are); {fix}"
    )
