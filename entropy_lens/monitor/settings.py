"""What a training command's --monitor says, and the statistics a monitor records, checked before any
work, without torch (`--help` and the flags' parsing load none):

    MonitorSettings(monitor="entropy,max_logit", monitor_every=10)   # --monitor, --monitor-every
    check_monitor(settings) -> ("entropy", "max_logit")             # () without --monitor
    check_monitor_stats(stats)                                       # AttentionMonitor's `stats=`
    summaries(("entropy", "received")) -> ("entropy", "received_first", "received_max_later")
    session_stats(("entropy", "received")) -> ("entropy", "received", "received_mean")

train-tiny and search-heads (training/) and the Trainer callback take them from here; AttentionMonitor
(monitor.py) checks its `stats` with `check_monitor_stats`. A monitor records row statistics and, of the
attention each key receives, `received` alone, as two summaries per head (statistics.SUMMARIES): the
first real key's share (an attention sink forming) and the largest share of any later key (a heavy
hitter); its capture session computes `received` and `received_mean` for them (`session_stats`). A
row-slice statistic (statistics.ROW_SLICE_STATISTICS, with its parameter: AttentionMonitor's spans=, ...) is
recorded as its arrays (`expanded`: offset_prob@0, offset_prob@1, ...), each summarised as a row statistic.
"""

from __future__ import annotations

from dataclasses import dataclass

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import did_you_mean
from entropy_lens.settings import MAX_COUNT, Checked, setting
from entropy_lens.statistics import (
    BY_NAME,
    ENTROPY,
    KEYS,
    MAX_LOGIT,
    RECEIVED,
    RECEIVED_MEAN,
    ROW_SLICE_STATISTICS,
    STATISTICS,
    SUMMARIES,
)
from entropy_lens.statistics.slices import Slices, base_name

__all__ = [
    "MONITOR_STATS",
    "MonitorSettings",
    "check_monitor",
    "check_monitor_stats",
    "expanded",
    "monitored",
    "session_stats",
    "summaries",
]

# What AttentionMonitor records by default: entropy and the max logit (QK-clip's quantity)
MONITOR_STATS = (ENTROPY.name, MAX_LOGIT.name)


@dataclass(frozen=True)
class MonitorSettings(Checked):
    """A training command's attention monitor (monitor.AttentionMonitor). Not a config field: watching
    changes no number of the run, so it stays out of every recipe, record and cache key."""

    monitor: str | None = setting(
        None,
        metavar="STATS",
        help="record these attention statistics (comma-separated: row statistics, and received for the "
        "first key's share and the largest later key's share) of every --monitor-every-th optimiser step, "
        "per head, and save their history beside the output (monitor/history.py)",
    )
    monitor_every: int | None = setting(
        None, metavar="N", at_least=1, at_most=MAX_COUNT, help="record every Nth optimiser step (default 1)"
    )
    every = property(lambda self: self.monitor_every or 1)  # --monitor-every, else every step

    @property
    def stats(self) -> tuple[str, ...]:
        """--monitor's names (empty: no monitor)."""
        return tuple(filter(None, (self.monitor or "").split(",")))


def check_monitor(settings: MonitorSettings | None) -> tuple[str, ...]:
    """A training command's --monitor statistics, checked before any work (empty: no monitor); a flag
    that would leave the run unwatched, silently (--monitor '', --monitor-every alone), is refused too.
    EntropyLensError in one line."""
    if settings is not None and settings.monitor is not None and not settings.stats:
        raise EntropyLensError(
            f"--monitor {settings.monitor!r} names no statistic; pass one or more, such as --monitor entropy, "
            "or leave --monitor out to train without the monitor"
        )
    if settings is not None and settings.monitor is None and settings.monitor_every is not None:
        raise EntropyLensError(
            f"--monitor-every {settings.monitor_every} needs --monitor; pass the statistics to record, such "
            "as --monitor entropy, or leave --monitor-every out"
        )
    if settings is None or not settings.stats:
        return ()
    try:
        return check_monitor_stats(settings.stats)
    except EntropyLensError as err:
        raise EntropyLensError(f"--monitor {settings.monitor}: {err}") from None


