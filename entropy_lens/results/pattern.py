"""DuoAttention's attention-pattern folder, the one writer and the one reader of its two files:

    config.json               {"sink_size": K, "recent_size": W}: a streaming head keeps its first K and
                              its last W keys
    full_attention_heads.tsv  (layers rows × KV heads columns, tab-separated, values in [0, 1]): each KV
                              head's score, high = a retrieval head, which keeps its whole cache

These are the files of DuoAttention's repository that kvpress's DuoAttentionPress reads. Two analyses
write them (`analysis.head_profile(result).export(folder)`: each KV head's distant mass from a scan;
`analysis.retrieval_pattern(record, ...).export(folder)`: each KV head's retrieval score from a passkey
run) through `write_pattern`, and `entropy_lens.kvpress.DuoAttentionPress` reads them through
`load_pattern`, every field checked, so a pattern either side refuses is refused by both. numpy only: the
press's environment and a laptop read it alike.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.results.files import atomic_write_text, check_regular_target, printable
from entropy_lens.settings import MAX_TOKENS, check_value

__all__ = ["PATTERN_CONFIG", "PATTERN_HEADS", "load_pattern", "write_pattern"]

PATTERN_CONFIG = "config.json"
PATTERN_HEADS = "full_attention_heads.tsv"
REWRITE = (
    "write the folder with entropy_lens.analysis.head_profile(result).export(folder) from a scan with "
    "--stats first_mass,recent_mass, or analysis.retrieval_pattern(record, ...).export(folder) from a "
    "passkey run"
)
# kvpress masks keys [sink_size, S − recent_size): recent_size 0 or a negative sink would mask nothing
SIZES = {"sink_size": 0, "recent_size": 1}  # each size's least value


def check_sizes(sink_size, recent_size, *, where: str, fix) -> None:
    """EntropyLensError in one line unless sink_size >= 0 and recent_size >= 1 are whole numbers (1.9,
    "4" and true are refused, never truncated); `fix(name, value)` says how to give one."""
    for name, value in (("sink_size", sink_size), ("recent_size", recent_size)):
        spec = {"at_least": SIZES[name], "at_most": MAX_TOKENS}
        check_value(
            value, int, spec, label=f"{where}{name}", fix=lambda v, n=name: fix(n, v), example=SIZES[name] + 3
        )


def _bad_scores(scores: np.ndarray) -> str | None:
    """Why `scores` is no table of head scores (2-D, not empty, finite, in [0, 1]), or None."""
    if scores.ndim != 2 or scores.size == 0:
        return (
            "it is empty" if scores.size == 0 else f"it has {scores.ndim} dimensions, not (layers, KV heads)"
        )
    bad = ~(np.isfinite(scores) & (scores >= 0) & (scores <= 1))
    if bad.any():
        return f"layer {np.argwhere(bad)[0][0]} holds {float(scores[bad][0])!r}"
    return None


def write_pattern(folder: str | Path, scores, *, sink_size: int, recent_size: int) -> Path:
    """Write the pattern folder (module docstring), each file atomically. Every check runs before any
    write: the sizes and scores as `load_pattern` reads them, the folder a folder (made where missing),
    and a file already at either name replaced only where it is a pattern file (one this writer could
    have written), never through a link or over another program's file.

    Args:
        folder: the folder to write (made where missing); its two pattern files are replaced.
        scores: (layers, KV heads) head scores in [0, 1], high = a retrieval head.
        sink_size: K, the keys a streaming head keeps from the start (>= 0).
        recent_size: W, the keys a streaming head keeps from the end (>= 1).

    Returns:
        Path: the folder.

    Raises:
        EntropyLensError: a size that is not a whole number in range, scores that are not a finite
            (layers, KV heads) table in [0, 1], an empty name, a target that is no folder (a file, a
            device, a FIFO), a folder that cannot be made, or a file there that is not a pattern file,
            in one line.
    """
    check_sizes(
        sink_size, recent_size, where="", fix=lambda name, v: f"pass {name}={v} (a whole number of keys)"
    )
    table = np.asarray(scores, dtype=np.float64)
    why = _bad_scores(table)
    if why:
        raise EntropyLensError(
            f"a pattern needs (layers, KV heads) scores in [0, 1] ({why}); pass such a table"
        )
    folder = check_regular_target(folder, flag="the pattern's folder", folder=True, example="patterns/mine")
    for name in (PATTERN_CONFIG, PATTERN_HEADS):
        _check_replaceable(folder / name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise EntropyLensError(
            f"cannot make the folder {printable(folder)} ({err.strerror or err}); pass a writable folder"
        ) from None
    config = {"sink_size": sink_size, "recent_size": recent_size}
    atomic_write_text(folder / PATTERN_CONFIG, json.dumps(config, indent=2) + "\n")
    rows = ["\t".join(f"{v:.6f}" for v in layer) for layer in table]
    atomic_write_text(folder / PATTERN_HEADS, "\n".join(rows) + "\n")
    return folder


def load_pattern(folder: str | Path) -> tuple[int, int, np.ndarray]:
    """(sink_size, recent_size, head scores (layers, KV heads) in [0, 1]) of a pattern folder, as kvpress's
    DuoAttentionPress reads DuoAttention's, every field checked: a pattern that would mask nothing
    (recent_size 0, a negative sink), a size that is not a whole number (1.9, "4", true), a score that is
    NaN, infinite or outside [0, 1] (`write_pattern` writes them in [0, 1]) is refused in one line, never
    clipped or truncated.

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
    missing = [name for name in (PATTERN_CONFIG, PATTERN_HEADS) if not (folder / name).is_file()]
    if missing:
        raise EntropyLensError(f"{folder} lacks {', '.join(missing)}: {REWRITE}")
    config_file, heads_file = folder / PATTERN_CONFIG, folder / PATTERN_HEADS
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise EntropyLensError(f"{config_file} is not readable JSON ({first_line(err)}); {REWRITE}") from None
    if not isinstance(config, dict) or not set(SIZES) <= set(config):
        raise EntropyLensError(f"{config_file} needs sink_size and recent_size; {REWRITE}")
    check_sizes(
        config["sink_size"],
        config["recent_size"],
        where=f"{config_file}'s ",
        fix=lambda name, v: f'export the folder again, or write "{name}": {v}',
    )
    try:
        with warnings.catch_warnings():  # an empty file: refused below, not warned about
            warnings.simplefilter("ignore", UserWarning)
            scores = np.loadtxt(heads_file, dtype=float, delimiter="\t", ndmin=2, encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise EntropyLensError(
            f"{heads_file} is not a table of numbers ({first_line(err)}); {REWRITE}"
        ) from None
    why = _bad_scores(scores)
    if why:
        raise EntropyLensError(f"{heads_file} needs head scores in [0, 1] ({why}); {REWRITE}")
    return int(config["sink_size"]), int(config["recent_size"]), scores


def _check_replaceable(path: Path) -> None:
    """EntropyLensError in one line unless nothing stands at `path` or a pattern file does (a regular file,
    not a link, that `_is_pattern_file` reads as this writer's): another program's file is kept."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file() or not _is_pattern_file(path):
        what = f"a link to {printable(os.path.realpath(path))}" if path.is_symlink() else "not a pattern file"
        raise EntropyLensError(
            f"{printable(path)} is {what} this export wrote, and is kept; move it away or pass another folder"
        )


def _is_pattern_file(path: Path) -> bool:
    """Whether `path` reads as a file `write_pattern` writes: config.json holding exactly sink_size and
    recent_size as whole numbers, or a tab-separated table of numbers in [0, 1]."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.name == PATTERN_CONFIG:
            config = json.loads(text)
            return (
                isinstance(config, dict)
                and set(config) == set(SIZES)
                and all(type(v) is int for v in config.values())
            )
        values = [float(cell) for line in text.splitlines() if line for cell in line.split("\t")]
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return bool(values) and all(0.0 <= v <= 1.0 for v in values)
