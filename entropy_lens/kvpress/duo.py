"""kvpress's DuoAttentionPress on an attention pattern the lens measured: kvpress fetches DuoAttention's
per-head patterns from the web for six checkpoints only (and scores other models' heads with an
experimental heuristic); this subclass reads the folder `analysis.head_profile(result).export(folder)`
(or `analysis.retrieval_pattern(record, ...).export(folder)`, from a passkey run) wrote from any model a
scan can run, checked by `results.pattern.load_pattern`: config.json (sink_size, recent_size) and
full_attention_heads.tsv (layers × KV heads, high = a retrieval head), the files and format of
DuoAttention's repository.

    press = DuoAttentionPress(head_compression_ratio=0.5, pattern="patterns/smollm2")
    pipe(context, question=question, press=press)   # kvpress's kv-press-text-generation pipeline

The heads with the lowest scores (the streaming heads: their sink and recent window carry their
attention) keep only those keys, as in kvpress; nothing is fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvpress.presses.duo_attention_press import DuoAttentionPress as KVPressDuoAttention

from entropy_lens.errors import EntropyLensError
from entropy_lens.results.pattern import load_pattern  # the format's one reader, beside its one writer
from entropy_lens.settings import check_argument


@dataclass
class DuoAttentionPress(KVPressDuoAttention):
    """kvpress's DuoAttentionPress with its pattern read from `pattern` (module docstring).

    Args:
        head_compression_ratio: the share of KV heads made streaming heads (kvpress's), in [0, 1].
        pattern: the attention-pattern folder (`HeadProfile.export`, `RetrievalPattern.export`), read and
            checked when the press is made.

    Raises:
        EntropyLensError: a ratio outside [0, 1], no pattern, or a pattern folder `load_pattern` refuses.
    """

    pattern: str | Path | None = None

    def __post_init__(self):
        ratio = self.head_compression_ratio
        check_argument("head_compression_ratio", ratio, float, {"at_least": 0.0, "at_most": 1.0}, example=0.5)
        if self.pattern is None:
            raise EntropyLensError("DuoAttentionPress needs pattern=FOLDER (HeadProfile.export wrote it)")
        self._pattern = load_pattern(self.pattern)  # checked now, not at the first prefill
        post_init = getattr(super(), "__post_init__", None)
        if post_init is not None:
            post_init()

    def load_attention_pattern(self, model):
        """The pattern of `pattern`, checked against `model`'s layers and KV heads (kvpress calls this
        from post_init_from_model)."""
        sink, recent, scores = load_pattern(self.pattern)  # read again: the folder may have changed
        config = model.config.get_text_config()
        want = (config.num_hidden_layers, getattr(config, "num_key_value_heads", config.num_attention_heads))
        if scores.shape != want:
            raise EntropyLensError(
                f"{self.pattern}: {scores.shape[0]} layers x {scores.shape[1]} KV heads, but the model has "
                f"{want[0]} x {want[1]}; export the profile of a scan of this model"
            )
        return sink, recent, scores


__all__ = ["DuoAttentionPress", "load_pattern"]
