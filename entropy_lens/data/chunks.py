"""Documents -> one packed token stream -> chunks of length + 1 tokens -> a seeded sample.

`token_chunks(tokenizer, data, length=T, samples=B)` returns `Chunks.ids`, int64 (B, T + 1):
inputs are `ids[:, :-1]` and targets `ids[:, 1:]`, so every one of the T positions has a
next-token target.

Design choices:

- Packing, not padding. Each document is tokenised without special tokens and followed by
  the tokenizer's document separator (eos, else bos, else nothing; `Chunks.separator_id`
  records which), and the documents are concatenated in order into one stream. The stream is
  cut into consecutive, non-overlapping chunks of T + 1 tokens, and the incomplete tail is
  dropped. A chunk may span a document boundary, as in the pre-training data of most LMs;
  long books such as the Austen novels make that rare for T of a few thousand.
- Sliding windows (`stride=S`, the sliding-window perplexity of Press et al. 2022): the rows are
  instead the windows of T + 1 tokens starting every S tokens of the stream, k·S for k = 0, 1, ...
  (`sliding_window_view(stream, T + 1)[::S]`, views until the sample is copied out). Window k's
  last S targets are stream tokens k·S + T − S + 1 .. k·S + T, so these spans of different
  windows are disjoint: scoring only the last S positions of a sample of windows scores each token
  at most once. S = T gives windows that share one token, each target scored once. A `.npy`
  source is already cut into rows and takes no stride.
- Selection is reproducible: `default_rng(seed).choice(n_available, samples, replace=False)`,
  sorted, so the same (tokenizer, data, length, samples, seed, stride) always gives the same rows.
- Tokenising is the slow part, and a sweep calls this once per scale or length. The stream is cached in memory, keyed by the tokenizer's
  identity (class, name, size, separator and a digest of its serialized vocabulary and
  merges) and a digest of the documents' text, not of the `data` string: editing a file
  between calls cannot return stale tokens, and two names for the same text share an entry.
- A `.npy` file holds token ids already cut into rows, (N, T + 1); it is checked against
  the tokenizer and used as-is, rows being selected like chunks. No separator is inserted. It needs
  no tokenizer (`tokenizer=None`: the caller checks the ids against its model's vocabulary), so a
  model folder without one scans it (`holds_token_ids`).
"""

from __future__ import annotations

import hashlib
import operator
import os
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from entropy_lens.data.corpora import load_labelled
from entropy_lens.errors import EntropyLensError

__all__ = [
    "Chunks",
    "check_stride",
    "clear_cache",
    "holds_token_ids",
    "packed_stream",
    "separator_id",
    "token_chunks",
]

_CACHE: OrderedDict[tuple, np.ndarray] = OrderedDict()
_CACHE_SIZE = 4  # streams; Austen with a 300-token vocabulary is 3M tokens (24 MB)
_BATCH_DOCS = 256  # documents per tokenizer call: parallel in Rust, bounded Python lists


@dataclass(frozen=True, eq=False)
class Chunks:
    """A seeded sample of chunks. `eq=False`: compare `ids` with numpy, not `==`."""

    ids: np.ndarray  # int64 (samples, length + 1)
    indices: list[int]  # which chunk (or window, with a stride; for .npy: which row) each row is
    n_available: int  # how many chunks (or windows) of length + 1 the source fills
    n_tokens: int  # tokens in the packed stream (for .npy: rows * (length + 1))
    description: str  # e.g. "austen (6 documents, 1,012,345 tokens)"
    separator_id: int | None  # the token between documents (None: none, or a .npy source)

    @property
    def length(self) -> int:
        """The model input length T (each row holds T + 1 tokens)."""
        return self.ids.shape[1] - 1


def check_length(length: int) -> None:
    """--len must be at least 2: a chunk (or training window) holds --len inputs plus one target."""
    if length < 2:
        raise EntropyLensError(
            f"--len must be at least 2 (got {length}): a chunk holds --len inputs plus one target; "
            "pass --len 2 or more"
        )


def holds_token_ids(data: str | os.PathLike) -> bool:
    """Whether `data` is a .npy of token ids, which needs no tokenizer (a corpus name or text does)."""
    return os.fspath(data).endswith(".npy")


