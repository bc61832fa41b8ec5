"""The records of an `AttentionMonitor` (monitor.py): each recorded step's summary (summary.StepSummary),
the forwards of one step merged into one record, and what is read of them: `latest()`, `scalars()`, the
`history` and its file (history.py). A non-finite step is recorded as such, and said once per monitor
(NonFiniteStepWarning).

`MonitorRecords` is the half of AttentionMonitor that keeps records; monitor.py's half decides which
forwards record and installs the hooks that record them, and hands each finished forward to `_add`.
"""

from __future__ import annotations

import warnings

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor.history import History
from entropy_lens.monitor.summary import NonFiniteStepWarning, StepSummary, flat_scalars


class MonitorRecords:
    """The record keeping of AttentionMonitor, which subclasses it and provides `model`, `every`,
    `n_layers`, `n_heads`, `summaries` (the names of latest()'s and the history's arrays) and `meta()`."""

    def __init__(self) -> None:
        self._records: list[StepSummary] = []
        self._warned_nonfinite = False

    def _add(self, summary: StepSummary) -> None:
        """A finished forward's summary: merged into its step's record, or a record of its own."""
        if self._records and self._records[-1].step == summary.step:
            self._records[-1] = self._records[-1].merge(summary)
        else:
            self._records.append(summary)
        if summary.nonfinite and not self._warned_nonfinite:
            self._warned_nonfinite = True
            warnings.warn(
                f"{type(self.model).__name__}: the attention of step {summary.step} is not finite "
                f"({summary.nonfinite.splitlines()[0]}); the step is recorded as non-finite (nonfinite_steps, "
                "scalars()['attention/nonfinite']) and the training loop decides what to do with it; said "
                "once per monitor",
                NonFiniteStepWarning,
                stacklevel=2,
            )

    # -- results ------------------------------------------------------------------------------------
    @property
    def recorded(self) -> int:
        """How many steps have been recorded (non-finite ones included)."""
        return len(self._records)

    @property
    def latest_step(self) -> int | None:
        """The step of the last record (finite or not), None before the first."""
        return self._records[-1].step if self._records else None

    @property
    def latest_finite(self) -> bool:
        """Whether the last record's attention was finite (False before the first)."""
        return bool(self._records) and self._records[-1].nonfinite is None

    @property
    def nonfinite_steps(self) -> list[int]:
        """The recorded steps whose attention was not finite (module docstring), oldest first."""
        return [r.step for r in self._records if r.nonfinite]

    def latest(self) -> dict[str, np.ndarray]:
        """{name: (layers, heads) float32} of the last recorded step whose attention was finite, for each of
        `summaries`: the mean over its real query rows, the maximum for maxima; received's two summaries
        (received_first, received_max_later) over its batch rows (summary.py).

        Returns:
            dict: {name: (layers, heads) float32}, each in its unit (received_max_later NaN: no later key).

        Raises:
            EntropyLensError: no finite step recorded yet.
        """
        finite = [r for r in self._records if r.nonfinite is None]
        if not finite:
            nonfinite = f"; steps {self.nonfinite_steps} were not finite" if self._records else ""
            raise EntropyLensError(
                f"AttentionMonitor has recorded no finite step yet (every={self.every}: the first record is "
                f"step {self.every}{nonfinite}); call latest() after a recorded forward"
            )
        return finite[-1].values()

    def scalars(self, prefix: str = "attention", *, per_head: bool = False) -> dict[str, float]:
        """The last record as flat {name: float} for any logger: `{prefix}/nonfinite` (1.0 where its
        attention was not finite, with nothing else; 0.0), `{prefix}/{stat}/layer_{l}/mean`, `/min` and
        `/max` over the layer's heads, and with per_head=True each `{prefix}/{stat}/layer_{l}/head_{h}`.

        Args:
            prefix: the names' first part ("" for none).
            per_head: add one scalar per head.

        Returns:
            dict: {name: float}, as above.

        Raises:
            TypeError: prefix not a str or per_head not a bool.
            EntropyLensError: no finite step recorded yet (where the last record was finite or none).
        """
        if not isinstance(prefix, str) or not isinstance(per_head, bool):
            raise TypeError("scalars(prefix: str, *, per_head: bool)")
        flag = f"{prefix}/nonfinite" if prefix else "nonfinite"
        if self._records and not self.latest_finite:
            return {flag: 1.0}
        return {flag: 0.0, **flat_scalars(self.latest(), prefix, per_head=per_head)}

    @property
    def history(self) -> History:
        """Every recorded step with finite attention, oldest first, and the steps without
        (`nonfinite`) (history.History)."""
        records = [r for r in self._records if r.nonfinite is None]
        shape = (0, self.n_layers, self.n_heads)
        values = {
            s: np.stack([r.values()[s] for r in records]) if records else np.zeros(shape, np.float32)
            for s in self.summaries
        }
        return History(
            steps=np.array([r.step for r in records], dtype=np.int64),
            forwards=np.array([r.forwards for r in records], dtype=np.int64),
            rows=np.array([r.rows for r in records], dtype=np.int64),
            values=values,
            meta=self.meta(),
            nonfinite=np.array(self.nonfinite_steps, dtype=np.int64),
            sequences=np.array([r.sequences for r in records], dtype=np.int64),
        )

    def save(self, path) -> None:
        """Write `history` to `path` (.npz, atomically; history.py's schema).

        Args:
            path: the file to write (str or Path); a target that is not a regular file is refused.
        """
        self.history.save(path)
