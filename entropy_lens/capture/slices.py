"""What a capture reads off the row pass's log-sum-exp besides the row statistics, a step between the row
pass and the bookkeeping, from the layer's score tiles, never a second row pass (a route that gave no
log-sum-exp is refused) and never T × S: the row-slice statistics it sums over rows (`Measure.slices`:
span_mass@<span>, offset_prob@<d>, top_key; kernels/slices.py's `slices_from_lse`), and a block of the
probabilities a recorder keeps (`Session.keep_block`: query positions a..b over keys c..d, `block_pass`).

Positions are the layer's key indices, as the other statistics' (`distance`): a forward's tokens from 0,
a decode step's rows at the end of its cache. A batch whose rows start at different keys (left padding)
would place a span at different tokens per row: refused for span_mass, and top_key is counted from each
row's first real key.
"""

from __future__ import annotations

import torch

from entropy_lens.capture.call import LayerCall, LayerInputs
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.plan import Route
from entropy_lens.kernels.probs import probs_from_lse
from entropy_lens.kernels.reference import attention_probabilities
from entropy_lens.kernels.slices import slices_from_lse
from entropy_lens.kernels.stats import RowStats
from entropy_lens.statistics import SPAN_MASS, TOP_KEY


def wants_slices(call: LayerCall) -> bool:
    """Whether the layer records row-slice statistics or keeps a block: it captures and its session asks."""
    return call.capturing and (bool(call.session.measure.slices) or _block(call) is not None)


def _block(call: LayerCall) -> tuple | None:
    """((row indices of the call), (keys), on_block) of the session's kept block where the call holds it:
    query positions a..b among its own (a decode step's rows at the end of its keys) and keys c..d."""
    kept = call.session.keep_block
    if kept is None:
        return None
    (a, b), (c, d), on_block = kept
    T, S = call.query.shape[2], call.key.shape[2]
    if not (S - T <= a and b <= S and d <= S):
        return None
    return (a - (S - T), b - (S - T)), (c, d), on_block


def block_pass(call: LayerCall, inputs: LayerInputs, rows: RowStats) -> None:
    """The session's kept block of this layer to its `on_block`, where the call holds it (`_block`)."""
    block = _block(call)
    if block is None:
        return
    query, key = call.query.detach(), inputs.key.detach()
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    if rows.lse is None:  # the reference route: no streamed pass, the probabilities whole
        p, _, _ = attention_probabilities(query, key, softmax_scale, inputs.mods)
        kept = p[:, :, slice(*block[0]), slice(*block[1])].float()
    else:
        kept = probs_from_lse(query, key, rows.lse, softmax_scale, inputs.mods, block[0], block[1])
    block[2](call.module.layer_idx, kept)


def slice_pass(call: LayerCall, inputs: LayerInputs, route: Route, rows: RowStats) -> dict[str, torch.Tensor]:
    """{array: (B, Hq, T) float32} of the session's row-slice statistics for the layer's rows, at the
    scores its statistics were computed at (λ_h, every score modifier), on the row pass's log-sum-exp."""
    slices = call.session.measure.slices
    if not slices:
        return {}
    if rows.lse is None and not backend_of(route.kernel).materialises:
        raise RuntimeError(
            f"the {route.path} route gave no log-sum-exp for {', '.join(slices.stats)}; it must return one "
            "(`with_lse`) wherever the session asks for row-slice statistics"
        )
    query, key = call.query.detach(), inputs.key.detach()
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    first = _padding_starts(call)
    if first is not None and SPAN_MASS.name in slices.stats:
        raise EntropyLensError(
            f"{SPAN_MASS.name} on a batch whose rows start at different keys (left padding) would place each "
            "span at other tokens per row; record span_mass on unpadded (or right-padded) batches, or per "
            "generated token with GenerationRecorder, which counts real positions"
        )
    values = slices_from_lse(query, key, rows.lse, softmax_scale, inputs.mods, slices)
    if first is not None and TOP_KEY.name in values:
        top = values[TOP_KEY.name]
        values[TOP_KEY.name] = torch.where(top >= 0, top - first.to(top).view(-1, 1, 1), top)
    return values


def _padding_starts(call: LayerCall) -> torch.Tensor | None:
    """(B,) each batch row's first real key where they differ (left padding; the recorder's
    `Session.padding_start`), else None."""
    start = call.session.padding_start
    if start is None or start[0] is None or not bool((start[0] != 0).any()):
        return None
    return start[0]
