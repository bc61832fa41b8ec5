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
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from kvpress.presses.duo_attention_press import DuoAttentionPress as KVPressDuoAttention

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.settings import MAX_TOKENS, check_argument, check_value

PATTERN_FILES = ("config.json", "full_attention_heads.tsv")  # analysis/head_profile.py writes them
REWRITE = (
    "write the folder with entropy_lens.analysis.head_profile(result).export(folder) from a scan with "
    "--stats first_mass,recent_mass"
)


def load_pattern(folder: str | Path) -> tuple[int, int, np.ndarray]:
    """(sink_size, recent_size, head scores (layers, KV heads) in [0, 1]) of an attention-pattern folder,
    as kvpress's DuoAttentionPress reads DuoAttention's, every field checked: a pattern that would mask
    nothing (recent_size 0, a negative sink), a size that is not a whole number (1.9, "4", true), a score
    that is NaN, infinite or outside [0, 1] (`HeadProfile.export` writes them in [0, 1]) is refused in
    one line, never clipped or truncated.

    Args:
        folder: the folder holding config.json and full_attention_heads.tsv.

    Returns:
        tuple: (sink_size, recent_size, scores).

    Raises:
        EntropyLensError: a missing or unreadable file, a missing or invalid field, in one line naming
            how to write the folder.
    """
    if not isinstance(folder, (str, os.PathLike)) or not str(folder):
        raise EntropyLensError(f"pattern must be a folder (a str or Path), not {folder!r}; {REWRITE}")
    folder = Path(folder)
    missing = [name for name in PATTERN_FILES if not (folder / name).is_file()]
    if missing:
        raise EntropyLensError(f"{folder} lacks {', '.join(missing)}: {REWRITE}")
    config_file, heads_file = (folder / name for name in PATTERN_FILES)
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise EntropyLensError(f"{config_file} is not readable JSON ({first_line(err)}); {REWRITE}") from None
    if not isinstance(config, dict) or not {"sink_size", "recent_size"} <= set(config):
        raise EntropyLensError(f"{config_file} needs sink_size and recent_size; {REWRITE}")
    # kvpress masks keys [sink_size, S − recent_size): recent_size 0 or a negative sink masks nothing
    for name, least in (("sink_size", 0), ("recent_size", 1)):
        spec = {"at_least": least, "at_most": MAX_TOKENS}
        fix = lambda v, name=name: f'export the folder again, or write "{name}": {v}'
        check_value(config[name], int, spec, label=f"{config_file}'s {name}", fix=fix, example=least + 3)
    try:
        with warnings.catch_warnings():  # an empty file: refused below, not warned about
            warnings.simplefilter("ignore", UserWarning)
            scores = np.loadtxt(heads_file, dtype=float, delimiter="\t", ndmin=2, encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise EntropyLensError(
            f"{heads_file} is not a table of numbers ({first_line(err)}); {REWRITE}"
        ) from None
    bad = ~(np.isfinite(scores) & (scores >= 0) & (scores <= 1))
    if scores.size == 0 or bad.any():
        where = (
            "it is empty"
            if scores.size == 0
            else f"layer {np.argwhere(bad)[0][0]} holds {float(scores[bad][0])!r}"
        )
        raise EntropyLensError(f"{heads_file} needs head scores in [0, 1] ({where}); {REWRITE}")
    return int(config["sink_size"]), int(config["recent_size"]), scores


@dataclass
class DuoAttentionPress(KVPressDuoAttention):
    """kvpress's DuoAttentionPress with its pattern read from `pattern` (module docstring).

    Args:
        head_compression_ratio: the share of KV heads made streaming heads (kvpress's), in [0, 1].
        pattern: the attention-pattern folder (`HeadProfile.export`), read and checked when the press
            is made.

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
