"""The row statistics, each declared once, without torch (`--help` and results readers load none): a
`Statistic` holds what every layer needs to know of it (its unit, description, bound, plot label, whether
its square is summed, its `Reduction`: how rows combine into one number, and its axis: a value per query
row or per key), and every table derives from `STATISTICS`:

    kernels/stats.py      @read("entropy", needs=...)   how a kernel reads it off the streaming state
    kernels/reference.py  @definition("entropy")        its float64 definition from the probabilities
    results, analysis, view, plotting                   STATISTICS[name].unit, .bound, .label, ...

Both registries are checked against STATISTICS when their module is imported (`check_registered`): a
statistic declared here without a read or a definition fails the import. Code that needs a statistic by
name takes it from here (`ENTROPY.name`), so the name is written once (tests/kernels/test_stats.py holds it).

`parse_stats` reads a --stats value (or a `stats=` argument) into names, once for every caller: scan's
--stats, train-tiny's --monitor, `AttentionMonitor(stats=...)`, `EntropyRecorder(stats=...)` and the
kernels' `stats=`.

Two axes, one declaration each. A row statistic (axis ROWS: a value per query row) and a key statistic
(axis KEYS: a value per key, the attention it receives, `entropy_lens.attention_received`) are both a
`Statistic` below, declared once in `DECLARED`; `STATISTICS` and `KEY_STATISTICS` are its two views by
axis. Everything that iterates `STATISTICS` (the kernels' reads and definitions, the host sums, results,
the monitor, --stats, the docs' tables) means the row statistics and sees no key statistic; the key
statistics have their own registries (kernels/received.py's `@key_read`, kernels/received_reference.py's
`@key_definition`, checked against KEY_STATISTICS by `check_registered(..., declared=KEY_STATISTICS)`) and
their own parser, `parse_key_stats`. `parse_stats` refuses a key statistic in one line that says where it
is computed.


The kernels that compute the statistics (BACKENDS) and the --fused modes are flags.py's.
"""

from __future__ import annotations

import difflib
import math
import sys
from dataclasses import dataclass

import numpy as np

PROBABILITY = "probability"  # the unit of a statistic that lies in [0, 1]
LOG_BOUND = "log"  # a row of i + 1 keys has at most ln(i + 1) nats (one outcome more with a sink)
POSITION_BOUND = "position"  # a causal row at position i looks back at most i tokens
ROWS, KEYS = "rows", "keys"  # a statistic's axis: one value per query row, or per key (attention received)
AXES = (ROWS, KEYS)


@dataclass(frozen=True)
class Reduction:
    """How many values of a statistic (rows, samples, micro-batches, ranks) combine into one, declared once
    and called by every place that sums: the host sums, a scan's sums, the monitor's step summaries, the
    head statistics and the results summary. `name` is what metadata records ("mean", "max"); `op` the
    elementwise combine, one name in numpy and torch ("add", "maximum"); `identity` the value before any
    row (0 for a sum, −inf for a maximum); `over` its reduction over an axis, one name in numpy, torch
    and torch's `scatter_reduce` ("sum", "amax"); `summary` the function of the finished value over an
    axis, one name in numpy and torch ("mean", "amax"; a mean's finished value is the total over the
    rows' count, a maximum's the total itself); `all_reduce`: torch.distributed.ReduceOp's name ("SUM",
    "MAX"). Each method takes numpy arrays or torch tensors and returns the same kind."""

    name: str
    op: str
    over: str
    summary: str
    identity: float
    all_reduce: str

    def combine(self, a, b):
        """a and b combined elementwise (a sum, or the larger)."""
        return getattr(_library(a), self.op)(a, b)

    def reduce(self, values, axis, keep=None):
        """`values` reduced over `axis` (an int or a tuple), the entries where `keep` is False left out
        (as the identity)."""
        lib = _library(values)
        if keep is not None:
            values = lib.where(keep, values, self.identity)
        return getattr(lib, self.over)(values, axis)

    def summarize(self, values, axis):
        """Finished values summarised over `axis` (an int or a tuple): their mean, or their maximum (a
        span of positions, a layer's heads)."""
        return getattr(_library(values), self.summary)(values, axis)

    def finish(self, total, count):
        """The value of `total` over `count` rows (broadcast): the mean or the maximum, NaN where no row."""
        lib = _library(total)
        seen = count > 0
        if self.summary != "mean":  # a maximum: the total itself
            return lib.where(seen, total, math.nan)
        return lib.where(seen, total / lib.where(seen, count, 1), math.nan)


