"""Attention received by each key inside a capture: the column pass of kernels/received.py on the rows'
log-sum-exp the layer's own statistics pass already computed (`RowStats.lse`), so a layer that records
key statistics runs two passes over its keys, never three; a layer whose route gave no LSE (a training
step's fused pass, the model's eager weights) has it computed by one row pass first. Only where the
session asks for key statistics (`Session.key_stats`); each layer's {statistic: (B, Hq, S) float32}
goes to `Session.on_key_stats`.
"""

from __future__ import annotations

import torch

from entropy_lens.capture.call import LayerCall, LayerInputs
from entropy_lens.kernels import Route
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.plan import statistics_kernel
from entropy_lens.kernels.received import counted_rows, received_from_lse, row_log_sum_exp
from entropy_lens.kernels.stats import RowStats


def wants_keys(call: LayerCall) -> bool:
    """Whether the layer records key statistics: it captures and its session asks for some."""
    return call.capturing and bool(call.session.key_stats) and call.session.on_key_stats is not None


@torch.no_grad()
def report_received(call: LayerCall, inputs: LayerInputs, route: Route, rows: RowStats) -> None:
    """The layer's key statistics, handed to the session's `on_key_stats(layer_idx, {name: (B, Hq, S)})`:
    over the call's counted query rows (its real rows, or the last `query_window` of them), at the scores
    the route's statistics were computed at (λ_h, every score modifier)."""
    session = call.session
    query, key = call.query.detach(), inputs.key.detach()
    T, S = query.shape[2], key.shape[2]
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    kernel, kernel_mods = statistics_kernel(route.kernel, query, key, inputs.mods, one_pass=True)
    lse = rows.lse
    if lse is None and kernel != "reference":  # a route without the LSE: one row pass for it
        lse = row_log_sum_exp(kernel, query, key, softmax_scale, kernel_mods)
    counted = counted_rows(inputs.mods, T, S, session.query_window, query.device)
    values = received_from_lse(
        query, key, lse, softmax_scale, inputs.mods, rows=counted, stats=session.key_stats, backend=kernel
    )
    session.on_key_stats(call.module.layer_idx, values)
