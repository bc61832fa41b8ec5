"""The results file: the contract between compute (scan) and analysis/plotting.

One `.npz` that `numpy.load(path)` opens without entropy_lens (numpy only; no torch here):

    entropy     float32 (layers, heads, len)  mean over samples of H_i, nats
    entropy_sq  float32 (layers, heads, len)  mean of H_i² (std = sqrt(entropy_sq − entropy²))
    loss        float32 (len,)                mean NLL of token i+1 given tokens <= i, nats
    loss_sq     float32 (len,)                mean of squared NLL
    count       int64   (len,)                samples averaged at each position
    sink_mass   float32 (layers, heads, len)  only for models with attention sinks (gpt-oss): mean over
                                              samples of the probability the softmax gives the sink
                                              (the entropy counts the sink as one more outcome)
    Every array beyond these and meta is a row statistic the scan recorded (`ScanResult.stats`, by name,
    with its mean square `<name>_sq`; kernels.stats.ROW_STATS computes them, entropy_lens.statistics
    declares them without torch), shaped as entropy; `stat_names`, `stat(name)` and
    `stat_unit(name)` read entropy and them alike.
    meta        0-d str                       JSON object, keys below

meta (schema_version 1 or 2: a file is written as the lowest version that describes it, 2 only where it
holds row statistics beyond entropy and sink mass (`scan --stats`, with meta `stats` and `first_keys`), so
a reader of version 1 opens every file without them; both load): schema_version, entropy_lens_version, git_hash, model, model_source,
model_class (the class that ran; absent in older files), remote_code_ignored (only where a config's
auto_map named model code that did not run, without --trust-remote-code: that code's name), config_hash, nope, n_layers, n_heads, n_kv_heads, head_dim, scales ([layers][heads] multipliers of
1/√d, so λ_h = scales[l][h]/√d; all equal for a uniform --scale), scale_source, train_len, data,
data_description, seed, samples, length (tokens per sequence; `len` in files written before 0.9), batch_size, dtype, device, threads (torch's CPU thread count:
--threads or OMP_NUM_THREADS; absent in files written before it), backend (the entropy kernels that ran,
"+"-joined: torch_chunked, triton, reference, native; "none" for a loss-only scan), fold (only where
torch_chunked ran on CPU: "compiled" or "eager (why)", kernels/fold.py), native (only for a CPU scan
with --fused auto or on: the native kernel's status, "built", "not built" (no layer asked for it) or
"unavailable (why)": then the CPU fused pass ran torch-streamed; kernels/native), attention_path (what computed
the layers, capture/paths.py's names, several joined by "+": "sdpa-then-entropy": sdpa's output, then an
entropy-only pass; "triton-fused": the Triton kernel's one pass for output and entropy;
"torch-streamed": output and entropy from the same score tiles in plain torch, the CPU fused pass where
the native kernel is unavailable and the way of layers with softcapping or attention sinks, which sdpa
cannot compute; "native": the same from one C++ kernel, the CPU fused pass; "sdpa": sdpa alone,
a loss-only scan's layers; "none": no forward ran. Files written before these names say "separate" for
sdpa-then-entropy (sdpa in a loss-only scan), "streamed" for torch-streamed, and "fused" for
triton-fused on a CUDA `device`, torch-streamed on CPU), fused_choices (only where `--fused auto`
decided: the path it kept per shape of attention call, {shape key: "fused" (the fused pass) |
"separate" (sdpa-then-entropy)}; a resumed scan reuses the interrupted one's, and
`PathChoices(replay=...)` reproduces them), world_size (torchrun's processes), context_parallel (the
sequence shards C: P under --context-parallel alone, C under --context-parallel C (the world_size / C
groups split the samples), else 1; absent in files written before it; scan_config's context_parallel is
true for the flag alone, C for C, absent without it), entropy_units ("nats"),
loss_units ("nats"), entropy_reduction (the scan's --record: "heads"; "mean": the heads axis has
length 1 and holds the mean over the layer's heads of entropy and of entropy_sq; "none": loss only, the
heads axis has length 0; files written before 0.9 say "per_head", "mean_heads", "not_captured"), chunk_indices (which chunk of the packed text each sample is; with a
`stride` in scan_config, which window: window k starts at token k·stride), scan_config (the ScanConfig's
fields; `stride` only when set), torch_version, transformers_version, created_utc, wall_time_s.

Files written before the names above keep loading: `upgrade_meta` maps their keys and values to
today's, for every ScanResult however it is made (and `read_sweep_index` does the same for `len`).
Their bytes are not changed, so figure-cache entries keep their names (those hash the ScanConfig).

Files are written atomically (temporary file in the same folder, then os.replace): a reader sees
the old file or the new one, never half of one (`results.files`).

Files are untrusted: `ScanResult.load` refuses, in one line naming the file and the fix, any damage:
an unreadable archive, arrays that are not real numbers of the shapes above, NaN/inf where a mean is
expected (never read as 0), no positions, meta fields of the wrong type (`results.schema.check_meta`:
a string `length` "256" is not 256). `scan --resume` scans such a file again. Sweep indexes are read
by `read_sweep_index` alone (`results.sweep_index`), which refuses files listed outside the folder.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.files import (
    WriteFailed,
    atomic_savez,
    atomic_write_text,
    check_regular_target,
    is_integer,
    printable,
    read_npz,
    shown,
    write_failure_reason,
)
from entropy_lens.results.schema import (
    ARRAYS,
    ENTROPY_REDUCTIONS,
    LEGACY_META_KEYS,
    LEGACY_REDUCTIONS,
    READABLE_VERSIONS,
    REQUIRED_META,
    SCHEMA_VERSION,
    VERSION_1_STATS,
    check_meta,
    schema_version_of,
    upgrade_meta,
)
from entropy_lens.results.sweep_index import SWEEP_INDEX, SWEEP_KIND, read_sweep_index, write_sweep_index
from entropy_lens.statistics import ENTROPY, FIRST_MASS, MAX, SINK_MASS, STATISTICS, reduction_of

__all__ = [  # the file's contract (this module), and what its submodules give every reader
    "ARRAYS",
    "ENTROPY_REDUCTIONS",
    "LEGACY_META_KEYS",
    "LEGACY_REDUCTIONS",
    "READABLE_VERSIONS",
    "REQUIRED_META",
    "SCHEMA_VERSION",
    "SWEEP_INDEX",
    "SWEEP_KIND",
    "VERSION_1_STATS",
    "ScanResult",
    "WriteFailed",
    "atomic_savez",
    "atomic_write_text",
    "check_meta",
    "check_regular_target",
    "in_l",
    "printable",
    "read_sweep_index",
    "schema_version_of",
    "shown",
    "span_label",
    "spans_by_l",
    "summary",
    "upgrade_meta",
    "write_failure_reason",
    "write_sweep_index",
]


@dataclass
class ScanResult:
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
        """The row statistics this result holds (`stat(name)` gives each): entropy where recorded, then
        those of `stats` in statistics.STATISTICS's order (then any other, by name), not their `<name>_sq`."""
        own = [k for k in self.stats if not (k.endswith("_sq") and k[:-3] in self.stats)]
        known = [k for k in STATISTICS if k in own and k != ENTROPY.name]
        return (ENTROPY.name,) * bool(self.n_heads) + (*known, *sorted(set(own) - set(known)))

    def stat(self, name: str, *, squared: bool = False) -> np.ndarray | None:
        """(layers, heads, len) mean of the row statistic `name` (entropy or one of `stats`), or with
        `squared` its mean square (None where the file holds none: sink_mass)."""
        if name not in self.stat_names:
            held = ", ".join(self.stat_names) or "none (a loss-only scan)"
            raise EntropyLensError(
                f"the result holds no {name!r} (it holds {held}); scan with --stats {name} to record it"
            )
        key = name + "_sq" * squared
        return getattr(self, key) if name == ENTROPY.name else self.stats.get(key)

    def stat_unit(self, name: str) -> str:
        """The unit `name` is stored in: statistics.STATISTICS's, else the meta's `stats` ("" if neither)."""
        info = STATISTICS.get(name)
        return info.unit if info else str((self.meta.get("stats") or {}).get(name, ""))

    @property
    def entropy_reduction(self) -> str:
        """How the entropy is stored: "heads", "mean" (over each layer's heads) or "none" (loss only)."""
        return self.meta.get("entropy_reduction", "heads" if self.n_heads else "none")

    @property
    def n_layers(self) -> int:
        return self.entropy.shape[0]

    @property
    def n_heads(self) -> int:
        return self.entropy.shape[1]

    @property
    def length(self) -> int:
        return self.entropy.shape[2]

    @property
    def mean_entropy(self) -> np.ndarray:
        """(len,) H̄_i: unweighted mean over all layers and heads (the paper's Eq. 1), nats."""
        return self.entropy.mean(axis=(0, 1))

    @property
    def entropy_std(self) -> np.ndarray:
        """(layers, heads, len) standard deviation over samples, nats."""
        return np.sqrt(np.clip(self.entropy_sq - self.entropy.astype(np.float64) ** 2, 0, None))

    def save(self, path: str | Path) -> Path:
        """Write the file atomically, as the lowest schema version that describes it (`schema_version_of`):
        a file without the statistics of version 2 opens in readers of version 1 too. The meta says the
        version written, so this result and the file it loads back as agree."""
        arrays = {name: getattr(self, name) for name in ARRAYS} | self.stats
        self.meta["schema_version"] = schema_version_of(self.meta, self.stats)
        return atomic_savez(path, meta=np.array(json.dumps(self.meta, sort_keys=True)), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> ScanResult:
        """The results file at `path`, checked (the module docstring: files are untrusted); any damage is
        one EntropyLensError naming the file and the fix."""
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
        module docstring gives, no positions, or meta fields of the wrong type."""
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


def in_l(position: int, L: int) -> str:
    """A position as a multiple of the training length L, as span labels write it: 0, L/2, L, 2L, 3.5L."""
    if position == 0 or position == L:
        return "0" if position == 0 else "L"
    return "L/2" if 2 * position == L else f"{position / L:.3g}L"


def span_label(span: tuple[int, int], L: int) -> str:
    """Positions [a, b) in multiples of L: '[L/2, L)', '[3.5L, 4L)'."""
    return f"[{in_l(span[0], L)}, {in_l(span[1], L)})"


def spans_by_l(length: int, L: int, *, start: int = 0) -> dict[str, tuple[int, int]]:
    """{label: (a, b)} for [0, L/2), [L/2, L), then [kL, (k+1)L) up to `length` (spans double in width
    beyond 8L; the last may be partial), leaving out the spans before `start`: in- and
    out-of-distribution positions side by side, as `summary` and the model cards tabulate them."""
    edges, width = [0, L // 2, L], L
    while edges[-1] < length:
        width = width * 2 if edges[-1] >= 8 * L else width
        edges.append(min(length, edges[-1] + width))
    pairs = [(a, b) for a, b in itertools.pairwise(edges) if a >= start and b <= length]
    return {span_label(pair, L): pair for pair in pairs}


def summary(result: ScanResult) -> str:
    """Mean entropy over heads and mean loss by span of positions: `spans_by_l` with a training length
    L in the meta (and len > L), otherwise the first, middle and last tenth; then, for a result with
    further row statistics (`scan --stats`), the mean of each over heads and the same spans, one column
    per statistic under its name and unit; a statistic whose declaration summarises it by a maximum
    (`Statistic.reduction` MAX: max_logit, QK-clip's quantity) shows the max over heads and positions
    instead, and a line under the table says so."""
    T, L = result.length, result.meta.get("train_len")
    if isinstance(L, int) and 2 <= L < T:
        spans, head = spans_by_l(T, L), f"L = {L}"
    else:
        tenth = max(1, T // 10)
        middle = (T - tenth) // 2
        spans = {"first": (0, tenth), "middle": (middle, middle + tenth), "last": (T - tenth, T)}
        head = "tenth"
    h = result.mean_entropy if result.n_heads else None
    lines = [f"{head:<12}{'positions':>16}{'entropy (nats)':>17}{'loss (nats)':>14}"]
    for name, (a, b) in spans.items():
        entropy = f"{h[a:b].mean():>17.3f}" if h is not None else f"{'not recorded':>17}"
        lines.append(f"{name:<12}{f'[{a}, {b})':>16}{entropy}{np.nanmean(result.loss[a:b]):>14.3f}")
    if h is None:
        why = "entropy: not recorded, a loss-only scan (--record none); scan with --record heads to record it"
        return "\n".join([*lines, why])
    names = result.stat_names[1:]
    if names:  # a second block: one column per further statistic, its name above its unit
        widths = [max(len(n), len(result.stat_unit(n)), 8) + 2 for n in names]
        cells = lambda values: "".join(f"{v:>{w}}" for v, w in zip(values, widths))
        lines += ["", f"{head:<12}" + cells(names), " " * 12 + cells(map(result.stat_unit, names))]
        how = {n: reduction_of(n) for n in names}  # the mean, or the maximum
        curves = {n: how[n].summarize(result.stat(n), (0, 1)) for n in names}  # (len,) each
        for label, (a, b) in spans.items():
            lines.append(f"{label:<12}" + cells(f"{how[n].summarize(curves[n][a:b], 0):.3f}" for n in names))
        lines += [
            f"{n}: max over positions and heads of each span (QK-clip's quantity), not the mean"
            for n in names
            if how[n] is MAX
        ]
    if FIRST_MASS.name in names:
        lines.append(f"first_mass: the mass on the first K = {result.meta.get('first_keys', 1)} keys")
    return "\n".join(lines)
