"""Mask forms the kernels share (torch only).

`decompose` reads a bool 4-D mask as causal & sliding window & key padding where it is one;
`as_key_padding` is that form as the Triton kernel takes it (key padding (B, 1, 1, S) and a window).
The plan (`kernels.plan.statistics_kernel`) runs the Triton kernel only where `as_key_padding` finds the
form, the capture reduces transformers' masks to it once per forward, and the Triton launcher
refuses any other mask.
"""

from __future__ import annotations

import torch

ROWS_PER_CHECK = 1024  # rows of a (T, S) mask compared at a time: never a second T x S tensor


def decompose(mask, B: int, T: int, S: int, causal: bool):
    """(keep, window) with `mask` == [causal] & [sliding window] & key padding, or None when the
    validated bool 4-D mask is not of that form (it differs per head or per query otherwise).

    keep:   (B, S) bool, True = attend, or None when every key is kept.
    window: the sliding window W (query i sees keys j with i + S − T − W < j <= i + S − T), or None.
    A (B|1, 1, 1, S) mask is key padding. A (B|1, 1, T, S) mask is what transformers builds for a
    padded batch (causal and key padding) or for a sliding-window layer (causal, window, padding):
    W is read from the farthest key any row sees behind itself, each key's keep from the row that
    sees it on its diagonal (or the first row, for keys of a cache prefix; True for keys no row
    sees), and the mask is then
    checked equal to the decomposition, ROWS_PER_CHECK rows at a time, so any result is exact."""
    if mask is None or mask.shape[1] != 1 or mask.shape[2] not in (1, T):
        return None
    rows_of = mask[:, 0]  # (B|1, T|1, S)
    if mask.shape[2] == 1 or not causal:
        keep = rows_of[:, 0]
        window = None
    else:
        offset = S - T
        keys = torch.arange(S, device=mask.device)
        window = _farthest_seen(rows_of, offset) if S else None
        window = None if window is None or window >= S else window
        keep = rows_of[:, (keys - offset).clamp(0, T - 1), keys]  # key j on row j − offset's diagonal
        if window is not None:
            keep = keep | (keys <= offset - window)  # keys no row sees: kept, to keep the form simple
    if mask.shape[2] == T:
        keys = torch.arange(S, device=mask.device, dtype=torch.int32)
        for r0 in range(0, T, ROWS_PER_CHECK):
            r1 = min(r0 + ROWS_PER_CHECK, T)
            expected = keep[:, None, :].expand(-1, r1 - r0, S)
            if causal:  # row i sees keys (i + S − T − window, i + S − T]
                last = torch.arange(r0, r1, device=mask.device, dtype=torch.int32)[:, None] + (S - T)
                expected = expected & (keys <= last)
                if window is not None:
                    expected = expected & (keys > last - window)
            if not torch.equal(rows_of[:, r0:r1], expected):
                return None
    return (None if bool(keep.all()) else keep.expand(B, S)), window


def as_key_padding(mask, B: int, T: int, S: int, causal: bool, window: int | None = None):
    """(keep, window) with keep (B, 1, 1, S) bool key padding or None (every key kept) and the
    sliding window, the narrower of `window` and the mask's own; or None when the validated bool
    4-D `mask` is not causal & window & key padding (see `decompose`). mask None: (None, window)."""
    if mask is None:
        return None, window
    parts = decompose(mask, B, T, S, causal)
    if parts is None:
        return None
    keep, mask_window = parts
    window = mask_window if window is None else min(window, mask_window or window)
    return (None if keep is None else keep[:, None, None, :]), window


def _farthest_seen(rows_of, offset: int) -> int | None:
    """1 + the largest distance i + offset − j of a key j that row i sees, over all rows that see a
    key (None when none does): the window a causal sliding-window mask was built with."""
    T = rows_of.shape[1]
    far = None
    for r0 in range(0, T, ROWS_PER_CHECK):
        block = rows_of[:, r0 : r0 + ROWS_PER_CHECK]
        first = block.to(torch.uint8).argmax(-1)  # the first key each row sees (0 when it sees none)
        reach = torch.arange(r0, r0 + block.shape[1], device=block.device) + offset - first + 1
        reach = reach[block.any(-1)]
        if reach.numel():
            far = max(far or 0, int(reach.max()))
    return far
