"""What a generation recorder saves (entropy_lens.GenerationRecorder): the statistics of every generated
token's attention row, one `.npz` that numpy opens. Torch-free. ::

    tokens      int64   (B, N)                 the generated ids; −1 after a sequence ended (its end token
                                               included before) and where a decode loop never fed one
    <stat>      float32 (B, N, layers, heads)  a row statistic (entropy_lens.statistics.STATISTICS) of
                                               generated token n's row: the query whose logits chose it
                                               (n = 0: the prompt's last position); NaN after a sequence ended
    span_mass   float32 (B, N, layers, heads, spans)    per span of meta's span_names
    offset_prob float32 (B, N, layers, heads, offsets)  per offset of meta's offsets
    distance_mass float32 (B, N, layers, heads, bins)   per bin of meta's distance_bins (version 3)
    top_key     int64   (B, N, layers, heads, k)        the k most probable keys' real positions (−1: no
                                               key; after a sequence ended); top_key_prob float32 beside it
    probs       float32 (B, N, layers, heads, K)        keep_probs=("generated", span): row n's probabilities
                                               over the span's keys from its start, K the longest run (0
                                               past a row's own position: a causal row sees none there)
    prompt_len  int64   (B,)                   each sequence's real prompt tokens (left padding left out)
    prompt      int64   (B, max prompt_len)    each sequence's real prompt ids, from real position 0 on;
                                               −1 after its prompt, or where not known (a prompt given as
                                               inputs_embeds) (version 2; absent in version 1 files)
    lengths     int64   (B,)                   each sequence's generated tokens up to and with its end
    meta        0-d str                        JSON: schema ("entropy_lens.generation"), schema_version,
                                               entropy_lens_version, model, model_class, n_layers, n_heads,
                                               stats, the statistics' parameters (spans, span_names,
                                               offsets, top_keys, distance_bins where recorded), backend,
                                               attention_path,
                                               eos_token_id; optional, token_texts: {id: text} of every
                                               id of the prompts and generated tokens, each decoded alone
                                               (`with_token_texts`; entropy-lens generate writes it), which
                                               `entropy-lens view` shows
    prompt_rows.<stat>  (B, P, layers, heads[, values])  a statistic of every prompt row, position 0 .. P − 1
                                               (NaN past a sequence's prompt): a vLLM request with
                                               `prompt=True` (entropy_lens.vllm) (version 3)
Version 2 added the row-slice arrays (span_mass, offset_prob, top_key, top_key_prob), version 3
distance_mass and the prompt's rows; earlier files load as they are (`slots` names any row-slice
statistic's last axis). token_texts is an optional meta field, not a new version: a file without it
loads, and the view shows its tokens by id.

`is_generation(path)` tells a generation file from a scan's or a history by its meta's schema, reading
the meta alone.

Every value of a live token is finite; a sequence's values after its end are NaN (−1 for ids), never a
number that could be read as one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.files import (
    atomic_savez,
    check_regular_source,
    meta_schema,
    npz_holds,
    printable,
    read_npz,
)
from entropy_lens.statistics import ROW_SLICE_STATISTICS, SPAN_MASS, STATISTICS, TOP_KEY, TOP_KEY_PROB

PROBS = "probs"  # keep_probs' block: each generated token's row over a span's keys
ARRAYS = (*STATISTICS, *ROW_SLICE_STATISTICS, TOP_KEY_PROB, PROBS)  # every array a result may hold

SCHEMA = "entropy_lens.generation"
GENERATION_VERSION = 3
READS_VERSIONS = (1, 2, 3)
PROMPT_ROWS = "prompt_rows."  # the prefix of the prompt's rows' arrays (version 3)
TOKEN_TEXTS = "token_texts"  # the optional meta field: {id: text}
__all__ = ["GENERATION_VERSION", "TOKEN_TEXTS", "GenerationResult", "is_generation"]


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
        prompt_values: {stat: (B, P, layers, heads[, values])}: the prompt's rows (`prompt_stat`), where
            recorded.

    Raises:
        EntropyLensError: shapes that disagree, or a live token's value that is not finite.
    """

    tokens: np.ndarray
    values: dict[str, np.ndarray]
    prompt_len: np.ndarray
    lengths: np.ndarray
    meta: dict = field(default_factory=dict)
    prompt: np.ndarray | None = None
    prompt_values: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        B, N = self.tokens.shape
        if self.prompt is not None and (self.prompt.ndim != 2 or self.prompt.shape[0] != B):
            raise EntropyLensError(f"prompt must be ({B}, prompt tokens); got {self.prompt.shape}")
        if self.prompt_len.shape != (B,) or self.lengths.shape != (B,):
            raise EntropyLensError(
                f"prompt_len and lengths must be ({B},); got {self.prompt_len.shape}, {self.lengths.shape}"
            )
        for name, v in self.values.items():
            trailing = name in ROW_SLICE_STATISTICS or name in (TOP_KEY_PROB, PROBS)
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
        return self.slots(SPAN_MASS.name)

    def slots(self, name: str) -> tuple[str, ...]:
        """The labels of a row-slice statistic's last axis, as its declaration names them from the meta.

        Args:
            name: a row-slice statistic (statistics.ROW_SLICE_STATISTICS).

        Returns:
            tuple: span_mass its spans, offset_prob its offsets, a distance bin its lower edge; () where
            the slots have no names (top_key's ranks) or it was not recorded.
        """
        p = ROW_SLICE_STATISTICS[name].sliced
        if p.named is not None:
            return tuple(self.meta.get(p.named, ()))
        value = self.meta.get(p.name)
        labels = None if value is None else p.labels(tuple(value) if isinstance(value, list) else value)
        return tuple(labels or ())

    def ids_at(self, positions: np.ndarray) -> np.ndarray:
        """The token id at each real position of each sequence: its prompt and then its generated tokens.

        Args:
            positions: (B, ...) int64 real positions (a sequence's first real prompt token is 0), e.g.
                `stat("top_key")`.

        Returns:
            np.ndarray: int64 of `positions`' shape; −1 where a position holds no token (−1 itself, or
            past the tokens) or its id is not known (a prompt given as inputs_embeds).

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
    def token_texts(self) -> dict[int, str]:
        """The text of each id the meta's token_texts holds (`with_token_texts`), keyed by the id; empty
        where none were decoded (a result made without a tokenizer, or before the field existed)."""
        texts = self.meta.get(TOKEN_TEXTS)
        return {int(i): t for i, t in texts.items()} if isinstance(texts, dict) else {}

    def with_token_texts(self, tokenizer) -> GenerationResult:
        """This result with meta token_texts: every id of its prompts and generated tokens decoded alone
        by `tokenizer` (what `entropy-lens view` shows of each token; `entropy-lens generate` does this).

        Args:
            tokenizer: a transformers tokenizer (its `batch_decode`, spaces left as they are).

        Returns:
            GenerationResult: a copy, its meta with token_texts {str(id): text} (JSON keys are strings).
        """
        held = [self.tokens] if self.prompt is None else [self.tokens, self.prompt]
        ids = np.unique(np.concatenate([a.ravel() for a in held]))
        ids = [int(i) for i in ids if i >= 0]
        # as it stands in the text: no clean-up of the spaces before punctuation
        texts = tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False) if ids else []
        return replace(self, meta={**self.meta, TOKEN_TEXTS: dict(zip(map(str, ids), texts, strict=True))})

    @property
    def offsets(self) -> tuple[int, ...]:
        """offset_prob's offsets, in the order of its last axis."""
        return tuple(self.meta.get("offsets", ()))

    def lookback_ratio(self, context: str = "prompt") -> np.ndarray:
        """Lookback Lens' ratio (Chuang et al., 2024) of every generated token's row, per layer and head:
        A(context) / (A(context) + A(new)), A the mean probability over a span's positions: the context
        [0, c) and the new positions after it up to the row's own, c..i (the authors' definition: their
        context leaves the response header out, so "new" is never empty). Read off span_mass.

        Args:
            context: "prompt" (c = each sequence's prompt_len) or a recorded span (`span_names`) that
                starts at 0: its stop is c.

        Returns:
            np.ndarray: (B, N, layers, heads) float64; NaN after a sequence ended and where the ratio is
            undefined: a row with no position after the context (token 0 when the context is the whole
            prompt) or one whose keys hold no mass (all on a sink).

        Raises:
            EntropyLensError: span_mass not recorded, or a context that is no span from 0.
        """
        mass = self.stat(SPAN_MASS.name).astype(np.float64)  # (B, N, layers, heads, spans)
        if context not in self.span_names:
            raise EntropyLensError(
                f"context {printable(context)!r} is not a recorded span (recorded: {', '.join(self.span_names)}); "
                "record it with GenerationRecorder(..., spans={name: (0, stop)})"
            )
        if context == "prompt":
            stop = self.prompt_len.astype(np.float64)
        else:
            start, stop = self.meta["spans"][context]
            if start != 0:
                raise EntropyLensError(
                    f"context {context!r} starts at {start}; Lookback Lens' context is the text before the "
                    "response: record a span from 0, e.g. spans={'context': (0, stop)}"
                )
            stop = np.full(self.prompt_len.shape, float(stop))
        row = (
            self.prompt_len[:, None] + np.arange(self.tokens.shape[1])[None, :] - 1
        )  # each row's real position
        seen = np.minimum(stop[:, None], row + 1.0)  # the context's positions up to the row's own
        new = row + 1.0 - seen
        ctx_mass = mass[..., self.span_names.index(context)]
        keys = mass[..., 0] + mass[..., 1]  # prompt and generated cover every key: 1 − the sink's share
        with np.errstate(divide="ignore", invalid="ignore"):
            a_ctx = ctx_mass / seen[:, :, None, None]
            a_new = (keys - ctx_mass) / new[:, :, None, None]
            ratio = a_ctx / (a_ctx + a_new)
        defined = (new > 0)[:, :, None, None] & (a_ctx + a_new > 0) & self.live[:, :, None, None]
        return np.where(defined, ratio, np.nan)

    def lookback_features(self, context: str = "prompt", *, window: int | None = 8, tokens=None):
        """The lookback ratios averaged over a chunk of generated tokens and flattened layer-major
        (L0-H0, L0-H1, ..., L1-H0, ...), the feature vectors the authors' logistic-regression detectors
        take (their `extract_time_series_features`).

        Args:
            context: as `lookback_ratio`.
            window: each window of `window` consecutive live tokens of a sequence (their sliding_window);
                ignored where `tokens` is given.
            tokens: (s, e): the one chunk s..e − 1 of generated tokens of every sequence (their
                predefined span).

        Returns:
            tuple: (features (M, layers · heads) float64, rows (M, 2) int64: each vector's sequence and its
            chunk's last token).

        Raises:
            EntropyLensError: a chunk holding an undefined ratio (one line saying which), a chunk outside
                a sequence's live tokens, or no chunk at all.
        """
        ratio = self.lookback_ratio(context)
        B, _, L, H = ratio.shape
        if tokens is not None:
            s, e = (int(v) for v in tokens)
            chunks = [(b, s, e) for b in range(B)]
        else:
            w = int(window)
            if w < 1:
                raise EntropyLensError(f"window must be at least 1 (got {w}); the authors use 8")
            chunks = [(b, j - w + 1, j + 1) for b in range(B) for j in range(w - 1, int(self.lengths[b]))]
        features, rows = [], []
        for b, s, e in chunks:
            if not 0 <= s < e <= self.lengths[b]:
                raise EntropyLensError(
                    f"tokens ({s}, {e}) are outside sequence {b}'s {int(self.lengths[b])} generated tokens"
                )
            chunk = ratio[b, s:e]
            if np.isnan(chunk).any():
                raise EntropyLensError(
                    f"sequence {b}'s tokens {s}..{e - 1} hold an undefined lookback ratio (a row with no "
                    f"position after the context {context!r}, or none of its mass on keys): record a context "
                    "that ends before the prompt does, or start the chunks after it"
                )
            features.append(chunk.mean(0).reshape(L * H))
            rows.append((b, e - 1))
        if not features:
            raise EntropyLensError(f"no sequence has {window} live generated tokens; pass a smaller window")
        return np.stack(features), np.asarray(rows, dtype=np.int64)

    def retrieval_scores(self, needle, *, top: int = 1) -> np.ndarray:
        """Wu et al.'s (2024) retrieval score of every head: at each generated token, the head retrieves
        when one of its `top` most probable keys lies in the needle and holds the very token written;
        its score is how often it so retrieves, over the needle's length (a token copied twice counts
        twice, as theirs). Read off top_key and the ids (`ids_at`).

        Args:
            needle: (start, stop) real positions of the needle in the prompt.
            top: the ranks that may retrieve (their topk; at most the recorded top_keys).

        Returns:
            np.ndarray: (B, layers, heads) float64, each sequence's scores over its live tokens.

        Raises:
            EntropyLensError: top_key not recorded (or fewer ranks than `top`), an empty needle.
        """
        keys = self.stat(TOP_KEY.name)  # (B, N, layers, heads, k)
        start, stop = (int(v) for v in needle)
        if not 0 <= start < stop:
            raise EntropyLensError(f"needle ({start}, {stop}) is empty; pass (start, stop) with start < stop")
        if not 1 <= top <= keys.shape[-1]:
            raise EntropyLensError(
                f"top={top}, but top_key holds {keys.shape[-1]} ranks; record top_keys={top} or pass top <= "
                f"{keys.shape[-1]}"
            )
        keys = keys[..., :top]
        copied = (self.ids_at(keys) == self.tokens[:, :, None, None, None]) & (keys >= start) & (keys < stop)
        hits = copied.any(-1) & self.live[:, :, None, None]
        return hits.sum(1) / (stop - start)

    @property
    def stats(self) -> tuple[str, ...]:
        """The row statistics held, in the order recorded (top_key_prob and probs are none)."""
        return tuple(name for name in self.values if name not in (TOP_KEY_PROB, PROBS))

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

    def prompt_stat(self, name: str) -> np.ndarray:
        """(B, P, layers, heads[, values]): statistic `name` of every prompt row, position 0 .. P − 1 (NaN
        past a sequence's prompt); row P − 1 is also generated token 0's.

        Args:
            name: a statistic recorded with the prompt's rows; another is an EntropyLensError.
        """
        if name not in self.prompt_values:
            raise EntropyLensError(
                f"{printable(name)!r}: this result holds no prompt rows of it (prompt rows: "
                f"{', '.join(self.prompt_values) or 'none'}); a vLLM request records them with "
                "entropy_lens.vllm.request(..., prompt=True)"
            )
        return self.prompt_values[name]

    def save(self, path: str | Path) -> Path:
        """The result as one .npz at `path`, written atomically (module docstring); returns the path.

        Args:
            path: the file to write (a target that is not a regular file is refused).
        """
        meta = {"schema": SCHEMA, **self.meta, "schema_version": GENERATION_VERSION}
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
            **{
                PROMPT_ROWS + name: v.astype(np.int64 if name == TOP_KEY.name else np.float32)
                for name, v in self.prompt_values.items()
            },
        )

    @classmethod
    def load(cls, path: str | Path) -> GenerationResult:
        """A result `save` wrote; EntropyLensError in one line for any other file.

        Args:
            path: the .npz to read.
        """
        again = "record it again with GenerationRecorder(...).result().save(path)"
        path = check_regular_source(
            path, label=str(path), fix=f"pass a file GenerationResult.save wrote, or {again}"
        )
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
        prompt_values = {
            name[len(PROMPT_ROWS) :]: arrays.pop(name)
            for name in list(arrays)
            if name.startswith(PROMPT_ROWS)
        }
        unknown = [name for name in (*arrays, *prompt_values) if name not in ARRAYS]
        if unknown:
            raise EntropyLensError(f"{printable(path)} holds unknown arrays {unknown}; {again}")
        names = [*meta.get("stats", arrays), *(name for name in (TOP_KEY_PROB, PROBS) if name in arrays)]
        values = {name: arrays[name] for name in names}
        return cls(tokens, values, prompt_len, lengths, meta, prompt, prompt_values)


def is_generation(path: str | Path, *, what: str, again: str) -> bool:
    """Whether the .npz at `path` says it is a generation result: its meta's `schema` is SCHEMA (the
    file's name says nothing). Only the meta is read; a file that is not a readable .npz is refused in
    one EntropyLensError naming it `what`, with `again` (how to make it again)."""
    return meta_schema(path, what=what, again=again) == SCHEMA
