"""Per-head attention statistics over training steps (Figure 18): which heads collapse or sharpen, and
when; how the largest attention logit grows; whether two runs' losses agree.

The inputs are a monitor history's arrays (monitor/history.py: `steps` (n,), `entropy` and `max_logit`
(n, layers, heads), entropy in nats, each record the mean over a step's real query rows, max_logit their
maximum), so these functions take arrays and never read a file.

How a head's entropy trajectory is named (`head_trajectories`), in order:
  1. `first` is its entropy at the first record, `final` at the last.
  2. It **collapses** where `final` ≤ COLLAPSE_NATS (0.5 nats: at most e^0.5 ≈ 1.6 keys' worth of
     attention, entropy fallen toward 0); its step is the first recorded step from which every later
     record stays at or below COLLAPSE_NATS.
  3. Else it **sharpens** where `final` ≤ SHARPEN_RATIO × `first` (its entropy at least halved); its step
     is the first recorded step from which every later record stays at or below SHARPEN_RATIO × `first`.
  4. Else it **broadens** where `final` > `first`, and **holds** otherwise (it fell by less than half);
     neither has a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from entropy_lens.statistics import ENTROPY, MAX_LOGIT

__all__ = [
    "COLLAPSE_NATS",
    "SHARPEN_RATIO",
    "LogitGrowth",
    "LossAgreement",
    "head_trajectories",
    "logit_growth",
    "loss_agreement",
    "settled_step",
]

COLLAPSE_NATS = 0.5  # a head whose final entropy is at most this has collapsed (step 2 above)
SHARPEN_RATIO = 0.5  # a head whose final entropy is at most this share of its first has sharpened (step 3)


def _check(steps: np.ndarray, values: np.ndarray, name: str) -> None:
    if values.ndim != 3 or values.shape[0] != len(steps) or not len(steps):
        raise ValueError(
            f"{name} is {values.shape}, not (steps, layers, heads) with one record per step of {len(steps)}; "
            "pass a monitor history's arrays (monitor.load_history)"
        )


def settled_step(steps: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
    """The first of `steps` from which every later value of `values` (n,) is ≤ `threshold`; None where
    the last one is above it."""
    above = np.flatnonzero(np.asarray(values) > threshold)
    if not len(above):
        return int(steps[0])
    return None if above[-1] == len(values) - 1 else int(steps[above[-1] + 1])


def head_trajectories(steps, entropy) -> pd.DataFrame:
    """One row per head: layer, head, first, final, lowest (nats), verdict ("collapses", "sharpens",
    "broadens", "holds") and step (the verdict's step; -1 for those without one), as the module
    docstring defines them. `steps` (n,), `entropy` (n, layers, heads) nats."""
    steps, entropy = np.asarray(steps), np.asarray(entropy, dtype=np.float64)
    _check(steps, entropy, ENTROPY.name)
    rows = []
    for layer in range(entropy.shape[1]):
        for head in range(entropy.shape[2]):
            line = entropy[:, layer, head]
            first, final = float(line[0]), float(line[-1])
            if final <= COLLAPSE_NATS:
                verdict, step = "collapses", settled_step(steps, line, COLLAPSE_NATS)
            elif final <= SHARPEN_RATIO * first:
                verdict, step = "sharpens", settled_step(steps, line, SHARPEN_RATIO * first)
            else:
                verdict, step = ("broadens" if final > first else "holds"), None
            rows.append((layer, head, first, final, float(line.min()), verdict, -1 if step is None else step))
    columns = ["layer", "head", "first", "final", "lowest", "verdict", "step"]
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class LogitGrowth:
    """The largest attention logit (λ·q·k with its bias) over a run's recorded steps, over every head."""

    first: float  # the largest over heads at the first record
    final: float  # the largest over heads at the last record
    peak: float  # the largest over every head and record
    peak_step: int  # the step of `peak`
    peak_head: tuple[int, int]  # (layer, head) of `peak`
    final_head: tuple[int, int]  # (layer, head) of `final`
    by_layer: np.ndarray  # (layers,) the largest over each layer's heads at the last record

    @property
    def ratio(self) -> float:
        """final / first (inf where the first is 0)."""
        return self.final / self.first if self.first > 0 else float("inf")


def logit_growth(steps, max_logit) -> LogitGrowth:
    """How `max_logit` (n, layers, heads) grew over `steps` (n,)."""
    steps, values = np.asarray(steps), np.asarray(max_logit, dtype=np.float64)
    _check(steps, values, MAX_LOGIT.name)
    record, layer, head = np.unravel_index(values.argmax(), values.shape)
    last = values[-1]
    final_head = np.unravel_index(last.argmax(), last.shape)
    return LogitGrowth(
        first=float(values[0].max()),
        final=float(last.max()),
        peak=float(values[record, layer, head]),
        peak_step=int(steps[record]),
        peak_head=(int(layer), int(head)),
        final_head=(int(final_head[0]), int(final_head[1])),
        by_layer=last.max(axis=1),
    )


@dataclass(frozen=True)
class LossAgreement:
    """Two training logs' losses at the steps both logged (up to a step)."""

    steps: int  # steps both logged
    equal: int  # of them, losses equal exactly
    max_difference: float  # the largest |a − b| (0 where all are equal; NaN where none are shared)
    first_difference: int | None  # the first step whose losses differ (None: none differ)

    @property
    def identical(self) -> bool:
        return self.steps > 0 and self.equal == self.steps


def loss_agreement(a: list[dict], b: list[dict], *, up_to: int | None = None) -> LossAgreement:
    """Compare two train-tiny logs (lists of {"step", "loss", ...}) at the steps both logged, ≤ `up_to`."""
    la = {int(r["step"]): float(r["loss"]) for r in a if up_to is None or r["step"] <= up_to}
    lb = {int(r["step"]): float(r["loss"]) for r in b if up_to is None or r["step"] <= up_to}
    shared = sorted(set(la) & set(lb))
    if not shared:
        return LossAgreement(0, 0, float("nan"), None)
    diff = np.array([abs(la[s] - lb[s]) for s in shared])
    differing = [s for s, d in zip(shared, diff) if d != 0]
    return LossAgreement(
        steps=len(shared),
        equal=len(shared) - len(differing),
        max_difference=float(diff.max()),
        first_difference=differing[0] if differing else None,
    )
