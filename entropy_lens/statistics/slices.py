"""The row-slice statistics' parameters, checked once (torch-free): span_mass's named key spans,
offset_prob's offsets, top_key's k. `Slices` is what a run asks of them; a run that sums over rows (a
scan, `EntropyRecorder`, the monitor) records each value as an array of its own, named
`<statistic>@<span name or offset>` (`arrays`), beside the other row statistics. ::

    Slices.parse(("span_mass", "offset_prob"), spans={"doc": (0, 200)}, offsets=(0, 1))
    .arrays -> ("span_mass@doc", "offset_prob@0", "offset_prob@1")
    statistic_of("offset_prob@1") -> OFFSET_PROB
"""

from __future__ import annotations

from dataclasses import dataclass

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import check_argument

# the row-slice statistics' names (statistics declares each as a Statistic under its name) and parameters
SPAN_MASS_NAME, OFFSET_PROB_NAME, TOP_KEY_NAME = "span_mass", "offset_prob", "top_key"
SLICED = (SPAN_MASS_NAME, OFFSET_PROB_NAME, TOP_KEY_NAME)
SLICE_KEYWORDS = ("spans", "offsets", "top_keys")  # the row-slice statistics' parameters, as keywords
SEP = "@"  # between a row-slice statistic's name and its span or offset in an array's name
# what a refusal of a statistic without its parameter says
NEEDS = {
    "spans": "spans={name: (start, stop)}: the keys whose mass each row gives, e.g. spans={'doc': (0, 200)}",
    "offsets": "offsets=(d, ...): the keys d positions behind each row (0: its own key, 1: the previous "
    "token), e.g. offsets=(0, 1)",
}


def check_spans(spans, *, reserved=(), at_most: int | None = None) -> dict[str, tuple[int, int]]:
    """{name: (start, stop)} checked: a dict of identifiers (none of `reserved`) to 0 <= start < stop
    (<= at_most where given); EntropyLensError in one line otherwise."""
    if spans is None:
        return {}
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
    return checked


def check_offsets(offsets) -> tuple[int, ...]:
    """offset_prob's offsets d >= 0, each once; EntropyLensError in one line otherwise."""
    values = tuple(offsets)
    for d in values:
        check_argument("offsets", d, int, {"at_least": 0}, example=1)
    if len(set(values)) != len(values):
        raise EntropyLensError(f"offsets {list(values)} name an offset twice; give each once")
    return tuple(int(d) for d in values)


@dataclass(frozen=True)
class Slices:
    """The row-slice statistics a run asks for (`stats`, of ROW_SLICE_STATISTICS) and their parameters:
    `spans` ((name, (start, stop)), ...) for span_mass, `offsets` for offset_prob, `top_keys` for top_key.
    Build with `parse`; empty (`bool(Slices())` is False) where none is asked for."""

    stats: tuple[str, ...] = ()
    spans: tuple[tuple[str, tuple[int, int]], ...] = ()
    offsets: tuple[int, ...] = ()
    top_keys: int = 1

    def __bool__(self) -> bool:
        return bool(self.stats)

    @classmethod
    def parse(cls, stats, *, spans=None, offsets=(), top_keys=1, reserved=()) -> Slices:
        """`stats` (names of ROW_SLICE_STATISTICS) and their parameters, checked: a parameter given
        without its statistic, or offset_prob without offsets (span_mass without spans, unless the caller
        records `reserved` spans anyway: a generation's prompt and generated), is refused in one line
        naming the fix."""
        names = tuple(stats)
        unknown = [name for name in names if name not in SLICED]
        if unknown:
            raise EntropyLensError(
                f"{', '.join(unknown)}: not a row-slice statistic; choose from {', '.join(SLICED)}"
            )
        offsets = tuple(offsets or ())
        for keyword, given, stat in (
            ("spans", bool(spans), SPAN_MASS_NAME),
            ("offsets", bool(offsets), OFFSET_PROB_NAME),
            ("top_keys", top_keys != 1, TOP_KEY_NAME),
        ):
            if given and stat not in names:
                raise EntropyLensError(
                    f"{keyword}= is read by the statistic {stat}, which stats= does not name; add "
                    f"{stat!r} to stats, or leave {keyword}= out"
                )
            needed = keyword == "offsets" or keyword == "spans" and not reserved
            if not given and stat in names and needed:
                raise EntropyLensError(f"{stat} needs {NEEDS[keyword]}")
        check_argument("top_keys", top_keys, int, {"at_least": 1}, example=1)
        return cls(
            names,
            tuple(check_spans(spans, reserved=reserved).items()),
            check_offsets(offsets),
            int(top_keys),
        )

    @property
    def arrays(self) -> tuple[str, ...]:
        """The arrays a run that sums over rows records: span_mass@<span>, offset_prob@<d>, top_key."""
        out = []
        for name in self.stats:
            if name == SPAN_MASS_NAME:
                out += [f"{name}{SEP}{span}" for span, _ in self.spans]
            elif name == OFFSET_PROB_NAME:
                out += [f"{name}{SEP}{d}" for d in self.offsets]
            else:
                out.append(name)  # top_key: the most probable key alone
        return tuple(out)

    def recorded(self) -> dict:
        """The parameters asked for, as a results meta keeps them (JSON)."""
        meta = {}
        if SPAN_MASS_NAME in self.stats:
            meta["spans"] = {name: list(span) for name, span in self.spans}
        if OFFSET_PROB_NAME in self.stats:
            meta["offsets"] = list(self.offsets)
        if TOP_KEY_NAME in self.stats:
            meta["top_keys"] = self.top_keys
        return meta


def base_name(array: str) -> str:
    """The statistic an array records: "offset_prob@1" -> "offset_prob" (any other name as it is)."""
    return array.split(SEP, 1)[0]
