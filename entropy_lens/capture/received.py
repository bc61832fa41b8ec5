"""Attention received by each key inside a capture. A capturing layer runs three steps: the row pass
(capture/paths.py's `run_path`: the output and the row statistics, with the rows' log-sum-exp where the
session asks for key statistics, `Session.measure.key_stats`), the column pass on that LSE
(`column_pass`: kernels/received.py's column state), and the bookkeeping (paths.record, `report_keys`):
two passes over the keys, never three; every route returns its LSE, and a route that did not would be
refused, never given a quiet second row pass. Where the row pass runs the native kernel, it keeps the
column state from its own score tiles (`one_pass_keys`, kernels.plan's ONE_PASS_KEYS): one pass over
the keys, and `column_pass` reads that state. Each layer's column state (sums, maxima, counts: (B, Hq, S)
float32) goes to the session's consumer (capture/reports.py), which reads the key statistics off it
(`read_received`): the recorder's continues a sequence across decode steps, the monitor's summarises one forward.

A sharded sequence (--context-parallel, capture/context_parallel.py) takes the same steps per chunk: each
chunk's column state (`column_pass` over its own query rows, keys [0, b) widened), added over its chunks, combines
every rank's state over the group (`combined_over_ranks`: keys on one rank receive from queries on later
ranks) and hands it on once, from the group's first rank (capture/context_parallel.py), so the result is
the one-process one.
"""

from __future__ import annotations

import torch

from entropy_lens.capture.call import LayerCall, LayerInputs
from entropy_lens.kernels import Route
from entropy_lens.kernels.backends import backend_of
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.plan import statistics_kernel
from entropy_lens.kernels.received import counted_rows, received_state
from entropy_lens.kernels.stats import RowStats
from entropy_lens.statistics import MAX, MEAN

# how the column state of passes over disjoint query rows combines (kernels/received.py's KEY_STATE)
STATE_REDUCTIONS = {"sum": MEAN, "max": MAX, "count": MEAN}  # MEAN's combine: a sum


def layer_counted_rows(call: LayerCall, inputs: LayerInputs) -> torch.Tensor | None:
    """(B|1, T) bool: the query rows of the call whose attention counts (its real rows, or the last W of
    them with a query window); None: every row."""
    window = call.session.measure.query_window
    T, S = call.query.shape[2], inputs.key.shape[2]
    return counted_rows(inputs.mods, T, S, window, call.query.device)


def one_pass_keys(call: LayerCall, kernel: str) -> bool:
    """Whether the layer's row pass keeps its column state too (kernels.plan's ONE_PASS_KEYS: the native
    kernel), so that `column_pass` reads it instead of a second pass over the keys: where the layer
    records key statistics over its own rows (a sharded chunk counts its rows its own way)."""
    return call.wants_keys and backend_of(kernel).keeps_key_state and call.session.context is None


@torch.no_grad()
def column_pass(call: LayerCall, inputs: LayerInputs, route: Route, rows: RowStats, counted=..., length=None):
    """The layer's column pass (step 2 of a capture: the row pass, this, the bookkeeping): the column state
    {"sum", "max", "count"} (B, Hq, S) over the call's counted query rows (`counted`: (B|1, T) bool, None
    for every row; default: the call's real rows, or the last W of them with a query window), at the scores the route's
    statistics were computed at (λ_h, every score modifier), the state the row pass kept where it did
    (`one_pass_keys`), else on the rows' log-sum-exp the row pass gave
    (`rows.lse`: every route gives it where the session asks for key statistics; the reference needs none,
    it materialises). `length`: a sharded chunk's keys [0, S) widened to the sequence's keys (the keys
    beyond receive nothing from these rows). RuntimeError where a route gave no log-sum-exp: a second row
    pass is never run quietly."""
    query, key = call.query.detach(), inputs.key.detach()
    softmax_scale = validate_scale(query, key, call.softmax_scale)
    kernel, _ = statistics_kernel(route.kernel, query, key, inputs.mods, one_pass=True)
    if rows.lse is None and not backend_of(kernel).materialises:
        raise RuntimeError(
            f"the {route.path} route gave no log-sum-exp for attention received; it must return one "
            "(`with_lse`) wherever the session asks for key statistics"
        )
    if counted is ... and rows.key_state is not None:  # the row pass kept it (`one_pass_keys`)
        state = rows.key_state
    else:
        counted = layer_counted_rows(call, inputs) if counted is ... else counted
        state = received_state(query, key, rows.lse, softmax_scale, inputs.mods, rows=counted, backend=kernel)
    if length is None:
        return state
    return {name: torch.nn.functional.pad(t, (0, length - key.shape[2])) for name, t in state.items()}


def combined(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The column states of passes over disjoint query rows as one: sums and counts added, maxima kept."""
    out = dict(states[0])
    for state in states[1:]:
        out = {name: STATE_REDUCTIONS[name].combine(out[name], state[name]) for name in out}
    return out


def combined_over_ranks(state: dict[str, torch.Tensor], exchange, ranks: int) -> dict[str, torch.Tensor]:
    """A sharded layer's column state: this rank's `state` combined with every rank's of the group
    (`exchange`, the shards' all-gather, over `ranks` ranks); every rank computes the same state."""
    names = tuple(state)
    stacked = torch.stack([state[name] for name in names], dim=-1)  # (B, Hq, N, 3): one exchange
    pieces = exchange(stacked.unsqueeze(2).flatten(3), [1] * ranks) if ranks > 1 else [stacked[:, :, None]]
    everyone = [
        {name: piece[:, :, 0].view(stacked.shape)[..., i] for i, name in enumerate(names)} for piece in pieces
    ]
    return combined(everyone)
