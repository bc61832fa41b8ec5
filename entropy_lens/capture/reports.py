"""What a capture session hands back to whoever reads it: `Reports`, the one protocol its consumers
implement (the recorders' sums, the generation recorder, the monitor's ForwardSums, a press, a passkey
run, capture's probe forward).

A session (capture/call.py's `Session`) holds one consumer, `session.reports`; the capture asks it what to
compute and hands it each layer's reports, and names no consumer. Each report is a method that does
nothing by default; a consumer asks for one by overriding its method (the capture computes only what is
asked), and for the last rows' probabilities and a kept block by setting the attribute that says which:

    report_stats(layer, stats, key_offset, *, inputs_finite=None)
        {statistic: (B, Hq, T) float32}: the row statistics of the session's measure that apply to the
        layer (sink mass only for a model with attention sinks), and the row-slice statistics' arrays,
        for query rows at key positions key_offset .. key_offset + T − 1 (key_offset = S − T). Overriding
        it is what makes a layer capture: the capture's pass runs only for a consumer that asks for it.
        With `stats_check_inputs`, `inputs_finite` is the layer's unread check of its inputs where the
        capture left it (capture/call.py's `check_finite_inputs`: a GPU's), which the consumer refuses
        where the statistics reach the host (capture/accumulate.py's HostSums).
    report_nonfinite(layer, why)
        a capturing layer was handed a query, key or value that is not finite: the layer then runs as one
        that captures nothing, its numbers the model's own, NaN and all (a training monitor: the loop
        decides what such a step means). Not overridden (a scan's): the capture refuses, naming the layer.
    report_key_state(layer, state, key_offset)
        the column state {"sum", "max", "count": (B, Hq, S) float32} of the key statistics the session
        measures (capture/received.py), read off it by `kernels.received.read_received`; a decode step's
        (key_offset S − T > 0) adds to the keys of the sequence it continues.
    report_rows(layer, p)        with probe_rows = R > 0
        p (B, Hq, R, S) float64: the last R query rows' probabilities over every key, whole, of each call
        (passkey's answer rows, a generated token's row), whether or not the layer captures.
    report_block(layer, probs)   with keep_block = ((a, b), (c, d))
        (B, Hq, b − a, d − c) float32: the probabilities query positions a..b give keys c..d, for a
        forward that holds them (capture/slices.py's `block_pass`).

`fan_out(*consumers)` is one consumer made of several, each report handed to each that asks for it, in
order: the monitor's sums after an EntropyRecorder's own (monitor/install.py).
"""

from __future__ import annotations

import torch

from entropy_lens.errors import EntropyLensError

__all__ = ["FanOut", "Reports", "fan_out"]


class Reports:
    """The protocol a capture session's consumer implements (module docstring): every report a no-op,
    nothing asked. Subclass it and override what you read."""

    probe_rows: int = 0  # R > 0: report_rows gets each call's last R query rows; 0: none asked
    keep_block: tuple | None = None  # ((a, b), (c, d)): report_block gets that block; None: none asked
    stats_check_inputs: bool = False  # report_stats takes `inputs_finite=`, the layer's unread check

    def report_stats(self, layer: int, stats: dict, key_offset: int, *, inputs_finite=None) -> None:
        """One layer's row statistics {name: (B, Hq, T)} at key offset S − T (module docstring)."""

    def report_nonfinite(self, layer: int, why: str) -> None:
        """A capturing layer's query, key or value was not finite (`why`, one line); it captures nothing."""

    def report_key_state(self, layer: int, state: dict, key_offset: int) -> None:
        """One layer's column state {"sum", "max", "count": (B, Hq, S)} at key offset S − T."""

    def report_rows(self, layer: int, p: torch.Tensor) -> None:
        """One call's last `probe_rows` rows' probabilities, p (B, Hq, R, S) float64."""

    def report_block(self, layer: int, probs: torch.Tensor) -> None:
        """One layer's kept block (`keep_block`), (B, Hq, b − a, d − c) float32."""

    @property
    def asks_stats(self) -> bool:
        """Whether the consumer reads the row statistics: the layers capture."""
        return _overrides(self, "report_stats")

    @property
    def asks_nonfinite(self) -> bool:
        """Whether a layer's non-finite inputs are reported (and the layer captures nothing) or refused."""
        return _overrides(self, "report_nonfinite")

    @property
    def asks_key_state(self) -> bool:
        """Whether the consumer reads the column state of the key statistics."""
        return _overrides(self, "report_key_state")


def _overrides(consumer: Reports, method: str) -> bool:
    """Whether `consumer`'s class implements `method` itself (else the protocol's no-op: not asked)."""
    return getattr(type(consumer), method) is not getattr(Reports, method)


class FanOut(Reports):
    """Several consumers as one: each report handed to each consumer that asks for it, in order; what it
    asks is what any of them asks (the last rows: the most any asks, each handed its own last rows)."""

    def __init__(self, *consumers: Reports):
        self.consumers = consumers
        self.probe_rows = max((c.probe_rows for c in consumers), default=0)
        blocks = [c.keep_block for c in consumers if c.keep_block is not None]
        if len(blocks) > 1:
            raise EntropyLensError(
                f"{len(blocks)} consumers of one capture session each keep a block of probabilities "
                f"({', '.join(map(str, blocks))}); a session keeps one: keep it in one of them"
            )
        self.keep_block = blocks[0] if blocks else None
        takers = [c for c in consumers if c.asks_stats]
        self.stats_check_inputs = bool(takers) and all(c.stats_check_inputs for c in takers)

    @property
    def asks_stats(self) -> bool:
        return any(c.asks_stats for c in self.consumers)

    @property
    def asks_nonfinite(self) -> bool:
        return any(c.asks_nonfinite for c in self.consumers)

    @property
    def asks_key_state(self) -> bool:
        return any(c.asks_key_state for c in self.consumers)

    def report_stats(self, layer, stats, key_offset, *, inputs_finite=None):
        checked = {} if inputs_finite is None else {"inputs_finite": inputs_finite}  # as the capture hands it
        for c in self.consumers:
            if c.asks_stats:
                c.report_stats(layer, stats, key_offset, **checked)

    def report_nonfinite(self, layer, why):
        for c in self.consumers:
            if c.asks_nonfinite:
                c.report_nonfinite(layer, why)

    def report_key_state(self, layer, state, key_offset):
        for c in self.consumers:
            if c.asks_key_state:
                c.report_key_state(layer, state, key_offset)

    def report_rows(self, layer, p):
        for c in self.consumers:
            if c.probe_rows:
                c.report_rows(layer, p[:, :, p.shape[2] - c.probe_rows :])

    def report_block(self, layer, probs):
        for c in self.consumers:
            if c.keep_block is not None:
                c.report_block(layer, probs)


def fan_out(*consumers: Reports) -> Reports:
    """One consumer handing each report to each of `consumers` that asks for it, in order; the one
    consumer that asks anything as itself (a FanOut of one would only add a step)."""
    asking = [c for c in consumers if _asks_anything(c)]
    return asking[0] if len(asking) == 1 else FanOut(*asking)


def _asks_anything(c: Reports) -> bool:
    return (
        c.asks_stats or c.asks_nonfinite or c.asks_key_state or bool(c.probe_rows) or c.keep_block is not None
    )
