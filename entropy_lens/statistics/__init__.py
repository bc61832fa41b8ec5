"""Every statistic, each declared once, without torch (`--help` and results readers load none): a
`Statistic` holds what every layer needs to know of it (its unit, description, bound, plot label, whether
its square is summed, its `Reduction`: how rows combine into one number, its axis: a value per query
row or per key, and its `Parameter`s: first_mass's K, the key statistics' query window), and every
table derives from `DECLARED`:

    kernels/stats.py      @read("entropy", needs=...)   how a kernel reads it off the streaming state
    kernels/reference.py  @definition("entropy")        its float64 definition from the probabilities
    results, analysis, view, plotting                   STATISTICS[name].unit, .bound, .label, ...
    flags.Measure, runs/configs.py                      PARAMETERS: keywords, flags, meta, cache keys
    kernels/slice_stats.py  @defined, @streamed         a row-slice statistic's (`sliced`: its parameter
                                                        gives it a trailing axis) float64 definition and
                                                        accumulator on the row pass's log-sum-exp
    flags.Measure.slices, runs/configs.py        SLICE_PARAMETERS: keywords, flags, meta

One registry of reads and one of definitions, both axes; each axis is checked against its declaration
when the module that fills it is imported (`check_registered(table, what, axis)`): a statistic declared
here without a read or a definition fails the import. Code that needs a statistic by name takes it from
here (`ENTROPY.name`), so the name is written once (tests/kernels/test_stats.py holds it).

Two axes, one declaration. A row statistic (ROWS: a value per query row) and a key statistic (KEYS: a
value per key, the attention it receives, `entropy_lens.attention_received`) are both a `Statistic` in
`DECLARED`; `BY_AXIS` views it by axis (`STATISTICS`: the rows, `KEY_STATISTICS`: the keys), leaving
out the monitor's summaries of a key statistic (`of`: received_first, received_max_later; `SUMMARIES`),
which no kernel computes, and the row-slice statistics (`sliced`: `ROW_SLICE_STATISTICS`), which the
slice pass computes rather than a read of the row pass's state. Everything that iterates `STATISTICS` (results, the monitor, --stats, the
docs' tables) means the row statistics. `flags.parse_stats(stats, axis)` reads a --stats value or a
`stats=` argument for either axis or both.
"""

from __future__ import annotations

from dataclasses import dataclass

from entropy_lens.statistics.parameter import (
    Parameter,
    SliceParameter,
    base_name,
    check_bins,
    check_offsets,
    check_spans,
    check_top_keys,
)
from entropy_lens.statistics.reduction import MAX, MEAN, REDUCTIONS, Reduction

PROBABILITY = "probability"  # the unit of a statistic that lies in [0, 1]
LOG_BOUND = "log"  # a row of i + 1 keys has at most ln(i + 1) nats (one outcome more with a sink)
POSITION_BOUND = "position"  # a causal row at position i looks back at most i tokens
ROWS, KEYS = "rows", "keys"  # a statistic's axis: one value per query row, or per key (attention received)
AXES = (ROWS, KEYS)


# the parameters of the statistics below, each declared once
FIRST_KEYS = Parameter(
    "first_keys",
    1,
    "K",
    "first {} keys",
    "K of first_mass: the mass on a row's first K real (unpadded) keys",
    keyed_at_default=True,
)
RECENT_KEYS = Parameter(
    "recent_keys",
    64,
    "W",
    "last {} keys",
    "W of recent_mass: the mass on a row's last W keys, those ending at its own position",
)
QUERY_WINDOW = Parameter(
    "query_window",
    None,
    "W",
    "last {} query rows",
    "the key statistics count only the last W query rows of each window (SnapKV's observation window); "
    "default: every row",
    example=32,
)


