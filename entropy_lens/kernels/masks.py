"""Mask forms the kernels share (torch only)."""

from __future__ import annotations

import torch


def key_padding(mask, B: int, T: int, S: int, causal: bool):
    """The (B, S) keep-mask of a validated bool 4-D mask when it is key padding only, else None.

    Besides (B|1, 1, 1, S) this recognises a (B|1, 1, T, S) mask that is exactly causal AND key
    padding, the mask transformers builds for a padded batch: its last row (which sees every key
    under bottom-right causality) is the keep-mask. The check costs one pass over the T x S mask."""
    if mask is None or mask.shape[1] != 1 or mask.shape[2] not in (1, T):
        return None
    if mask.shape[2] == 1:
        return mask[:, 0, 0, :].expand(B, S)
    keep = mask[:, 0, -1 if causal else 0, :]
    expected = keep[:, None, :].expand(-1, T, S)
    if causal:
        rows = torch.arange(T, device=mask.device)[:, None] + (S - T)
        expected = expected & (torch.arange(S, device=mask.device)[None, :] <= rows)
    return keep.expand(B, S) if torch.equal(mask[:, 0], expected) else None
