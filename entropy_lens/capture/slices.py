"""What a capture reads off the row pass's log-sum-exp besides the row statistics, a step between the row
pass and the bookkeeping, from the layer's score tiles, never a second row pass (a route that gave no
log-sum-exp is refused) and never T × S: the row-slice statistics of `Measure.slices` (kernels/slices.py's
`slice_values`), summed over rows as arrays (<statistic>@<slot>) or a generated token's row whole, and
a block of the probabilities a recorder keeps (its keep_probs, asked through capture/reports.py: query
positions a..b over keys c..d, `block_pass`).

Positions are real: each batch row's keys from its first real one (the layer's `first_key`: left padding
left out, a decode step's rows at the end of its cache), a generation's prompt spans from the session's
`prompt_len`. Span masses are sums over key ranges, as first_mass's: where the route's backend sums them in
its row pass (`spans_in_rows`), the route hands it the ranges (`row_pass_spans`) and the slice pass takes
them from its RowStats instead of computing them again.
"""

from __future__ import annotations

import torch

from entropy_lens.capture.call import LayerCall, LayerInputs
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.plan import Route
from entropy_lens.kernels.probs import probs_from_lse
from entropy_lens.kernels.reference import attention_probabilities
from entropy_lens.kernels.slices import as_arrays, slice_values, span_ranges
from entropy_lens.kernels.stats import RowStats


def wants_slices(call: LayerCall) -> bool:
    """Whether the layer records row-slice statistics or keeps a block: it captures and its session asks."""
    return call.capturing and (bool(call.session.measure.slices) or call.kept_block is not None)


def row_pass_spans(call: LayerCall, inputs: LayerInputs, route: Route) -> torch.Tensor | None:
    """(B|1, n, 2) int64: the key ranges of the session's spans (kernels/slices.py's `span_ranges`) for
    `route`'s row pass to sum, where the layer captures, the session asks for span masses and the route's
    backend sums them in its row pass; else None (the slice pass computes them, if asked). A generation's
    prompt (per_token, T > 1) wants its last row alone: the slice pass's one row costs less than the
    row pass's sums over every row (1.5 s more at a 4K SmolLM2 prompt)."""
    session = call.session
    prompt = session is not None and session.measure.slices.per_token and call.query.shape[2] > 1
    if prompt or not (call.capturing and backend_of(route.kernel).spans_in_rows):
        return None
    S = inputs.key.shape[2]
    return span_ranges(inputs.mods, session.measure.slices, S, session.prompt_len, call.query.device)


def block_pass(call: LayerCall, inputs: LayerInputs, rows: RowStats) -> torch.Tensor | None:
    """(B, Hq, b − a, d − c) float32: this layer's part of the block the session keeps, where the call
    holds it (`LayerCall.kept_block`), for the bookkeeping to hand on (paths.record); else None."""
    block = call.kept_block
    if block is None:
        return None
    query, key = call.query.detach(), inputs.key.detach()
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    if rows.lse is None:  # the reference route: no streamed pass, the probabilities whole
        p, _, _ = attention_probabilities(query, key, softmax_scale, inputs.mods)
        kept = p[:, :, slice(*block[0]), slice(*block[1])].float()
    else:
        kept = probs_from_lse(query, key, rows.lse, softmax_scale, inputs.mods, block[0], block[1])
    return kept


def slice_pass(call: LayerCall, inputs: LayerInputs, route: Route, rows: RowStats) -> dict[str, torch.Tensor]:
    """The session's row-slice statistics for the layer's rows, at the scores its statistics were computed
    at (λ_h, every score modifier), on the row pass's log-sum-exp: {array: (B, Hq, T) float32} for a run
    that sums over rows (`Slices.arrays`); per generated token (`Slices.per_token`) the last row alone,
    each statistic whole, {name: (B, Hq, 1, n)} (top_key int64, top_key_prob beside it). Span masses the
    row pass summed (`RowStats.spans`) are taken from it."""
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
    T = query.shape[2]
    span = (T - 1, T) if slices.per_token else (0, T)  # a generated token's row: the call's last
    prompt_len = call.session.prompt_len
    values = slice_values(
        query, key, rows.lse, softmax_scale, inputs.mods, slices, span, prompt_len, spans=rows.spans
    )
    return values if slices.per_token else as_arrays(slices, values)
