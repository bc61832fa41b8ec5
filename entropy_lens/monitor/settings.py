"""What a training command's --monitor says, and the statistics a monitor records, checked before any
work, without torch (`--help` and the flags' parsing load none):

    MonitorSettings(monitor="entropy,max_logit", monitor_every=10)   # --monitor, --monitor-every
    check_monitor(settings) -> ("entropy", "max_logit")             # () without --monitor
    check_monitor_stats(stats)                                       # AttentionMonitor's `stats=`

train-tiny and search-heads (training/) and the Trainer callback take them from here; AttentionMonitor
(monitor.py) checks its `stats` with `check_monitor_stats`.
"""

from __future__ import annotations

from dataclasses import dataclass

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import parse_stats
from entropy_lens.settings import MAX_COUNT, Checked, setting
from entropy_lens.statistics import ENTROPY, MAX_LOGIT, STATISTICS, did_you_mean

__all__ = ["MONITOR_STATS", "MonitorSettings", "check_monitor", "check_monitor_stats"]

# What AttentionMonitor records by default: entropy and the max logit (QK-clip's quantity)
MONITOR_STATS = (ENTROPY.name, MAX_LOGIT.name)


@dataclass(frozen=True)
class MonitorSettings(Checked):
    """A training command's attention monitor (monitor.AttentionMonitor). Not a config field: watching
    changes no number of the run, so it stays out of every recipe, record and cache key."""

    monitor: str | None = setting(
        None,
        metavar="STATS",
        help="record these attention row statistics (comma-separated) of every --monitor-every-th "
        "optimiser step, per head, and save their history beside the output (monitor/history.py)",
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
    """`stats` as a tuple of distinct known row statistics; EntropyLensError in one line naming the
    known ones otherwise."""
    stats = (stats,) if isinstance(stats, str) else stats
    if not isinstance(stats, (tuple, list)) or not all(isinstance(s, str) for s in stats):
        raise EntropyLensError(f"stats must be a tuple of names (got {stats!r}); pass stats=('entropy',)")
    unknown = [s for s in stats if s not in STATISTICS]
    if unknown or not stats or len(set(stats)) != len(stats):
        what = (
            f"unknown statistic {', '.join(map(repr, unknown))}{did_you_mean(unknown)}"
            if unknown
            else f"stats={tuple(stats)!r}"
        )
        raise EntropyLensError(
            f"AttentionMonitor cannot record {what}; pass distinct names from {', '.join(STATISTICS)}"
        )
    return parse_stats(stats)  # checked above: parsed once, passed to the ScaleSession as it is