MEAN = Reduction("mean", "add", "sum", "mean", 0.0, all_reduce="SUM")
MAX = Reduction("max", "maximum", "amax", "amax", -math.inf, all_reduce="MAX")
REDUCTIONS = {r.name: r for r in (MEAN, MAX)}


def _library(x):
    """torch for a tensor, numpy for anything else (torch imported only where a caller has it)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else np


@dataclass(frozen=True)
class Statistic:
    """One row statistic: `name` (its results arrays and flags), `unit` (what the arrays store),
    `description`, `label` (a figure's axis), `bound`: how the largest value a causal row at position i
    can take grows with i (LOG_BOUND: ln(i + 1); POSITION_BOUND: i), None where none grows with i (a
    probability is at most 1 everywhere); `squared`: whether the host sums its square too (the results'
    `<name>_sq`; every statistic but sink_mass, whose results arrays hold no square); `reduction`: how
    values combine (MEAN, or MAX for a maximum); `axis`: ROWS (a value per query row) or KEYS (per key)."""

    name: str
    unit: str
    description: str
    label: str
    bound: str | None = None
    squared: bool = True
    reduction: Reduction = MEAN
    axis: str = ROWS

    def __post_init__(self):
        known = self.reduction in REDUCTIONS.values() and self.axis in AXES
        if self.bound not in (None, LOG_BOUND, POSITION_BOUND) or not known:
            raise ValueError(
                f"statistic {self.name!r}: bound {self.bound!r}, reduction {self.reduction!r} or axis "
                f"{self.axis!r} unknown; use bound None, {LOG_BOUND!r} or {POSITION_BOUND!r}, a reduction of "
                f"{', '.join(REDUCTIONS)} and an axis of {', '.join(AXES)}"
            )

    @property
    def sums(self) -> tuple[str, ...]:
        """The host sums (and results arrays) of the statistic: its own and, if `squared`, `<name>_sq`."""
        return (self.name, self.name + "_sq")[: 1 + self.squared]


ENTROPY = Statistic(
    "entropy", "nats", "−Σ p ln p over the row's keys (and its sink)", "entropy $H$", LOG_BOUND
)
SINK_MASS = Statistic(
    "sink_mass",
    PROBABILITY,
    "the attention sink's probability (models with sinks: gpt-oss)",
    "attention-sink mass",
    squared=False,
)
MAX_PROB = Statistic(
    "max_prob", PROBABILITY, "the largest probability of the row's outcomes", "max probability"
)
COLLISION_ENTROPY = Statistic(
    "collision_entropy", "nats", "−ln Σ p² (Rényi order 2)", "collision entropy $H_2$", LOG_BOUND
)
VARENTROPY = Statistic("varentropy", "nats²", "Σ p (−ln p − H)², the variance of the surprisal", "varentropy")
DISTANCE = Statistic(
    "distance",
    "tokens",
    "Σ_j p_j (pos_i − j) / Σ_j p_j over the keys: how far back the row looks",
    "mean distance back",
    POSITION_BOUND,
)
FIRST_MASS = Statistic(
    "first_mass",
    PROBABILITY,
    "Σ_{r <= j < r + K} p_j: the mass on the first K real keys (r: the first unpadded one)",
    "first-token mass",  # K = 1; plotting.stat_label names K otherwise
)
RECENT_MASS = Statistic(
    "recent_mass",
    PROBABILITY,
    "Σ_{pos_i − W < j <= pos_i} p_j: the mass on the last W keys up to the row's own position (the sink "
    "is no key)",
    "recent-window mass",  # W = 64; plotting.stat_label names W
)

MAX_LOGIT = Statistic(
    "max_logit",
    "score",
    "max_j s_j over the row's attendable keys: λ q·k after the softcap and the position bias (ALiBi, key "
    "bias), the sink excluded; 0 for a row with no key (QK-clip's quantity)",
    "max attention logit",
    squared=False,
    reduction=MAX,
)

# The key statistics: a value per key j of each query head, over the call's counted query rows i (its
# real rows, or the last W of them with a query window), p_ij the probability row i gives key j (a
# sink's share is the row's sink_mass, never a key's); n_j the counted rows that can attend key j
RECEIVED = Statistic(
    "received",
    "attention",
    "Σ_i p_ij over the counted query rows: the attention mass key j receives (at most n_j)",
    "attention received",
    axis=KEYS,
)
RECEIVED_MAX = Statistic(
    "received_max",
    PROBABILITY,
    "max_i p_ij over the counted query rows: the largest share any row gives key j (0 where none can)",
    "largest share received",
    squared=False,
    reduction=MAX,
    axis=KEYS,
)
RECEIVED_MEAN = Statistic(
    "received_mean",
    PROBABILITY,
    "Σ_i p_ij / n_j, n_j the counted query rows that can attend key j (causality, window, padding); 0 "
    "where none can (kvpress's ObservedAttentionPress)",
    "mean share received",
    axis=KEYS,
)

# What AttentionMonitor records of a key statistic per layer and head at each step (monitor/summary.py):
# not a value per key but two numbers over the keys, each reduced over a step's batch rows by its own
# reduction. Not among DECLARED (no kernel computes them); `reduction_of` and the history's view know them
RECEIVED_FIRST = Statistic(
    "received_first",
    PROBABILITY,
    "received at a batch row's first real key over its counted query rows: the share of attention an "
    "attention sink at the first token takes",
    "first key's share",
    squared=False,
    axis=KEYS,
)
RECEIVED_MAX_LATER = Statistic(
    "received_max_later",
    PROBABILITY,
    "the largest received_mean of any key after a batch row's first real one: a heavy hitter appearing",
    "largest later key's share",
    squared=False,
    reduction=MAX,
    axis=KEYS,
)
# the key statistics the monitor takes, each with its summaries
KEY_SUMMARIES: dict[str, tuple[Statistic, ...]] = {RECEIVED.name: (RECEIVED_FIRST, RECEIVED_MAX_LATER)}
SUMMARIES: dict[str, Statistic] = {s.name: s for group in KEY_SUMMARIES.values() for s in group}

# every statistic, each declared once, rows first; the views below are its two axes
DECLARED: tuple[Statistic, ...] = (
    ENTROPY,
    SINK_MASS,
    MAX_PROB,
    COLLISION_ENTROPY,
    VARENTROPY,
    DISTANCE,
    FIRST_MASS,
    RECENT_MASS,
    MAX_LOGIT,
    RECEIVED,
    RECEIVED_MAX,
    RECEIVED_MEAN,
)
if len({s.name for s in DECLARED}) != len(DECLARED):  # one name per statistic, across both axes
    raise ValueError("entropy_lens.statistics: two statistics share a name; rename one")
# every row statistic, by name, in the order results, summaries and --stats list them
STATISTICS: dict[str, Statistic] = {s.name: s for s in DECLARED if s.axis == ROWS}
# every key statistic (attention received), by name, in the order `attention_received` returns them
KEY_STATISTICS: dict[str, Statistic] = {s.name: s for s in DECLARED if s.axis == KEYS}


def declared(name: str) -> Statistic:
    """The declared statistic `name` of either axis (KeyError naming the choices otherwise)."""
    stat = STATISTICS.get(name) or KEY_STATISTICS.get(name)
    if stat is None:
        raise KeyError(
            f"{name!r} is no declared statistic; choose from {', '.join(STATISTICS | KEY_STATISTICS)}"
        )
    return stat


def reduction_of(key: str) -> Reduction:
    """How the sum or array named `key` combines: its statistic's reduction for a statistic's own
    (`entropy`, `max_logit`, `received_max`) or a monitor's summary (`received_max_later`), MEAN for its
    square (`entropy_sq`), a count or anything not declared."""
    stat = STATISTICS.get(key) or KEY_STATISTICS.get(key) or SUMMARIES.get(key)
    return stat.reduction if stat is not None else MEAN


DEFAULT_STATS = (ENTROPY.name, SINK_MASS.name)  # what the kernels return unless asked for less
# the statistics --stats may add (entropy is always recorded, sink_mass wherever a model has sinks)
EXTRA_STATS = tuple(name for name in STATISTICS if name not in DEFAULT_STATS)


def check_registered(table: dict, what: str, declared: dict | None = None) -> dict:
    """`table` (name -> an implementation) in the order of `declared` (STATISTICS, the row statistics,
    unless given: KEY_STATISTICS for the key statistics' registries); ValueError, at the import of the
    module that fills it, where a declared statistic lacks one or an undeclared name has one."""
    declared = STATISTICS if declared is None else declared
    missing = [name for name in declared if name not in table]
    unknown = [name for name in table if name not in declared]
    if missing or unknown:
        view = "KEY_STATISTICS" if declared is KEY_STATISTICS else "STATISTICS"
        raise ValueError(
            f"{what}: {'no entry for ' + ', '.join(missing) if missing else ''}"
            f"{'; ' if missing and unknown else ''}{'undeclared ' + ', '.join(unknown) if unknown else ''}; "
            f"every statistic of entropy_lens.statistics.{view} needs exactly one"
        )
    return {name: table[name] for name in declared}


ALL = "all"  # --stats all: every declared statistic


def did_you_mean(names, declared=None) -> str:
    """ " (did you mean max_prob?)": for each of `names`, the declared statistics (`declared`, default
    STATISTICS) it begins (at least three letters, any case) or else the closest one (difflib), or ""
    where none is close: the hint a refusal of an unknown name carries."""
    declared = list(STATISTICS if declared is None else declared)
    close: dict[str, None] = {}
    for name in (str(n).lower() for n in names):
        begun = [known for known in declared if len(name) >= 3 and known.startswith(name)]
        close |= dict.fromkeys(begun or difflib.get_close_matches(name, declared, n=1, cutoff=0.6))
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def parse_stats(stats) -> tuple[str, ...]:
    """`stats` (a name, names comma-separated, or a sequence of names; "all" alone: every statistic) as a
    tuple of declared names in the order given. ValueError in one line where it names no statistic, names
    an unknown one (with the closest declared names: "did you mean max_prob?"), or puts "all" beside
    others."""
    names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats)
    if names == (ALL,):
        return tuple(STATISTICS)
    if ALL in names:
        raise ValueError(
            f"`{ALL}` cannot be combined with other statistics (got {','.join(map(str, names))}); write "
            f"{ALL} alone for every one, or a list of names without it"
        )
    keys = [name for name in names if name in KEY_STATISTICS]
    if keys:
        raise ValueError(
            f"{', '.join(keys)}: a key statistic (attention received by each key), not a row statistic; "
            f"compute it with entropy_lens.attention_received(q, k, stats=...), and choose row statistics "
            f"here from {ALL} or {', '.join(STATISTICS)}"
        )
    unknown = [name for name in names if name not in STATISTICS]
    if unknown or not names:
        what = f"unknown row statistic {unknown!r}{did_you_mean(unknown)}" if unknown else "no row statistic"
        raise ValueError(f"{what}; choose from {ALL} or {', '.join(STATISTICS)}")
    return names


def split_stats(stats) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`stats` of both axes (a name, names comma-separated, a sequence; "all" alone: every row and every
    key statistic) as (row statistics, key statistics), each in the order given, each checked as
    `parse_stats` and `parse_key_stats` check theirs; the rows default to DEFAULT_STATS where only key
    statistics are named (entropy is always recorded). What a recorder and a scan's --stats take."""
    names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats)
    if names == (ALL,):
        return tuple(STATISTICS), tuple(KEY_STATISTICS)
    if ALL in names:
        parse_stats(names)  # its refusal of `all` beside other names
    unknown = [name for name in names if name not in STATISTICS and name not in KEY_STATISTICS]
    if unknown:  # either axis's name: the hint and the choices name both
        raise ValueError(
            f"unknown statistic {unknown!r}{did_you_mean(unknown, [*STATISTICS, *KEY_STATISTICS])}; choose "
            f"{ALL}, row statistics from {', '.join(STATISTICS)}, or key statistics from {', '.join(KEY_STATISTICS)}"
        )
    keys = tuple(name for name in names if name in KEY_STATISTICS)
    rows = tuple(name for name in names if name not in KEY_STATISTICS)
    return (parse_stats(rows) if rows or not keys else DEFAULT_STATS), keys


def parse_key_stats(stats) -> tuple[str, ...]:
    """`stats` (a name, names comma-separated, or a sequence; "all" alone: every key statistic) as a tuple
    of declared key statistics (KEY_STATISTICS) in the order given; ValueError in one line otherwise (a
    row statistic names `attention_stats`)."""
    names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats)
    if names == (ALL,):
        return tuple(KEY_STATISTICS)
    rows = [name for name in names if name in STATISTICS]
    unknown = [
        name for name in names if name not in KEY_STATISTICS and name not in STATISTICS and name != ALL
    ]
    if ALL in names and not rows and not unknown:
        raise ValueError(
            f"`{ALL}` cannot be combined with other key statistics (got {','.join(map(str, names))}); write "
            f"{ALL} alone for every one, or the names without it"
        )
    if rows or unknown or not names:
        what = (
            f"{', '.join(rows)}: a row statistic (use entropy_lens.attention_stats)"
            if rows
            else f"unknown key statistic {unknown!r}{did_you_mean(unknown, KEY_STATISTICS)}"
            if unknown
            else "no key statistic"
        )
        raise ValueError(f"{what}; choose key statistics from {ALL} or {', '.join(KEY_STATISTICS)}")
    return names
