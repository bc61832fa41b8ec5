"""What a generation recorder saves (entropy_lens.GenerationRecorder): the statistics of every generated
token's attention row, one `.npz` that numpy opens. Torch-free. ::

    tokens      int64   (B, N)                 the generated ids; −1 after a sequence ended (its end token
                                               included before) and where a decode loop never fed one
    <stat>      float32 (B, N, layers, heads)  a row statistic (entropy_lens.statistics.STATISTICS) of
                                               generated token n's row: the query whose logits chose it
                                               (n = 0: the prompt's last position); NaN after a sequence ended
    prompt_len  int64   (B,)                   each sequence's real prompt tokens (left padding left out)
    lengths     int64   (B,)                   each sequence's generated tokens up to and with its end
    meta        0-d str                        JSON: schema ("entropy_lens.generation"), schema_version,
                                               entropy_lens_version, model, model_class, n_layers, n_heads,
                                               stats, the statistics' parameters, backend, attention_path,
                                               eos_token_id

Every value of a live token is finite; a sequence's values after its end are NaN (−1 for ids), never a
number that could be read as one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.files import atomic_savez, npz_holds, printable, read_npz
from entropy_lens.statistics import STATISTICS

SCHEMA = "entropy_lens.generation"
GENERATION_VERSION = 1
__all__ = ["GENERATION_VERSION", "GenerationResult"]


@dataclass(frozen=True)
class GenerationResult:
    """The statistics of every generated token (module docstring).

    Args:
        tokens: (B, N) int64 generated ids, −1 after a sequence ended.
        values: {stat: (B, N, layers, heads) float32}, NaN after a sequence ended.
        prompt_len: (B,) each sequence's real prompt tokens.
        lengths: (B,) each sequence's generated tokens up to and with its end.
        meta: what ran (module docstring), as saved.

    Raises:
        EntropyLensError: shapes that disagree, or a live token's value that is not finite.
    """

    tokens: np.ndarray
    values: dict[str, np.ndarray]
    prompt_len: np.ndarray
    lengths: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        B, N = self.tokens.shape
        if self.prompt_len.shape != (B,) or self.lengths.shape != (B,):
            raise EntropyLensError(
                f"prompt_len and lengths must be ({B},); got {self.prompt_len.shape}, {self.lengths.shape}"
            )
        for name, v in self.values.items():
            if v.shape[:2] != (B, N) or v.ndim != 4:
                raise EntropyLensError(f"{name}: shape {v.shape}, expected ({B}, {N}, layers, heads)")
            live = np.broadcast_to(self.live[:, :, None, None], v.shape)
            if not np.isfinite(v[live]).all():
                raise EntropyLensError(f"{name} holds a value that is not finite for a live token; refused")

    @property
    def stats(self) -> tuple[str, ...]:
        """The row statistics held, in the order recorded."""
        return tuple(self.values)

    @property
    def live(self) -> np.ndarray:
        """The (B, N) tokens of each sequence up to and with its end, True where the values are numbers."""
        return np.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]

    def stat(self, name: str) -> np.ndarray:
        """(B, N, layers, heads) float32: row statistic `name` of every generated token (NaN after a
        sequence ended).

        Args:
            name: a recorded row statistic (`stats`); another is an EntropyLensError naming them.
        """
        if name not in self.values:
            known = ", ".join(self.values) or "none"
            hint = (
                f"record it with GenerationRecorder(model, stats=({name!r}, ...))"
                if name in STATISTICS
                else ""
            )
            raise EntropyLensError(
                f"{printable(name)!r} was not recorded (recorded: {known}){'; ' + hint if hint else ''}"
            )
        return self.values[name]

    def save(self, path: str | Path) -> Path:
        """The result as one .npz at `path`, written atomically (module docstring); returns the path.

        Args:
            path: the file to write (a target that is not a regular file is refused).
        """
        meta = {"schema": SCHEMA, "schema_version": GENERATION_VERSION, **self.meta}
        return atomic_savez(
            path,
            tokens=self.tokens.astype(np.int64),
            prompt_len=self.prompt_len.astype(np.int64),
            lengths=self.lengths.astype(np.int64),
            meta=np.array(json.dumps(meta)),
            **{name: v.astype(np.float32) for name, v in self.values.items()},
        )

    @classmethod
    def load(cls, path: str | Path) -> GenerationResult:
        """A result `save` wrote; EntropyLensError in one line for any other file.

        Args:
            path: the .npz to read.
        """
        path = Path(path)
        again = "record it again with GenerationRecorder(...).result().save(path)"
        if not npz_holds(path, ("tokens", "lengths", "meta")):
            raise EntropyLensError(
                f"{printable(path)} is not a generation result (no tokens or meta); {again}"
            )
        arrays = read_npz(path, what="generation result", again=again)
        try:
            meta = json.loads(str(arrays.pop("meta")))
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
            raise EntropyLensError(f"{printable(path)} is not a generation result (its meta); {again}")
        if meta.get("schema_version") != GENERATION_VERSION:
            raise EntropyLensError(
                f"{printable(path)} is a generation result of schema version {meta.get('schema_version')!r}; "
                f"this entropy_lens reads version {GENERATION_VERSION}: upgrade it, or {again}"
            )
        tokens, prompt_len, lengths = arrays.pop("tokens"), arrays.pop("prompt_len"), arrays.pop("lengths")
        unknown = [name for name in arrays if name not in STATISTICS]
        if unknown:
            raise EntropyLensError(f"{printable(path)} holds unknown arrays {unknown}; {again}")
        return cls(
            tokens, {name: arrays[name] for name in meta.get("stats", arrays)}, prompt_len, lengths, meta
        )
