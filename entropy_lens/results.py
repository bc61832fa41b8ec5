"""The results file: the contract between compute (scan) and analysis/plotting.

One `.npz` that `numpy.load(path)` opens without entropy_lens (numpy only; no torch here):

    entropy     float32 (layers, heads, len)  mean over samples of H_i, nats
    entropy_sq  float32 (layers, heads, len)  mean of H_i² (std = sqrt(entropy_sq − entropy²))
    loss        float32 (len,)                mean NLL of token i+1 given tokens <= i, nats
    loss_sq     float32 (len,)                mean of squared NLL
    count       int64   (len,)                samples averaged at each position
    meta        0-d str                       JSON object, keys below

meta (schema_version 1): schema_version, entropy_lens_version, git_hash, model, model_source,
config_hash, nope, n_layers, n_heads, n_kv_heads, head_dim, scales ([layers][heads] multipliers of
1/√d, so λ_h = scales[l][h]/√d; all equal for a uniform --scale), scale_source, train_len, data,
data_description, seed, samples, len, batch_size, dtype, device, backend, entropy_units ("nats"),
loss_units ("nats"), entropy_reduction ("none": per head; sweeps may store "mean_heads" with
heads = 1), chunk_indices, torch_version, transformers_version, created_utc, wall_time_s.

Files are written atomically (temporary file in the same folder, then os.replace): a reader sees
the old file or the new one, never half of one.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError

SCHEMA_VERSION = 1
ARRAYS = ("entropy", "entropy_sq", "loss", "loss_sq", "count")
REQUIRED_META = (
    "schema_version", "entropy_lens_version", "git_hash", "model", "config_hash", "nope", "head_dim",
    "scales", "data", "seed", "samples", "len", "dtype", "device", "backend", "wall_time_s",
)  # fmt: skip


@dataclass
class ScanResult:
    entropy: np.ndarray  # (layers, heads, len) nats
    entropy_sq: np.ndarray  # (layers, heads, len)
    loss: np.ndarray  # (len,) nats
    loss_sq: np.ndarray  # (len,)
    count: np.ndarray  # (len,)
    meta: dict = field(default_factory=dict)

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
        arrays = {name: getattr(self, name) for name in ARRAYS}
        return atomic_savez(path, meta=np.array(json.dumps(self.meta, sort_keys=True)), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> ScanResult:
        path = Path(path)
        if not path.is_file():
            raise EntropyLensError(f"results file {path} does not exist; run `entropy-lens scan` to make it")
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # truncated or foreign file
            raise EntropyLensError(f"{path} is not a readable results file ({err}); rerun the scan") from None
        missing = [k for k in (*ARRAYS, "meta") if k not in data]
        if missing:
            raise EntropyLensError(f"{path} lacks {', '.join(missing)}; it is not an entropy-lens results file")
        meta = json.loads(str(data.pop("meta")))
        version = meta.get("schema_version")
        if version != SCHEMA_VERSION:
            raise EntropyLensError(
                f"{path} has schema_version {version}, this entropy-lens reads {SCHEMA_VERSION}; "
                "rerun the scan with this version"
            )
        result = cls(**{k: data[k] for k in ARRAYS}, meta=meta)
        result.validate(source=str(path))
        return result

    def validate(self, source: str = "result") -> None:
        L, H, T = self.entropy.shape
        if self.entropy_sq.shape != (L, H, T) or any(getattr(self, a).shape != (T,) for a in ARRAYS[2:]):
            raise EntropyLensError(f"{source}: array shapes disagree; the file is corrupt, rerun the scan")
        missing = [k for k in REQUIRED_META if k not in self.meta]
        if missing:
            raise EntropyLensError(f"{source}: meta lacks {', '.join(missing)}; rerun the scan")
        if self.meta["len"] != T:
            raise EntropyLensError(f"{source}: meta len {self.meta['len']} != array length {T}")


def atomic_savez(path: str | Path, **arrays) -> Path:
    """np.savez to `path` atomically (write a sibling temporary file, fsync, os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(buf.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def summary(result: ScanResult) -> str:
    """Mean entropy over heads and mean loss in the first, middle and last tenth of positions."""
    T = result.length
    tenth = max(1, T // 10)
    spans = {"first": (0, tenth), "middle": ((T - tenth) // 2, (T - tenth) // 2 + tenth), "last": (T - tenth, T)}
    h = result.mean_entropy
    lines = [f"{'tenth':<8}{'positions':>16}{'entropy (nats)':>17}{'loss (nats)':>14}"]
    for name, (a, b) in spans.items():
        lines.append(f"{name:<8}{f'[{a}, {b})':>16}{h[a:b].mean():>17.3f}{np.nanmean(result.loss[a:b]):>14.3f}")
    return "\n".join(lines)
