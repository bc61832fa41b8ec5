"""What to measure, parsed once: `--backend`, `--fused`, `--stats` and the statistics' parameters
(statistics.PARAMETERS: `--first-keys`, ...) become one record, `Measure`, where a run starts
(`ScanConfig.measure`, the entrance of `EntropyRecorder`/`ScaleSession`/`AttentionMonitor`, the kernels'
public functions), and every layer below takes it whole and never parses a value again
(`capture.call.Session` and `kernels.plan` refuse a raw string with a TypeError).

    Backend     the kernel of the row statistics: auto, or one of BACKENDS (the enum's other values)
    Fused       a capturing layer's routes: auto (time both) | on (the one pass) | off (sdpa + a statistics pass)
    Stats       the row statistics a run records: a tuple of names declared in statistics.STATISTICS
    Measure     the record: row and key statistics, every parameter's value, the backend, the fused mode

The enums are str-valued, so a results meta, a cache key or a command written from one reads as before
("native", "auto"). Each `parse_*` takes the user's value (or an already parsed one, returned as it is)
and raises the flag's one-line error. Torch-free: `--help` and results readers import no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass
from enum import StrEnum

from entropy_lens import statistics
from entropy_lens.errors import EntropyLensError
from entropy_lens.statistics import (
    DEFAULT_STATS,
    KEY_STATISTICS,
    KEYS,
    ROW_SLICE_STATISTICS,
    ROWS,
    STATISTICS,
)
from entropy_lens.statistics.slices import Slices

ENV_VAR = "ENTROPY_LENS_BACKEND"  # overrides --backend auto, read when the flag is parsed


class Backend(StrEnum):
    """--backend: the kernel of the row statistics; AUTO lets `kernels.plan` pick per device and route.

    Args:
        value: "auto" or one of `BACKENDS` (the members' values); `parse_backend` also reads
            ENTROPY_LENS_BACKEND and says what to pass instead of an unknown name.
    """

    AUTO = "auto"
    REFERENCE = "reference"
    TORCH_CHUNKED = "torch_chunked"
    NATIVE = "native"
    TRITON = "triton"


class Fused(StrEnum):
    """--fused: time both routes (AUTO), the one pass wherever it applies (ON), sdpa + a statistics pass (OFF).

    Args:
        value: one of `FUSED_MODES` (the members' values); `parse_fused` names them on an unknown one.
    """

    AUTO = "auto"
    ON = "on"
    OFF = "off"


BACKENDS = tuple(b.value for b in Backend if b is not Backend.AUTO)  # the kernels of the row statistics
FUSED_MODES = tuple(f.value for f in Fused)


class Stats(tuple):
    """Names of row statistics (statistics.STATISTICS), in the order asked for; built by `parse_stats`.

    Args:
        iterable: the names, already checked (`parse_stats` checks a user's value and builds this).
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(tuple(self))


ALL = "all"  # --stats all: every declared statistic


def did_you_mean(names, declared=None) -> str:
    """ " (did you mean max_prob?)": for each of `names`, the declared statistics (`declared`, default
    STATISTICS) it begins (at least three letters, any case) or else the closest one (difflib), or ""
    where none is close: the hint a refusal of an unknown name carries."""
    declared = list(STATISTICS if declared is None else declared)
    close: dict[str, None] = {}
    for name in (str(n).lower() for n in names):
        begun = [known for known in declared if len(name) >= 3 and known.startswith(name)]
        close |= dict.fromkeys(begun or difflib.get_close_matches(name, declared, n=1, cutoff=0.6))
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def parse_stats(stats, axis: str | None = ROWS):
    """`stats` (a name, names comma-separated, or a sequence of names; "all" alone: every statistic of
    the axis) as a tuple of declared names of `axis` in the order given: ROWS (`attention_stats`, the
    monitor), KEYS (`attention_received`), or None for both, as (row statistics, key statistics) with the
    rows DEFAULT_STATS where only key statistics are named (what a recorder and a scan's --stats take).
    ValueError in one line where it names no statistic, an unknown one (with the closest declared names:
    "did you mean max_prob?"), one of the other axis (saying where it is computed), or "all" beside
    others."""
    if isinstance(stats, Stats) and axis == ROWS:
        return stats  # parsed already
    names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats)
    sliced = [name for name in names if name in ROW_SLICE_STATISTICS]
    if sliced:
        raise ValueError(
            f"{', '.join(sliced)}: a row-slice statistic with parameters of its own, not computed here: "
            "at every row by entropy_lens.row_slice_stats, per generated token by GenerationRecorder, "
            f"summed over rows by EntropyRecorder, AttentionMonitor and scan; choose here from {ALL} or "
            f"{', '.join(STATISTICS)}"
        )
    if axis is None:
        return _both(names)
    declared, other = (STATISTICS, KEY_STATISTICS) if axis == ROWS else (KEY_STATISTICS, STATISTICS)
    what = "row" if axis == ROWS else "key"
    if names == (ALL,):
        return Stats(declared) if axis == ROWS else tuple(declared)
    crossed = [name for name in names if name in other]
    unknown = [name for name in names if name not in declared and name not in other and name != ALL]
    if ALL in names and (axis == ROWS or not crossed and not unknown):
        raise ValueError(
            f"`{ALL}` cannot be combined with other {'' if axis == ROWS else 'key '}statistics (got "
            f"{','.join(map(str, names))}); write {ALL} alone for every one, or a list of names without it"
        )
    if crossed and axis == ROWS:
        raise ValueError(
            f"{', '.join(crossed)}: a key statistic (attention received by each key), not a row statistic; "
            f"compute it with entropy_lens.attention_received(q, k, stats=...), and choose row statistics "
            f"here from {ALL} or {', '.join(STATISTICS)}"
        )
    if crossed or unknown or not names:
        why = (
            f"{', '.join(crossed)}: a row statistic (use entropy_lens.attention_stats)"
            if crossed
            else f"unknown {what} statistic {unknown!r}{did_you_mean(unknown, declared)}"
            if unknown
            else f"no {what} statistic"
        )
        choose = f"choose from {ALL} or" if axis == ROWS else f"choose key statistics from {ALL} or"
        raise ValueError(f"{why}; {choose} {', '.join(declared)}")
    return Stats(names) if axis == ROWS else names


def split_slices(stats) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the other names, the row-slice statistics' names) of `stats` (a name, names comma-separated, or a
    sequence): what an entrance that records row-slice statistics at every row (`Measure.parse`'s
    `slices=`) takes apart before `parse_stats` reads the rest."""
    names = tuple(filter(None, stats.split(","))) if isinstance(stats, str) else tuple(stats)
    sliced = tuple(name for name in names if name in ROW_SLICE_STATISTICS)
    return tuple(name for name in names if name not in ROW_SLICE_STATISTICS), sliced


def _both(names: tuple) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`parse_stats(names, axis=None)`: (row statistics, key statistics)."""
    if names == (ALL,):
        return Stats(STATISTICS), tuple(KEY_STATISTICS)
    if ALL in names:
        parse_stats(names)  # its refusal of `all` beside other names
    unknown = [name for name in names if name not in STATISTICS and name not in KEY_STATISTICS]
    if unknown:  # either axis's name: the hint and the choices name both
        raise ValueError(
            f"unknown statistic {unknown!r}{did_you_mean(unknown, [*STATISTICS, *KEY_STATISTICS])}; choose "
            f"{ALL}, row statistics from {', '.join(STATISTICS)}, or key statistics from {', '.join(KEY_STATISTICS)}"
        )
    keys = tuple(name for name in names if name in KEY_STATISTICS)
    rows = tuple(name for name in names if name not in KEY_STATISTICS)
    return (parse_stats(rows) if rows or not keys else Stats(DEFAULT_STATS)), keys


def triton_available() -> bool:
    """Whether the triton backend's package is installed (its kernel runs on CUDA tensors)."""
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def parse_backend(value) -> Backend:
    """--backend `value` as a Backend; "auto" as ENTROPY_LENS_BACKEND overrides it (read here, once, when
    the flag is parsed); one line naming the choices otherwise."""
    if isinstance(value, Backend):
        return value
    names = ("auto", *BACKENDS)
    if value not in names:
        raise EntropyLensError(
            f"unknown entropy backend {value!r}; choose one of auto, {', '.join(BACKENDS)} "
            f"(via --backend or {ENV_VAR})"
        )
    override = os.environ.get(ENV_VAR, "auto") if value == "auto" else value
    if override not in names:
        raise EntropyLensError(
            f"unknown entropy backend {override!r} in {ENV_VAR}; choose one of auto, {', '.join(BACKENDS)}"
        )
    return Backend(override)


def parse_fused(value) -> Fused:
    """--fused `value` as a Fused; one line naming the choices otherwise."""
    if isinstance(value, Fused):
        return value
    if value not in FUSED_MODES:
        raise EntropyLensError(f"fused={value!r} is not known; use one of {', '.join(FUSED_MODES)}")
    return Fused(value)


def parse_params(params: dict) -> tuple[tuple[str, int | None], ...]:
    """The statistics' parameters given by name, each checked by its declaration
    (statistics.PARAMETERS), with the defaults of the others: ((name, value), ...) in PARAMETERS'
    order. TypeError in one line for an unknown name (with the closest: a keyword no function takes),
    EntropyLensError for a value out of range."""
    unknown = [name for name in params if name not in statistics.PARAMETERS]
    if unknown:
        known = [*statistics.PARAMETERS, *statistics.SLICE_PARAMETERS]
        hint = did_you_mean(unknown, known)
        raise TypeError(
            f"unknown argument {', '.join(map(repr, unknown))}{hint}; the statistics' parameters are "
            f"{', '.join(known)} (entropy_lens.statistics.PARAMETERS, SLICE_PARAMETERS)"
        )
    return tuple(
        (name, p.check(params[name]) if name in params else p.default)
        for name, p in statistics.PARAMETERS.items()
    )


NO_SLICES = Slices()  # no row-slice statistic
DEFAULT_ROWS = Stats(DEFAULT_STATS)  # entropy and sink mass
DEFAULT_PARAMS = parse_params({})  # every parameter at its default


@dataclass(frozen=True, kw_only=True)
class Measure:
    """What to measure, as one record: the row statistics (`stats`), the key statistics (`key_stats`),
    every statistic's parameter (`params`, statistics.PARAMETERS: `measure.first_keys`, or `measure[name]`), the
    row-slice statistics with theirs (`slices`: summed over rows as an array per slot,
    <statistic>@<label>; or per generated token), the kernel (`backend`) and the route mode (`fused`). Built once at each entrance (`Measure.parse`:
    `ScanConfig.measure`, `EntropyRecorder`/`ScaleSession`, `AttentionMonitor`, the kernels' public
    functions) and passed whole through the session, the route and `plan.run` to the kernels, which
    read the parameters of the statistics they compute; nothing below an entrance parses a value again
    (`capture.call.Session` and `kernels.plan` refuse an unparsed one with a TypeError)."""

    stats: Stats = DEFAULT_ROWS
    key_stats: tuple[str, ...] = ()
    params: tuple[tuple[str, int | None], ...] = DEFAULT_PARAMS
    backend: Backend = Backend.AUTO
    fused: Fused = Fused.AUTO
    slices: Slices = NO_SLICES

    @classmethod
    def parse(
        cls,
        *,
        stats=statistics.DEFAULT_STATS,
        key_stats=(),
        backend="auto",
        fused="auto",
        slices=(),
        per_token=False,
        **params,
    ) -> Measure:
        """Each value through its parser: the one place a user's values become these. `stats` names row
        statistics (a flags.Stats passes through), `key_stats` key statistics; `slices` row-slice
        statistics (`split_slices`), with `per_token` where a generation keeps them per generated token
        (statistics.slices.Slices); `params` the statistics' parameters by name, the row-slice
        statistics' (statistics.SLICE_PARAMETERS: spans, offsets, top_keys, ...) among them
        (`parse_params`)."""
        sliced = {name: params.pop(name) for name in list(params) if name in statistics.SLICE_PARAMETERS}
        asked = Slices.parse(slices, per_token=per_token, **sliced)
        return cls(
            stats=parse_stats(stats),
            key_stats=parse_stats(key_stats, KEYS) if key_stats else (),
            params=parse_params(params),
            backend=parse_backend(backend),
            fused=parse_fused(fused),
            slices=asked if per_token else asked.summed(),
        )

    def __getitem__(self, name: str) -> int | None:
        """The value of the parameter `name` (statistics.PARAMETERS)."""
        return dict(self.params)[name]

    # each statistic's parameter as a typed field (declared in entropy_lens.statistics)
    @property
    def first_keys(self) -> int:
        """first_mass's K (statistics.FIRST_KEYS)."""
        return self[statistics.FIRST_KEYS.name]

    @property
    def recent_keys(self) -> int:
        """recent_mass's W (statistics.RECENT_KEYS)."""
        return self[statistics.RECENT_KEYS.name]

    @property
    def query_window(self) -> int | None:
        """The key statistics' last W query rows (statistics.QUERY_WINDOW); None: every row."""
        return self[statistics.QUERY_WINDOW.name]

    def replace(self, **changes) -> Measure:
        """This record with `changes` (already parsed values: `stats=`, `key_stats=`, `params=`, ...)."""
        return dataclasses.replace(self, **changes)

    def recorded(self) -> dict:
        """{parameter: value} as a results meta and a history record them: every parameter that is set
        (None: off, as the query window by default, is left out), and the row-slice statistics' (spans,
        offsets, ...) where any is asked for."""
        return {name: value for name, value in self.params if value is not None} | self.slices.recorded()


DEFAULT_MEASURE = Measure()  # entropy and sink mass, every parameter at its default, auto


def require(**values) -> None:
    """TypeError unless each value is of its parsed type: what the layers below the entrance check, so a
    raw value cannot slip past the parse (`require(backend=b, fused=f)`, `require(measure=m)`)."""
    types = {"backend": Backend, "fused": Fused, "stats": Stats, "measure": Measure}
    for name, value in values.items():
        if not isinstance(value, types[name]) or isinstance(value, bool):
            fix = "Measure.parse(...)" if name == "measure" else f"parse_{name}({value!r})"
            raise TypeError(
                f"{name}={value!r} is not parsed; pass entropy_lens.flags.{fix} (the run's entrance parses "
                "what to measure once)"
            )
