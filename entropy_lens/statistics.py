"""The row statistics, each declared once, without torch (`--help` and results readers load none): a
`Statistic` holds what every layer needs to know of it (its unit, description, bound, plot label, whether
its square is summed, how a per-head summary reduces it), and every table derives from `STATISTICS`:

    kernels/stats.py      @read("entropy", needs=...)   how a kernel reads it off the streaming state
    kernels/reference.py  @definition("entropy")        its float64 definition from the probabilities
    results, analysis, view, plotting                   STATISTICS[name].unit, .bound, .label, ...

Both registries are checked against STATISTICS when their module is imported (`check_registered`): a
statistic declared here without a read or a definition fails the import. Code that needs a statistic by
name takes it from here (`ENTROPY.name`), so the name is written once (tests/kernels/test_stats.py holds it).

`parse_stats` reads a --stats value (or a `stats=` argument) into names, once for every caller: scan's
--stats, train-tiny's --monitor, `AttentionMonitor(stats=...)`, `EntropyRecorder(stats=...)` and the
kernels' `stats=`.


The kernels that compute the statistics (BACKENDS) and the --fused modes are flags.py's.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

PROBABILITY = "probability"  # the unit of a statistic that lies in [0, 1]
LOG_BOUND = "log"  # a row of i + 1 keys has at most ln(i + 1) nats (one outcome more with a sink)
POSITION_BOUND = "position"  # a causal row at position i looks back at most i tokens
SUMMARIES = ("mean", "max")  # how a per-head summary reduces a statistic over rows


@dataclass(frozen=True)
class Statistic:
    """One row statistic: `name` (its results arrays and flags), `unit` (what the arrays store),
    `description`, `label` (a figure's axis), `bound`: how the largest value a causal row at position i
    can take grows with i (LOG_BOUND: ln(i + 1); POSITION_BOUND: i), None where none grows with i (a
    probability is at most 1 everywhere); `squared`: whether the host sums its square too (the results'
    `<name>_sq`; every statistic but sink_mass, whose results arrays hold no square); `summary`: how
    a per-head summary reduces it over rows, "mean", or "max" for a maximum."""

    name: str
    unit: str
    description: str
    label: str
    bound: str | None = None
    squared: bool = True
    summary: str = "mean"

    def __post_init__(self):
        if self.bound not in (None, LOG_BOUND, POSITION_BOUND) or self.summary not in SUMMARIES:
            raise ValueError(
                f"statistic {self.name!r}: bound {self.bound!r} / summary {self.summary!r} unknown; use "
                f"bound None, {LOG_BOUND!r} or {POSITION_BOUND!r} and summary one of {', '.join(SUMMARIES)}"
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

MAX_LOGIT = Statistic(
    "max_logit",
    "score",
    "max_j s_j over the row's attendable keys: λ q·k after the softcap and the position bias (ALiBi, key "
    "bias), the sink excluded; 0 for a row with no key (QK-clip's quantity)",
    "max attention logit",
    squared=False,
    summary="max",
)

# every row statistic, by name, in the order results, summaries and --stats list them
STATISTICS: dict[str, Statistic] = {
    s.name: s
    for s in (ENTROPY, SINK_MASS, MAX_PROB, COLLISION_ENTROPY, VARENTROPY, DISTANCE, FIRST_MASS, MAX_LOGIT)
}
MAXIMA = frozenset(s.name for s in STATISTICS.values() if s.summary == "max")  # summed as maxima
DEFAULT_STATS = (ENTROPY.name, SINK_MASS.name)  # what the kernels return unless asked for less
# the statistics --stats may add (entropy is always recorded, sink_mass wherever a model has sinks)
EXTRA_STATS = tuple(name for name in STATISTICS if name not in DEFAULT_STATS)


def check_registered(table: dict, what: str) -> dict:
    """`table` (name -> an implementation) in STATISTICS's order; ValueError, at the import of the module
    that fills it, where a declared statistic lacks one or an undeclared name has one."""
    missing = [name for name in STATISTICS if name not in table]
    unknown = [name for name in table if name not in STATISTICS]
    if missing or unknown:
        raise ValueError(
            f"{what}: {'no entry for ' + ', '.join(missing) if missing else ''}"
            f"{'; ' if missing and unknown else ''}{'undeclared ' + ', '.join(unknown) if unknown else ''}; "
            "every statistic of entropy_lens.statistics.STATISTICS needs exactly one"
        )
    return {name: table[name] for name in STATISTICS}


ALL = "all"  # --stats all: every declared statistic


def did_you_mean(names) -> str:
    """ " (did you mean max_prob?)": for each of `names`, the declared statistics it begins (at least three
    letters, any case) or else the closest one (difflib), or "" where none is close: the hint a refusal
    of an unknown name carries."""
    close: dict[str, None] = {}
    for name in (str(n).lower() for n in names):
        begun = [known for known in STATISTICS if len(name) >= 3 and known.startswith(name)]
        close |= dict.fromkeys(begun or difflib.get_close_matches(name, list(STATISTICS), n=1, cutoff=0.6))
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
    unknown = [name for name in names if name not in STATISTICS]
    if unknown or not names:
        what = f"unknown row statistic {unknown!r}{did_you_mean(unknown)}" if unknown else "no row statistic"
        raise ValueError(f"{what}; choose from {ALL} or {', '.join(STATISTICS)}")
    return names
