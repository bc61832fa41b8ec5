"""train-tiny's --monitor: the attention statistics of its optimiser steps (monitor.AttentionMonitor),
saved as `<out>/attention-history.npz` (monitor/history.py's file; its steps are the optimiser steps).

Watching changes no number of the run: the monitor records through the model's own sdpa output and
gradients (`fused="off"`: the statistics in a no-grad pass of their own), so the weights are bit-identical
with and without it (tests/monitor/test_monitor_runs.py). ALiBi (BLOOM blocks) keeps its layers' own attention
code for the output too (capture/paths.py's "own-then-entropy"), not sdpa's float mask, which rounds
differently from BLOOM's own.

Resuming: every checkpoint also writes the history so far to `<out>.partial/attention-history.npz`; a
resumed run continues it, so the finished history has every step of the whole run. A run resumed with
--monitor from a checkpoint that kept no history (the interrupted run had no --monitor) says so, and its
history starts at the resumed step; one that recorded other statistics (compared as a set) or another
--monitor-every is refused, and one that recorded nothing yet takes any --monitor (training/resumable.py:
what a resume keeps, refuses and says). A statistic no recorded step could measure (sink_mass without
sinks) is refused when the monitor is made, before step 1 (monitor/applies.py). Under --init-from (only
the passkey phase runs) the history starts at the phase's first step.
"""

from __future__ import annotations

from pathlib import Path

from entropy_lens.monitor import AttentionMonitor, History
from entropy_lens.monitor.settings import MonitorSettings, check_monitor
from entropy_lens.training.resumable import joined, prior_history

__all__ = ["HISTORY", "Watch"]

HISTORY = "attention-history.npz"


class Watch:
    """The monitor of one train-tiny run (a no-op without --monitor): `with watch:` around the loop,
    `watch.step = n` before step n's forward, `watch.save(path)` at each checkpoint and at the end.
    `note`: the resumed checkpoint's training.resumable.HISTORY_NOTE (what its history recorded)."""

    def __init__(
        self,
        settings: MonitorSettings | None,
        model,
        *,
        work: Path,
        start: int,
        resumed: bool,
        progress: bool,
        note: dict | None = None,
    ):
        stats = check_monitor(settings)
        self.monitor = (
            AttentionMonitor(model, stats=stats, every=settings.every, fused="off") if stats else None
        )
        self.prior = (
            prior_history(work / HISTORY, self.monitor, start, note=note, progress=progress)
            if resumed
            else None
        )
        if stats and start and not resumed and progress:  # --init-from: the passkey phase only
            print(f"entropy-lens: --monitor's history starts at step {start + 1} (--init-from)", flush=True)

    def __enter__(self):
        if self.monitor is not None:
            self.monitor.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        if self.monitor is not None:
            self.monitor.close()
        return False

    @property
    def step(self) -> int | None:
        return None if self.monitor is None else self.monitor.step

    @step.setter
    def step(self, value: int) -> None:
        if self.monitor is not None:
            self.monitor.step = value

    def save(self, path: Path) -> History | None:
        """The history of the whole run so far to `path` (atomically), returned; nothing without --monitor."""
        if self.monitor is None:
            return None
        history = joined(self.prior, self.monitor.history)
        history.save(path)
        return history
