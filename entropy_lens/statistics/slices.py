"""The row-slice statistics' parameters and the record of what a run asks of them (torch-free). A
row-slice statistic (entropy_lens.statistics: span_mass, offset_prob, top_key, distance_mass) is declared
with its `SliceParameter` (`Statistic.sliced`), whose value gives it a trailing axis: a slot per span,
offset, rank or distance bin. `Slices` is what a run asks for, parsed once (inside `flags.Measure`); a
run that sums over rows (a scan, `EntropyRecorder`, the monitor) records each slot as an array of its
own, `<statistic>@<label>` (`arrays`), a generation keeps each statistic whole (`per_token`). ::

    Slices.parse(("span_mass", "distance_mass"), spans={"doc": (0, 200)}, distance_bins=(0, 16, 256))
    .arrays -> ("span_mass@doc", "distance_mass@0", "distance_mass@16", "distance_mass@256")
    statistic_of("distance_mass@16") -> DISTANCE_MASS
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import ROW_SLICE_STATISTICS, SLICE_PARAMETERS
from entropy_lens.statistics.parameter import (  # the parameters' checks, re-exported where readers look
    SEP,
    base_name,
    check_bins,
    check_offsets,
    check_spans,
    check_top_keys,
)

__all__ = ["SEP", "Slices", "base_name", "check_bins", "check_offsets", "check_spans", "check_top_keys"]


@dataclass(frozen=True)
class Slices:
    """The row-slice statistics a run asks for (`stats`, of statistics.ROW_SLICE_STATISTICS) and the
    checked values of their parameters (`values`: ((parameter, value), ...), in the order of `stats`);
    `per_token`: recorded per generated token (GenerationRecorder): the spans begin with their
    built-in prompt and generated, top_key keeps k keys, and each statistic keeps its trailing axis
    whole at the row that chose the token. Build with `parse`; empty (`bool(Slices())` is False) where none
    is asked for."""

    stats: tuple[str, ...] = ()
    values: tuple[tuple[str, Any], ...] = ()
    per_token: bool = False

    def __bool__(self) -> bool:
        return bool(self.stats)

    @classmethod
    def parse(cls, stats, *, per_token: bool = False, **values) -> Slices:
        """`stats` (names of ROW_SLICE_STATISTICS) and their parameters by keyword (SLICE_PARAMETERS),
        each checked by its declaration: an unknown keyword is a TypeError; a parameter given without its
        statistic, a statistic without the parameter it needs, or a value out of range an
        EntropyLensError in one line naming the fix."""
        unknown = [key for key in values if key not in SLICE_PARAMETERS]
        if unknown:
            raise TypeError(
                f"got an unexpected keyword {', '.join(map(repr, unknown))}; the row-slice statistics' "
                f"parameters are {', '.join(SLICE_PARAMETERS)}"
            )
        names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats or ())
        strange = [name for name in names if name not in ROW_SLICE_STATISTICS]
        if strange:
            raise EntropyLensError(
                f"{', '.join(map(str, strange))}: not a row-slice statistic; choose from "
                f"{', '.join(ROW_SLICE_STATISTICS)}"
            )
        checked = []
        for stat in ROW_SLICE_STATISTICS.values():
            p = stat.sliced
            given = p.given(values.get(p.name))
            if given and stat.name not in names:
                raise EntropyLensError(
                    f"{p.name}= is read by the statistic {stat.name}, which stats= does not name; add "
                    f"{stat.name!r} to stats, or leave {p.name}= out"
                )
            if stat.name not in names:
                continue
            if not given and p.needs is not None and not (per_token and p.built_in):
                raise EntropyLensError(f"{stat.name} needs {p.needs}")
            checked.append((stat.name, p.check(values[p.name] if given else p.default)))
        order = dict(checked)
        return cls(names, tuple((name, order[name]) for name in names), bool(per_token))

    def summed(self) -> Slices:
        """This record, checked as a run that sums over rows takes it (a scan, EntropyRecorder, the
        monitor): a slot per array, so a parameter without labels (top_key's k) at its default alone;
        EntropyLensError in one line otherwise."""
        for name, value in self.values:
            p = ROW_SLICE_STATISTICS[name].sliced
            if p.labels(value) is None and value != p.check(p.default):
                raise EntropyLensError(
                    f"{p.name}={value}: a run that sums over rows records {name} at {p.name}={p.default} "
                    f"alone; more per generated token: GenerationRecorder({p.name}=...), per row: "
                    "entropy_lens.row_slice_stats"
                )
        return self

    def without(self, *names: str) -> Slices:
        """This record less the statistics `names` (those a row pass computed: kernels/slices.py)."""
        return Slices(
            tuple(n for n in self.stats if n not in names),
            tuple((n, v) for n, v in self.values if n not in names),
            self.per_token,
        )

    def value(self, name: str):
        """The checked value of statistic `name`'s parameter (KeyError where `name` is not asked for)."""
        return dict(self.values)[name]

    def labels(self, name: str) -> tuple[str, ...] | None:
        """The labels of statistic `name`'s slots (a generation's built-in spans first); None: one slot."""
        p = ROW_SLICE_STATISTICS[name].sliced
        own = p.labels(self.value(name))
        if own is None:
            return None
        return (*p.built_in, *own) if self.per_token else own

    @property
    def arrays(self) -> tuple[str, ...]:
        """The arrays a run that sums over rows records: <statistic>@<label> per slot (top_key: itself)."""
        out = []
        for name in self.stats:
            labels = self.labels(name)
            out += [name] if labels is None else [f"{name}{SEP}{label}" for label in labels]
        return tuple(out)

    def recorded(self) -> dict:
        """The parameters asked for, as a results meta keeps them (JSON), each under its name (a
        generation's spans also their slots' names, span_names)."""
        meta = {}
        for name, value in self.values:
            p = ROW_SLICE_STATISTICS[name].sliced
            meta[p.name] = p.record(value)
            if self.per_token and p.named is not None:
                meta[p.named] = list(self.labels(name))  # span_names: built-in spans and the caller's
        return meta
