"""A parameter of statistics (first_mass's K, the key statistics' query window), declared with them
(entropy_lens.statistics.PARAMETERS): `Parameter` holds its keyword, default, range, words and flag, and
checks and reads its values; `SliceParameter` is a row-slice statistic's (spans, offsets, k, bins), whose
value gives the statistic a trailing axis. Torch-free."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import MAX_TOKENS, check_argument, setting


@dataclass(frozen=True)
class Parameter:
    """A parameter of one or more statistics, declared with them (`Statistic.parameters`) and from here
    everywhere else: the keyword of every entrance (`attention_stats(<name>=4)`, `EntropyRecorder`,
    `AttentionMonitor`, the Trainer callback), the flag (`--first-keys`, runs/configs.py), the results meta
    and the cache key under `name`, the check of a value (`check`) and a reader's value (`read`).

    `name`: the keyword, flag (dashed) and meta field; `default`: its value unless given (None: off);
    `letter`: what labels and summaries call it ("K"); `span`: what it counts ("first {} keys": the
    first K = 4 keys, `spanned`); `help`: the flag's text; `keyed_at_default`:
    whether a cache key holds it at its default (False for parameters added after cached runs existed, so
    their keys stay as they were); `at_most`: its ceiling (settings.MAX_TOKENS), every one at least 1."""

    name: str
    default: int | None
    letter: str
    span: str  # what it counts, "{}" its letter and value: "first {} keys" -> "first K = 4 keys"
    help: str
    keyed_at_default: bool = False
    at_most: int = MAX_TOKENS
    example: int | None = None  # the value a refusal suggests (default: the default)

    @property
    def flag(self) -> str:
        """Its command-line flag ("--first-keys")."""
        return "--" + self.name.replace("_", "-")

    def spanned(self, value, *, letter: bool = True) -> str:
        """What it counts at `value`: "first K = 4 keys" (without its letter: "first 4 keys")."""
        return self.span.format(f"{self.letter} = {value}" if letter else value)

    @property
    def spec(self) -> dict:
        """Its range, as `settings.setting` and `settings.check_argument` take one."""
        return {"at_least": 1, "at_most": self.at_most}

    def check(self, value) -> int | None:
        """`value` as an int (None where the default is None and None is given); EntropyLensError in one
        line unless a whole number in its range (a numpy integer taken, True or 2.5 refused)."""
        if value is None and self.default is None:
            return None
        check_argument(self.name, value, int, self.spec, example=self.example or self.default)
        return int(value)

    def setting(self):
        """Its field in a run's settings (runs/configs.py): the flag, its help and range (settings.setting)."""
        return setting(self.default, help=self.help, metavar=self.letter, **self.spec)

    def read(self, meta: dict) -> int | None:
        """Its value in a result's `meta`: the meta's own field, else its scan_config's, else the default
        (a file written before the parameter existed measured at the default)."""
        config = meta.get("scan_config")
        value = meta.get(
            self.name, config.get(self.name, self.default) if isinstance(config, dict) else self.default
        )
        return (
            value if value is None or isinstance(value, int) and not isinstance(value, bool) else self.default
        )


@dataclass(frozen=True)
class SliceParameter:
    """The parameter that gives a row-slice statistic its trailing axis (`Statistic.sliced`): the key spans,
    offsets, top keys' k or distance bins of a row's mass. One slot per span, offset, rank or
    bin; a run that sums over rows records each slot as an array of its own, `<statistic>@<label>`.

    `name`: the keyword, flag (dashed) and meta field; `default`: its value unless given; `check`: a
    user's value -> the checked value (hashable; EntropyLensError in one line otherwise); `labels`: the
    checked value -> the slots' labels (None: one slot, the array named by the statistic alone);
    `record`: the checked value -> JSON for a results meta; `needs`: what a refusal of the statistic
    without it says (None: the default serves); `built_in`: slots a generation records before the
    caller's (the spans' prompt and generated); `example`: the flag's example value."""

    name: str
    default: Any
    check: Callable[[Any], Any]
    labels: Callable[[Any], tuple[str, ...] | None]
    record: Callable[[Any], Any]
    needs: str | None = None
    built_in: tuple[str, ...] = ()
    named: str | None = None  # the meta field naming a generation's slots, where they are names (span_names)
    slot: str = "{}"  # a slot in words, "{}" its label: "{} behind" -> "1 behind"
    example: str = ""
    help: str = ""  # its flag's help
    metavar: str = ""  # its flag's value, as the help shows it

    def given(self, value) -> bool:
        """Whether a keyword's `value` is one of its own (None, the default and an empty one are none)."""
        empty = isinstance(value, (tuple, list, dict)) and not value
        return value is not None and not empty and value != self.default

    def setting(self):
        """Its field in a run's settings (runs/configs.py's Slicing): a flag whose text the run
        parses (`Slicing.parsed_slicing`), None where not given."""
        return setting(None, help=self.help, metavar=self.metavar)

    @property
    def flag(self) -> str:
        """Its command-line flag ("--top-keys")."""
        return "--" + self.name.replace("_", "-")


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


def base_name(array: str) -> str:
    """The statistic an array records: "offset_prob@1" -> "offset_prob" (any other name as it is)."""
    return array.split(SEP, 1)[0]
