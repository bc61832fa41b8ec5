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

import itertools
from dataclasses import dataclass
from typing import Any

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import check_argument

SEP = "@"  # between a row-slice statistic's name and a slot's label in an array's name


def check_spans(spans, *, reserved=(), at_most: int | None = None) -> tuple[tuple[str, tuple[int, int]], ...]:
    """{name: (start, stop)} checked, as ((name, (start, stop)), ...): a dict of identifiers (none of
    `reserved`) to 0 <= start < stop (<= at_most where given); EntropyLensError in one line otherwise."""
    if spans is None:
        return ()
    if not isinstance(spans, dict):
        raise EntropyLensError(
            f"spans must be a dict {{name: (start, stop)}}, e.g. {{'doc': (0, 200)}}; got {type(spans).__name__}"
        )
    checked = {}
    bound = {"at_least": 0} | ({} if at_most is None else {"at_most": at_most})
    for name, span in spans.items():
        if not isinstance(name, str) or not name.isidentifier() or name in reserved:
            other = f" other than {' and '.join(reserved)} (those are always recorded)" if reserved else ""
            raise EntropyLensError(f"span name {name!r}: use a name of letters, digits and _{other}")
        if not isinstance(span, (tuple, list)) or len(span) != 2:
            raise EntropyLensError(f"span {name!r} must be (start, stop); got {span!r}")
        for value in span:
            check_argument(f"span {name!r}", value, int, bound, example=0)
        start, stop = int(span[0]), int(span[1])
        if start >= stop:
            raise EntropyLensError(
                f"span {name!r} ({start}, {stop}) is empty; pass (start, stop) with start < stop"
            )
        checked[name] = (start, stop)
    return tuple(checked.items())


def check_offsets(offsets) -> tuple[int, ...]:
    """offset_prob's offsets d >= 0, each once; EntropyLensError in one line otherwise."""
    values = tuple(offsets or ())
    for d in values:
        check_argument("offsets", d, int, {"at_least": 0}, example=1)
    if len(set(values)) != len(values):
        raise EntropyLensError(f"offsets {list(values)} name an offset twice; give each once")
    return tuple(int(d) for d in values)


def check_top_keys(k) -> int:
    """top_key's k >= 1; EntropyLensError in one line otherwise."""
    check_argument("top_keys", k, int, {"at_least": 1}, example=1)
    return int(k)


def check_bins(bins) -> tuple[int, ...]:
    """distance_mass's bin edges (0, b1, b2, ...): whole numbers from 0, each larger than the one before
    (bin m holds distances b_m <= i − j < b_(m+1), the last bin open); EntropyLensError in one line
    otherwise."""
    values = tuple(bins or ())
    for b in values:
        check_argument("distance_bins", b, int, {"at_least": 0}, example=16)
    if not values or values[0] != 0 or any(b <= a for a, b in itertools.pairwise(values)):
        raise EntropyLensError(
            f"distance_bins {list(values)}: give increasing edges from 0, e.g. (0, 16, 256): the bins "
            "[0, 16), [16, 256) and [256, ∞)"
        )
    return tuple(int(b) for b in values)


def _given(value, default) -> bool:
    """Whether a keyword holds a value of its own (None, the default and an empty one are none)."""
    empty = isinstance(value, (tuple, list, dict)) and not value
    return value is not None and not empty and value != default


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
        from entropy_lens.statistics import ROW_SLICE_STATISTICS, SLICE_PARAMETERS

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
            given = _given(values.get(p.name), p.default)
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
        from entropy_lens.statistics import ROW_SLICE_STATISTICS

        for name, value in self.values:
            p = ROW_SLICE_STATISTICS[name].sliced
            if p.labels(value) is None and value != p.check(p.default):
                raise EntropyLensError(
                    f"{p.name}={value}: a run that sums over rows records {name} at {p.name}={p.default} "
                    f"alone; more per generated token: GenerationRecorder({p.name}=...), per row: "
                    "entropy_lens.row_slice_stats"
                )
        return self

    def value(self, name: str):
        """The checked value of statistic `name`'s parameter (KeyError where `name` is not asked for)."""
        return dict(self.values)[name]

    def labels(self, name: str) -> tuple[str, ...] | None:
        """The labels of statistic `name`'s slots (a generation's built-in spans first); None: one slot."""
        from entropy_lens.statistics import ROW_SLICE_STATISTICS

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
        from entropy_lens.statistics import ROW_SLICE_STATISTICS

        meta = {}
        for name, value in self.values:
            p = ROW_SLICE_STATISTICS[name].sliced
            meta[p.name] = p.record(value)
            if self.per_token and p.named is not None:
                meta[p.named] = list(self.labels(name))  # span_names: built-in spans and the caller's
        return meta


def base_name(array: str) -> str:
    """The statistic an array records: "offset_prob@1" -> "offset_prob" (any other name as it is)."""
    return array.split(SEP, 1)[0]
