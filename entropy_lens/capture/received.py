"""Attention received by each key inside a capture: the column pass of kernels/received.py on the rows'
log-sum-exp the layer's own statistics pass already computed (`RowStats.lse`), so a layer that records
key statistics runs two passes over its keys, never three; a layer whose route gave no LSE (a training
step's fused pass, the model's eager weights) has it computed by one row pass first. Only where the
session asks for key statistics (`Session.measure.key_stats`); each layer's {statistic: (B, Hq, S) float32}
goes to `Session.on_key_stats`, and the column state they are read from (sums, maxima, counts) to
`Session.on_key_state` (the recorder's: a decode step's rows add to the keys it continues).

A sharded sequence (--context-parallel, capture/context_parallel.py) keeps each chunk's column state
(`key_state`: the sums, maxima and counts over its own query rows, keys [0, b)), adds its chunks, combines
every rank's state over the group (`combined_over_ranks`: keys on one rank receive from queries on later
ranks) and reads the statistics once, on the group's first rank (`report_sharded`), so the result is the
one-process one.
"""

from __future__ import annotations

import torch

from entropy_lens.capture.call import LayerCall, LayerInputs
from entropy_lens.kernels import Route
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.plan import statistics_kernel
from entropy_lens.kernels.received import (
    counted_rows,
    read_received,
    received_from_lse,
    received_state,
    row_log_sum_exp,
)
from entropy_lens.kernels.stats import RowStats
from entropy_lens.statistics import MAX, MEAN

# how the column state of passes over disjoint query rows combines (kernels/received.py's KEY_STATE)
STATE_REDUCTIONS = {"sum": MEAN, "max": MAX, "count": MEAN}  # MEAN's combine: a sum


def wants_keys(call: LayerCall) -> bool:
    """Whether the layer records key statistics: it captures and its session asks for some."""
    session = call.session
    takes = session.on_key_stats is not None or session.on_key_state is not None
    return call.capturing and bool(session.measure.key_stats) and takes


def _inputs(call: LayerCall, inputs: LayerInputs, route: Route, rows: RowStats):
    """(query, key, lse, softmax_scale, kernel) of the layer's column pass: the route's LSE, or one row
    pass for it where the route gave none (the reference needs none: it materialises)."""
    query, key = call.query.detach(), inputs.key.detach()
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    kernel, kernel_mods = statistics_kernel(route.kernel, query, key, inputs.mods, one_pass=True)
    lse = rows.lse
    if lse is None and kernel != "reference":
        lse = row_log_sum_exp(kernel, query, key, softmax_scale, kernel_mods)
    return query, key, lse, softmax_scale, kernel


@torch.no_grad()
def report_received(call: LayerCall, inputs: LayerInputs, route: Route, rows: RowStats) -> None:
    """The layer's key statistics, handed to the session's `on_key_stats(layer_idx, {name: (B, Hq, S)})`:
    over the call's counted query rows (its real rows, or the last `query_window` of them), at the scores
    the route's statistics were computed at (λ_h, every score modifier)."""
    session = call.session
    query, key, lse, softmax_scale, kernel = _inputs(call, inputs, route, rows)
    counted = counted_rows(
        inputs.mods, query.shape[2], key.shape[2], session.measure["query_window"], query.device
    )
    layer = call.module.layer_idx
    if session.on_key_state is None:
        values = received_from_lse(
            query,
            key,
            lse,
            softmax_scale,
            inputs.mods,
            rows=counted,
            stats=session.measure.key_stats,
            backend=kernel,
        )
        session.on_key_stats(layer, values)
        return
    # the column state, which a decode step's rows add to the keys of the sequence they continue
    state = received_state(query, key, lse, softmax_scale, inputs.mods, rows=counted, backend=kernel)
    session.on_key_state(layer, state, key.shape[2] - query.shape[2])
    if session.on_key_stats is not None:
        session.on_key_stats(layer, read_received(state, session.measure.key_stats))


@torch.no_grad()
def key_state(
    call: LayerCall, inputs: LayerInputs, route: Route, rows: RowStats, counted, length: int
) -> dict[str, torch.Tensor]:
    """One chunk's column state over its `counted` query rows ((B|1, T) bool or None), its keys [0, S)
    widened to the sequence's `length` keys (the keys beyond receive nothing from these rows)."""
    query, key, lse, softmax_scale, kernel = _inputs(call, inputs, route, rows)
    state = received_state(query, key, lse, softmax_scale, inputs.mods, rows=counted, backend=kernel)
    more = length - key.shape[2]
    return {name: torch.nn.functional.pad(t, (0, more)) for name, t in state.items()}


def combined(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The column states of passes over disjoint query rows as one: sums and counts added, maxima kept."""
    out = dict(states[0])
    for state in states[1:]:
        out = {name: STATE_REDUCTIONS[name].combine(out[name], state[name]) for name in out}
    return out


def report_sharded(session, layer: int, state: dict[str, torch.Tensor], exchange, ranks: int, first: bool):
    """A sharded layer's key statistics: this rank's `state` combined with every rank's of the group
    (`exchange`, the shards' all-gather, over `ranks` ranks) and read; reported on the group's `first`
    rank alone (every rank computes the same numbers; the sums count each sample once)."""
    names = tuple(state)
    stacked = torch.stack([state[name] for name in names], dim=-1)  # (B, Hq, N, 3): one exchange
    pieces = exchange(stacked.unsqueeze(2).flatten(3), [1] * ranks) if ranks > 1 else [stacked[:, :, None]]
    everyone = [
        {name: piece[:, :, 0].view(stacked.shape)[..., i] for i, name in enumerate(names)} for piece in pieces
    ]
    if first:
        state = combined(everyone)
        if session.on_key_state is not None:  # the whole sequence's keys: a forward of its own
            session.on_key_state(layer, state, 0)
        if session.on_key_stats is not None:
            session.on_key_stats(layer, read_received(state, session.measure.key_stats))
