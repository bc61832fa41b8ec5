"""The monitor's history: every recorded step's per-head summaries, and its versioned file.

One `.npz` that `numpy.load(path)` opens without entropy_lens, written atomically (results.files):

    steps     int64   (n,)                   the step of each record (the forward count, or the step
                                             the training loop set: meta `step_unit`)
    forwards  int64   (n,)                   recorded forwards merged into each step (gradient
                                             accumulation's micro-batches)
    rows      int64   (n,)                   real query rows (padding excluded) behind each step
    sequences int64   (n,)                   batch rows with a real query row behind each step (what
                                             received_first averages over); absent before version 3: 0
    nonfinite int64   (k,)                   the recorded steps whose attention was not finite (they
                                             have no record above); absent from version 1 files: none
    <stat>    float32 (n, layers, heads)     per name of meta `stats`: a row statistic's mean over the
                                             step's real query rows, or their maximum (meta `reductions`);
                                             from version 3 also received's summaries received_first and
                                             received_max_later, over the step's batch rows
                                             (statistics.SUMMARIES); from version 4 received_max_later
                                             is NaN over a step's (layers, heads) where it is undefined (no
                                             batch row had a real key after its first: T = 1), and no value
                                             is NaN or inf otherwise
    meta      0-d str                        JSON object: schema ("entropy_lens.monitor"), schema_version,
                                             entropy_lens_version, model, model_class, model_type, n_layers,
                                             n_heads, n_kv_heads, stats, reductions, every, the row
                                             statistics' parameters (statistics.ROW_PARAMETERS: K, W),
                                             step_unit ("forward" | "step")

`History.undefined(stat)` gives the steps where a summary is undefined. `load_history(path)` refuses a
damaged or foreign file in one EntropyLensError naming the file;
`is_history(path)` tells a history from a results file by its meta's `schema` (never by its name), reading
the meta alone. The module sits with the results file, torch-free, so that `entropy-lens view` opens a
history; `monitor/history.py` gives the monitor the same names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.files import atomic_savez, is_integer, meta_schema, printable, read_npz, shown
from entropy_lens.statistics import RECEIVED_MAX_LATER

SCHEMA = "entropy_lens.monitor"
SCHEMA_VERSION = 4  # 2: the non-finite steps; 3: `sequences`, received's summaries; 4: undefined ones NaN
READABLE_VERSIONS = (1, 2, 3, 4)
# the summaries that may be undefined at a step, NaN over all its (layers, heads): received_max_later
# where no batch row has a real key after its first one (monitor/summary.py)
UNDEFINABLE = (RECEIVED_MAX_LATER.name,)
ARRAYS = ("steps", "forwards", "rows")
HISTORY_FILE = "attention-history.npz"  # its name in the output folder of train-tiny --monitor


class Record(NamedTuple):
    """One recorded step of a History (`history[i]`, `for record in history`).

    Args:
        step: the step of the record (History.steps[i]).
        values: {stat: (layers, heads) float32}, the step's per-head summaries (History.values[stat][i]).
        forwards: the recorded forwards merged into the step.
        rows: the real query rows behind the step.
        sequences: the batch rows behind the step (0 in a file before version 3).
    """

    step: int
    values: dict[str, np.ndarray]
    forwards: int
    rows: int
    sequences: int


@dataclass
class History:
    """Recorded steps, oldest first: `steps`, `forwards`, `rows`, `sequences` (n,) int64 and `values[stat]`
    (n, layers, heads) float32 (see the module docstring); `meta` as the file's.

    It is also a sequence of its records, oldest first: `len(history)` records, `history[i]` (negative i
    from the end) the Record of one step (its step number and each statistic's (layers, heads) values),
    `history[i:j]` a list of them, `for record in history` each in turn; `history.at(step)` looks one up
    by its step number.

    Args:
        steps: (n,) int64, the step of each record.
        forwards: (n,) int64, the recorded forwards merged into each step.
        rows: (n,) int64, the real query rows behind each step.
        values: {stat: (n, layers, heads) float32}, each step's per-head summary, in the statistic's unit
            (NaN over a step where a summary of UNDEFINABLE is undefined: `undefined(stat)`).
        meta: the file's meta (the module docstring).
        nonfinite: (k,) int64, the recorded steps whose attention was not finite.
        sequences: (n,) int64, the batch rows behind each step; None: 0 for each (a file before version 3).
    """

    steps: np.ndarray
    forwards: np.ndarray
    rows: np.ndarray
    values: dict[str, np.ndarray]
    meta: dict = field(default_factory=dict)
    nonfinite: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sequences: np.ndarray | None = None

    def __post_init__(self):
        if self.sequences is None:
            self.sequences = np.zeros(len(self.steps), np.int64)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        """The record at position `index` (oldest first; negative from the end), or a list for a slice.

        Args:
            index: a position among the records (int), or a slice of them.

        Returns:
            Record | list[Record]: the step's number, per-head values, forwards, rows and sequences.

        Raises:
            IndexError: no record at `index`.
            TypeError: `index` neither an integer nor a slice (a step number: `at(step)`).
        """
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(
                f"History indices are positions (int) or slices, not {type(index).__name__}; "
                "look a step up by its number with history.at(step)"
            )
        n = len(self)
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"record {i} of a history of {n} records")
        i %= n
        return Record(
            step=int(self.steps[i]),
            values={stat: v[i] for stat, v in self.values.items()},
            forwards=int(self.forwards[i]),
            rows=int(self.rows[i]),
            sequences=int(self.sequences[i]),
        )

    def __iter__(self) -> Iterator[Record]:
        return (self[i] for i in range(len(self)))

    @property
    def stats(self) -> tuple[str, ...]:
        """The names of the recorded statistics, the keys of `values`."""
        return tuple(self.values)

    def undefined(self, stat: str) -> np.ndarray:
        """The steps (int64) at which `stat` is undefined: NaN over all its (layers, heads).

        Args:
            stat: a recorded statistic (one of `stats`); only those of UNDEFINABLE can be.

        Returns:
            np.ndarray: (k,) int64, oldest first; empty where `stat` is defined at every step.
        """
        values = self.values[stat]
        return self.steps[np.isnan(values).all(axis=(1, 2))] if values.size else self.steps[:0]

    def at(self, step: int) -> dict[str, np.ndarray]:
        """{stat: (layers, heads) float32} of the record of `step`; KeyError naming the steps held.

        Args:
            step: a recorded step (one of `steps`); the last record of it if several.

        Returns:
            dict: {stat: (layers, heads) float32}.

        Raises:
            KeyError: no record of `step`.
        """
        hits = np.flatnonzero(self.steps == step)
        if not len(hits):
            raise KeyError(f"no record of step {step}; recorded steps: {self.steps.tolist()}")
        return {stat: v[hits[-1]] for stat, v in self.values.items()}

    def save(self, path: str | Path) -> Path:
        """Write the history to `path` (.npz) atomically: a reader sees the old file or the new one.

        Args:
            path: the file to write (str or Path).

        Returns:
            Path: the file written.
        """
        return atomic_savez(
            path,
            **{name: getattr(self, name).astype(np.int64) for name in (*ARRAYS, "nonfinite", "sequences")},
            **{stat: v.astype(np.float32) for stat, v in self.values.items()},
            meta=np.array(json.dumps({**self.meta, "schema": SCHEMA, "schema_version": SCHEMA_VERSION})),
        )


def load_history(path: str | Path, *, again: str | None = None) -> History:
    """The monitor history at `path`, checked: any damage is one EntropyLensError naming the file and
    ending in `again`, the fix (default: save it again with mon.save; a command gives its own).

    Args:
        path: the .npz file (str or Path).
        again: the fix to end a refusal with; None: save the history again with mon.save.

    Returns:
        History: the records, checked against the meta.

    Raises:
        EntropyLensError: a missing, damaged or foreign file, or a schema version this package does not
            read.
    """
    path = Path(path)
    name = printable(path)
    tail = "" if again is None else f"; {again}"  # the fix of a file that is no history, if given
    again = again or "save the monitor's history again (mon.save(path))"
    if not path.is_file():
        raise EntropyLensError(f"{name} does not exist; {again}")
    data = read_npz(path, what="monitor history", again=again)
    if "meta" not in data:
        raise EntropyLensError(f"{name} has no meta; it is not an entropy-lens monitor history{tail}")
    try:
        meta = json.loads(str(data.pop("meta")))
    except (ValueError, RecursionError) as err:
        raise EntropyLensError(f"{name}: its meta is not JSON ({printable(err)}); {again}") from None
    if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
        raise EntropyLensError(
            f"{name} is not an entropy-lens monitor history (no schema {SCHEMA!r} in meta){tail}"
        )
    version = meta.get("schema_version")
    if not is_integer(version) or version not in READABLE_VERSIONS:
        raise EntropyLensError(
            f"{name} has schema_version {shown(version)}; this entropy-lens reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}: save it again with this version{tail}"
        )
    _check(name, data, meta, again)
    stats = meta["stats"]
    nonfinite = data.get("nonfinite", np.zeros(0, np.int64))
    if nonfinite.ndim != 1 or nonfinite.dtype.kind not in "iu":
        raise EntropyLensError(
            f"{name}: nonfinite is {nonfinite.dtype} {nonfinite.shape}, not steps; {again}"
        )
    sequences = data.get("sequences")  # absent before version 3
    if sequences is not None and (sequences.shape != data["steps"].shape or sequences.dtype.kind not in "iu"):
        raise EntropyLensError(
            f"{name}: sequences is {sequences.dtype} {sequences.shape}, not whole numbers of one per step; {again}"
        )
    values = {s: data[s] for s in stats}
    return History(
        *(data[k] for k in ARRAYS), values=values, meta=meta, nonfinite=nonfinite, sequences=sequences
    )


def is_history(path: str | Path, *, what: str, again: str) -> bool:
    """Whether the .npz at `path` says it is a monitor history: its meta's `schema` is SCHEMA (the file's
    name says nothing). Only the meta is read; a file that is not a readable .npz is refused by
    `read_npz` in one EntropyLensError naming it `what`, with `again` (how to make it again)."""
    return meta_schema(path, what=what, again=again) == SCHEMA


def _check(name: str, data: dict, meta: dict, again: str) -> None:
    """Every array the meta promises, of the shapes and kinds the module docstring gives, finite."""
    stats = meta.get("stats")
    if not isinstance(stats, list) or not all(isinstance(s, str) for s in stats):
        raise EntropyLensError(f"{name}: meta stats is {shown(stats)}, not a list of names; {again}")
    layers, heads = meta.get("n_layers"), meta.get("n_heads")
    if not (is_integer(layers) and is_integer(heads)):
        raise EntropyLensError(f"{name}: meta n_layers/n_heads are not whole numbers; {again}")
    missing = [k for k in (*ARRAYS, *stats) if k not in data]
    if missing:
        raise EntropyLensError(f"{name} lacks {', '.join(map(printable, missing))}; {again}")
    n = data["steps"].shape[0] if data["steps"].ndim == 1 else -1
    for key in ARRAYS:
        if data[key].ndim != 1 or data[key].shape[0] != n or data[key].dtype.kind not in "iu":
            raise EntropyLensError(
                f"{name}: {key} is {data[key].dtype} {data[key].shape}, not whole numbers of one per step; {again}"
            )
    for stat in stats:
        values = data[stat]
        if values.shape != (n, layers, heads) or values.dtype.kind != "f":
            raise EntropyLensError(
                f"{name}: {printable(stat)} is {values.dtype} {values.shape}, expected float "
                f"({n}, {layers}, {heads}) (steps, layers, heads); {again}"
            )
        finite = np.isfinite(values)
        if stat in UNDEFINABLE and values.size:  # a step where it is undefined: NaN over the whole step
            finite |= np.isnan(values).all(axis=(1, 2))[:, None, None]
        if not finite.all():
            raise EntropyLensError(f"{name}: {printable(stat)} holds NaN/inf values; {again}")
