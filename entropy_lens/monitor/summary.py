"""A recorded forward reduced to one number per statistic, layer and head, and steps made of forwards.

`ForwardSums` is the recorded forward's consumer of the capture session's reports (capture/reports.py).
Each capturing layer hands its row statistics, (B, H, T) float32 per statistic, to its `report_stats`. They are reduced on the tensors' own device, over the forward's
real query rows only (the forward's 2-D attention mask: a padded row adds nothing), by the statistic's
declared reduction (statistics.reduction_of):

    "mean": Σ_rows value (float64) and the row count n; the summary is Σ / n
    "max":  max_rows value; the summary is that maximum (QK-clip's max logit is a maximum, not a mean)

Key statistics (attention received by each key: received and received_mean, (B, H, S) per layer,
read off the column state the session hands `report_key_state`) are summarised per batch row, then over the forward's batch rows
that hold a real query row (`sequences`), as statistics.SUMMARIES declares:

    received_first      received at the row's first real key / its counted query rows; their mean
    received_max_later  max over the real keys after the first real one of received_mean, among those
                        enough of the row's counted rows see (statistics.ranked_rows: the last keys' mean
                        over a few rows is noise); their maximum over the batch rows that have such a
                        key (`later`); undefined, NaN in `values`, at a step where none has one (T = 1, or
                        a single real token per row)

`finish` brings the (layers, heads) results to the host once per forward, checks that every layer
reported once, and returns a `StepSummary`. Two summaries of one step (gradient accumulation's
micro-batches) `merge` exactly: sums and counts add, maxima take the larger.

A forward whose attention is not finite (a layer handed a NaN or inf query, key or value: `nonfinite`,
`report_nonfinite`; or a statistic that came out non-finite) gives a summary with no
numbers and `nonfinite` saying where it first was: the training loop decides what such a step means
(GradScaler skips it), the monitor records that it happened and warns once (NonFiniteStepWarning).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from entropy_lens.capture.probe import unreported
from entropy_lens.capture.reports import Reports
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.received import read_received
from entropy_lens.monitor.settings import is_row_array
from entropy_lens.statistics import (
    BY_NAME,
    RANKED_ROWS,
    RECEIVED,
    RECEIVED_FIRST,
    RECEIVED_MAX_LATER,
    RECEIVED_MEAN,
    reduction_of,
)


class NonFiniteStepWarning(RuntimeWarning):
    """A recorded step's attention was not finite (AttentionMonitor warns once, naming the layer and step)."""


@dataclass
class StepSummary:
    """One step's statistics: `sums[stat]` (layers, heads) float64, the sum over the real query rows for
    a "mean" statistic and their maximum for a "max" one (a key statistic's summary: over the batch
    rows); `rows` the real query rows (per layer and head: every layer sees the same rows); `sequences`
    the batch rows with a real query row; `later` those of them with a real key after their first one
    (what received_max_later is the maximum over: with none, its sums are the identity, −inf);
    `forwards` how many recorded forwards made it. A step whose attention was not finite has
    `nonfinite` (where it first was) and no sums."""

    step: int
    forwards: int
    rows: int
    sums: dict[str, np.ndarray]
    nonfinite: str | None = None
    sequences: int = 0
    later: int = 0

    def count(self, stat: str) -> int:
        """The rows `stat`'s sums are over: the real query rows, or batch rows for a summary of a key
        statistic (those with a later key for received_max_later)."""
        if stat == RECEIVED_MAX_LATER.name:
            return self.later
        return self.sequences if getattr(BY_NAME.get(stat), "of", None) else self.rows

    def values(self) -> dict[str, np.ndarray]:
        """{stat: (layers, heads) float32}: the mean over the real rows (batch rows for a summary of a
        key statistic), or their maximum; NaN where there is none (received_max_later without `later`)."""
        return {
            stat: reduction_of(stat).finish(s, self.count(stat)).astype(np.float32)
            for stat, s in self.sums.items()
        }

    def merge(self, other: StepSummary) -> StepSummary:
        """This step's summary with `other`'s forwards added (the same step, the same statistics); not
        finite if either is."""
        forwards, rows = self.forwards + other.forwards, self.rows + other.rows
        counts = {"sequences": self.sequences + other.sequences, "later": self.later + other.later}
        if self.nonfinite or other.nonfinite:
            return StepSummary(self.step, forwards, rows, {}, self.nonfinite or other.nonfinite, **counts)
        sums = {stat: reduction_of(stat).combine(s, other.sums[stat]) for stat, s in self.sums.items()}
        return StepSummary(self.step, forwards, rows, sums, **counts)


