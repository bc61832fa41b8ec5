"""What a generation recorder saves (entropy_lens.GenerationRecorder): the statistics of every generated
token's attention row, one `.npz` that numpy opens. Torch-free. ::

    tokens      int64   (B, N)                 the generated ids; −1 after a sequence ended (its end token
                                               included before) and where a decode loop never fed one
    <stat>      float32 (B, N, layers, heads)  a row statistic (entropy_lens.statistics.STATISTICS) of
                                               generated token n's row: the query whose logits chose it
                                               (n = 0: the prompt's last position); NaN after a sequence ended
    span_mass   float32 (B, N, layers, heads, spans)    per span of meta's span_names (generation/rows.py)
    offset_prob float32 (B, N, layers, heads, offsets)  per offset of meta's offsets
    top_key     int64   (B, N, layers, heads, k)        the k most probable keys' real positions (−1: no
                                               key; after a sequence ended); top_key_prob float32 beside it
    prompt_len  int64   (B,)                   each sequence's real prompt tokens (left padding left out)
    prompt      int64   (B, max prompt_len)    each sequence's real prompt ids, from real position 0 on;
                                               −1 after its prompt (version 2; absent in version 1 files)
    lengths     int64   (B,)                   each sequence's generated tokens up to and with its end
    meta        0-d str                        JSON: schema ("entropy_lens.generation"), schema_version,
                                               entropy_lens_version, model, model_class, n_layers, n_heads,
                                               stats, the statistics' parameters (spans, span_names,
                                               offsets, top_keys where recorded), backend, attention_path,
                                               eos_token_id
Version 2 added the row-slice arrays (span_mass, offset_prob, top_key, top_key_prob); version 1 files
load as they are.

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
from entropy_lens.statistics import ROW_SLICE_STATISTICS, STATISTICS, TOP_KEY

TOP_KEY_PROB = TOP_KEY.name + "_prob"  # the probabilities of top_key's keys, an array beside it
ARRAYS = (*STATISTICS, *ROW_SLICE_STATISTICS, TOP_KEY_PROB)  # every array a result may hold

SCHEMA = "entropy_lens.generation"
GENERATION_VERSION = 2
READS_VERSIONS = (1, 2)
__all__ = ["GENERATION_VERSION", "GenerationResult"]


@dataclass(frozen=True)
class GenerationResult:
    """The statistics of every generated token (module docstring).

    Args:
        tokens: (B, N) int64 generated ids, −1 after a sequence ended.
        values: {stat: (B, N, layers, heads) float32, a trailing axis for the row-slice statistics, top_key
            int64}, NaN (−1) after a sequence ended.
        prompt_len: (B,) each sequence's real prompt tokens.
        prompt: (B, P) int64 each sequence's real prompt ids from real position 0, −1 after it; None where
            not known (a version 1 file).
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
    prompt: np.ndarray | None = None

    def __post_init__(self):
        B, N = self.tokens.shape
        if self.prompt is not None and (self.prompt.ndim != 2 or self.prompt.shape[0] != B):
            raise EntropyLensError(f"prompt must be ({B}, prompt tokens); got {self.prompt.shape}")
        if self.prompt_len.shape != (B,) or self.lengths.shape != (B,):
            raise EntropyLensError(
                f"prompt_len and lengths must be ({B},); got {self.prompt_len.shape}, {self.lengths.shape}"
            )
        for name, v in self.values.items():
            trailing = name in ROW_SLICE_STATISTICS or name == TOP_KEY_PROB
            if v.shape[:2] != (B, N) or v.ndim != 4 + trailing:
                raise EntropyLensError(
                    f"{name}: shape {v.shape}, expected ({B}, {N}, layers, heads{', values' if trailing else ''})"
                )
            live = np.broadcast_to(self.live.reshape(B, N, *(1,) * (v.ndim - 2)), v.shape)
            if v.dtype.kind == "f" and not np.isfinite(v[live]).all():
                raise EntropyLensError(f"{name} holds a value that is not finite for a live token; refused")

    @property
    def span_names(self) -> tuple[str, ...]:
        """span_mass's spans, in the order of its last axis ("prompt", "generated", then the caller's)."""
        return tuple(self.meta.get("span_names", ()))

    def ids_at(self, positions: np.ndarray) -> np.ndarray:
        """The token id at each real position of each sequence: its prompt and then its generated tokens.

        Args:
            positions: (B, ...) int64 real positions (a sequence's first real prompt token is 0), e.g.
                `stat("top_key")`.

        Returns:
            np.ndarray: int64 of `positions`' shape; −1 where a position holds no token (−1 itself, or
            past the tokens).

        Raises:
            EntropyLensError: the prompt ids are not held (a version 1 file).
        """
        if self.prompt is None:
            raise EntropyLensError("this result holds no prompt ids (a version 1 file); record it again")
        B = self.tokens.shape[0]
        tokens = np.full((B, self.prompt.shape[1] + self.tokens.shape[1] + 1), -1, dtype=np.int64)
        for b in range(B):
            P = int(self.prompt_len[b])
            tokens[b, :P] = self.prompt[b, :P]
            tokens[b, P : P + self.tokens.shape[1]] = self.tokens[b]
        flat = np.asarray(positions, dtype=np.int64).reshape(B, -1)
        inside = (flat >= 0) & (flat < tokens.shape[1] - 1)
        got = np.take_along_axis(tokens, np.where(inside, flat, tokens.shape[1] - 1), 1)
        return got.reshape(np.shape(positions))

    @property
    def offsets(self) -> tuple[int, ...]:
        """offset_prob's offsets, in the order of its last axis."""
        return tuple(self.meta.get("offsets", ()))

    @property
    def stats(self) -> tuple[str, ...]:
        """The row statistics held, in the order recorded (top_key_prob is top_key's, not one)."""
        return tuple(name for name in self.values if name != TOP_KEY_PROB)

    @property
    def live(self) -> np.ndarray:
        """The (B, N) tokens of each sequence up to and with its end, True where the values are numbers."""
        return np.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]

    def stat(self, name: str) -> np.ndarray:
        """(B, N, layers, heads) float32: row statistic `name` of every generated token (NaN after a
        sequence ended); a row-slice statistic's last axis is its spans, offsets or k (top_key: int64
        positions, −1 where none; `top_key_prob` its probabilities).

        Args:
            name: a recorded row statistic (`stats`); another is an EntropyLensError naming them.
        """
        if name not in self.values:
            known = ", ".join(self.values) or "none"
            hint = (
                f"record it with GenerationRecorder(model, stats=({name!r}, ...))"
                if name in STATISTICS or name in ROW_SLICE_STATISTICS
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
            **({} if self.prompt is None else {"prompt": self.prompt.astype(np.int64)}),
            **{
                name: v.astype(np.int64 if name == TOP_KEY.name else np.float32)
                for name, v in self.values.items()
            },
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
        if meta.get("schema_version") not in READS_VERSIONS:
            raise EntropyLensError(
                f"{printable(path)} is a generation result of schema version {meta.get('schema_version')!r}; "
                f"this entropy_lens reads version {GENERATION_VERSION}: upgrade it, or {again}"
            )
        tokens, prompt_len, lengths = arrays.pop("tokens"), arrays.pop("prompt_len"), arrays.pop("lengths")
        prompt = arrays.pop("prompt", None)
        unknown = [name for name in arrays if name not in ARRAYS]
        if unknown:
            raise EntropyLensError(f"{printable(path)} holds unknown arrays {unknown}; {again}")
        names = [*meta.get("stats", arrays), *([TOP_KEY_PROB] if TOP_KEY_PROB in arrays else [])]
        return cls(tokens, {name: arrays[name] for name in names}, prompt_len, lengths, meta, prompt)