@dataclass(frozen=True)
class Statistic:
    """One row statistic: `name` (its results arrays and flags), `unit` (what the arrays store),
    `description`, `label` (a figure's axis), `bound`: how the largest value a causal row at position i
    can take grows with i (LOG_BOUND: ln(i + 1); POSITION_BOUND: i), None where none grows with i (a
    probability is at most 1 everywhere); `squared`: whether the host sums its square too (the results'
    `<name>_sq`; every statistic but sink_mass, whose results arrays hold no square); `reduction`: how
    values combine (MEAN, or MAX for a maximum); `axis`: ROWS (a value per query row) or KEYS (per key);
    `parameters`: what the caller may set of it (first_mass's K, the key statistics' query window);
    `of`: None, or the statistic it summarises (the monitor's summaries of received, computed from it);
    `sliced`: None, or the parameter that gives a row-slice statistic its trailing axis (its spans,
    offsets, k or bins): computed from the row pass's log-sum-exp by the slice pass (kernels/slices.py's
    `@streamed`, held to its `@defined` float64 definition), not read off the row pass's state."""

    name: str
    unit: str
    description: str
    label: str
    bound: str | None = None
    squared: bool = True
    reduction: Reduction = MEAN
    axis: str = ROWS
    parameters: tuple[Parameter, ...] = ()
    of: str | None = None
    sliced: SliceParameter | None = None

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
    "first-token mass",  # K = 1; `label_of` names K otherwise
    parameters=(FIRST_KEYS,),
)
RECENT_MASS = Statistic(
    "recent_mass",
    PROBABILITY,
    "Σ_{pos_i − W < j <= pos_i} p_j: the mass on the last W keys up to the row's own position (the sink "
    "is no key)",
    "recent-window mass",  # `label_of` names W
    parameters=(RECENT_KEYS,),
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
    parameters=(QUERY_WINDOW,),
)
RECEIVED_MAX = Statistic(
    "received_max",
    PROBABILITY,
    "max_i p_ij over the counted query rows: the largest share any row gives key j (0 where none can)",
    "largest share received",
    squared=False,
    reduction=MAX,
    axis=KEYS,
    parameters=(QUERY_WINDOW,),
)
RECEIVED_MEAN = Statistic(
    "received_mean",
    PROBABILITY,
    "Σ_i p_ij / n_j, n_j the counted query rows that can attend key j (causality, window, padding); 0 "
    "where none can (kvpress's ObservedAttentionPress)",
    "mean share received",
    axis=KEYS,
    parameters=(QUERY_WINDOW,),
)

# What AttentionMonitor records of a key statistic per layer and head at each step (monitor/summary.py):
# not a value per key but two numbers over the keys, each reduced over a step's batch rows by its own
# reduction: statistics derived from RECEIVED (`of`), which no kernel computes
RECEIVED_FIRST = Statistic(
    "received_first",
    PROBABILITY,
    "received at a batch row's first real key over its counted query rows: the share of attention an "
    "attention sink at the first token takes",
    "first key's share",
    squared=False,
    axis=KEYS,
    of=RECEIVED.name,
)
RECEIVED_MAX_LATER = Statistic(
    "received_max_later",
    PROBABILITY,
    "the largest received_mean of any key after a batch row's first real one that enough of its counted "
    "rows see (`ranked_rows`; a mean over a few rows at the end is noise): a heavy hitter appearing",
    "largest later key's share",
    squared=False,
    reduction=MAX,
    axis=KEYS,
    of=RECEIVED.name,
)

