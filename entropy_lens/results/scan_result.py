"""`ScanResult`: one results file in memory, its arrays and meta, written atomically as the lowest schema
version that describes it and read back checked (`load` refuses any damage in one line). The file's
contract, every array and meta key, is the docstring of `entropy_lens.results`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import did_you_mean
from entropy_lens.results.files import atomic_savez, is_integer, printable, read_npz, shown
from entropy_lens.results.schema import (
    ARRAYS,
    READABLE_VERSIONS,
    REQUIRED_META,
    check_meta,
    schema_version_of,
    upgrade_meta,
)
from entropy_lens.statistics import ENTROPY, KEY_STATISTICS, RECEIVED, SINK_MASS, STATISTICS

__all__ = ["ScanResult"]


@dataclass
class ScanResult:
    """A scan's means by layer, head and position, and its meta: the results file in memory (the
    docstring of `entropy_lens.results` gives the file's contract). `scan` makes one, `ScanResult.load`
    reads one.

    Args:
        entropy: (layers, heads, len) float32, mean entropy over samples, nats.
        entropy_sq: (layers, heads, len) float32, mean squared entropy, nats².
        loss: (len,) float32, mean NLL of token i+1 given tokens <= i, nats.
        loss_sq: (len,) float32, mean squared NLL.
        count: (len,) int64, samples averaged at each position.
        meta: the JSON meta (the file's contract); an older file's keys are upgraded (`upgrade_meta`).
        stats: {name: (layers, heads, len)} the other row statistics recorded (and their `<name>_sq`),
            in each statistic's unit: sink_mass for a model with attention sinks; and the key statistics
            (attention received by key position: `key_names`, read with `received`).
    """

    entropy: np.ndarray  # (layers, heads, len) nats
    entropy_sq: np.ndarray  # (layers, heads, len)
    loss: np.ndarray  # (len,) nats
    loss_sq: np.ndarray  # (len,)
    count: np.ndarray  # (len,)
    meta: dict = field(default_factory=dict)
    # the other row statistics the scan recorded (kernels.stats.ROW_STATS), (layers, heads, len) means by
    # name, stored under their names: sink_mass for a model with attention sinks
    stats: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        self.meta = upgrade_meta(self.meta)

    @property
    def sink_mass(self) -> np.ndarray | None:
        """(layers, heads, len) mean probability of the attention sink; None for a model without sinks."""
        return self.stats.get(SINK_MASS.name)

    @property
    def stat_names(self) -> tuple[str, ...]:
        """The row statistics this result holds (`stat(name)` gives each), entropy where recorded, then
        those of `stats` in statistics.STATISTICS's order (then any other, by name), not their `<name>_sq`."""
        own = [k for k in self.stats if not (k.endswith("_sq") and k[:-3] in self.stats)]
        own = [k for k in own if k not in KEY_STATISTICS]
        known = [k for k in STATISTICS if k in own and k != ENTROPY.name]
        return (ENTROPY.name,) * bool(self.n_heads) + (*known, *sorted(set(own) - set(known)))

    def stat(self, name: str, *, squared: bool = False) -> np.ndarray | None:
        """(layers, heads, len) mean of the row statistic `name` (entropy or one of `stats`), or with
        `squared` its mean square (None where the file holds none: sink_mass).

        Args:
            name: one of `stat_names`.
            squared: return the mean square instead of the mean.

        Returns:
            (layers, heads, len) means in `stat_unit(name)`, or None.

        Raises:
            EntropyLensError: the result holds no `name`.
        """
        if name in KEY_STATISTICS:
            raise EntropyLensError(
                f"{name} is a key statistic (by key position): read it with received({name!r})"
            )
        if name not in self.stat_names:
            held = ", ".join(self.stat_names) or "none (a loss-only scan)"
            raise EntropyLensError(
                f"the result holds no {name!r} (it holds {held}); scan with --stats {name} to record it"
            )
        key = name + "_sq" * squared
        return getattr(self, key) if name == ENTROPY.name else self.stats.get(key)

    @property
    def key_names(self) -> tuple[str, ...]:
        """The key statistics this result holds (attention received by key position), in
        statistics.KEY_STATISTICS's order; () for a scan without them."""
        return tuple(name for name in KEY_STATISTICS if name in self.stats)

    def received(self, name: str = RECEIVED.name, *, squared: bool = False) -> np.ndarray:
        """(layers, heads, key positions) the key statistic `name` by key position, the mean over samples
        (received_max: the largest), or with `squared` its mean square.

        Args:
            name: one of `key_names`.
            squared: return the mean square instead (received, received_mean).

        Returns:
            (layers, heads, key positions) float32 (heads 1 for a scan with --record mean).

        Raises:
            EntropyLensError: a name that is no key statistic (a row statistic names `stat`; a misspelt
                one the close match), `squared` for a maximum, or a key statistic the scan did not record
                (naming the --stats that records it).
        """
        if name in STATISTICS:
            raise EntropyLensError(
                f"{name} is a row statistic, by query position: read it with result.stat({name!r}); "
                f"received() reads the key statistics {', '.join(KEY_STATISTICS)}"
            )
        if name not in KEY_STATISTICS:
            raise EntropyLensError(
                f"{printable(name)!r} is no key statistic{did_you_mean([name], KEY_STATISTICS)}; pass one of "
                f"{', '.join(KEY_STATISTICS)}"
            )
        if squared and not KEY_STATISTICS[name].squared:
            raise EntropyLensError(f"{name} is a maximum and has no mean square; pass squared=False")
        key = name + "_sq" * squared
        if key not in self.stats:
            held = ", ".join(self.key_names) or "none"
            raise EntropyLensError(
                f"the result holds no {key!r} (key statistics held: {held}); scan with --stats {name} to record it"
            )
        return self.stats[key]

    def stat_unit(self, name: str) -> str:
        """The unit `name` is stored in: statistics.STATISTICS's, else the meta's `stats` ("" if neither).

        Args:
            name: a row statistic's name.

        Returns:
            str: the unit ("nats", "probability", ...).
        """
        info = STATISTICS.get(name) or KEY_STATISTICS.get(name)
        return info.unit if info else str((self.meta.get("stats") or {}).get(name, ""))

    @property
    def entropy_reduction(self) -> str:
        """How the entropy is stored, "heads", "mean" (over each layer's heads) or "none" (loss only)."""
        return self.meta.get("entropy_reduction", "heads" if self.n_heads else "none")

    @property
    def n_layers(self) -> int:
        """The number of layers (the first axis of `entropy`)."""
        return self.entropy.shape[0]

    @property
    def n_heads(self) -> int:
        """The number of heads recorded per layer (the second axis; 1 for --record mean, 0 for none)."""
        return self.entropy.shape[1]

    @property
    def length(self) -> int:
        """The number of positions (tokens per sequence, the last axis)."""
        return self.entropy.shape[2]

    @property
    def mean_entropy(self) -> np.ndarray:
        """(len,) H̄_i, the unweighted mean over all layers and heads (the paper's Eq. 1), nats."""
        return self.entropy.mean(axis=(0, 1))

    @property
    def entropy_std(self) -> np.ndarray:
        """(layers, heads, len) standard deviation over samples, nats."""
        return np.sqrt(np.clip(self.entropy_sq - self.entropy.astype(np.float64) ** 2, 0, None))

    def save(self, path: str | Path) -> Path:
        """Write the file atomically, as the lowest schema version that describes it (`schema_version_of`):
        a file without the statistics of version 2 opens in readers of version 1 too. The meta says the
        version written, so this result and the file it loads back as agree.

        Args:
            path: the .npz file to write (str or Path); a target that is not a regular file is refused.

        Returns:
            Path: the file written.
        """
        arrays = {name: getattr(self, name) for name in ARRAYS} | self.stats
        self.meta["schema_version"] = schema_version_of(self.meta, self.stats)
        return atomic_savez(path, meta=np.array(json.dumps(self.meta, sort_keys=True)), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> ScanResult:
        """The results file at `path`, checked (the module docstring: files are untrusted); any damage is
        one EntropyLensError naming the file and the fix.

        Args:
            path: the .npz file (str or Path).

        Returns:
            ScanResult: the result, validated.

        Raises:
            EntropyLensError: a missing, damaged or foreign file, an unreadable schema version, or NaN/inf
                where a mean is expected.
        """
        path = Path(path)
        name = printable(path)
        if not path.is_file():
            raise EntropyLensError(f"{name} does not exist; run `entropy-lens scan` to make it")
        again = "rerun the scan that made it with --resume, which scans an unreadable file again"
        data = read_npz(path, what="results file", again=again)
        missing = [k for k in (*ARRAYS, "meta") if k not in data]
        if missing:
            raise EntropyLensError(
                f"{name} lacks {', '.join(missing)}; it is not an entropy-lens results file"
            )
        try:
            meta = json.loads(str(data.pop("meta")))
        except (ValueError, RecursionError) as err:  # RecursionError: nesting too deep
            raise EntropyLensError(
                f"{name} is not a readable results file (meta: {printable(err)}); {again}"
            ) from None
        if not isinstance(meta, dict):
            raise EntropyLensError(f"{name} is not a readable results file (meta is not an object); {again}")
        version = meta.get("schema_version")
        if not is_integer(version) or version not in READABLE_VERSIONS:
            raise EntropyLensError(
                f"{name} has schema_version {shown(version)}, this entropy-lens reads "
                f"{', '.join(map(str, READABLE_VERSIONS))}; rerun the scan with this version"
            )
        stats = {k: v for k, v in data.items() if k not in ARRAYS}  # every further array is a statistic
        result = cls(**{k: data[k] for k in ARRAYS}, meta=meta, stats=stats)
        result.validate(source=str(path))
        for name, values in {**{k: data[k] for k in ARRAYS}, **stats}.items():
            bad = ~np.isfinite(values)
            if bad.any():  # a mean of NaN is no number: refused, never read as 0 or drawn as if measured
                where = ", ".join(map(str, np.argwhere(bad)[0]))
                raise EntropyLensError(
                    f"{printable(path)}: {printable(name)} holds {int(bad.sum())} NaN/inf value(s) where numbers are "
                    f"expected (first at [{where}]); {again} (in --dtype float32 if the scan diverged)"
                )
        return result

    def validate(self, source: str = "result") -> None:
        """Refuse, in one line naming `source`, arrays that are not real numbers of the shapes the
        module docstring gives, no positions, or meta fields of the wrong type.

        Args:
            source: the name the messages give the result (a file's path).

        Raises:
            EntropyLensError: any of the above, in one line.
        """
        source = printable(source)
        corrupt = "the file is corrupt, rerun the scan"
        for name, values in {**{k: getattr(self, k) for k in ARRAYS}, **self.stats}.items():
            values = np.asarray(values)
            if values.dtype.kind not in "iuf":
                raise EntropyLensError(
                    f"{source}: {printable(name)} is {values.dtype}, not real numbers; {corrupt}"
                )
        for name in ARRAYS:
            ndim = 3 if name in ENTROPY.sums else 1
            if getattr(self, name).ndim != ndim:
                want = "(layers, heads, positions)" if ndim == 3 else "(positions,)"
                raise EntropyLensError(
                    f"{source}: {name} has shape {getattr(self, name).shape}, not {want}; {corrupt}"
                )
        L, H, T = self.entropy.shape
        if self.entropy_sq.shape != (L, H, T) or any(getattr(self, a).shape != (T,) for a in ARRAYS[2:]):
            raise EntropyLensError(f"{source}: array shapes disagree; {corrupt}")
        for name, values in self.stats.items():
            if values.shape != (L, H, T):
                raise EntropyLensError(
                    f"{source}: {printable(name)} has shape {values.shape}, not entropy's {(L, H, T)}; {corrupt}"
                )
        if T == 0:
            raise EntropyLensError(
                f"{source}: the file holds no positions (arrays of length 0); rerun the scan with --len 2 "
                "or more"
            )
        missing = [k for k in REQUIRED_META if k not in self.meta]
        if missing:
            raise EntropyLensError(f"{source}: meta lacks {', '.join(missing)}; rerun the scan")
        check_meta(self.meta, source)
        if self.meta["length"] != T:
            raise EntropyLensError(
                f"{source}: meta length {self.meta['length']} != array length {T}; {corrupt}"
            )
