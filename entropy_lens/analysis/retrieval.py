"""Retrieval heads (Wu et al., 2024) from a passkey run, as the DuoAttention pattern kvpress reads::

    record = json.loads(Path("passkey.json").read_text())     # entropy-lens passkey ... --out passkey.json
    pattern = retrieval_pattern(record, 1024, sink_size=64, recent_size=256)
    pattern.scores                     # (layers, KV heads): the highest retrieval score in each KV group
    pattern.export("patterns/mine")    # config.json, full_attention_heads.tsv: DuoAttentionPress(pattern=...)

Each query head's score is `retrieval_heads(record, length)`: over the trials, how often per answer token
its most probable key lay in the needle and held the very token written, over the needle's length (0 to
1). DuoAttention keeps or drops the cache per KV head, which every query head of its group reads, so a KV
head scores the highest score of its group: it is a retrieval head when any of its query heads
retrieves (a mean would let two streaming heads hide a third that retrieves). The export writes that
score in the head-score slot of DuoAttention's folder (`results.pattern`), with the sink and recent window
a streaming head keeps, which a passkey run does not measure: the caller chooses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from entropy_lens.analysis.passkey import retrieval_heads
from entropy_lens.errors import EntropyLensError
from entropy_lens.results.pattern import check_sizes, write_pattern

__all__ = ["RetrievalPattern", "retrieval_pattern"]


@dataclass(frozen=True)
class RetrievalPattern:
    """Each KV head's retrieval score from a passkey run, a DuoAttention pattern (`retrieval_pattern`).

    Args:
        scores: (layers, KV heads) the highest mean retrieval score of each KV head's query heads, in [0, 1].
        heads: (layers, heads) each query head's mean retrieval score (`retrieval_heads`).
        sink_size: the first keys a streaming head keeps (DuoAttention's sink_size).
        recent_size: the last keys a streaming head keeps (DuoAttention's recent_size).
        length: the window length whose trials were averaged (None: every length).
        model: the record's model.
    """

    scores: np.ndarray
    heads: np.ndarray
    sink_size: int
    recent_size: int
    length: int | None = None
    model: str = ""

    def export(self, folder: str | Path) -> Path:
        """Write DuoAttention's pattern folder for kvpress's DuoAttentionPress: `scores` in its head-score
        slot, `sink_size` and `recent_size` in its config, through `results.pattern.write_pattern` (every
        check before any write; never through a link or over another program's file).

        Args:
            folder: the folder to write (made where missing); its two pattern files are replaced.

        Returns:
            Path: the folder.

        Raises:
            EntropyLensError: an empty name, a target that is no folder, a folder that cannot be made, or a
                file there that is not a pattern file, in one line.
        """
        return write_pattern(folder, self.scores, sink_size=self.sink_size, recent_size=self.recent_size)


def retrieval_pattern(
    record: dict,
    length: int | None = None,
    *,
    sink_size: int,
    recent_size: int,
    kv_heads: int | None = None,
) -> RetrievalPattern:
    """The retrieval heads of a passkey run per KV head (module docstring), ready to export.

    Args:
        record: a passkey record (`entropy-lens passkey --out`'s JSON, read) with retrieval scores.
        length: only the trials of this window length; None: every trial.
        sink_size: the first keys a streaming head keeps (>= 0; DuoAttention's patterns use 64 or more).
        recent_size: the last keys a streaming head keeps (>= 1; DuoAttention's patterns use 256 or more).
        kv_heads: the model's KV heads (None: the record's n_kv_heads; needed for a record without it).

    Returns:
        RetrievalPattern: the query heads' scores and each KV head's highest.

    Raises:
        EntropyLensError: a sink or window out of range, a damaged record, no trial of `length`, trials
            recorded before the score, or KV heads that the record lacks, contradicts or that do not
            divide its heads, in one line.
    """
    check_sizes(sink_size, recent_size, where="", fix=lambda name, v: f"pass {name}={v} (keys)")
    heads = retrieval_heads(record, length)
    model = record.get("model") if isinstance(record.get("model"), dict) else {}
    recorded = model.get("n_kv_heads")
    if kv_heads is None and recorded is None:
        raise EntropyLensError(
            "the passkey record names no n_kv_heads (written before it was recorded); pass kv_heads=N, the "
            "model's num_key_value_heads"
        )
    if kv_heads is not None and recorded is not None and kv_heads != recorded:
        raise EntropyLensError(
            f"kv_heads={kv_heads}, but the record's model has {recorded} KV heads; leave kv_heads out"
        )
    groups = kv_heads if kv_heads is not None else recorded
    layers, n_heads = heads.shape
    if type(groups) is not int or groups < 1 or n_heads % groups:
        raise EntropyLensError(
            f"{n_heads} query heads do not split into {groups!r} KV heads; pass kv_heads as a divisor of "
            f"{n_heads} (the model's num_key_value_heads)"
        )
    scores = heads.reshape(layers, groups, n_heads // groups).max(-1)
    return RetrievalPattern(
        scores=scores,
        heads=heads,
        sink_size=sink_size,
        recent_size=recent_size,
        length=length,
        model=str((record.get("config") or {}).get("model", "")),
    )
