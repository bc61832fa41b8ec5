"""What a row returns: how the kernels read each row statistic (`ROW_STATS`, registered with `@read`
under the name entropy_lens.statistics declares), and `RowStats`, the record every kernel returns.

Each kernel streams a row's keys into a state of named accumulators (`STATE`: the running max m, the
sum l = Σ e^(s − m) and the centred sum u = Σ e^(s − m)(s − m); merge.py merges them across key shards)
and reads each statistic off the final state with its `RowStat.read`. A new statistic is a `Statistic`
in entropy_lens.statistics (its name, unit, description, bound, label, `squared`, `summary`), a `@read`
here (what it reads off the state, the accumulators it `needs`), its float64 `@definition` in
reference.py, plus its accumulator's update in each kernel's loop; the import fails where a declared
statistic lacks a read or a definition, and the host sums (capture/accumulate.py, runs/sums.py) and the
results arrays follow from the declaration. ::

    RowStats(values={"entropy": (B, Hq, T) fp32, "sink_mass": ...}, out=(B, T, Hq, Dv) or None)
    stats["entropy"], stats.out

"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

from entropy_lens.kernels.mods import ScoreMods
from entropy_lens.statistics import (
    KEY_STATISTICS,
    ROWS,
    STATISTICS,
    Statistic,
    check_registered,
    declared,
    statistic_of,
)

STATE = ("m", "l", "u")  # the streaming accumulators every kernel keeps, in the order they store them
# Further accumulators, kept only where a statistic asked for needs them (stats `needs`); per row, with
# s the scores, m the running max, e = e^(s − m), b_j = pos_i − j how far key j lies behind the row:
#   w = Σ e (s − m)²   c = Σ e²   lk = Σ_keys e   d = Σ_keys e b   f = Σ_{keys r <= j < r + K} e
# (r = ScoreMods.first_key: the row's first real key, the first the mask lets through; 0 unpadded)
#   mk = max_keys s: the largest score over the row's keys, −inf before any (m without the sink)
#   rk = Σ_{keys 0 <= b < W} e: the row's last W = recent_keys keys, pos_i − W < j <= pos_i
# (the sink is an outcome of l, u, w and c, not of the key sums nor of mk). A new max m' rescales them
# with α = e^(m − m'), δ = m − m': w ← α (w + 2δu + δ²l), c ← α² c, and the key sums ← α ·; mk is no
# sum and is not rescaled: mk ← max(mk, max_blk s). merge.py merges two states by the same rules.
# A pass given key ranges (`spans` (B|1, n, 2) int64: [lo_x, hi_x) per batch row, the same for all its
# rows) keeps n planes more, "spans": sp_x = Σ_{lo_x <= j < hi_x} e, rescaled as f (a session's span
# masses in the row pass, kernels/slices.py's `span_ranges`; e is 0 on a key the row may not see).
EXTRA_STATE = ("w", "c", "lk", "d", "f", "mk", "rk")


def _ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a / b, and 0 where b = 0. Every accumulator is 0 in a row that saw no outcome (l = 0: no key and no
    sink), so there a / b = 0/0 = NaN, which becomes 0; one op more than the division (the reads run for
    every layer of a scan, so they stay few and whole-tensor)."""
    return (a / b).nan_to_num_(nan=0.0)


