"""kvpress's DuoAttentionPress on an attention pattern the lens measured: kvpress fetches DuoAttention's
per-head patterns from the web for six checkpoints only (and scores other models' heads with an
experimental heuristic); this subclass reads the folder `analysis.head_profile(result).export(folder)`
wrote from any model a scan can run: config.json (sink_size, recent_size) and full_attention_heads.tsv
(layers × KV heads, high = a retrieval head), the files and format of DuoAttention's repository.

    press = DuoAttentionPress(head_compression_ratio=0.5, pattern="patterns/smollm2")
    pipe(context, question=question, press=press)   # kvpress's kv-press-text-generation pipeline

The heads with the lowest scores (the streaming heads: their sink and recent window carry their
attention) keep only those keys, as in kvpress; nothing is fetched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from kvpress.presses.duo_attention_press import DuoAttentionPress as KVPressDuoAttention

from entropy_lens.errors import EntropyLensError

PATTERN_FILES = ("config.json", "full_attention_heads.tsv")  # analysis/head_profile.py writes them


def load_pattern(folder: str | Path) -> tuple[int, int, np.ndarray]:
    """(sink_size, recent_size, head scores (layers, KV heads) clipped to [0, 1]) of an attention-pattern
    folder, as kvpress's DuoAttentionPress reads DuoAttention's.

    Args:
        folder: the folder holding config.json and full_attention_heads.tsv.

    Returns:
        tuple: (sink_size, recent_size, scores).

    Raises:
        EntropyLensError: a missing file or field, naming how to write the folder.
    """
    folder = Path(folder)
    missing = [name for name in PATTERN_FILES if not (folder / name).is_file()]
    if missing:
        raise EntropyLensError(
            f"{folder} lacks {', '.join(missing)}: write it with "
            "entropy_lens.analysis.head_profile(result).export(folder) from a scan with "
            "--stats first_mass,recent_mass"
        )
    config = json.loads((folder / PATTERN_FILES[0]).read_text(encoding="utf-8"))
    try:
        sink, recent = int(config["sink_size"]), int(config["recent_size"])
    except (KeyError, TypeError, ValueError):
        raise EntropyLensError(f"{folder / PATTERN_FILES[0]} needs whole sink_size and recent_size") from None
    scores = np.loadtxt(folder / PATTERN_FILES[1], dtype=float, delimiter="\t", ndmin=2)
    return sink, recent, np.clip(scores, 0, 1)


@dataclass
class DuoAttentionPress(KVPressDuoAttention):
    """kvpress's DuoAttentionPress with its pattern read from `pattern` (module docstring).

    Args:
        head_compression_ratio: the share of KV heads made streaming heads (kvpress's).
        pattern: the attention-pattern folder (`HeadProfile.export`).
    """

    pattern: str | Path | None = None

    def load_attention_pattern(self, model):
        """The pattern of `pattern`, checked against `model`'s layers and KV heads (kvpress calls this
        from post_init_from_model)."""
        if self.pattern is None:
            raise EntropyLensError("DuoAttentionPress needs pattern=FOLDER (HeadProfile.export wrote it)")
        sink, recent, scores = load_pattern(self.pattern)
        config = model.config.get_text_config()
        want = (config.num_hidden_layers, getattr(config, "num_key_value_heads", config.num_attention_heads))
        if scores.shape != want:
            raise EntropyLensError(
                f"{self.pattern}: {scores.shape[0]} layers x {scores.shape[1]} KV heads, but the model has "
                f"{want[0]} x {want[1]}; export the profile of a scan of this model"
            )
        return sink, recent, scores


__all__ = ["DuoAttentionPress", "load_pattern"]