def check_monitor_stats(stats) -> tuple[str, ...]:
    """`stats` as a tuple of distinct known row statistics and key statistics the monitor summarises
    (statistics.SUMMARIES: received); EntropyLensError in one line naming the known ones otherwise.

    Args:
        stats: a name or a tuple of names.

    Returns:
        tuple: the names, in the order given.

    Raises:
        EntropyLensError: not names, none, a repeated or unknown name, or a key statistic (or a summary's
            name) other than received.
    """
    stats = (stats,) if isinstance(stats, str) else stats
    if not isinstance(stats, (tuple, list)) or not all(isinstance(s, str) for s in stats):
        raise EntropyLensError(f"stats must be a tuple of names (got {stats!r}); pass stats=('entropy',)")
    other = [
        s for s in stats if BY_NAME.get(s) is not None and BY_NAME[s].axis == KEYS and s not in SUMMARIES
    ]
    if other:
        raise EntropyLensError(
            f"AttentionMonitor cannot record {', '.join(other)}: of the attention each key receives it records "
            f"{RECEIVED.name}'s two summaries per head ({' and '.join(x.name for x in SUMMARIES[RECEIVED.name])}); pass {RECEIVED.name}"
        )
    unknown = [
        s for s in stats if s not in STATISTICS and s not in SUMMARIES and s not in ROW_SLICE_STATISTICS
    ]
    if unknown or not stats or len(set(stats)) != len(stats):
        what = (
            f"unknown statistic {', '.join(map(repr, unknown))}{did_you_mean(unknown)}"
            if unknown
            else f"stats={tuple(stats)!r}"
        )
        raise EntropyLensError(
            f"AttentionMonitor cannot record {what}; pass distinct names from "
            f"{', '.join((*STATISTICS, *SUMMARIES, *ROW_SLICE_STATISTICS))}"
        )
    return tuple(stats)


def expanded(stats: tuple[str, ...], slices: Slices) -> tuple[str, ...]:
    """`stats` (checked) with each row-slice statistic replaced by its arrays in `slices` (the session's
    `Measure.slices`): what a forward reports and the summaries are read from.

    Args:
        stats: the monitor's statistics, as `check_monitor_stats` returns them.
        slices: the parsed row-slice statistics and their parameters.

    Returns:
        tuple: ("entropy", "offset_prob@0", "offset_prob@1", "received", ...).
    """
    return tuple(
        name
        for s in stats
        for name in ([a for a in slices.arrays if base_name(a) == s] if s in ROW_SLICE_STATISTICS else [s])
    )


def is_row_array(name: str) -> bool:
    """Whether `name` is summarised as a row statistic: one of STATISTICS, or a row-slice statistic's array."""
    return name in STATISTICS or base_name(name) in ROW_SLICE_STATISTICS


def summaries(stats: tuple[str, ...]) -> tuple[str, ...]:
    """The per-head summaries a monitor of `stats` (checked) records, in order: a row statistic itself, a
    key statistic its summaries (received: received_first, received_max_later).

    Args:
        stats: the monitor's statistics, as `check_monitor_stats` returns them.

    Returns:
        tuple: the names of `AttentionMonitor.latest()`'s arrays and of the history's.
    """
    return tuple(n for s in stats for n in ([s] if is_row_array(s) else [x.name for x in SUMMARIES[s]]))


def monitored(names) -> tuple[str, ...]:
    """The monitor's statistics behind the summaries `names` (a history's arrays): `summaries`' inverse.

    Args:
        names: summary names, as a history's `stats`.

    Returns:
        tuple: each row statistic, and received once for its summaries, in order.
    """
    return tuple(dict.fromkeys(BY_NAME[n].of or n if n in BY_NAME else base_name(n) for n in names))


def session_stats(stats: tuple[str, ...]) -> tuple[str, ...]:
    """What the capture session of a monitor of `stats` (checked) records: its row statistics and, for
    received, the key statistics its summaries are read from (received, received_mean).

    Args:
        stats: the monitor's statistics, as `check_monitor_stats` returns them.

    Returns:
        tuple: statistic names for `ScaleSession(stats=...)`.
    """
    keys = (RECEIVED.name, RECEIVED_MEAN.name) if any(s in SUMMARIES for s in stats) else ()
    return tuple(s for s in stats if s in STATISTICS or s in ROW_SLICE_STATISTICS) + keys