def entropy_from_state(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """H = log l − u/l (nats) from the streaming state; 0 for rows that saw no key (l = 0).

    Args:
        state: a kernel's or a merge's state, holding "l" and "u", each (B, Hq, T) float32.

    Returns:
        (B, Hq, T) float32 entropy in nats, >= 0.
    """
    l, u = state["l"], state["u"]
    return (torch.log(l) - u / l).nan_to_num_(nan=0.0).clamp_min_(0.0)  # l = 0: −inf − NaN = NaN -> 0


def sink_mass_from_state(state: Mapping[str, torch.Tensor], sinks: torch.Tensor | None) -> torch.Tensor:
    """p_sink = e^(σ_h − m)/l, (B, Hq, T) float32, for a state that holds the sinks σ (Hq,) (zeros for
    sinks None). l >= 1 there: the largest score, or the sink itself, adds e^0.

    Args:
        state: a state holding "m" and "l", each (B, Hq, T) float32, with the sinks merged in once.
        sinks: (Hq,) float, the sink logits σ_h, or None.

    Returns:
        (B, Hq, T) float32 probability of the sink, in [0, 1].
    """
    m, l = state["m"], state["l"]
    if sinks is None:
        return torch.zeros_like(l)
    return torch.exp(sinks.to(l).view(1, -1, 1) - m) / l


def log_sum_exp(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """(B, H, T) float32 lse = m + ln l of a kernel's final state (nats; with sinks the sink is one of
    the row's outcomes, so it is in l); +∞ for a row that saw no outcome (l = 0), so P = e^(s − lse) is
    0 there: what a flash backward (kernels/train.py) and the column pass of attention received
    (kernels/received.py) take."""
    return torch.where(state["l"] > 0, state["m"] + torch.log(state["l"]), torch.inf)


def range_masses(state: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    """(B, H, T, n) float32: each row's mass on the n key ranges its pass was given (`spans`), read as
    first_mass's f: the range's Σ e (the state's "spans", rescaled with the running max as f is) over l,
    so the sink's share is no range's; 0 in a row with no outcome; None where the pass kept none."""
    spans = state.get("spans")
    return None if spans is None else _ratio(spans, state["l"].unsqueeze(-1))


@dataclass(frozen=True)
class RowStat:
    """One per-row statistic as the kernels compute it: its declaration (`spec`,
    entropy_lens.statistics), `read(state, mods)` -> (B, Hq, T) float32 from a row's final state, which
    holds STATE and the accumulators `needs` names, and where it `applies` (recorded only there)."""

    spec: Statistic
    read: Callable[[Mapping[str, torch.Tensor], ScoreMods], torch.Tensor]
    applies: Callable[[ScoreMods], bool] = lambda mods: True
    needs: tuple[str, ...] = ()  # accumulators of EXTRA_STATE the kernels keep for it

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def squared(self) -> bool:
        """Whether the host sums its square too (the results' `<name>_sq`)."""
        return self.spec.squared

    @property
    def unit(self) -> str:
        return self.spec.unit

    @property
    def description(self) -> str:
        return self.spec.description


# The one registry of the kernels' reads, both axes: a row statistic's `f(state, mods)` off a row's final
# state (here), a key statistic's `f(state)` off the column pass's state (kernels/received.py); each axis
# checked against its declaration by the module that fills it (`check_registered`)
READS: dict[str, RowStat] = {}


def read(name: str, *, needs: tuple[str, ...] = (), applies=None):
    """Registers the decorated function as the kernels' read of the declared statistic `name` (either
    axis; `needs`, `applies`: a row statistic's)."""

    def register(f):
        if name in READS or name not in STATISTICS and name not in KEY_STATISTICS:
            raise ValueError(f"read({name!r}): registered twice or not declared in entropy_lens.statistics")
        unknown = set(needs) - set(EXTRA_STATE)
        if unknown:
            raise ValueError(f"read({name!r}) needs {sorted(unknown)}; choose from {', '.join(EXTRA_STATE)}")
        READS[name] = RowStat(declared(name), f, applies or (lambda mods: True), tuple(needs))
        return f

    return register


@read("entropy")
def _entropy(state, mods):
    return entropy_from_state(state)


@read("sink_mass", applies=lambda mods: mods.sinks is not None)
def _sink_mass(state, mods):
    return sink_mass_from_state(state, mods.sinks)


@read("max_prob")
def _max_prob(state, mods):
    l = state["l"]  # the largest outcome contributes e^(m − m) = 1 to l
    return l.reciprocal().nan_to_num_(posinf=0.0)


@read("collision_entropy", needs=("c",))
def _collision_entropy(state, mods):
    l, c = state["l"], state["c"]  # Σ p² = c / l²; l = c = 0: −inf + inf = NaN -> 0
    return (2 * torch.log(l) - torch.log(c)).nan_to_num_(nan=0.0).clamp_min_(0.0)


@read("varentropy", needs=("w",))
def _varentropy(state, mods):
    l = state["l"]  # Var_p(−ln p) = Var_p(s) = w/l − (u/l)²
    mean = _ratio(state["u"], l)
    return (_ratio(state["w"], l) - mean * mean).clamp_min_(0.0)


@read("distance", needs=("lk", "d"))
def _distance(state, mods):
    return _ratio(state["d"], state["lk"])  # over the keys only: the sink has no position


@read("first_mass", needs=("f",))
def _first_mass(state, mods):
    return _ratio(state["f"], state["l"])


@read("recent_mass", needs=("rk",))
def _recent_mass(state, mods):
    return _ratio(state["rk"], state["l"])  # l holds the sink: its share is no key's


@read("max_logit", needs=("mk",))
def _max_logit(state, mods):
    mk = state["mk"]  # −inf in a row that saw no key: 0 there
    return torch.where(mk == float("-inf"), torch.zeros_like(mk), mk)


# every declared statistic's read, in STATISTICS's order; the import fails where one lacks its read
ROW_STATS: dict[str, RowStat] = check_registered(READS, "kernels/stats.py reads", ROWS)


def accumulators(stats) -> tuple[str, ...]:
    """The accumulators of EXTRA_STATE that `stats` need, in EXTRA_STATE's order."""
    need = {a for name in stats for a in ROW_STATS[name].needs}
    return tuple(a for a in EXTRA_STATE if a in need)


def sum_names(stats) -> list[str]:
    """The host sums of `stats` (row or key statistics, row-slice statistics' arrays): each one's own
    and, for a `squared` one, `<name>_sq`."""
    return [key for name in stats for key in (name, name + "_sq")[: 1 + statistic_of(name).squared]]


def read_stats(state: Mapping[str, torch.Tensor], mods: ScoreMods, stats) -> dict[str, torch.Tensor]:
    """{name: (B, Hq, T) float32} for each of `stats`, read off a row's final `state`."""
    return {name: ROW_STATS[name].read(state, mods) for name in stats}


@dataclass(frozen=True)
class RowStats(Mapping):
    """What a kernel returns: each statistic asked for by name, (B, Hq, T) float32, the attention output
    (B, T, Hq, Dv) where the pass computes it (else None), and the rows' log-sum-exp where asked for it.

    Args:
        values: {name: (B, Hq, T) float32}, one per statistic asked for; `rows[name]` reads one.
        out: the attention output (B, T, Hq, Dv) in q's dtype, or None where the pass computes none.
        lse: (B, Hq, T) float32 `log_sum_exp` of the pass's final state (`with_lse=True`; +∞ for a row
            with no outcome): what the column pass of attention received takes (kernels/received.py),
            or None.
        key_state: the column state of attention received {"sum", "max", "count"} (B, Hq, S) float32 where
            the pass computed it from its own tiles (the native kernel's `key_state`), or None.
        spans: (B, Hq, T, n) float32 each row's mass on the n key ranges the pass was given (`run`'s
            `spans`: a session's span masses, computed in the row pass where its backend can,
            `spans_in_rows`), or None.
    """

    values: dict[str, torch.Tensor] = field(default_factory=dict)
    out: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    key_state: dict[str, torch.Tensor] | None = None
    spans: torch.Tensor | None = None

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)
