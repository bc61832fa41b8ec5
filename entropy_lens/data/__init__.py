"""Corpora and samplers: text -> documents -> packed chunks of T + 1 token ids.

    from entropy_lens.data import token_chunks
    chunks = token_chunks(tokenizer, "austen:persuasion", length=2048, samples=8, seed=0)
    inputs, targets = chunks.ids[:, :-1], chunks.ids[:, 1:]  # int64 (8, 2048) each

`corpora.py` turns a `--data` value (a bundled name or a path) into documents;
`chunks.py` tokenises, packs, cuts and samples them. Only numpy is imported here; the
tokenizer is whatever object the caller passes.
"""

from entropy_lens.data.chunks import (
    Chunks,
    check_length,
    clear_cache,
    holds_token_ids,
    packed_stream,
    random_windows,
    separator_id,
    token_chunks,
)
from entropy_lens.data.corpora import AUSTEN_NOVELS, BUNDLED_CORPORA, FILE_KINDS, load_documents

__all__ = [
    "AUSTEN_NOVELS",
    "BUNDLED_CORPORA",
    "FILE_KINDS",
    "Chunks",
    "check_length",
    "clear_cache",
    "holds_token_ids",
    "load_documents",
    "packed_stream",
    "random_windows",
    "separator_id",
    "token_chunks",
]
