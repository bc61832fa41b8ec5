"""What a row returns: the per-row statistics, declared once (`ROW_STATS`), and `RowStats`, the record
every kernel returns.

Each kernel streams a row's keys into a state of named accumulators (`STATE`: the running max m, the
sum l = Σ e^(s − m) and the centred sum u = Σ e^(s − m)(s − m); merge.py merges them across key shards)
and reads each statistic off the final state with its `RowStat.read`. A new statistic is a
`RowStat` here (its name, unit, what it reads off the state; `squared` when its mean square is
summed too) plus its accumulator's update in each kernel's loop; the host sums (capture/accumulate.py,
runs/sums.py) and the results arrays follow from this table.

    RowStats(values={"entropy": (B, Hq, T) fp32, "sink_mass": ...}, out=(B, T, Hq, Dv) or None)
    stats["entropy"], stats.out
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

from entropy_lens.kernels.mods import ScoreMods

STATE = ("m", "l", "u")  # the streaming accumulators of one row, in the order the kernels store them


def entropy_from_state(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """H = log l − u/l (nats) from the streaming state; 0 for rows that saw no key (l = 0)."""
    l, u = state["l"], state["u"]
    return torch.where(l > 0, torch.log(l) - u / l, torch.zeros_like(l)).clamp_min_(0.0)


def sink_mass_from_state(state: Mapping[str, torch.Tensor], sinks: torch.Tensor | None) -> torch.Tensor:
    """p_sink = e^(σ_h − m)/l, (B, Hq, T) float32, for a state that holds the sinks σ (Hq,) (zeros for
    sinks None). l >= 1 there: the largest score, or the sink itself, adds e^0."""
    m, l = state["m"], state["l"]
    if sinks is None:
        return torch.zeros_like(l)
    return torch.exp(sinks.to(l).view(1, -1, 1) - m) / l


@dataclass(frozen=True)
class RowStat:
    """One per-row statistic: `read(state, mods)` -> (B, Hq, T) float32 from a row's final state."""

    name: str
    unit: str
    description: str
    read: Callable[[Mapping[str, torch.Tensor], ScoreMods], torch.Tensor]
    squared: bool = False  # whether the host sums its square too (the results' `<name>_sq`)
    applies: Callable[[ScoreMods], bool] = lambda mods: True  # recorded only where this holds


ROW_STATS: dict[str, RowStat] = {
    stat.name: stat
    for stat in (
        RowStat(
            "entropy",
            "nats",
            "−Σ p ln p over the row's keys (and its sink)",
            lambda state, mods: entropy_from_state(state),
            squared=True,
        ),
        RowStat(
            "sink_mass",
            "probability",
            "the attention sink's probability (models with sinks: gpt-oss)",
            lambda state, mods: sink_mass_from_state(state, mods.sinks),
            applies=lambda mods: mods.sinks is not None,
        ),
    )
}
DEFAULT_STATS = ("entropy", "sink_mass")  # what the kernels return unless asked for less


def check_stats(stats) -> tuple[str, ...]:
    """`stats` as a tuple of known names; ValueError naming the known ones otherwise."""
    stats = (stats,) if isinstance(stats, str) else tuple(stats)
    unknown = [s for s in stats if s not in ROW_STATS]
    if unknown or not stats:
        raise ValueError(f"unknown row statistic {unknown or stats!r}; choose from {', '.join(ROW_STATS)}")
    return stats


def sum_names(stats) -> list[str]:
    """The host sums of `stats`: each statistic's own and, for a `squared` one, `<name>_sq`."""
    return [key for name in stats for key in (name, name + "_sq")[: 1 + ROW_STATS[name].squared]]


def read_stats(state: Mapping[str, torch.Tensor], mods: ScoreMods, stats) -> dict[str, torch.Tensor]:
    """{name: (B, Hq, T) float32} for each of `stats`, read off a row's final `state`."""
    return {name: ROW_STATS[name].read(state, mods) for name in stats}


@dataclass(frozen=True)
class RowStats(Mapping):
    """What a kernel returns: each statistic asked for by name, (B, Hq, T) float32, and the attention
    output (B, T, Hq, Dv) where the pass computes it (else None)."""

    values: dict[str, torch.Tensor] = field(default_factory=dict)
    out: torch.Tensor | None = None

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)