def token_chunks(
    tokenizer, data: str, *, length: int, samples: int, seed: int = 0, stride: int | None = None
) -> Chunks:
    """`samples` rows of `length + 1` consecutive tokens of `data` (a corpus name, a text path, or a
    .npy of token ids), chosen without replacement by `seed`. `stride` None: non-overlapping chunks;
    an int S >= 1: the windows starting every S tokens (module docstring), `Chunks.indices` then
    counting windows, so row i starts at stream token indices[i] * S. `tokenizer` may be None for a
    .npy (`holds_token_ids`): its ids are then not checked against a tokenizer's."""
    data = os.fspath(data)
    length, samples = operator.index(length), operator.index(samples)
    check_length(length)
    if samples < 1:
        raise EntropyLensError(f"--samples must be at least 1 (got {samples}); pass --samples 1 or more")
    if stride is not None:
        stride = operator.index(stride)
        check_stride(stride)
    width = length + 1
    if holds_token_ids(data):
        if stride is not None:
            raise EntropyLensError(
                f"--stride cannot cut --data {data!r}: a .npy already holds its rows; pass the text it "
                "was made from (or a corpus name) to slide windows over, or omit --stride"
            )
        rows = _npy_rows(tokenizer, data, width)
        n_tokens, separator = rows.size, None
        description = f"{data} ({len(rows):,} rows of {width:,} token ids)"
    else:
        stream, label, n_docs, separator = _packed(tokenizer, data)
        n_tokens = len(stream)
        if n_tokens < width:
            raise EntropyLensError(
                f"--len {length:,} needs {width:,} tokens per chunk but {data!r} has {n_tokens:,} tokens; "
                "pass --data with more text or a smaller --len"
            )
        if stride is None:
            rows = stream[: n_tokens // width * width].reshape(-1, width)
        else:
            rows = np.lib.stride_tricks.sliding_window_view(stream, width)[::stride]
        description = f"{label} ({n_docs:,} document{'s' * (n_docs != 1)}, {n_tokens:,} tokens)"
    n_available = len(rows)
    if samples > n_available:
        if stride is None:
            what, fix = f"chunks of {width:,} tokens (--len + 1)", "a smaller --len"
        else:
            what = f"windows of {width:,} tokens (--len + 1) starting every {stride:,} tokens (--stride)"
            fix = "a smaller --stride or --len"
        raise EntropyLensError(
            f"--samples {samples:,} is more than {data!r} holds: it fills only {n_available:,} {what}; "
            f"pass --samples {n_available:,} or fewer, {fix}, or more --data"
        )
    rng = np.random.default_rng(seed)
    indices = sorted(int(i) for i in rng.choice(n_available, size=samples, replace=False))
    ids = np.ascontiguousarray(rows[indices], dtype=np.int64)  # a copy: callers may write to it
    return Chunks(ids, indices, n_available, int(n_tokens), description, separator)


def check_stride(stride: int | None) -> None:
    """--stride: None (non-overlapping chunks) or at least 1 token between window starts."""
    if stride is not None and stride < 1:
        raise EntropyLensError(
            f"--stride must be at least 1 (got {stride}): windows start every --stride tokens; pass "
            "--stride 1 or more, or omit it for non-overlapping chunks"
        )


def packed_stream(tokenizer, data: str) -> tuple[np.ndarray, str]:
    """The whole corpus as one read-only int64 stream (doc0 sep doc1 sep ...) and its
    description. Cached: see the module docstring."""
    stream, label, n_docs, _ = _packed(tokenizer, os.fspath(data))
    return stream, f"{label} ({n_docs:,} document{'s' * (n_docs != 1)}, {len(stream):,} tokens)"


def random_windows(stream: np.ndarray, length: int, n: int, seed: int, step: int) -> np.ndarray:
    """(n, length + 1) windows of consecutive tokens at random offsets drawn by (seed, step) alone, so a
    resumed training run draws the same windows for the same step."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(stream) - length - 1, size=n)
    return np.stack([stream[s : s + length + 1] for s in starts])


def separator_id(tokenizer) -> int | None:
    """The token placed after each document: eos if the tokenizer has one, else bos, else None."""
    for token_id in (tokenizer.eos_token_id, tokenizer.bos_token_id):
        if token_id is not None:
            return int(token_id)
    return None


def clear_cache() -> None:
    """Forget every cached token stream."""
    _CACHE.clear()


def _packed(tokenizer, data: str) -> tuple[np.ndarray, str, int, int | None]:
    documents, label = load_labelled(data)  # a missing source first: its message lists every form
    if tokenizer is None:
        raise EntropyLensError(
            f"--data {data!r} is text, which needs the model's tokenizer; pass a tokenizer, or a .npy of "
            "token ids shaped (rows, --len + 1)"
        )
    separator = separator_id(tokenizer)
    key = (_tokenizer_key(tokenizer), _text_digest(documents))
    stream = _CACHE.get(key)
    if stream is None:
        stream = tokenize_and_pack(tokenizer, documents, separator)
        _CACHE[key] = stream
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return stream, label, len(documents), separator


def tokenize_and_pack(tokenizer, documents: list[str], separator: int | None) -> np.ndarray:
    backend = plain_backend(tokenizer)
    encoded: list[list[int]] = []
    for start in range(0, len(documents), _BATCH_DOCS):
        batch = documents[start : start + _BATCH_DOCS]
        if backend is not None:
            encoded += [e.ids for e in backend.encode_batch_fast(batch, add_special_tokens=False)]
        else:
            encoded += tokenizer(
                batch,
                add_special_tokens=False,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,  # no "longer than the model's maximum length" warning: we cut it ourselves
            )["input_ids"]
    extra = 0 if separator is None else 1
    stream = np.empty(sum(len(ids) for ids in encoded) + extra * len(encoded), dtype=np.int64)
    pos = 0
    for ids in encoded:
        stream[pos : pos + len(ids)] = ids
        pos += len(ids)
        if separator is not None:
            stream[pos] = separator
            pos += 1
    stream.flags.writeable = False  # shared by every caller through the cache
    return stream


def plain_backend(tokenizer):
    """The Rust tokenizer behind `tokenizer`, when calling it directly gives exactly the ids of
    `tokenizer(text, add_special_tokens=False)`: a stock `TokenizersBackend` (no subclass
    override of the encoding path) with no truncation or padding left set on the backend.
    `encode_batch_fast` skips the character offsets, which makes it faster. Else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return None
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    cls = type(tokenizer)
    stock = (
        isinstance(tokenizer, TokenizersBackend)
        and cls.__call__ is PreTrainedTokenizerBase.__call__
        and cls._encode_plus is TokenizersBackend._encode_plus
    )
    plain = backend.truncation is None and backend.padding is None
    same_specials = backend.encode_special_tokens == bool(getattr(tokenizer, "split_special_tokens", False))
    return backend if stock and plain and same_specials else None


def _tokenizer_key(tokenizer) -> tuple:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # fast tokenizer: vocabulary, merges, normalizer and added tokens
        text = backend.to_str()
    else:
        text = repr(sorted(tokenizer.get_vocab().items()))
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()
    name = getattr(tokenizer, "name_or_path", "")
    return type(tokenizer).__qualname__, name, len(tokenizer), separator_id(tokenizer), digest


def _text_digest(documents: list[str]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for doc in documents:
        raw = doc.encode("utf-8", "surrogatepass")
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


def _npy_rows(tokenizer, data: str, width: int) -> np.ndarray:
    kind = f"a .npy of token ids shaped (rows, --len + 1) = (N, {width:,})"
    if not os.path.isfile(data):
        raise EntropyLensError(f"--data {data!r} is not a file; pass {kind}")
    try:
        rows = np.load(data, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise EntropyLensError(f"--data {data!r} is not a readable .npy ({e}); pass {kind}") from None
    if rows.ndim != 2:
        raise EntropyLensError(f"--data {data!r} has shape {rows.shape}, not 2-D; pass {kind}")
    if not np.issubdtype(rows.dtype, np.integer):
        raise EntropyLensError(
            f"--data {data!r} holds {rows.dtype}, not integer token ids; save it with an integer dtype "
            "(e.g. ids.astype(np.int64))"
        )
    found = rows.shape[1]
    if found != width:
        raise EntropyLensError(
            f"--data {data!r} has rows of {found:,} tokens but --len {width - 1:,} needs {width:,} "
            f"(--len + 1); pass --len {found - 1:,} to use this file"
        )
    if len(rows) == 0:
        raise EntropyLensError(f"--data {data!r} has no rows; pass {kind}")
    low, high = int(rows.min()), int(rows.max())
    if tokenizer is None:  # the caller checks the ids against its model's vocabulary
        if low < 0:
            raise EntropyLensError(f"--data {data!r} holds token id {low:,}; pass token ids of 0 or more")
        return rows
    vocab = len(tokenizer)
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise EntropyLensError(
            f"--data {data!r} holds token id {bad:,} but the tokenizer's ids run 0..{vocab - 1:,}; "
            "pass the model whose tokenizer made these ids"
        )
    return rows
