"""Per-position next-token loss without holding T × vocab logits.

NLL in nats of token t+1 given tokens <= t, from the final hidden states, `chunk` positions at a
time: at 16K tokens a 32K vocabulary is 2 GB of fp32 logits at once, a 1024-position chunk 128 MB.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def next_token_nll(model, hidden: torch.Tensor, targets: torch.Tensor, *, chunk: int = 1024) -> torch.Tensor:
    """hidden (B, T, hidden) final (normed) states, targets (B, T) ids of the NEXT token
    -> (B, T) float32 NLL in nats. Targets < 0 (ignored) give NaN."""
    head = model.get_output_embeddings()
    softcap = getattr(model.config, "final_logit_softcapping", None)
    B, T = targets.shape
    out = torch.empty(B, T, dtype=torch.float32, device=hidden.device)
    for t0 in range(0, T, chunk):
        logits = head(hidden[:, t0 : t0 + chunk]).float()  # (B, c, V)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        tgt = targets[:, t0 : t0 + chunk]
        lse = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(-1, tgt.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        out[:, t0 : t0 + chunk] = torch.where(tgt >= 0, lse - picked, torch.full_like(lse, float("nan")))
    return out


@torch.no_grad()
def forward_hidden(model, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
    """Final hidden states (B, T, hidden) from the model's decoder, without computing logits."""
    out = model.get_decoder()(input_ids=input_ids, use_cache=False, **kwargs)
    return out.last_hidden_state
