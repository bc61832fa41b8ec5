"""The run-wide flags, parsed once: `--backend`, `--fused`, `--stats`, `--first-keys` and `--recent-keys`
become typed values where a run starts (`ScanConfig.flags`, the entrance of `EntropyRecorder`/
`ScaleSession`, the kernels' public functions), and every layer below takes those values and never
parses a string again (`capture.call.Session` and `kernels.plan` refuse a raw string with a TypeError).

    Backend     the kernel of the row statistics: auto, or one of BACKENDS (the enum's other values)
    Fused       a capturing layer's routes: auto (time both) | on (the one pass) | off (sdpa + a statistics pass)
    Stats       the row statistics a run records: a tuple of names declared in statistics.STATISTICS
    first_keys  first_mass's K: an int in the range of settings.FIRST_KEYS
    recent_keys recent_mass's W: an int in the range of settings.RECENT_KEYS

The enums are str-valued, so a results meta, a cache key or a command written from one reads as before
("native", "auto"). Each `parse_*` takes the user's value (or an already parsed one, returned as it is)
and raises the flag's one-line error. Torch-free: `--help` and results readers import no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum

from entropy_lens import statistics
from entropy_lens.errors import EntropyLensError
from entropy_lens.settings import FIRST_KEYS, RECENT_KEYS, check_argument

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


def parse_stats(value) -> Stats:
    """`value` as Stats: statistics.parse_stats' reading (a name, names comma-separated, a sequence, or
    "all" alone); ValueError in one line naming the closest and the known statistics otherwise."""
    return value if isinstance(value, Stats) else Stats(statistics.parse_stats(value))


def parse_first_keys(value) -> int:
    """first_mass's K as an int; EntropyLensError (a ValueError) unless a whole number in the range
    --first-keys declares (settings.FIRST_KEYS)."""
    check_argument("first_keys", value, int, FIRST_KEYS, example=1)
    return int(value)


def parse_recent_keys(value) -> int:
    """recent_mass's W as an int; EntropyLensError (a ValueError) unless a whole number in the range
    --recent-keys declares (settings.RECENT_KEYS)."""
    check_argument("recent_keys", value, int, RECENT_KEYS, example=64)
    return int(value)


@dataclass(frozen=True, kw_only=True)
class Flags:
    """The five flags of a capture, parsed: what `Session` holds and `ScanConfig.flags` gives."""

    backend: Backend = Backend.AUTO
    fused: Fused = Fused.AUTO
    stats: Stats
    first_keys: int = 1
    recent_keys: int = 64

    @classmethod
    def parse(cls, *, backend="auto", fused="auto", stats, first_keys=1, recent_keys=64) -> Flags:
        """Each flag through its `parse_*`: the one place a user's values become these."""
        return cls(
            backend=parse_backend(backend),
            fused=parse_fused(fused),
            stats=parse_stats(stats),
            first_keys=parse_first_keys(first_keys),
            recent_keys=parse_recent_keys(recent_keys),
        )


def require(**values) -> None:
    """TypeError unless each value is of its flag's parsed type: what the layers below the entrance check,
    so a raw string cannot slip past `parse_*` (`require(backend=b, fused=f)`)."""
    types = {"backend": Backend, "fused": Fused, "stats": Stats, "first_keys": int, "recent_keys": int}
    for name, value in values.items():
        if not isinstance(value, types[name]) or isinstance(value, bool):
            raise TypeError(
                f"{name}={value!r} is not parsed; pass entropy_lens.flags.parse_{name}({value!r}) "
                "(the run's entrance parses each flag once)"
            )
