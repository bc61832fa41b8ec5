"""Thresholds on the monitor's per-head summaries: a warning, once per head, when one is crossed.

    limits = Thresholds({"entropy": ("below", 0.1), "max_logit": ("above", 100.0)})
    limits.check(mon.latest(), step)   # warns AttentionThresholdWarning for each head newly crossing

Entropy collapse (a head's mean entropy falling toward 0) and logit growth (its max logit rising) are
the two failures watched for while training; each (statistic, layer, head) warns the first time only.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from entropy_lens.errors import EntropyLensError

DIRECTIONS = ("below", "above")


class AttentionThresholdWarning(UserWarning):
    """A head's attention statistic crossed a threshold (EntropyLensCallback, Thresholds)."""


class Thresholds:
    """{stat: ("below" | "above", limit)}, checked against `stats` (the monitor's) when given.

    Args:
        limits: None (no threshold) or {stat: ("below" | "above", a finite number)}, in the
            statistic's unit.
        stats: the statistics recorded; a threshold on another is refused. None: not checked.

    Raises:
        EntropyLensError: limits not a dict, a rule not (direction, finite number), or a statistic
            that is not recorded.
    """

    def __init__(self, limits: dict | None, *, stats: tuple[str, ...] | None = None):
        limits = {} if limits is None else limits
        if not isinstance(limits, dict):
            raise EntropyLensError(
                f"thresholds must be a dict (got {type(limits).__name__}); pass e.g. "
                "thresholds={'entropy': ('below', 0.1)}"
            )
        self.limits = {}
        for stat, rule in limits.items():
            if stats is not None and stat not in stats:
                raise EntropyLensError(
                    f"a threshold on {stat!r}, which is not recorded (stats={stats!r}); add it to stats or "
                    "drop the threshold"
                )
            ok = isinstance(rule, (tuple, list)) and len(rule) == 2 and rule[0] in DIRECTIONS
            value = rule[1] if ok else None
            if (
                not ok
                or isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise EntropyLensError(
                    f"threshold {stat!r}: {rule!r} is not ('below' | 'above', a finite number); pass e.g. "
                    f"{{{stat!r}: ('below', 0.1)}}"
                )
            self.limits[stat] = (rule[0], float(value))
        self.warned: set[tuple[str, int, int]] = set()  # (stat, layer, head) that warned already

    def check(self, values: dict[str, np.ndarray], step: int) -> list[str]:
        """Warn (AttentionThresholdWarning) for each head of `values` ({stat: (layers, heads)}) that
        crosses its statistic's limit for the first time; return those warnings' messages.

        Args:
            values: {stat: (layers, heads)} summaries of one step (`AttentionMonitor.latest()`), holding
                every statistic with a limit.
            step: the step the values are of, for the messages.

        Returns:
            list: the new warnings' messages (str), empty where no head crossed for the first time (an
            undefined value, NaN, crosses no threshold).
        """
        messages = []
        for stat, (direction, limit) in self.limits.items():
            v = values[stat]  # NaN: undefined at this step (received_max_later without a later key)
            crossed = np.isfinite(v) & (v < limit if direction == "below" else v > limit)
            for layer, head in map(tuple, np.argwhere(crossed)):
                key = (stat, int(layer), int(head))
                if key in self.warned:
                    continue
                self.warned.add(key)
                messages.append(
                    f"attention {stat} of layer {layer}, head {head} is {float(v[layer, head]):.4g} at step "
                    f"{step}, {direction} the threshold {limit:g}"
                )
        for message in messages:
            warnings.warn(message, AttentionThresholdWarning, stacklevel=3)
        return messages