# The row-slice statistics: a row's mass on named key spans, its probability at given offsets behind it,
# its most probable keys, its mass by distance (Lookback Lens' prompt against generated mass, LLM-Check's
# own-key and RAUQ's previous-token probability, retrieval heads' top key, how far attention reaches),
# each with a trailing axis its parameter gives (`sliced`): computed on the row pass's log-sum-exp by the
# slice pass at every row (kernels/slices.py), summed over rows by scans, EntropyRecorder and the monitor
# as an array per slot, kept whole per generated token by GenerationRecorder
BUILT_IN_SPANS = ("prompt", "generated")  # span_mass's spans of every generation, before the caller's
SPANS = SliceParameter(
    "spans",
    None,
    lambda value: check_spans(value, reserved=BUILT_IN_SPANS),
    lambda value: tuple(name for name, _ in value),
    lambda value: {name: list(span) for name, span in value},
    needs="spans={name: (start, stop)}: the keys whose mass each row gives, e.g. spans={'doc': (0, 200)}",
    built_in=BUILT_IN_SPANS,
    named="span_names",
    example="doc=0:200",
    help="span_mass's named key spans, tokens A..B−1 of each sequence (the first is 0), e.g. doc=0:200 "
    "(generate: besides prompt and generated, which it always records)",
    metavar="NAME=A:B,...",
)
OFFSETS = SliceParameter(
    "offsets",
    (),
    check_offsets,
    lambda value: tuple(map(str, value)),
    list,
    needs="offsets=(d, ...): the keys d positions behind each row (0: its own key, 1: the previous token), "
    "e.g. offsets=(0, 1)",
    slot="{} behind",
    example="0,1",
    help="offset_prob's offsets: the key D positions behind each row (0: its own)",
    metavar="D,...",
)
TOP_KEYS = SliceParameter("top_keys", 1, check_top_keys, lambda value: None, int, example="3")
DISTANCE_BINS = SliceParameter(
    "distance_bins",
    None,
    check_bins,
    lambda value: tuple(map(str, value)),
    list,
    needs="distance_bins=(0, b1, ...): the edges of the bins of distance i − j, e.g. (0, 16, 256)",
    slot="{}+ back",
    example="0,16,256",
    help="distance_mass's bins of distance i − j behind each row: [0, B1), [B1, B2), ..., the last open, "
    "e.g. 0,16,256",
    metavar="0,B1,...",
)
SPAN_MASS = Statistic(
    "span_mass",
    PROBABILITY,
    "Σ_{a <= j < b} p_j per named key span [a, b) in real positions: 'prompt', 'generated' (from the first "
    "generated token on) and the caller's; the sink is no key",
    "span mass",
    sliced=SPANS,
)
OFFSET_PROB = Statistic(
    "offset_prob",
    PROBABILITY,
    "p_{i − d} per offset d: the probability a row gives the key d real positions behind its own (d = 0: "
    "its own key; 0 where that key is before the sequence or out of the row's sight)",
    "offset probability",
    sliced=OFFSETS,
)
TOP_KEY = Statistic(
    "top_key",
    "position",
    "the real positions of the row's k most probable keys, exact ties the earliest first (−1 past the keys "
    "the row sees); their probabilities beside them (top_key_prob, float32: two keys may show one "
    "probability there and rank the later first, their values differing below float32's rounding)",
    "top key",
    squared=False,
    sliced=TOP_KEYS,
)
DISTANCE_MASS = Statistic(
    "distance_mass",
    PROBABILITY,
    "Σ_{b_m <= i − j < b_(m+1)} p_j per bin m of distance_bins (0, b1, ...), i − j in real positions, the "
    "last bin open: how far attention reaches (local, middle, far); the sink is no key",
    "mass by distance",
    sliced=DISTANCE_BINS,
)
TOP_KEY_PROB = TOP_KEY.name + "_prob"  # the probabilities of top_key's keys, an array beside it

# every statistic, each declared once, rows first; the views below are its axes
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
    RECEIVED_FIRST,
    RECEIVED_MAX_LATER,
    SPAN_MASS,
    OFFSET_PROB,
    TOP_KEY,
    DISTANCE_MASS,
)
if len({s.name for s in DECLARED}) != len(DECLARED):  # one name per statistic, across both axes
    raise ValueError("entropy_lens.statistics: two statistics share a name; rename one")