class ForwardSums(Reports):
    """The device-side reductions of one recorded forward (see the module docstring): the consumer of its
    capture session's reports (capture/reports.py).

    stats: the monitor's statistics (monitor.settings.check_monitor_stats): row statistics and received.
    mask: the forward's 2-D attention mask (B, S), 1/True = real token, or None (every row is real).
    """

    def __init__(self, n_layers: int, stats: tuple[str, ...], mask: torch.Tensor | None, *, model: str):
        self.n_layers, self.model = n_layers, model
        self.stats = tuple(s for s in stats if is_row_array(s))  # the row statistics (row-slice arrays too)
        self.keys = RECEIVED.name in stats  # received's summaries (received_first, received_max_later)
        self.mask = None if mask is None else mask.detach().bool()
        self.layers: list[int] = []  # the layers that reported, in order
        self.reduced: dict[int, dict[str, torch.Tensor]] = {}  # layer -> {stat: (H,)}
        self.key_layers: list[int] = []  # the layers that reported key statistics, in order
        self.rows: torch.Tensor | int | None = None  # real query rows, from the first report
        self.counted: torch.Tensor | None = None  # (B,) real query rows of each batch row, likewise
        self.sequences: torch.Tensor | None = None  # batch rows with a real query row
        self.later: torch.Tensor | None = None  # those with a real key after their first real one
        self.nonfinite: str | None = None  # where the forward's attention was first not finite

    def report_nonfinite(self, layer: int, why: str) -> None:
        """A layer whose query, key or value was not finite: it reports no statistics, and the forward's
        summary has none."""
        self.nonfinite = self.nonfinite or f"layer {layer}: {why}"

    def report_stats(
        self, layer: int, stats: dict[str, torch.Tensor], key_offset: int, *, inputs_finite=None
    ) -> None:
        """One layer's {stat: (B, H, T)} for queries at key positions key_offset .. key_offset + T − 1
        (`inputs_finite`: never handed, the monitor's layers check their inputs themselves)."""
        self.layers.append(layer)
        self.reduced.setdefault(layer, {})
        if not stats:  # nothing of `stats` applies to this layer: refused in finish
            return
        B, _, T = next(iter(stats.values())).shape
        keep = self._keep(T, key_offset)  # (B, 1, T) bool or None
        if self.counted is None:
            self.counted = keep.sum((1, 2)) if keep is not None else torch.full((B,), T, device=self.device)
        reduced = {}
        for name in self.stats:
            if name not in stats:
                continue  # a statistic that does not apply to this layer: refused in finish
            reduced[name] = reduction_of(name).reduce(stats[name].detach().double(), (0, 2), keep)
        self.reduced[layer].update(reduced)
        if self.rows is None:
            self.rows = B * T if keep is None else keep.sum()

    @property
    def device(self) -> torch.device | None:
        return None if self.mask is None else self.mask.device

    def report_key_state(self, layer: int, state: dict[str, torch.Tensor], key_offset: int = 0) -> None:
        """One layer's column state {sum, max, count: (B, H, S)} (a monitored forward starts its
        sequences: `key_offset` 0), its received and received_mean
        summarised per head as the module docstring says; nothing where the monitor records none."""
        self.key_layers.append(layer)
        if not self.keys:
            return
        values = read_received(state, (RECEIVED.name, RECEIVED_MEAN.name))
        received = values[RECEIVED.name].detach().double()
        mean = values[RECEIVED_MEAN.name].detach().double()
        B, H, S = received.shape
        if self.counted is None:  # no row statistic reported: every key a query row of its own
            keep = self._keep(S, 0)
            self.counted = keep.sum((1, 2)) if keep is not None else torch.full((B,), S, device=self.device)
        counted = self.counted.to(received.device)
        first = torch.zeros(B, dtype=torch.int64, device=received.device)  # each batch row's first real key
        later = torch.arange(S, device=received.device) > first[:, None]  # (B, S): its real keys after it
        if self.mask is not None and self.mask.shape[1] == S:
            real_keys = self.mask.to(received.device)
            first = real_keys.to(torch.uint8).argmax(dim=1)
            later = (torch.arange(S, device=received.device) > first[:, None]) & real_keys
        # a later key is ranked where enough of the batch row's counted rows see it (statistics.ranked_rows):
        # its counted rows at or after it, those rows being the row's last real positions
        real_at = self.mask.to(received.device) if self.mask is not None and self.mask.shape[1] == S else None
        real_at = (
            real_at if real_at is not None else torch.ones(B, S, dtype=torch.bool, device=received.device)
        )
        seeing = torch.minimum(counted[:, None], real_at.flip(1).cumsum(1).flip(1))  # (B, S)
        least = (counted // 2).clamp(1, RANKED_ROWS)  # ranked_rows, per batch row
        later = later & (seeing >= least[:, None])
        at_first = received.gather(2, first.view(B, 1, 1).expand(B, H, 1)).squeeze(2)  # (B, H)
        identity = RECEIVED_MAX_LATER.reduction.identity
        top = torch.where(later[:, None, :], mean, identity).amax(2)  # (B, H): −inf where no later key
        real = (counted > 0)[:, None]  # (B, 1): the batch rows that hold a real query row
        has_later = real & later.any(1, keepdim=True)  # (B, 1): received_max_later's batch rows
        share = at_first / counted.clamp_min(1)[:, None]
        reduced = self.reduced.setdefault(layer, {})
        reduced[RECEIVED_FIRST.name] = RECEIVED_FIRST.reduction.reduce(share, 0, real)
        reduced[RECEIVED_MAX_LATER.name] = RECEIVED_MAX_LATER.reduction.reduce(top, 0, has_later)
        if self.sequences is None:
            self.sequences, self.later = real.sum(), has_later.sum()

    @property
    def summaries(self) -> tuple[str, ...]:
        """The names this forward's summary holds: the row statistics, then received's summaries."""
        return self.stats + ((RECEIVED_FIRST.name, RECEIVED_MAX_LATER.name) if self.keys else ())

    def _keep(self, T: int, key_offset: int) -> torch.Tensor | None:
        """(B, 1, T): which of the layer's query rows are real, from the forward's 2-D mask where it covers
        the layer's keys (as the recorder's host sums place rows); None: all of them."""
        if self.mask is None or self.mask.shape[1] != key_offset + T:
            return None
        return self.mask[:, None, key_offset:]

    def check_reports(self) -> None:
        """EntropyLensError in one line for a layer that did not report once, or a statistic that some layer
        did not report (monitor/applies.py runs this on a probe forward when the monitor is made)."""
        model = self.model
        if sorted(self.layers) != list(range(self.n_layers)):
            raise EntropyLensError(
                f"{model}: the layers that reported attention statistics in this forward were "
                f"{sorted(self.layers) or 'none'}, not each of its {self.n_layers} layers once; its attention "
                "does not run (once per layer) through transformers' attention interface, so AttentionMonitor "
                "cannot measure it. See README, Supported architectures"
            )
        if self.keys and sorted(self.key_layers) != list(range(self.n_layers)):
            raise EntropyLensError(
                f"{model}: the layers that reported attention received in this forward were "
                f"{sorted(self.key_layers) or 'none'}, not each of its {self.n_layers} layers once; record it "
                "through a session that computes it (monitor.settings.session_stats)"
            )
        missing = [s for s in self.stats if any(s not in self.reduced[i] for i in range(self.n_layers))]
        if missing:
            raise unreported(
                model, missing, drop="the monitored statistics (AttentionMonitor's stats, --monitor)"
            )

    def finish(self, step: int) -> StepSummary:
        """The forward's StepSummary on the host (without numbers where its attention was not finite);
        EntropyLensError in one line where `check_reports` refuses the forward, or for no real row."""
        if self.nonfinite is not None:  # its non-finite layers reported nothing
            return StepSummary(step=step, forwards=1, rows=0, sums={}, nonfinite=self.nonfinite)
        self.check_reports()
        stacked = {
            s: torch.stack([self.reduced[i][s] for i in range(self.n_layers)]).cpu().numpy()
            for s in self.summaries
        }
        rows, sequences, later = int(self.rows), int(self.sequences or 0), int(self.later or 0)
        if rows == 0:
            raise EntropyLensError(
                "this forward's attention_mask holds no real token (all 0), so it has no rows to summarise; "
                "leave all-padding batches out"
            )
        for s, values in stacked.items():
            if s == RECEIVED_MAX_LATER.name and not later:  # no batch row has a later key: undefined
                continue
            bad = ~np.isfinite(values)
            if bad.any():
                layer, head = map(int, np.argwhere(bad)[0])
                why = f"{s} of head {head} is {values[layer, head]} ({int(bad.sum())} values not finite)"
                where = f"layer {layer}: {why}"
                return StepSummary(
                    step=step, forwards=1, rows=rows, sums={}, nonfinite=where, sequences=sequences
                )
        return StepSummary(step=step, forwards=1, rows=rows, sums=stacked, sequences=sequences, later=later)


def flat_scalars(latest: dict[str, np.ndarray], prefix: str, *, per_head: bool) -> dict[str, float]:
    """`latest` ({stat: (layers, heads)}) as flat {name: float} for a logger:
    `{prefix}/{stat}/layer_{l}/mean`, `/min` and `/max` over the layer's heads, and with `per_head` each
    `{prefix}/{stat}/layer_{l}/head_{h}` (`AttentionMonitor.scalars`; prefix "": none). An undefined
    summary (NaN: received_max_later at a step without a later key) is left out, never logged as NaN."""
    out = {}
    for stat, values in latest.items():
        for layer, heads in enumerate(values):
            if not np.isfinite(heads).all():  # undefined at this step: nothing to log
                continue
            key = f"{prefix}/{stat}/layer_{layer}" if prefix else f"{stat}/layer_{layer}"
            out |= {f"{key}/mean": float(heads.mean()), f"{key}/min": float(heads.min())}
            out[f"{key}/max"] = float(heads.max())
            if per_head:
                out |= {f"{key}/head_{h}": float(v) for h, v in enumerate(heads)}
    return out