BY_NAME: dict[str, Statistic] = {s.name: s for s in DECLARED}
# every statistic a kernel computes, by axis, in the order results, summaries and --stats list them
BY_AXIS: dict[str, dict[str, Statistic]] = {
    axis: {s.name: s for s in DECLARED if s.axis == axis and s.of is None and s.sliced is None}
    for axis in AXES
}
# the row-slice statistics (`sliced`), computed by the slice pass, and their parameters by name
ROW_SLICE_STATISTICS: dict[str, Statistic] = {s.name: s for s in DECLARED if s.sliced is not None}
SLICE_PARAMETERS: dict[str, SliceParameter] = {s.sliced.name: s.sliced for s in ROW_SLICE_STATISTICS.values()}
STATISTICS: dict[str, Statistic] = BY_AXIS[ROWS]  # the row statistics
KEY_STATISTICS: dict[str, Statistic] = BY_AXIS[KEYS]  # the key statistics (attention received)
# the monitor's summaries of a key statistic, by the statistic they summarise
SUMMARIES: dict[str, tuple[Statistic, ...]] = {
    name: tuple(s for s in DECLARED if s.of == name)
    for name in KEY_STATISTICS
    if any(s.of == name for s in DECLARED)
}
# every parameter of a statistic, by name, in the order of DECLARED; those of the row statistics
PARAMETERS: dict[str, Parameter] = {p.name: p for s in DECLARED for p in s.parameters}
ROW_PARAMETERS: dict[str, Parameter] = {p.name: p for s in STATISTICS.values() for p in s.parameters}


RANKED_ROWS = 64  # a key's mean share (received_mean) is ranked where at least this many counted rows see it


def ranked_rows(counted: int) -> int:
    """How many counted query rows must see a key for its mean share (received_mean) to be ranked among
    keys (the scan summary's "most received", the monitor's received_max_later): RANKED_ROWS, or half of
    `counted` where there are fewer than twice that (at least 1). The last keys of a causal sequence
    are seen by 1, 2, ... rows, and a mean over so few is noise that reads as a heavy hitter."""
    return min(RANKED_ROWS, max(1, counted // 2))


def declared(name: str) -> Statistic:
    """The declared statistic `name` of either axis (KeyError naming the choices otherwise)."""
    stat = BY_NAME.get(name)
    if stat is None or stat.of is not None or stat.sliced is not None:
        raise KeyError(
            f"{name!r} is no declared statistic; choose from {', '.join(STATISTICS | KEY_STATISTICS)}"
        )
    return stat


def statistic_of(array: str) -> Statistic:
    """The statistic an array (or a sum) records: a declared statistic under its own name, or a row-slice
    statistic under its array's (`span_mass@doc`, `offset_prob@1`: statistics/slices.py); KeyError naming
    the choices otherwise."""
    return ROW_SLICE_STATISTICS.get(base_name(array)) or declared(array)


def reduction_of(key: str) -> Reduction:
    """How the sum or array named `key` combines: its statistic's reduction for a statistic's own
    (`entropy`, `max_logit`, `received_max`) or a monitor's summary (`received_max_later`), MEAN for its
    square (`entropy_sq`), a count or anything not declared."""
    stat = BY_NAME.get(key)
    return stat.reduction if stat is not None else MEAN


DEFAULT_STATS = (ENTROPY.name, SINK_MASS.name)  # what the kernels return unless asked for less
# the statistics --stats may add (entropy is always recorded, sink_mass wherever a model has sinks)
EXTRA_STATS = tuple(name for name in STATISTICS if name not in DEFAULT_STATS)


def check_registered(table: dict, what: str, axis: str = ROWS) -> dict:
    """The entries of `table` (name -> an implementation: the one registry of kernels/stats.py's reads,
    or of kernels/reference.py's definitions) on `axis`, in the order of BY_AXIS[axis]; ValueError, at
    the import of the module that fills that axis, where a declared statistic lacks one or an entry
    names no declared statistic."""
    declared = BY_AXIS[axis]
    missing = [name for name in declared if name not in table]
    unknown = [
        name for name in table if name not in BY_NAME or BY_NAME[name].of is not None or BY_NAME[name].sliced
    ]
    if missing or unknown:
        raise ValueError(
            f"{what}: {'no entry for ' + ', '.join(missing) if missing else ''}"
            f"{'; ' if missing and unknown else ''}{'undeclared ' + ', '.join(unknown) if unknown else ''}; "
            f"every statistic of entropy_lens.statistics.BY_AXIS[{axis!r}] needs exactly one"
        )
    return {name: table[name] for name in declared}
